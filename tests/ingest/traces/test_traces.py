"""Public cluster traces: Alibaba GPU 2023, PAI 2020, AcmeTrace, Alibaba GenAI duty cycle."""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest import registry
from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.traces import public as traces

NOW = datetime(2024, 6, 1)
DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
EPOCH_2023 = datetime(2023, 1, 1)
EPOCH_PAI = datetime(2020, 7, 2)

# Every file of corpus/traces and the format it must be sniffed as.
CORPUS_FORMATS = {
    "acmetrace-cluster_summary.csv": "acme_summary",
    "alibaba-genai-v2026-pod_gpu_duty_cycle_anon-first18000.csv": "alibaba_genai_duty_cycle",
    "alibaba-gpu-v2023-openb_node_list_all_node.csv": "alibaba2023_nodes",
    "alibaba-gpu-v2023-openb_node_list_gpu_node.csv": "alibaba2023_nodes",
    "alibaba-gpu-v2023-openb_pod_list_default.csv": "alibaba2023_pods",
    "alibaba-pai-gpu-v2020-headers/pai_group_tag_table.header": "pai2020_group_tag",
    "alibaba-pai-gpu-v2020-headers/pai_instance_table.header": "pai2020_instance",
    "alibaba-pai-gpu-v2020-headers/pai_job_table.header": "pai2020_job",
    "alibaba-pai-gpu-v2020-headers/pai_machine_metric.header": "pai2020_machine_metric",
    "alibaba-pai-gpu-v2020-headers/pai_machine_spec.header": "pai2020_machine_spec",
    "alibaba-pai-gpu-v2020-headers/pai_sensor_table.header": "pai2020_sensor",
    "alibaba-pai-gpu-v2020-headers/pai_task_table.header": "pai2020_task",
}


def line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def ingest(store, paths, **ctx_kw):
    base = ParseContext(file="", **ctx_kw) if ctx_kw else None
    return ingest_paths(store, [str(p) for p in paths], now=NOW, base_ctx=base)


# -- the real corpus -----------------------------------------------------------------------------


def test_every_corpus_trace_is_sniffed_and_fully_accounted(store, corpus):
    folder = corpus / "traces"
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert {str(p.relative_to(folder)) for p in files} == set(CORPUS_FORMATS)
    report = ingest(store, files)
    by_path = {Path(f.path).relative_to(folder.resolve()).as_posix(): f for f in report.files}
    for rel, fmt in CORPUS_FORMATS.items():
        f = by_path[rel]
        assert f.status == "ok", (rel, f.error)
        assert f.format == fmt
        assert f.lines == line_count(folder / rel)
        assert f.parsed + f.noise + f.quarantined == f.lines
        assert f.quarantined == 0
    registered = store.query("SELECT path, lines FROM ingested_files")
    assert registered.height == len(CORPUS_FORMATS)


def test_alibaba2023_pods_real_rows(store, corpus):
    path = corpus / "traces" / "alibaba-gpu-v2023-openb_pod_list_default.csv"
    report = ingest(store, [path])
    assert report.files[0].parsed == line_count(path) - 1  # all but the header
    assert store.count("jobs") == 8152
    rows = store.query(
        'SELECT job_id, n_gpus, partition, state, state_detail, submit, start, "end", elapsed_s,'
        " source, line FROM jobs WHERE job_id IN (?, ?, ?) ORDER BY job_id",
        ["openb-pod-0001", "openb-pod-0017", "openb-pod-0033"],
    ).to_dicts()
    s = timedelta(seconds=1)
    assert rows[0] == {
        "job_id": "openb-pod-0001",
        "n_gpus": 1,
        "partition": "LS",
        "state": "RUNNING",
        "state_detail": "Running",
        "submit": EPOCH_2023 + 427061 * s,
        "start": EPOCH_2023 + 427061 * s,
        "end": EPOCH_2023 + 12902960 * s,
        "elapsed_s": 12902960.0 - 427061,
        "source": "alibaba2023",
        "line": 3,
    }
    assert (rows[1]["n_gpus"], rows[1]["state"], rows[1]["partition"]) == (
        8,
        "COMPLETED",
        "Burstable",
    )
    assert rows[1]["end"] == EPOCH_2023 + 10769854 * s
    assert (rows[2]["state"], rows[2]["start"]) == ("FAILED", EPOCH_2023 + 9965463 * s)
    # Pending pods were never scheduled: no start.
    pending = store.query(
        "SELECT count(*) AS n, count(start) AS started FROM jobs WHERE state = 'PENDING'"
    ).row(0, named=True)
    assert pending["n"] == 897 and pending["started"] == 0
    states = dict(store.query("SELECT state, count(*) FROM jobs GROUP BY state").rows())
    assert states == {"RUNNING": 5193, "FAILED": 1870, "PENDING": 897, "COMPLETED": 192}


