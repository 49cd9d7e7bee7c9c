"""The kernel-log parser on the real corpus (read in place) and on hand-written fixtures."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlens.ingest import base
from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.kernel.parser import PARSERS, KernelParser, sniff_text
from faultlens.ingest.reader import iter_chunks
from faultlens.ingest.schema import conform, empty_frame

DATA = Path(__file__).resolve().parents[2] / "data" / "kernel"
NOW = datetime(2026, 3, 1, 12, 0, 0)
KERNEL = KernelParser()
BY_NAME = {p.name: p for p in PARSERS}


def real_line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def ingest(store, paths, **ctx_fields):
    from faultlens.ingest.pipeline import ingest_paths

    base = ParseContext(file="", **ctx_fields) if ctx_fields else None
    return ingest_paths(store, [str(p) for p in paths], now=NOW, base_ctx=base)


def events(store, name: str) -> pl.DataFrame:
    return store.query("SELECT * FROM events WHERE file LIKE ? ORDER BY line", [f"%{name}"])


def xid_files(corpus: Path) -> list[Path]:
    return sorted((corpus / "xid").iterdir())


# -- every real file: accounting -------------------------------------------------------------------


def test_every_corpus_file_is_accounted_for(corpus, store):
    files = xid_files(corpus)
    assert len(files) >= 18
    report = ingest(store, files)
    by_path = {Path(f.path).name: f for f in report.files}
    for path in files:
        r = by_path[path.name]
        assert r.status in ("ok", "partial"), (path.name, r.error)
        assert r.format in ("lines", "k8s_device_plugin"), path.name
        assert r.lines == real_line_count(path), path.name
        assert r.lines == r.parsed + r.noise + r.quarantined, path.name
    # nothing in the real corpus is left unexplained
    assert store.count("quarantine") == 0
    assert by_path["xid-gpud-testdata-xid13-xid43-dmesg-decode-iso.log"].parsed == 636
    assert by_path["kmsg-gpud-testdata-nvswitch-open-raw-devkmsg.log"].noise == 47


# -- concrete fields from real lines ---------------------------------------------------------------


@pytest.fixture
def loaded(corpus, store):
    ingest(store, xid_files(corpus))
    return store


def one(frame: pl.DataFrame, **where) -> dict:
    for k, v in where.items():
        frame = frame.filter(pl.col(k) == v)
    assert frame.height >= 1, where
    return frame.row(0, named=True)


def test_xid79_old_driver_dmesg(loaded):
    ev = events(loaded, "xid-pastebin-jJdbRLSr-xid79-driver375-dmesg.log")
    assert ev.height == 1
    r = ev.row(0, named=True)
    assert (r["kind"], r["code"], r["gpu"], r["line"]) == ("xid", 79, "0000:03:00.0", 2)
    assert r["uptime_s"] == pytest.approx(5107.644336)
    assert r["ts"] is None and r["ts_flag"] == "boot_relative"
    assert (r["severity"], r["action"]) == ("critical", "reboot_node")


def test_dmesg_ctime_xid45_and_hung_task(loaded):
    ev = events(loaded, "xid-gpud-pr117-xid45-hung-task-dmesg-T.log")
    x = one(ev, kind="xid")
    assert x["ts"] == datetime(2024, 10, 12, 18, 35, 32)
    assert (x["code"], x["gpu"], x["pid"], x["process"]) == (
        45,
        "0000:61:00.0",
        1496200,
        "distprovers-gpu",
    )
    assert json.loads(x["attrs"])["ch"] == "0000000a"
    h = one(ev, kind="hung_task")
    assert (h["process"], h["pid"], h["line"]) == ("cache_mgr_event", 620917, 7)
    assert json.loads(h["attrs"]) == {"blocked_s": 120}


def test_sxid_from_dmesg_iso(loaded):
    r = one(events(loaded, "sxid-gpud-pr338-nvswitch-sxid12028-dmesg-iso.log"), kind="sxid")
    assert (r["code"], r["gpu"]) == (12028, "0000:84:00.0")
    assert r["ts"] == datetime(2025, 1, 25, 10, 34, 54, 859532)
    attrs = json.loads(r["attrs"])
    assert attrs["switch"] == 1 and len(attrs["data"]) == 9 and attrs["data"][0] == "0x000001c0"


def test_nvlink_xids(loaded):
    ev = events(loaded, "xid-gpud-pr1160-pr1174-xid144-145-149-nvlink-kmsg.log")
    assert ev["kind"].to_list() == ["nvlink"] * 5
    assert ev["code"].to_list() == [144, 149, 149, 149, 145]
    r = ev.row(1, named=True)
    assert (r["subkind"], r["gpu"], r["ts_flag"]) == ("Fatal", "0000:00:00.0", "no_ts")
    attrs = json.loads(r["attrs"])
    assert (attrs["link"], attrs["unit"], attrs["intr"], attrs["inst"]) == (
        0,
        "NETIR_LINK_EVT",
        "XC0",
        "i0",
    )
    assert attrs["words"][0] == "0x026001c6" and len(attrs["words"]) == 6
    assert json.loads(ev.row(3, named=True)["attrs"])["link"] == -1
    last = ev.row(4, named=True)
    assert (last["subkind"], last["gpu"], json.loads(last["attrs"])["link"]) == (
        "Nonfatal",
        "0018:01:00.0",
        13,
    )


def test_fallen_off_the_bus_multiline(loaded):
    ev = events(loaded, "xid-nvsentinel-issue155-fallen-off-bus-multiline.log")
    r = one(ev, kind="fallen_off_bus")
    assert (r["gpu"], r["line"], r["severity"]) == ("0000:b3:00.0", 1, "critical")
    assert r["uptime_s"] == pytest.approx(1843.308145)
    assert json.loads(r["attrs"]) == {"lines": 3, "pci_id": "10de:26b5"}
    assert "fallen off the bus" in r["message"]
    assert one(ev, kind="gpu_init_fail")["subkind"] == "probe_failed"
    assert one(ev, kind="xid")["gpu"] == "0000:44:00.0"
    rec = loaded.query("SELECT * FROM ingested_files WHERE path LIKE '%issue155%'").row(
        0, named=True
    )
    # 3 lines of the record + probe failure + bare Xid 79 parsed; the module banner is noise
    assert (rec["parsed"], rec["noise"], rec["quarantined"]) == (5, 1, 0)


def test_gsp_timeout_xid119(loaded):
    ev = events(loaded, "xid-gpud-testdata-xid119-gsp-rpc-timeout-dmesg-ctime-xe9680.log")
    g = ev.filter((pl.col("kind") == "gsp_timeout") & (pl.col("code") == 119))
    assert g.height == 5
    r = g.row(0, named=True)
    assert (r["gpu"], r["pid"], r["process"], r["line"]) == (
        "0000:9b:00.0",
        2024380,
        "nvidia-smi",
        3,
    )
    assert r["ts"] == datetime(2025, 2, 23, 16, 24, 18)
    assert json.loads(r["attrs"]) == {
        "after_s": 6,
        "fn": 103,
        "fn_name": "GSP_RM_ALLOC",
        "rm_gpu": 4,
    }
    assert one(ev, subkind="rate_limited")["gpu"] == "0000:9b:00.0"


def test_reset_required(loaded):
    ev = events(loaded, "xid-sichek-issue51-gsp-reset-required-dmesg-T.log")
    assert ev["kind"].to_list() == ["reset_required", "reset_required"]
    assert ev["ts"][1] == datetime(2026, 1, 11, 9, 52, 1)
    assert "NV_ERR_RESET_REQUIRED" in ev["message"][1]


def test_edac_apei_mce(loaded):
    ev = events(loaded, "ras-ovro-lwa-issue117-edac-apei-pcie-dmesg.log")
    ue = one(ev, kind="memory")
    attrs = json.loads(ue["attrs"])
    assert (ue["subkind"], ue["severity"], attrs["mc"], attrs["channel"]) == (
        "UE",
        "critical",
        "MC3",
        "2",
    )
    assert attrs["location"] == "CPU_SrcID#1_MC#1_Chan#2_DIMM#0"
    apei = one(ev, kind="pcie")
    assert (apei["gpu"], apei["subkind"], apei["line"]) == ("0000:5e:00.0", "recoverable", 2)
    a = json.loads(apei["attrs"])
    assert a["section_type"] == "PCIe error" and a["slot"] == "9" and a["lines"] == 11
    assert one(ev, kind="mce")["subkind"] == "logged"


def test_ib_link_flap_and_mlx5_port_state(loaded):
    ib = events(loaded, "syslog-azurehpc-nhc-ib6-link-flap.log")
    assert ib["subkind"].to_list() == ["lost_carrier"] * 6 + ["gained_carrier"] * 6
    r = ib.row(0, named=True)
    assert (r["node"], json.loads(r["attrs"])) == ("jplc7eb7-vm-0", {"interface": "ib6"})
    # year-less stamp: the year comes from the file's mtime (the corpus copy's, here)
    assert r["ts"].strftime("%m-%d %H:%M:%S") == "08-17 06:18:01"
    mlx = events(loaded, "journalctl-k-gpud-pr1209-gpu-node-context.log")
    assert mlx["subkind"].to_list() == ["INIT", "ACTIVE"]
    m = mlx.row(1, named=True)
    assert m["node"] == "000-000-00000-1-gpu-1" and m["kind"] == "ib_port"
    assert json.loads(m["attrs"]) == {"device": "mlx5_5", "nic_pci": "0000:ab:00.0", "port": 1}


def test_kmsg_raw_records_are_noise_with_uptime(corpus):
    path = corpus / "xid" / "kmsg-gpud-testdata-nvswitch-open-raw-devkmsg.log"
    line = path.read_text().splitlines()[0]
    from faultlens.ingest.kernel.line import parse_prefix

    pre = parse_prefix(line, ParseContext(file=str(path)))
    assert pre.uptime_s == pytest.approx(206.764307) and pre.body.startswith("nvidia-nvswitch2")
    assert pre.ts_flag == "boot_relative"
    xid = "6,4011,57631398999,-;NVRM: Xid (PCI:0000:3b:00): 94, pid=1, name=x, Contained"
    res = KERNEL.parse_line(xid, ParseContext(file="k"))
    assert isinstance(res, Parsed)
    assert res.rows["events"][0]["uptime_s"] == pytest.approx(57631.398999)


def test_device_plugin_xid_critical_error(loaded):
    ev = events(loaded, "k8s-device-plugin-issue189-xidcriticalerror-xid69.log")
    r = one(ev, subkind="xid_critical")
    assert (r["code"], r["gpu"], r["source"], r["kind"]) == (
        69,
        "GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8",
        "k8s",
        "device_unhealthy",
    )
    assert r["ts"] == datetime(2020, 8, 10, 19, 9, 42)
    assert one(ev, subkind="marked_unhealthy")["line"] == 2


def test_old_form_and_pid_unknown(loaded):
    ev = events(loaded, "xid-dxvk-issue1027-xid31-13-32-dmesg.log")
    assert ev["code"].to_list() == [31, 31, 13, 13, 13, 13, 32]
    assert ev["ts_flag"][0] == "no_ts" and ev["gpu"].unique().to_list() == ["0000:01:00.0"]
    v = events(loaded, "xid-vllm-issue5901-xid13-a800-dmesg.log").row(0, named=True)
    assert v["pid"] is None and v["process"] is None and v["gpu"] == "0000:43:00.0"


# -- time: year inference, rollover, boot time -----------------------------------------------------


def test_syslog_year_from_mtime_with_dec_jan_rollover(tmp_path, store):
    path = tmp_path / "kern.log"
    shutil.copy(DATA / "syslog-dec-jan-rollover.log", path)
    jan = datetime(2025, 1, 1, 0, 5).timestamp()
    os.utime(path, (jan, jan))
    ingest(store, [path])
    ev = events(store, "kern.log")
    assert ev["ts"].to_list() == [datetime(2024, 12, 31, 23, 59, 58), datetime(2025, 1, 1, 0, 0, 1)]
    assert ev["node"][0] == "gpu-07"
    assert ev["uptime_s"][0] == pytest.approx(86390.5)


def test_syslog_year_option_rolls_over(store):
    ingest(store, [DATA / "syslog-dec-jan-rollover.log"], year=2030)
    ev = events(store, "syslog-dec-jan-rollover.log")
    assert [t.year for t in ev["ts"].to_list()] == [2030, 2031]


def test_boot_time_option_resolves_dmesg_stamps(corpus, store):
    boot = datetime(2025, 2, 14, 5, 0, 0)
    ingest(
        store, [corpus / "xid" / "xid-pastebin-jJdbRLSr-xid79-driver375-dmesg.log"], boot_time=boot
    )
    r = events(store, "xid79-driver375-dmesg.log").row(0, named=True)
    assert r["ts"] == boot + timedelta(seconds=5107, microseconds=644336)
    assert r["ts_flag"] == "boot_relative_resolved"


def test_boot_time_learned_from_rtc_line(store):
    report = ingest(store, [DATA / "dmesg-rtc-boot-time.log"])
    f = report.files[0]
    assert (f.lines, f.parsed, f.quarantined, f.status) == (5, 1, 1, "partial")
    r = events(store, "dmesg-rtc-boot-time.log").row(0, named=True)
    boot = datetime(2025, 2, 14, 5, 3, 41) - timedelta(seconds=1.25)
    assert r["ts"] == boot + timedelta(seconds=5107, microseconds=644336)
    q = store.query("SELECT line, reason FROM quarantine").row(0)
    assert q == (5, "NVRM line with unknown shape")


# -- journal JSON ----------------------------------------------------------------------------------


def test_journal_json(store):
    report = ingest(store, [DATA / "journal-json.log"])
    f = report.files[0]
    assert f.format == "journal_json"
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (4, 2, 1, 1)
    ev = events(store, "journal-json.log")
    x = ev.row(0, named=True)
    assert (x["node"], x["code"], x["gpu"], x["ts"]) == (
        "gpu-12",
        94,
        "0000:3b:00.0",
        datetime(2025, 2, 14, 5, 3, 41),
    )
    assert x["uptime_s"] == pytest.approx(5107.644336)
    assert ev.row(1, named=True)["subkind"] == "DOWN"


# -- the two paths agree ---------------------------------------------------------------------------


def _chunk_events(parser, path: Path, ctx: ParseContext) -> tuple[pl.DataFrame, set[int]]:
    state = parser.new_state(ctx)
    frames, multi = [], set()
    for chunk in iter_chunks(path):
        res = parser.parse_chunk(chunk.lines, chunk.first_line, ctx, state)
        frames.append(res.tables.get("events"))
    frames.append(parser.finish(ctx, state).tables.get("events"))
    ev = pl.concat(
        [conform("events", f) for f in frames if f is not None] + [empty_frame("events")]
    )
    for row in ev.filter(pl.col("attrs").str.contains('"lines":')).iter_rows(named=True):
        n = json.loads(row["attrs"])["lines"]
        multi.update(range(row["line"], row["line"] + n + 12))
    return ev, multi


# 0: a batch's Xid messages read once per distinct message and joined back; 10**9: per row
@pytest.mark.parametrize("min_repeat", [0, 10**9])
def test_vectorized_and_line_paths_agree_on_every_real_file(corpus, monkeypatch, min_repeat):
    monkeypatch.setattr(base, "PER_DISTINCT_MIN_REPEAT", min_repeat)
    for path in xid_files(corpus) + [corpus / "loghub" / "loghub-Linux_2k.log"]:
        name = "k8s_device_plugin" if "device-plugin" in path.name else "kernel"
        parser = BY_NAME[name]
        ctx = ParseContext(file=str(path), mtime=datetime(2025, 6, 1), node="n1")
        ev, multi = _chunk_events(parser, path, ctx)
        rows = []
        for i, line in enumerate(path.read_text().split("\n"), start=1):
            res = parser.parse_line(line, ctx)
            if i in multi:
                continue
            if isinstance(res, Parsed):
                rows.extend({**r, "line": i} for r in res.rows["events"])
        want = ev.filter(~pl.col("line").is_in(sorted(multi))).sort("line")
        got = (
            conform("events", pl.DataFrame(rows, schema=want.schema)).sort("line")
            if rows
            else want.clear()
        )
        assert got.to_dicts() == want.to_dicts(), path.name


# -- robustness ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=120),
            st.binary(max_size=80).map(lambda b: b.decode("utf-8", "replace")),
            st.sampled_from(
                [
                    "[  12.5] NVRM: Xid (PCI:0000:3b:00): 79, ",
                    "NVRM: The NVIDIA GPU 0000:b3:00.0",
                    "   NVRM: (PCI ID: 10de:26b5) installed",
                    "{1}[Hardware Error]: x: y",
                    "Feb 30 01:02:03 h kernel: NVRM: Xid (PCI:0000:01:00): 13, x",
                    "6,1,99,-;SXid (PCI:1:2): 5",
                    "nvme nvme0: I/O 1 QID 2 timeout, aborting",
                    "Kernel panic - not syncing: ",
                    'EXT4-fs error (device "x\\): f:1: comm \x01"q: ',
                    "CPU1: Core temperature/speed normal",
                    'mlx5_core 0000:01:00.0: Port module event[error]: module 1, Cable error, "\\',
                ]
            ),
        ),
        max_size=30,
    )
)
def test_arbitrary_lines_never_crash_and_are_accounted(lines):
    lines = [ln.replace("\n", " ") or None for ln in lines]
    series = pl.Series("line", lines, dtype=pl.String)
    for parser in PARSERS:
        ctx = ParseContext(file="f", mtime=datetime(2025, 1, 1), year=None)
        state = parser.new_state(ctx)
        res = parser.parse_chunk(series, 1, ctx, state).merge(parser.finish(ctx, state))
        nonnull = sum(1 for ln in lines if ln is not None)
        assert res.parsed + res.quarantined <= nonnull
        if res.quarantine is not None:
            qlines = res.quarantine["line"].to_list()
            assert len(set(qlines)) == len(qlines)
            assert all(lines[q - 1] is not None for q in qlines)
        for ln in lines:
            if ln is not None:
                parser.parse_line(ln, ctx)


def test_candidate_without_shape_is_quarantined():
    res = KERNEL.parse_line("[ 1.0] NVRM: something new happened", ParseContext(file="f"))
    assert isinstance(res, Quarantined) and "NVRM" in res.reason
    assert KERNEL.parse_line("[ 1.0] usb 1-1: new device", ParseContext(file="f")) is None


def test_gsp_core_dump_registers_are_noise_and_driver_asserts_stay_quarantined(tmp_path, store):
    # the falcon core dump a GSP timeout prints (open-gpu-kernel-modules' kflcnCoreDump*: its
    # PRI / TRACE / ICD lines) is the dump's body, like the RPC history table; an assertion
    # the driver prints is a message of no known shape: quarantined, on both parser paths
    lines = [
        "[ 9.1] NVRM: GPU2 kflcnCoreDumpNondestructive_IMPL: PRI: riscvPc               : 0000a1c4",
        "[ 9.1] NVRM: kflcnCoreDumpNondestructive_IMPL: TRACE: 07 = 0x0000000000c0ffee",
        "[ 9.2] NVRM: GPU2 kflcnCoreDumpDestructive: ICD: PC = 0x00000000deadbeef",
        "[ 9.3] NVRM: GPU2 nvAssertFailedNoLog: Assertion failed: 0 @ kernel_gsp.c:1200",
    ]
    ctx = ParseContext(file="f")
    assert [KERNEL.parse_line(ln, ctx) for ln in lines[:3]] == [None, None, None]
    assert isinstance(KERNEL.parse_line(lines[3], ctx), Quarantined)
    log = tmp_path / "dmesg.log"
    log.write_text("\n".join(lines) + "\n")
    (f,) = ingest(store, [log]).files
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (4, 0, 3, 1)
    assert store.query("SELECT line FROM quarantine").rows() == [(4,)]


# -- sniffing does not steal other formats ---------------------------------------------------------


def test_sniff_scores(corpus):
    for kind in ("nccl", "telemetry", "slurm"):
        for path in sorted((corpus / kind).iterdir()):
            head = path.read_text(errors="replace").splitlines()[:400]
            assert sniff_text(head, str(path)) <= 0.3, path.name
    kern = (corpus / "xid" / "xid-vllm-issue5901-xid13-a800-dmesg.log").read_text().splitlines()
    assert sniff_text(kern, "x.log") >= 0.9


def test_sniff_rfc5424_syslog():
    """RFC 5424 lines (no colon after the app name) are syslog, not an unknown format."""
    kern = "<4>1 2026-12-01T06:11:02.123Z gpu-a03 kernel - - - NVRM: Xid (PCI:0000:3b:00): 63, x"
    other = '<6>1 2026-12-01T06:11:05+01:00 gpu-a03 sshd 991 - [meta x="1"] Accepted publickey'
    assert sniff_text([kern, kern, other], "x.log") >= 0.9
    assert sniff_text([kern, other, other, other], "x.log") == 0.8
    assert sniff_text([other, other], "x.log") == 0.5
    slurm = "<6>1 2026-12-01T06:11:05Z gpu-a03 slurmd 77 - - launch task StepId=1.0"
    assert sniff_text([slurm, slurm], "x.log") == 0.2


# -- exactly once, growth, rotation, gzip, failures -----------------------------------------------


def test_reingest_grow_rotate(corpus, tmp_path, store):
    src = corpus / "xid" / "xid-gpud-pr117-xid45-hung-task-dmesg-T.log"
    path = tmp_path / "dmesg.log"
    path.write_bytes(src.read_bytes() + b"\n")
    ingest(store, [path])
    n = store.count("events")
    assert n == 7
    assert ingest(store, [path]).files[0].status == "unchanged"
    assert store.count("events") == n
    with path.open("ab") as f:
        f.write(
            b"[Sat Oct 12 18:40:00 2024] NVRM: Xid (PCI:0000:61:00): 79, pid=1, name=x, "
            b"GPU has fallen off the bus.\n"
        )
    r = ingest(store, [path]).files[0]
    assert (r.lines, r.parsed) == (1, 1)
    new = store.query("SELECT line, code FROM events WHERE code = 79").row(0)
    assert new == (14, 79)
    assert store.count("events") == n + 1
    path.write_bytes(
        b"[Sun Oct 13 01:00:00 2024] NVRM: Xid (PCI:0000:61:00): 48, pid=2, name=y, DBE\n"
    )
    r = ingest(store, [path]).files[0]
    assert (r.status, r.lines, r.parsed) == ("ok", 1, 1)
    assert store.query("SELECT count(*) FROM events WHERE code = 48").item() == 1


def test_gzip_same_as_plain_truncated_gzip_fails(corpus, tmp_path, db_path):
    from faultlens.ingest.store import Store

    src = corpus / "xid" / "xid-gpud-testdata-xid119-gsp-rpc-timeout-dmesg-ctime-xe9680.log"
    gz = tmp_path / "kern.log.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    with Store(tmp_path / "a.duckdb") as a, Store(tmp_path / "b.duckdb") as b:
        ra = ingest(a, [src]).files[0]
        rb = ingest(b, [gz]).files[0]
        assert (ra.lines, ra.parsed, ra.noise) == (rb.lines, rb.parsed, rb.noise)
        cols = "ts, kind, code, gpu, pid, attrs, line"
        assert a.query(f"SELECT {cols} FROM events ORDER BY line").equals(
            b.query(f"SELECT {cols} FROM events ORDER BY line")
        )
    bad = tmp_path / "cut.log.gz"
    bad.write_bytes(gz.read_bytes()[:-40])
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    with Store(db_path) as s:
        report = ingest(s, [bad, binary, src])
        status = {Path(f.path).name: f.status for f in report.files}
        assert status == {"cut.log.gz": "failed", "blob.bin": "failed", src.name: "ok"}
        assert s.query("SELECT count(*) FROM events WHERE file LIKE '%cut.log.gz'").item() == 0
        assert s.count("events") == 6


# -- host storage, CPU thermal, NIC health, panics -------------------------------------------------

HOST = DATA / "syslog-host-storage-thermal-nic-panic.log"


def test_host_storage_thermal_nic_panic_lines(store):
    report = ingest(store, [HOST], year=2025)
    f = report.files[0]
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (28, 24, 3, 1)
    assert store.query("SELECT line, reason FROM quarantine").rows() == [
        (12, "kernel GPU/RAS line with unknown shape")
    ]
    ev = events(store, HOST.name)
    by_line = {r["line"]: r for r in ev.iter_rows(named=True)}
    assert sorted(set(range(1, 29)) - set(by_line)) == [12, 13, 24, 27]

    def row(line: int) -> tuple:
        r = by_line[line]
        return r["kind"], r["subkind"], r["severity"], r["action"], json.loads(r["attrs"] or "{}")

    assert row(1) == (
        "storage",
        "nvme_timeout",
        "warning",
        "none",
        {"device": "nvme0", "qid": 4, "tag": 123, "recovery": "aborting"},
    )
    assert by_line[1]["ts"] == datetime(2025, 3, 3, 4, 12, 9)
    assert by_line[1]["node"] == "gpu-21" and by_line[1]["uptime_s"] == pytest.approx(86400.123456)
    assert row(2)[4] == {"device": "nvme0", "qid": 12, "tag": 817, "recovery": "aborting"}
    assert row(3)[1:3] == ("nvme_timeout", "error")
    assert row(4) == (
        "storage",
        "io_error",
        "error",
        "none",
        {"device": "nvme0n1", "error": "I/O", "op": "READ", "sector": 1953525160},
    )
    assert row(5)[4] == {"device": "sda", "error": "I/O", "op": "WRITE", "sector": 2048}
    assert row(6)[4]["error"] == "critical medium"
    assert row(7)[:2] == ("storage", "buffer_io_error")
    assert row(7)[4] == {"device": "nvme0n1p2", "block": 0}
    assert row(8) == (
        "storage",
        "nvme_error",
        "error",
        "none",
        {
            "device": "nvme0n1",
            "op": "Read",
            "lba": 3907029160,
            "blocks": 8,
            "status": "Unrecovered Read Error",
            "sct": "0x2",
            "sc": "0x81",
        },
    )
    assert row(9) == (
        "storage",
        "fs_error",
        "error",
        "none",
        {
            "fs": "EXT4",
            "device": "nvme0n1p2",
            "function": "ext4_find_entry",
            "inode": 2,
            "comm": "python3",
        },
    )
    assert row(10)[4] == {"fs": "EXT4", "device": "md0", "function": "ext4_reserve_inode_write"}
    assert row(11) == (
        "storage",
        "fs_readonly",
        "error",
        "drain_node",
        {"fs": "EXT4", "device": "md0"},
    )
    assert row(14) == (
        "thermal",
        "cpu_throttled",
        "warning",
        "none",
        {"cpu": 12, "level": "Core", "total_events": 1},
    )
    assert row(15)[4] == {"cpu": 12, "level": "Package", "total_events": 7}
    assert row(16)[4] == {"cpu": 40, "level": "Core", "total_events": 42}
    assert row(17) == ("thermal", "cpu_normal", "info", "none", {"cpu": 12, "level": "Core"})
    assert row(18)[:3] == ("mce", "cmci_storm", "warning")
    assert row(19)[:2] == ("mce", "logged")
    assert row(20) == (
        "ib_port",
        "fatal",
        "critical",
        "drain_node",
        {"nic_pci": "0000:5e:00.0", "fatal_error": 1},
    )
    assert row(21)[:2] == ("ib_port", "fatal") and "fatal_error" not in row(21)[4]
    assert row(22) == (
        "ib_port",
        "module_error",
        "error",
        "none",
        {"nic_pci": "0000:5e:00.0", "module": 0, "error": "High Temperature"},
    )
    assert row(23)[1:3] == ("module_plugged", "info")
    assert row(25)[:3] == ("mce", "exception", "critical")
    assert row(26) == ("mce", "panic", "critical", "reboot_node", {"reason": "Fatal machine check"})
    assert row(28) == (
        "kernel_panic",
        "hung_task",
        "critical",
        "reboot_node",
        {"reason": "hung_task: blocked tasks"},
    )
    assert by_line[28]["node"] == "gpu-22"


def test_host_lines_both_paths_agree():
    ctx = ParseContext(file=str(HOST), year=2025, node="n1")
    ev, _ = _chunk_events(KERNEL, HOST, ctx)
    rows, quarantined = [], []
    for i, line in enumerate(HOST.read_text().split("\n"), start=1):
        res = KERNEL.parse_line(line, ctx)
        if isinstance(res, Parsed):
            rows.extend({**r, "line": i} for r in res.rows["events"])
        elif isinstance(res, Quarantined):
            quarantined.append(i)
    got = conform("events", pl.DataFrame(rows, schema=ev.schema)).sort("line")
    assert got.to_dicts() == ev.sort("line").to_dicts()
    assert ev.height == 24 and quarantined == [12]


def test_synthetic_cluster_kernel_precursors_and_failures_are_events(tmp_path, store):
    import dataclasses

    from faultlens.synth import SynthConfig, generate
    from faultlens.synth.config import LLAMA3_CAUSES

    host = {"CPU", "NIC", "SSD", "System Memory"}  # rare in the real mix: made common here
    causes = tuple(
        dataclasses.replace(c, count=10 if c.name in host else 3, precursor_p=1.0)
        for c in LLAMA3_CAUSES
    )
    cfg = SynthConfig(
        n_nodes=8,
        days=7,
        seed=0,
        causes=causes,
        benign_episodes_per_node_day=1.0,
        failures_per_1000_node_days=150.0,
        write_job_logs=False,
        write_training=False,
        write_telemetry=False,
    )
    generate(cfg, tmp_path / "synth")
    truth = json.loads((tmp_path / "synth" / "ground_truth.json").read_text())
    report = ingest(
        store,
        sorted((tmp_path / "synth" / "nodes").glob("*/kern.log")),
        year=cfg.start.year,
        node_pattern=r"/nodes/(?P<node>[^/]+)/",  # the synthetic layout: dmesg logs name no host
    )
    assert report.totals["quarantined"] == 0 and report.totals["failed"] == 0
    ev = store.query("SELECT node, ts, kind, subkind FROM events")
    precursors = [p for p in truth["precursors"] if p["source"] == "kernel"]
    templates = {p["template"] for p in precursors}
    assert {"nvme_timeout", "cpu_throttle", "mlx5_module_temp", "mce_corrected"} <= templates

    def near(node: str, ts: datetime, seconds: float) -> pl.DataFrame:
        return ev.filter(
            (pl.col("node") == node)
            & pl.col("ts").is_between(
                ts - timedelta(seconds=seconds), ts + timedelta(seconds=seconds)
            )
        )

    missed = [
        p for p in precursors if near(p["node"], datetime.fromisoformat(p["ts"]), 1.0).height == 0
    ]
    assert missed == []
    # what each host failure writes at the moment it happens
    want = {
        "SSD": {("storage", "nvme_timeout"), ("storage", "io_error"), ("storage", "fs_error")},
        "CPU": {("mce", "exception"), ("mce", "panic")},
        "NIC": {("ib_port", "fatal")},
    }
    seen = set()
    for f in truth["failures"]:
        if f["cause"] in want:
            got = near(f["node"], datetime.fromisoformat(f["ts"]), 8.0)
            assert want[f["cause"]] <= set(got.select("kind", "subkind").rows()), f
            seen.add(f["cause"])
    assert seen == set(want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "EXT4-fs error (device sd{0}): f:1: comm {0}: x",
                    "Kernel panic - not syncing: {0}",
                    "mlx5_core 0000:01:00.0: Port module event[error]: module 1, Cable error, {0}",
                    "nvme0n1: Write(0x1) @ LBA 9, 1 blocks, {0} (sct 0x0 / sc 0x4)",
                    "mlx5_core 0000:01:00.0: Port module event: module 1, Unknown status",
                    "EDAC MC1: 2 UE {0} on DIMM_A1 (channel:1 count:7 page:0x1 {0} channel:2)",
                    "EDAC sbridge MC0: 1 CE x on {0}",
                    "pcieport 0000:00:01.0: AER: {0} error received: 0000:01:00.0",
                    "nvidia 0000:3b:00.0: PCIe Bus Error: severity={0}, type=Data Link Layer, (Transmitter ID)",
                ]
            ),
            st.text(
                alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
                max_size=12,
            ),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_family_attrs_json_same_on_both_paths(items):
    lines = [tpl.format(text) for tpl, text in items]
    ctx = ParseContext(file="f", node="n")
    state = KERNEL.new_state(ctx)
    res = KERNEL.parse_chunk(pl.Series("line", lines, dtype=pl.String), 1, ctx, state)
    vec = res.tables.get("events", empty_frame("events"))
    rows = []
    for i, line in enumerate(lines, start=1):
        out = KERNEL.parse_line(line, ctx)
        if isinstance(out, Parsed):
            rows.extend({**r, "line": i} for r in out.rows["events"])
    got = conform("events", pl.DataFrame(rows, schema=vec.schema)) if rows else vec.clear()
    assert got.sort("line").to_dicts() == conform("events", vec).sort("line").to_dicts()


def test_rfc3164_fast_stamp_path_equals_the_general_one(corpus):
    from faultlens.ingest.kernel.parser import KernelState
    from faultlens.ingest.kernel.vec import _bsd_prefix_frame, _generic_prefix_frame

    lines = (DATA / "syslog-dec-jan-rollover.log").read_text().splitlines()
    lines += HOST.read_text().splitlines()
    lines += (corpus / "xid" / "syslog-azurehpc-nhc-ib6-link-flap.log").read_text().splitlines()
    lines += [
        "Feb 29 01:02:03 h kernel: x",
        "Apr 31 23:59:59 h k: [  5.5] y",
        "Jan  0 00:00:00 h a: z",
    ]
    cand = pl.DataFrame(
        {"line": range(1, len(lines) + 1), "raw": lines},
        schema={"line": pl.Int64, "raw": pl.String},
    )
    for ctx in (
        ParseContext(file="f", year=2023),
        ParseContext(file="f", mtime=NOW),
        ParseContext(file="f"),
    ):
        fast = _bsd_prefix_frame(cand, ctx, fast_state := KernelState())
        slow = _generic_prefix_frame(cand, ctx, slow_state := KernelState())
        assert fast is not None and fast.height == len(lines)
        assert fast.to_dicts() == slow.to_dicts()
        assert (fast_state.boot_time, fast_state.year_offset) == (
            slow_state.boot_time,
            slow_state.year_offset,
        )
    mixed = pl.concat([cand, pl.DataFrame({"line": [999], "raw": ["[  1.5] NVRM: x"]})])
    assert _bsd_prefix_frame(mixed, ParseContext(file="f"), KernelState()) is None


# an RFC 3164 line's parts in order: stamp, host (colons inside or at its end), blank, tag, uptime
_BSD_LINE = st.tuples(
    st.sampled_from(["Feb 14 05:03:41 ", "Feb  4 05:03:41 ", "Feb 14 05:03:41  ", ""]),
    st.lists(st.sampled_from(["h", "-1.x", ":", "::", "é", "[x]", "\x85"]), max_size=5).map(
        "".join
    ),
    st.sampled_from([" ", "\t", " \t", ""]),
    st.sampled_from(["kernel", "k[12]", "k[]", "", "a:b"]),
    st.sampled_from([":", ": ", ":\t", ""]),
    st.sampled_from(["[ 12.5] ", "[12.5]", "[x", ""]),
    st.sampled_from(["NVRM: Xid", "", ":"]),
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BSD_LINE, min_size=1))
def test_rfc3164_fast_pattern_reads_the_host_as_written(lines):
    from faultlens.ingest.kernel import patterns as kp

    # the host as the pattern says it: non-blanks, the last not a colon, then a blank
    plain = kp.BSD_FAST_RE.replace(r"(?:[^ \t:]|:+[^ \t:])+", r"[^ \t]*[^ \t:]")
    assert plain != kp.BSD_FAST_RE
    frame = pl.DataFrame({"raw": lines})
    raw = pl.col("raw")
    assert frame.select(raw.str.extract_groups(kp.BSD_FAST_RE)).equals(
        frame.select(raw.str.extract_groups(plain))
    )
