"""NCCL / nccl-tests parsing: every real file through the pipeline, concrete values, both paths."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from faultlens.ingest import base
from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.nccl import parser as nccl
from faultlens.ingest.nccl import vec as nccl_vec
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.reader import iter_chunks
from faultlens.ingest.store import Store
from tests.conftest import CORPUS

NOW = datetime(2025, 1, 1)
DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"
CORPUS_NCCL = CORPUS / "nccl"
# Channel / proxy-connect chatter only: nothing to extract, every line is noise.
ALL_NOISE = {
    "nccl-issue1538-channels-2.22.3-k8s-worker.log",
    "nccl-issue1657-ib-connect-debug-opid.log",
    "nccl-issue834-channels-p2p-ipc-read-gdrdma.log",
}
CORPUS_FILES = sorted(p.name for p in CORPUS_NCCL.glob("*")) if CORPUS_NCCL.is_dir() else []


def real_line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def ingest_one(store: Store, path: Path, year: int | None = 2024) -> dict:
    report = ingest_paths(store, [str(path)], now=NOW, base_ctx=ParseContext(file="", year=year))
    (f,) = report.files
    assert f.status in ("ok", "partial"), f.error
    return f.to_json()


def events(store: Store, **where: str) -> list[dict]:
    frame = store.query("SELECT * FROM events ORDER BY line")
    for col, value in where.items():
        frame = frame.filter(pl.col(col) == value)
    return [{**r, "attrs": json.loads(r["attrs"] or "{}")} for r in frame.to_dicts()]


def both_paths(path: Path, ctx: ParseContext, chunk_bytes: int = 1 << 25) -> tuple:
    """(vectorized ChunkResult over chunks, reference ChunkResult over all lines)."""
    parser = nccl.NcclParser()
    state = parser.new_state(ctx)
    result = None
    all_lines: list[str | None] = []
    for chunk in iter_chunks(path, chunk_bytes=chunk_bytes):
        part = parser.parse_chunk(chunk.lines, chunk.first_line, ctx, state)
        result = part if result is None else result.merge(part)
        all_lines.extend(chunk.lines.to_list())
    assert result is not None
    result = result.merge(parser.finish(ctx, state))
    return result, nccl.reference_parse(all_lines, ctx)


def assert_same(a, b) -> None:
    assert a.parsed == b.parsed
    assert a.quarantined == b.quarantined
    assert set(a.tables) == set(b.tables)
    for name, frame in a.tables.items():  # row order may differ: the vectorized rows come last
        key = ["line", "in_place"] if name == "link_health" else ["line"]
        left = frame.sort(key, maintain_order=True)
        right = b.tables[name].sort(key, maintain_order=True)
        assert left.equals(right), (name, left.to_dicts(), right.to_dicts())


# -- every real file ------------------------------------------------------------------------------


def test_corpus_is_present() -> None:
    assert len(CORPUS_FILES) >= 20


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_every_corpus_file_ingests_with_accounting(corpus: Path, store: Store, name: str) -> None:
    path = corpus / "nccl" / name
    f = ingest_one(store, path)
    assert f["format"] == "lines"  # a line-oriented log: every family read
    assert f["lines"] == real_line_count(path)
    assert f["parsed"] + f["noise"] + f["quarantined"] == f["lines"]
    assert (f["parsed"] > 0) == (name not in ALL_NOISE)
    assert f["quarantined"] == 0  # every real WARN / watchdog line parses
    assert store.count("quarantine") == 0


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_reference_and_vectorized_paths_agree(corpus: Path, name: str) -> None:
    path = corpus / "nccl" / name
    ctx = ParseContext(file=str(path), year=2024)
    vec, ref = both_paths(path, ctx)
    assert_same(vec, ref)


@pytest.mark.parametrize("min_repeat", [0, 10**9])
def test_paths_agree_per_distinct_message_and_per_row(
    corpus: Path, monkeypatch: pytest.MonkeyPatch, min_repeat: int
) -> None:
    # 0: every batch's shapes computed per distinct message and joined back; 10**9: per row
    monkeypatch.setattr(base, "PER_DISTINCT_MIN_REPEAT", min_repeat)
    for name in CORPUS_FILES:
        path = corpus / "nccl" / name
        ctx = ParseContext(file=str(path), year=2024)
        vec, ref = both_paths(path, ctx)
        assert_same(vec, ref)


@pytest.mark.parametrize("name", ["torchrun-watchdog-childfailed.log", "pdsh-nccl-timestamped.log"])
def test_paths_agree_on_fixtures_also_with_tiny_chunks(name: str) -> None:
    path = DATA / name
    ctx = ParseContext(file=str(path), year=2024)
    vec, ref = both_paths(path, ctx)
    assert_same(vec, ref)
    tiny, _ = both_paths(path, ctx, chunk_bytes=300)  # blocks split across chunks
    assert_same(tiny, ref)


# -- NET/IB, socket, ibv, CUDA --------------------------------------------------------------------


def test_ib_completion_status12_vendor129(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue1405-netib-completion-status12-vendor129.log")
    evs = events(store, subkind="ib_completion")
    assert len(evs) == 3
    first = evs[0]
    assert (first["node"], first["pid"], first["gpu_index"], first["line"]) == (
        "kp-ddp-worker-0",
        3468,
        4,
        1,
    )
    assert first["kind"] == "nccl_error" and first["source"] == "nccl"
    assert first["ts"] is None and first["ts_flag"] == "no_ts"
    a = first["attrs"]
    assert (a["status"], a["vendor_err"], a["peer"], a["peer_port"]) == (
        12,
        129,
        "10.216.210.236",
        54862,
    )
    assert a["status_name"] == "IBV_WC_RETRY_EXC_ERR" and a["direction"] == "Recv"
    assert a["local_gid"] == "fd00:1148:9000:5000:4:200:3:ff22"
    assert a["remote_gid"] == "fd00:1148:9000:5000:4:200:3:ff1f"
    assert evs[2]["attrs"]["peer_port"] == 49892


def test_ib_completion_old_wording_error4_vendor81(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue928-netib-error4-vendor81-h100.log")
    evs = events(store, kind="nccl_error")
    assert [(e["node"], e["attrs"]["status"], e["attrs"]["vendor_err"]) for e in evs] == [
        ("h100-2", 4, 81),
        ("h100-1", 4, 81),
        ("h100-5", 4, 81),
    ]
    assert evs[0]["attrs"]["peer"] == "fe80::966d:ae03:8b:df78%ib0"
    assert evs[0]["attrs"]["direction"] == "Send"
    assert evs[2]["gpu_index"] == 3


def test_socket_broken_pipe_and_remote_error(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue795-2.14.3-socket-broken-pipe-remote-error.log")
    evs = events(store)
    assert [e["subkind"] for e in evs] == ["socket", "ncclRemoteError", "socket"]
    assert evs[0]["attrs"]["error"] == "Broken pipe"
    assert (evs[0]["attrs"]["peer"], evs[0]["attrs"]["peer_port"]) == ("10.200.84.247", 58355)
    assert evs[1]["attrs"]["retcode"] == 6 and evs[1]["attrs"]["peer_rank"] == 9
    assert evs[2]["attrs"]["error"] == "Connection closed by remote peer"
    assert all(e["node"] == "a100-st-p4d24xlarge-22" for e in evs)


def test_ibv_create_qp_failure_and_old_ranks(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-horovod-issue1651-old-nccl-ibv-create-qp-ring.log")
    (ev,) = events(store)
    assert (ev["subkind"], ev["attrs"]["call"], ev["node"]) == ("ibv", "ibv_create_qp", "ta1-1")
    ranks = store.query("SELECT node, rank, nranks, nic FROM nccl_ranks ORDER BY rank").rows()
    assert ranks == [("ta1-0", 0, 2, "mlx4_0/2(PHB)"), ("ta1-1", 1, 2, "mlx4_0/2(PHB)")]


def test_ray_prefixed_timestamped_cuda_failure(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue1283-ray-timestamped-cuda-failure.log")
    (ev,) = events(store)
    assert ev["ts"] == datetime(2024, 5, 11, 14, 10, 52, 227000) and ev["ts_flag"] is None
    assert (ev["subkind"], ev["node"], ev["pid"]) == ("cuda", "n176-080-198", 2657296)
    assert ev["attrs"]["cuda_code"] == 1 and ev["attrs"]["cuda_error"] == "invalid argument"
    assert ev["attrs"]["actor"] == "train_rft" and ev["attrs"]["src"] == "include/alloc.h:102"


def test_other_warn_lines_are_nccl_warn(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue1066-init-2.12.12-nvmlwrap-warn.log")
    evs = events(store)
    assert [(e["kind"], e["severity"], e["pid"]) for e in evs] == [
        ("nccl_warn", "warning", 1080061),
        ("nccl_warn", "warning", 1080060),
    ]
    assert evs[0]["message"] == "nvmlDeviceGetHandleByPciBusId() failed: Not Found"


# -- the rank map ---------------------------------------------------------------------------------


def rank_map(store: Store) -> list[dict]:
    return store.query("SELECT * FROM nccl_ranks ORDER BY node, pid, rank").to_dicts()


def test_init_2_7_8_processes_version_and_nic(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue1129-init-2.7.8-ib.log")
    rows = rank_map(store)
    assert [(r["pid"], r["cuda_dev"]) for r in rows] == [(6561, 0), (6563, 1), (6564, 2), (6565, 3)]
    assert {r["nccl_version"] for r in rows} == {"2.7.8+cuda11.1"}
    assert rows[0]["nic"] == "mlx5_0:1/IB" and rows[0]["transport"] == "IB"
    assert rows[0]["rank"] is None and rows[0]["node"] == "node08"


def test_init_2_19_3_socket_rank_busid(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue1267-init-2.19.3-socket-gcp.log")
    (r,) = rank_map(store)
    assert (r["node"], r["pid"], r["rank"], r["nranks"], r["cuda_dev"]) == (
        "instance-8g-96c-4",
        101707,
        0,
        1,
        0,
    )
    assert r["bus_id"] == "0000:00:03.0" and r["comm_id"] == "0x7ef9513a104d9d97"
    assert (r["nccl_version"], r["transport"]) == ("2.19.3+cuda12.3", "Socket")
    assert r["nic"] == "ens7:10.128.0.33<0>"


def test_init_2_21_5_docker(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-issue1504-init-2.21.5-docker-eth0.log")
    rows = rank_map(store)
    assert [r["pid"] for r in rows] == [26023, 26024, 26025, 26026]
    assert {(r["node"], r["nccl_version"]) for r in rows} == {("678c7278cb2d", "2.21.5+cuda12.4")}


def test_init_2_22_3_leonardo_two_ranks_deduplicated(corpus: Path, store: Store) -> None:
    path = corpus / "nccl" / "nccl-tests-issue331-sendrecv-a100-leonardo-init-to-destroy.log"
    ingest_one(store, path)
    rows = rank_map(store)  # Init START and Init COMPLETE of each rank -> one row
    assert [(r["rank"], r["nranks"], r["cuda_dev"], r["bus_id"]) for r in rows] == [
        (0, 2, 0, "0000:1d:00.0"),
        (1, 2, 1, "0000:56:00.0"),
    ]
    assert {r["nccl_version"] for r in rows} == {"2.22.3+cuda12.2"}
    assert rows[0]["nic"] == "mlx5_0:1/IB mlx5_1:1/IB mlx5_2:1/IB mlx5_3:1/IB"
    assert rows[0]["comm_id"] == "0xf6bfaf5466e2b71f"


def test_nccl_tests_banner_gives_rank_map(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-tests-soperator-pr428-h100-16rank-header.txt")
    rows = store.query("SELECT * FROM nccl_ranks ORDER BY rank").to_dicts()
    assert len(rows) == 12
    assert (rows[0]["node"], rows[0]["pid"], rows[0]["bus_id"]) == (
        "worker-1",
        1887,
        "0000:8d:00.0",
    )
    assert (rows[8]["node"], rows[8]["cuda_dev"], rows[8]["bus_id"]) == (
        "worker-0",
        0,
        "0000:8d:00.0",
    )


# -- nccl-tests results ---------------------------------------------------------------------------


def test_nccl_tests_rows_mooncake(corpus: Path, store: Store) -> None:
    ingest_one(store, corpus / "nccl" / "nccl-tests-mooncake-pr3484-allreduce-results-rows.txt")
    rows = store.query("SELECT * FROM link_health ORDER BY line, in_place").to_dicts()
    assert len(rows) == 22
    last_oop, last_ip = rows[-2], rows[-1]
    assert (last_oop["size_bytes"], last_oop["busbw_gbs"], last_oop["in_place"]) == (
        33554432,
        300.51,
        False,
    )
    assert (last_ip["busbw_gbs"], last_ip["in_place"], last_ip["time_us"]) == (300.52, True, 195.4)
    assert last_oop["test"] == "all_reduce_perf"  # from the file name
    assert (last_oop["dtype"], last_oop["redop"], last_oop["wrong"]) == ("float", "sum", 0)


def test_nccl_tests_rows_leonardo_sendrecv(corpus: Path, store: Store) -> None:
    path = corpus / "nccl" / "nccl-tests-issue331-sendrecv-a100-leonardo-init-to-destroy.log"
    ingest_one(store, path)
    rows = store.query("SELECT * FROM link_health WHERE size_bytes = 2147483648 ORDER BY in_place")
    oop, ip = rows.to_dicts()
    assert (oop["busbw_gbs"], oop["time_us"], oop["wrong"]) == (71.74, 29935.0, 0)
    assert (ip["busbw_gbs"], ip["wrong"]) == (72.88, None)  # "N/A"
    assert (oop["node"], oop["test"]) == ("lrdn2296", "sendrecv_perf")
    assert store.count("link_health") == 58


# -- launcher prefixes and timestamps (hand-written fixture) -------------------------------------


def test_pdsh_prefixed_and_nccl_timestamped_lines(store: Store) -> None:
    f = ingest_one(store, DATA / "pdsh-nccl-timestamped.log")
    assert (f["lines"], f["quarantined"]) == (13, 0)
    evs = events(store)
    ib, ibv, headless = evs
    # line 11 lost its host:pid:tid [dev] header: still a WARN event, its node from pdsh's tag
    assert (headless["line"], headless["kind"], headless["node"]) == (11, "nccl_warn", "gpu-a02")
    assert headless["message"] == "this line lost its header"
    assert ib["ts"] == datetime(2025, 3, 1, 12, 0, 5) and ib["node"] == "gpu-a02"
    assert (ib["attrs"]["status"], ib["attrs"]["vendor_err"], ib["attrs"]["hca"]) == (
        12,
        129,
        "mlx5_3",
    )
    assert ib["attrs"]["status_str"] == "transport retry counter exceeded"
    assert (ibv["subkind"], ibv["attrs"]["call"], ibv["attrs"]["errno"]) == (
        "ibv",
        "ibv_modify_qp",
        110,
    )
    (r,) = rank_map(store)
    assert (r["node"], r["rank"], r["nranks"], r["bus_id"]) == ("gpu-a01", 0, 16, "0000:18:00.0")
    assert (r["nccl_version"], r["nic"]) == ("2.26.2+cuda12.8", "mlx5_0:1/IB mlx5_3:1/IB")
    lh = store.query("SELECT node, test, busbw_gbs FROM link_health ORDER BY in_place").rows()
    assert lh == [("gpu-a01", "all_reduce_perf", 43.37), ("gpu-a01", "all_reduce_perf", 44.02)]
    assert store.query("SELECT line, reason FROM quarantine").rows() == []


def test_job_id_from_jobs_folder(tmp_path: Path, store: Store, corpus: Path) -> None:
    src = corpus / "nccl" / "nccl-issue928-netib-error4-vendor81-h100.log"
    dst = tmp_path / "jobs" / "4711" / "nccl.log"
    dst.parent.mkdir(parents=True)
    dst.write_bytes(src.read_bytes())
    ingest_one(store, dst)
    assert {e["job_id"] for e in events(store)} == {"4711"}


# -- sniffing -------------------------------------------------------------------------------------


def test_sniff_claims_nccl_and_not_other_sources(corpus: Path) -> None:
    parser, torch = nccl.PARSERS
    for path in (corpus / "nccl").glob("*"):
        head = path.read_text(errors="replace").splitlines()[:400]
        assert max(parser.sniff(head, str(path)), torch.sniff(head, str(path))) >= 0.7, path
    for sub in ("xid", "slurm", "telemetry", "loghub"):
        for path in (corpus / sub).glob("*"):
            if path.is_file():
                head = path.read_text(errors="replace").splitlines()[:400]
                assert parser.sniff(head, str(path)) == 0.0, path
                assert torch.sniff(head, str(path)) == 0.0, path


def test_parse_line_reference() -> None:
    ctx = ParseContext(file="x.log")
    parser = nccl.NcclParser()
    line = (
        "h1:1:2 [3] net.cc:1 NCCL WARN NET/IB : Got completion from peer 1.2.3.4<5> with "
        "status=5 opcode=0 len=0 vendor err 249 (Recv)"
    )
    got = parser.parse_line(line, ctx)
    assert isinstance(got, Parsed)
    (ev,) = got.rows["events"]
    assert json.loads(ev["attrs"])["status_name"] == "IBV_WC_WR_FLUSH_ERR"
    assert parser.parse_line("h1:1:2 [3] NCCL INFO Channel 00/02 :    0   1", ctx) is None
    assert isinstance(parser.parse_line("garbage NCCL WARN x", ctx), Quarantined)


# -- arbitrary input ------------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    [
        "h:1:2 [0] NCCL WARN ",
        "NCCL INFO comm 0x1 rank ",
        " nranks ",
        "NCCL version ",
        "Last error:",
        "Watchdog caught collective operation timeout: WorkNCCL(",
        "ChildFailedError",
        "  time      : ",
        "  host      : ",
        "  rank      : 3 (local_rank: ",
        "  traceback : ",
        "ncclRemoteError: ",
        "   8   2   float   sum   -1   9.8   0.00   0.00   0",
        "#  Rank  0 Group  0 Pid 1 on h ",
        "NCCL error in: x:1, ",
        "[rank1]:",
        "(pid=3, ip=1.2.3.4) ",
        "\r",
        "\x00",
        "é",
        "[E1129 ",
        "Got completion from peer ",
        "ProcessGroupNCCL.cpp:1] ",
        "_perf",
        " Pid ",
        " float ",
        "[rank1]:[E1129 13:05:01.123 ProcessGroupNCCL.cpp:1] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=X, Timeout(ms)=5) ran for 6 milliseconds",
        "h:1:2 [0] x.cc:1 NCCL WARN NET/IB : Got completion from peer 1.2.3.4<5> with status=12 "
        "opcode=0 len=0 vendor err 1 (Recv)",
        "h:1:2 [0] x.cc:1 NCCL WARN Net : Call to recv from h<5> failed : ",
        "h:1:2 [0] a.h:1 NCCL WARN Cuda failure 2 '",
        "ibv_reg_mr failed with ",
    ]
)
_LINE = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=20)), max_size=6).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.none(), _LINE), max_size=30))
# a start line that is also a result line, after a gap: the handler folds it into the block
@example(["NCCL error in: x:1, ", None, "ncclRemoteError: NCCL error in: x:1, "])
@example(["NCCL error in: x:1, ", None, "Last error:", "NCCL error in: x:1, "])
def test_arbitrary_lines_never_crash_and_are_accounted(lines: list[str | None]) -> None:
    lines = [None if (x is None or x == "" or "\n" in x) else x for x in lines]
    ctx = ParseContext(file="/tmp/x.log", year=2024)
    parser = nccl.NcclParser()
    state = parser.new_state(ctx)
    series = pl.Series("line", lines, dtype=pl.String)
    vec = parser.parse_chunk(series, 1, ctx, state).merge(parser.finish(ctx, state))
    non_null = sum(x is not None for x in lines)
    assert vec.parsed + vec.quarantined <= non_null
    if vec.quarantine is not None:
        assert vec.quarantine["line"].is_unique().all()
    assert_same(vec, nccl.reference_parse(lines, ctx))


# pieces of NCCL line heads, so that generated lines match ``NCCL_LINE`` often, in odd places
_HEAD_PIECES = st.sampled_from(
    ["h:1:2 ", "h-2.x:3:4 ", "[0] ", "[-1] ", "1.5 ", "net.cc:12 ", "NCCL ", "NCCL WARN ", "WARN"]
    + ["ABORT", "INFO", " ", ":", "x", "é", "\t", "[", "NCCL ABORT"]
)


@pytest.mark.parametrize("min_repeat", [0, 10**9])
@settings(
    max_examples=300,
    deadline=None,
    # the fixture sets the same constant for every example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.lists(_HEAD_PIECES, max_size=12).map("".join), min_size=1, max_size=12))
# the head behind an earlier "NCCL ", a level at the line's end, a space after ABORT
@example(lines=["NCCL h:1:2 [0] NCCL WARN m", "é NCCL x h:1:2 [0] NCCL INFO"])
@example(lines=["h:1:2 [0] net.cc:12 NCCL ABORT x", "h:1:2 [-1] NCCL ABORT", "h:1:2 [0] NCCL"])
def test_nccl_groups_read_by_head_part_equal_the_whole_line_pattern(
    monkeypatch: pytest.MonkeyPatch, min_repeat: int, lines: list[str]
) -> None:
    monkeypatch.setattr(base, "PER_DISTINCT_MIN_REPEAT", min_repeat)
    cand = pl.DataFrame({"line": range(2 * len(lines)), "raw": lines * 2})
    raw = pl.col("raw")
    want = (
        cand.with_columns(ng=raw.str.extract_groups(nccl_vec.NCCL_HEAD))
        .unnest("ng")
        .with_columns(msg=raw.str.strip_prefix(pl.col("_head")))
        .drop("_head")
    )
    assert nccl_vec.nccl_groups(cand).equals(want)


# a watchdog line's parts in order, each in the spellings the pattern takes, then wrong ones
_WATCHDOG_SLOTS = [
    (["", "[3] "], ["[3]", "[x] "]),
    (["", "[rank2]:", "[rank2]: ", "[default1]:"], ["[rank]:"]),
    (["[E", "[E1129 13:05:01.000000028", "[E129 01:02:03", "[E1129 13:05:01"], ["[W", "E"]),
    ([" ProcessGroupNCCL.cpp:616] "], [" ProcessGroupNCCL.cpp:] ", "ProcessGroupNCCL.cpp:1] "]),
    (
        ["[Rank 4] ", "[PG 0 Rank 4] ", "[PG 1 (default_pg) Rank 2 Rank 3] "],
        ["[PG ] Rank 1] ", "[Rank] "],
    ),
    (["Watchdog caught collective operation timeout: WorkNCCL("], ["Watchdog caught "]),
    (["", "SeqNum=28, "], ["SeqNum=, "]),
    (["OpType=ALLREDUCE", "OpType=_ALL2"], ["OpType="]),
    (["", ", NumelIn=224, NumelOut=-1"], [", NumelIn=1"]),
    (["", ", TensorShape=[8, 2]", ", TensorShape=[]"], [", TensorShape=[", ", TensorShape=[]]"]),
    ([", Timeout(ms)=600000) ran for 600028 milliseconds"], [", Timeout(ms)=1) ran for ms"]),
    (["", " before timing out.", "é", ")"], []),
]
# each part right nine times in ten: about a third of the lines match
_WATCHDOG_LINE = st.tuples(
    *(st.sampled_from(right * 9 * max(1, len(wrong)) + wrong) for right, wrong in _WATCHDOG_SLOTS)
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_WATCHDOG_LINE, _LINE), min_size=1, max_size=12))
def test_watchdog_groups_equal_the_whole_pattern(lines: list[str]) -> None:
    rows = pl.DataFrame({"raw": lines})
    want = rows.with_columns(wd=pl.col("raw").str.extract_groups(nccl_vec._WATCHDOG_HEAD))
    assert nccl_vec.watchdog_groups(rows).equals(want)