def test_alibaba2023_pods_trace_epoch_option(store, corpus):
    path = corpus / "traces" / "alibaba-gpu-v2023-openb_pod_list_default.csv"
    ingest(store, [path], options={"trace_epoch": "2023-06-01T00:00:00"})
    start = store.scalar("SELECT start FROM jobs WHERE job_id = ?", ["openb-pod-0001"])
    assert start == datetime(2023, 6, 1) + timedelta(seconds=427061)


def test_alibaba2023_node_lists_become_gpu_inventory(store, corpus):
    path = corpus / "traces" / "alibaba-gpu-v2023-openb_node_list_all_node.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    report = ingest(store, [path])
    gpu_nodes = [r for r in rows if int(r["gpu"]) > 0]
    assert report.files[0].parsed == len(gpu_nodes)
    assert report.files[0].noise == len(rows) - len(gpu_nodes) + 1  # CPU-only nodes + header
    assert store.count("gpus") == sum(int(r["gpu"]) for r in gpu_nodes)
    node = store.query(
        "SELECT gpu_index, model, source FROM gpus WHERE node = ? ORDER BY gpu_index",
        ["openb-node-0500"],
    )
    assert node["gpu_index"].to_list() == list(range(8))
    assert set(node["model"]) == {"G2"} and set(node["source"]) == {"alibaba2023"}
    assert store.scalar("SELECT count(*) FROM gpus WHERE node = ?", ["openb-node-0000"]) == 0


def test_genai_duty_cycle_becomes_gpu_util_telemetry(store, corpus):
    path = corpus / "traces" / "alibaba-genai-v2026-pod_gpu_duty_cycle_anon-first18000.csv"
    ingest(store, [path])
    assert store.count("telemetry") == 18000
    row = store.query(
        "SELECT ts, gpu, metric, value FROM telemetry WHERE node = ? AND ts = ?",
        ["63beb1b84354963cd40aa5fbdac96110", datetime(2022, 9, 11, 1, 12)],
    ).to_dicts()
    assert row == [
        {
            "ts": datetime(2022, 9, 11, 1, 12),
            "gpu": None,
            "metric": "DCGM_FI_DEV_GPU_UTIL",
            "value": 28.2,
        }
    ]
    assert store.scalar("SELECT count(DISTINCT node) FROM telemetry") == 114


def test_acme_cluster_summary_is_noise_and_readable(store, corpus):
    path = corpus / "traces" / "acmetrace-cluster_summary.csv"
    report = ingest(store, [path])
    assert (report.files[0].parsed, report.files[0].noise) == (0, 6)
    summary = traces.read_cluster_summary(path)
    seren = summary.filter(pl.col("id") == "Seren").row(0, named=True)
    assert seren["job_num"] == 1031550 and seren["gpu_job_num"] == 663813


def test_rows_parse_independently_of_their_chunk(corpus):
    """The traces' ``parse_line`` IS their chunk path run on one row, so this is no check of a
    reference against the vectorized path: it checks that a row's result does not depend on the
    rows around it (a chunk of 60 rows = 60 one-row chunks)."""
    for rel, fmt in CORPUS_FORMATS.items():
        path = corpus / "traces" / rel
        parser = registry.get(fmt)
        lines = path.read_text().splitlines()[1:61]  # data rows (header files have none)
        ctx = ParseContext(file=str(path))
        chunk = parser.parse_chunk(pl.Series(lines, dtype=pl.String), 2, ctx, None)
        singles = [parser.parse_line(ln, ctx) for ln in lines]
        assert chunk.parsed == sum(isinstance(r, Parsed) for r in singles)
        assert chunk.quarantined == sum(isinstance(r, Quarantined) for r in singles)
        for table, frame in chunk.tables.items():
            rows = [row for r in singles if isinstance(r, Parsed) for row in r.rows.get(table, [])]
            assert frame.drop("line", strict=False).to_dicts() == [
                {k: v for k, v in row.items() if k != "line"} for row in rows
            ]


