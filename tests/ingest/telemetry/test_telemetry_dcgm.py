"""dcgm-exporter scrapes: the vectorized path agrees with prometheus_client's parser; bad input;
hand-written fixtures for the other line formats; property tests."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest.base import ChunkResult, ParseContext, Quarantined
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.telemetry.common import gpu_inventory
from faultlens.ingest.telemetry.dcgm import DcgmExporterParser
from faultlens.ingest.telemetry.dcgm_logs import (
    DcgmiParser,
    FabricManagerParser,
    NvHostengineParser,
)
from faultlens.ingest.telemetry.nvsmi import NvidiaSmiQParser, NvidiaSmiXmlParser
from faultlens.ingest.telemetry.nvsmi_text import (
    NvidiaSmiBundleParser,
    NvidiaSmiCsvParser,
    NvidiaSmiNvlinkParser,
    NvidiaSmiTableParser,
)
from faultlens.ingest.telemetry.prom import PrometheusJsonParser

DATA = Path(__file__).resolve().parents[2] / "data" / "telemetry"
NOW = datetime(2025, 1, 1)
CTX = ParseContext(file="f", node="n0", mtime=datetime(2024, 7, 1))
ALL_PARSERS = [
    DcgmExporterParser(),
    DcgmiParser(),
    FabricManagerParser(),
    NvHostengineParser(),
    NvidiaSmiQParser(),
    NvidiaSmiXmlParser(),
    NvidiaSmiCsvParser(),
    NvidiaSmiTableParser(),
    NvidiaSmiNvlinkParser(),
    NvidiaSmiBundleParser(),
    PrometheusJsonParser(),
]


def fast_path(text: str) -> ChunkResult:
    p = DcgmExporterParser()
    lines = pl.Series(text.splitlines(), dtype=pl.String)
    lines = pl.select(pl.when(lines == "").then(None).otherwise(lines)).to_series()
    return p.parse_chunk(lines, 1, CTX, p.new_state(CTX))


def reference_path(text: str) -> list[dict]:
    p = DcgmExporterParser()
    rows = []
    for line in text.splitlines():
        r = p.parse_line(line, CTX)
        if r is not None and not isinstance(r, Quarantined):
            rows.extend(r.rows["telemetry"])
    return rows


def canon(rows: list[dict]) -> list[tuple]:
    out = []
    for r in rows:
        v = r["value"]
        out.append((r["ts"], r["node"], r["gpu"], r["metric"], "nan" if v != v else v))
    return sorted(out, key=repr)


def assert_paths_agree(text: str) -> None:
    fast = fast_path(text)
    fast_rows = fast.tables["telemetry"].to_dicts() if "telemetry" in fast.tables else []
    assert canon(fast_rows) == canon(reference_path(text))


def generated_scrape(nodes: int = 3, gpus: int = 4, scrapes: int = 3) -> str:
    out = []
    for k in range(scrapes):
        for metric in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"):
            out += [f"# HELP {metric} help text.", f"# TYPE {metric} gauge"]
            for n in range(nodes):
                for g in range(gpus):
                    value = (
                        79
                        if metric.endswith("XID_ERRORS") and (n, g, k) == (1, 2, 1)
                        else (40 + g + k if not metric.endswith("XID_ERRORS") else 0)
                    )
                    out.append(
                        f'{metric}{{gpu="{g}",UUID="GPU-{n:04d}{g:04d}",pci_bus_id='
                        f'"00000000:{0x19 + g:02X}:00.0",device="nvidia{g}",modelName='
                        f'"NVIDIA H100 80GB HBM3",Hostname="node{n}"}} {value}.5 '
                        f"{1721001600000 + 15000 * k}"
                    )
    return "\n".join(out) + "\n"


def test_fast_path_agrees_with_prometheus_client_on_real_scrapes(corpus):
    for f in sorted((corpus / "telemetry").glob("*.prom")):
        assert_paths_agree(f.read_text())


def test_fast_path_agrees_on_generated_and_odd_scrapes():
    assert_paths_agree(generated_scrape())
    assert_paths_agree((DATA / "scrape-xid.prom").read_text())
    odd = (
        'up 1\nno_labels_metric 2.5 1721001600000\nm{a="x} y",gpu="1"} 3\n'
        'm{gpu="2",Hostname="h"} NaN\nm{gpu="3"} +Inf\nm{gpu="4"}  7\n'
        'm{gpu="5",err_msg="say \\"hi\\""} 1e3\n'
    )
    assert_paths_agree(odd)


def test_xid_gauge_becomes_one_event_per_change(store):
    path = DATA / "scrape-xid.prom"
    f = ingest_paths(store, [str(path)], now=NOW).files[0]
    assert (f.format, f.lines, f.parsed, f.noise, f.quarantined) == ("dcgm_exporter", 10, 6, 4, 0)
    ev = store.query("SELECT * FROM events").to_dicts()
    assert len(ev) == 1  # Xid 79 read twice on GPU 0 -> one event
    e = ev[0]
    assert (e["kind"], e["code"], e["severity"], e["node"]) == ("xid", 79, "critical", "gpu-007")
    assert (e["gpu"], e["gpu_index"], e["line"]) == ("0000:3b:00.0", 0, 7)
    assert e["message"] == "GPU has fallen off the bus"
    assert e["ts"] == datetime(2024, 7, 15, 0, 0)
    # the odd line (spaces, "} " inside a label value) went through the reference parser
    assert (
        store.scalar("SELECT value FROM telemetry WHERE metric = 'DCGM_FI_DEV_POWER_USAGE'")
        == 412.5
    )
    inv = gpu_inventory(store).select("gpu_index", "pci_bus_id", "driver_version").rows()
    assert inv == [(0, "0000:3b:00.0", "535.161.08"), (1, "0000:4c:00.0", "535.161.08")]


def test_truncated_scrape_and_half_written_export_lose_nothing_else(store):
    paths = [
        DATA / n
        for n in (
            "truncated.prom",
            "query-range-half-written.json",
            "query-range.json",
            "query-gpu.csv",
        )
    ]
    report = ingest_paths(store, [str(p) for p in paths], now=NOW)
    by = {Path(f.path).name: f for f in report.files}
    t = by["truncated.prom"]
    assert (t.status, t.parsed, t.quarantined) == ("partial", 2, 1)
    reason, line = store.query(
        "SELECT reason, line FROM quarantine WHERE file LIKE '%truncated.prom'"
    ).row(0)
    assert line == 4 and "truncated scrape" in reason
    h = by["query-range-half-written.json"]
    assert (h.status, h.format, h.parsed, h.quarantined) == (
        "partial",
        "prometheus_json",
        0,
        h.lines,
    )
    assert "invalid JSON (half-written export?)" in store.scalar(
        "SELECT min(reason) FROM quarantine WHERE file LIKE '%half-written.json'"
    )
    assert by["query-range.json"].status == "ok"
    assert by["query-gpu.csv"].status == "partial"  # its last row is short
    temps = store.query(
        "SELECT ts, value FROM telemetry WHERE node = 'gpu-012' AND gpu = 3 "
        "AND metric = 'DCGM_FI_DEV_GPU_TEMP' ORDER BY ts"
    ).rows()
    assert temps == [
        (datetime(2024, 7, 15, 0, 0), 47.0),
        (datetime(2024, 7, 15, 0, 0, 15), 48.0),
        (datetime(2024, 7, 15, 0, 0, 30), 49.0),
    ]
    assert store.scalar("SELECT pci_bus_id FROM gpus WHERE node = 'gpu-012'") == "0000:5d:00.0"


def test_query_gpu_csv_series(store):
    f = ingest_paths(
        store,
        [str(DATA / "query-gpu.csv")],
        now=NOW,
        base_ctx=ParseContext(file="", node="csvnode"),
    ).files[0]
    assert (f.format, f.lines, f.parsed, f.quarantined) == ("nvidia_smi_csv", 5, 4, 1)
    assert "expected 13 comma-separated fields, found 9" in store.scalar(
        "SELECT reason FROM quarantine"
    )
    rows = dict(
        store.query(
            "SELECT metric, value FROM telemetry WHERE gpu = 1 AND ts = '2024-07-15 10:00:00'"
        ).iter_rows()
    )
    assert rows["DCGM_FI_DEV_POWER_USAGE"] == 300.5
    assert rows["DCGM_FI_DEV_SM_CLOCK"] == 1755.0
    assert rows["DCGM_FI_DEV_GPU_TEMP"] == 35.0
    assert rows["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 2.0
    assert rows["DCGM_FI_DEV_RETIRED_PENDING"] == 1.0
    assert rows["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 4.0
    inv = store.query(
        "SELECT gpu_index, pci_bus_id, uuid, first_seen, last_seen FROM gpus ORDER BY 1"
    ).rows()
    assert inv[0] == (
        0,
        "0000:19:00.0",
        "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        datetime(2024, 7, 15, 10),
        datetime(2024, 7, 15, 10, 0, 5),
    )


def test_sniffers_do_not_claim_other_logs():
    kernel = [
        "Jul 15 10:00:00 gpu-001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
        "fallen off the bus."
    ]
    slurm = ["JobID|JobName|State", "123|train|FAILED"]
    nccl = ["gpu-001:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"]
    for head in (kernel, slurm, nccl):
        for p in ALL_PARSERS:
            assert p.sniff(head, "x.log") == 0.0, (p.name, head)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=120), max_size=12))
def test_parsers_never_crash_and_account_for_every_line(lines):
    series = pl.Series([ln.replace("\n", " ") or None for ln in lines], dtype=pl.String)
    for p in ALL_PARSERS:
        r = p.parse_chunk(series, 1, CTX, p.new_state(CTX))
        r = r.merge(p.finish(CTX, p.new_state(CTX)))
        assert 0 <= r.parsed + r.quarantined <= series.len()
        for line in series.drop_nulls().to_list():
            p.parse_line(line, CTX)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "x:y_z"]),
            st.dictionaries(
                st.sampled_from(["gpu", "UUID", "Hostname", "err_msg", "zz"]),
                st.text(alphabet='ab1 }{,=\\"', max_size=8),
                max_size=4,
            ),
            st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=False, width=32)),
            st.one_of(st.none(), st.integers(0, 2 * 10**12)),
        ),
        max_size=10,
    )
)
def test_fast_and_reference_agree_on_generated_samples(samples):
    lines = []
    for name, labels, value, ts in samples:
        esc = ",".join(
            f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
            for k, v in labels.items()
        )
        lines.append(f"{name}{{{esc}}} {value}" + (f" {ts}" if ts is not None else ""))
    text = "\n".join(lines) + "\n"
    assert_paths_agree(text)
    assert fast_path(text).quarantined == 0