def test_trace_parsers_claim_no_other_corpus_file(corpus):
    names = {p.name for p in traces.PARSERS}
    for path in sorted(corpus.rglob("*")):
        if not path.is_file() or "traces" in path.parts or path.suffix == ".md":
            continue
        head = path.read_text(errors="replace")[:65536].splitlines()[:400]
        assert all(p.sniff(head, str(path)) == 0 for p in traces.PARSERS), path
        assert registry.sniff(head, str(path))[0] not in names


# -- PAI 2020 (hand-written rows in the documented headerless layout) -----------------------------


def test_pai_job_table(store):
    report = ingest(store, [DATA / "pai_job_table.csv"])
    f = report.files[0]
    assert (f.format, f.lines, f.parsed, f.noise, f.quarantined) == ("pai2020_job", 7, 4, 1, 2)
    jobs = store.query(
        'SELECT job_id, user, state, state_detail, submit, start, "end" FROM jobs ORDER BY line'
    ).to_dicts()
    s = timedelta(seconds=1)
    assert jobs[0] == {
        "job_id": "6a1f3b0c9d2e4f5a6b7c8d9e",
        "user": "58540f191766",
        "state": "COMPLETED",
        "state_detail": "Terminated",
        "submit": EPOCH_PAI + 1739162 * s,
        "start": None,
        "end": EPOCH_PAI + 1739200 * s,
    }
    assert [j["state"] for j in jobs] == ["COMPLETED", "FAILED", "RUNNING", "PENDING"]
    assert jobs[1]["end"] == EPOCH_PAI + timedelta(seconds=2003600.5)
    quarantine = store.query("SELECT line, reason FROM quarantine ORDER BY line").rows()
    assert quarantine[0][0] == 6 and quarantine[0][1].startswith("expected 6 comma-separated")
    assert quarantine[1] == (7, "end_time is not a number: soon")


def test_pai_task_and_instance_tables(store):
    ingest(store, [DATA / "pai_task_table.csv", DATA / "pai_instance_table.csv"])
    tasks = store.query(
        "SELECT step, n_gpus, state, start FROM job_steps WHERE job_id = ? "
        "AND NOT contains(step, '/') ORDER BY line",
        ["7b2e4c1d0f3a5b6c7d8e9f0a"],
    ).to_dicts()
    assert tasks == [
        {
            "step": "worker",
            "n_gpus": 4,
            "state": "FAILED",
            "start": EPOCH_PAI + timedelta(seconds=2000000),
        },
        {
            "step": "ps",
            "n_gpus": None,
            "state": "FAILED",
            "start": EPOCH_PAI + timedelta(seconds=2000000),
        },
    ]
    # 8 instances x 25% of a GPU = 2 GPUs
    assert store.scalar("SELECT n_gpus FROM job_steps WHERE step = 'PyTorchWorker'") == 2
    inst = store.query(
        "SELECT step, nodes, state FROM job_steps WHERE contains(step, '/') ORDER BY line"
    ).rows()
    assert inst == [
        ("worker/0", ["c1f2a3b4c5d6e7f8a9b0c1d2"], "FAILED"),
        ("worker/1", ["d2a3b4c5d6e7f8a9b0c1d2e3"], "COMPLETED"),
        ("PyTorchWorker/0", None, "RUNNING"),
    ]
    assert store.query("SELECT line, reason FROM quarantine").row(0)[0] == 5


def test_pai_machine_spec_and_forced_columns(store):
    ingest(store, [DATA / "pai_machine_spec.csv"])
    counts = dict(store.query("SELECT model, count(*) FROM gpus GROUP BY model").rows())
    assert counts == {"V100": 8, "T4": 2}


def test_pai_headerless_sniff_needs_the_row_shape():
    job = registry.get("pai2020_job")
    rows = (DATA / "pai_job_table.csv").read_text().splitlines()
    assert 0 < job.sniff(rows, "x.csv") < 0.99
    assert job.sniff(["job_name,inst_id,user,status,start_time,end_time"], "x") == 0.99
    assert job.sniff(["a,b,c,Done,1,2", "a,b,c,Done,1,2"], "x") == 0.0
    assert registry.get("pai2020_task").sniff(rows, "x") == 0.0


# -- AcmeTrace job traces (hand-written rows in the documented layout) ----------------------------


def test_acme_seren_and_kalos(store):
    report = ingest(store, [DATA / "trace_seren.csv", DATA / "trace_kalos.csv"])
    seren, kalos = sorted(report.files, key=lambda f: f.path, reverse=True)
    assert (seren.format, seren.lines, seren.parsed, seren.noise, seren.quarantined) == (
        "acme_jobs",
        6,
        3,
        1,
        2,
    )
    assert (kalos.parsed, kalos.quarantined) == (2, 0)
    row = store.query(
        'SELECT user, name, n_nodes, n_gpus, submit, start, "end", elapsed_s, '
        "state, source FROM jobs WHERE job_id = ?",
        ["dlc1001"],
    ).row(0, named=True)
    assert row == {
        "user": "u0042",
        "name": "Pretrain",
        "n_nodes": 4,
        "n_gpus": 32,
        "submit": datetime(2023, 3, 1, 8),
        "start": datetime(2023, 3, 1, 8, 5),
        "end": datetime(2023, 3, 1, 20, 5),
        "elapsed_s": 43200.0,
        "state": "FAILED",
        "source": "acme",
    }
    # Cancelled while queued: no start, still a job.
    assert store.scalar("SELECT start FROM jobs WHERE job_id = ?", ["dlc1003"]) is None
    assert store.scalar("SELECT state FROM jobs WHERE job_id = ?", ["kalos-77"]) == "NODE_FAIL"
    reasons = store.query(
        "SELECT line, reason FROM quarantine WHERE file LIKE ? ORDER BY line", ["%seren%"]
    ).rows()
    assert reasons[0] == (5, "start_time is not a time: not a time")
    assert reasons[1][0] == 6 and "expected 13" in reasons[1][1]


def test_acme_missing_key_columns_quarantine_every_row():
    parser = registry.get("acme_jobs")
    lines = pl.Series(
        [
            "job_id,gpu_num,duration,state,submit_time,start_time,end_time",
            "j1,8,10,COMPLETED,2023-01-01 00:00:00,,",
        ],
        dtype=pl.String,
    )
    ok = parser.parse_chunk(lines, 1, ParseContext(file="t"), None)
    assert ok.parsed == 1 and ok.tables["jobs"]["n_gpus"].to_list() == [8]
    # A header that is not AcmeTrace's: read with the documented layout, every line rejected.
    bad = parser.parse_chunk(
        pl.Series(["job_id,gpu_num,duration,state,submit_time", "j1,8,10,COMPLETED,x"]),
        1,
        ParseContext(file="t"),
        None,
    )
    assert bad.parsed == 0 and bad.quarantined == 2
    assert bad.quarantine["reason"][1].startswith("expected 13 comma-separated fields")
    # Columns forced by the caller that lack the key ones: every row says which are missing.
    forced = ParseContext(file="t", columns=["job_id", "gpu_num", "state"])
    bad = parser.parse_chunk(pl.Series(["j1,8,COMPLETED"]), 2, forced, None)
    assert bad.quarantined == 1 and "missing" in bad.quarantine["reason"][0]


# -- arbitrary input ------------------------------------------------------------------------------

_field = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["", "1.5", "nan", "inf", "-1", "1e400", "Terminated", "Failed", "Running", '"a,b"', "\x00"]
    ),
)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.lists(_field, min_size=1, max_size=14).map(",".join), max_size=8),
    header=st.sampled_from([None, *{p.columns for p in traces.PARSERS}]),
)
def test_arbitrary_rows_never_crash_and_are_accounted(rows, header):
    lines = ([",".join(header)] if header else []) + [r.replace("\n", " ") for r in rows]
    series = pl.Series(lines, dtype=pl.String)
    ctx = ParseContext(file="fuzz")
    for parser in traces.PARSERS:
        result = parser.parse_chunk(series, 1, ctx, None)
        assert result.parsed + result.quarantined <= len(lines)
        if result.quarantine is not None:
            assert result.quarantine["line"].is_unique().all()
