"""The streamed read of a Prometheus range export (vectorized windows, or ijson where a layout
is not the compact one) gives the whole-document read's rows and line accounting (generated
exports in every layout, the hand-written fixtures), and rejects what it rejects; the line
census counts lines as the reader splits them."""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest import streamed
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.reader import iter_chunks
from faultlens.ingest.store import Store
from faultlens.ingest.streamed import line_census
from faultlens.ingest.telemetry import prom
from faultlens.ingest.telemetry.prom import PrometheusJsonParser

NOW = datetime(2026, 1, 1)
DATA = Path(__file__).parents[2] / "data" / "telemetry"
T0 = 1_721_000_000


def export(n_series: int, n_points: int, *, layout: str, result_type: str = "matrix") -> str:
    """A ``query_range`` answer: GPU temperatures plus an Xid series that changes value."""
    result = []
    for s in range(n_series):
        metric = "DCGM_FI_DEV_XID_ERRORS" if s % 5 == 4 else "DCGM_FI_DEV_GPU_TEMP"
        labels = {
            "__name__": metric,
            "Hostname": f"gpu{s // 8:03d}",
            "gpu": str(s % 8),
            "UUID": f"GPU-{s:08d}",
            "pci_bus_id": f"00000000:{s % 8 + 16:02X}:00.0",
            "instance": "dcgm:9400",
        }
        if metric == "DCGM_FI_DEV_XID_ERRORS":
            vals = ["0" if i < n_points // 2 else "79" for i in range(n_points)]
        else:
            vals = [str(40 + (i * 7 + s) % 13) + ".5" for i in range(n_points)]
        pts = [[T0 + 15 * i, v] for i, v in enumerate(vals)]
        if result_type == "vector":
            result.append({"metric": labels, "value": pts[0]})
        else:
            result.append({"metric": labels, "values": pts})
    doc = {"status": "success", "data": {"resultType": result_type, "result": result}}
    if layout == "compact":
        return json.dumps(doc, separators=(",", ":"))
    if layout == "pretty":
        return json.dumps(doc, indent=2) + "\n"
    if layout == "crlf":
        return json.dumps(doc, indent=1).replace("\n", "\r\n") + "\r\n\r\n"
    head = '{"status":"success","data":{"resultType":"matrix","result":['
    lines = [json.dumps(r, separators=(",", ":")) for r in result]
    return head + "\n" + ",\n".join(lines) + "\n]}}\n"  # one series per line (jq -c)


def _ingest(path: Path, db: Path, *, stream: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(PrometheusJsonParser, "stream_min_bytes", 0 if stream else 1 << 62)
    with Store(db) as store:
        report = ingest_paths(store, [str(path)], now=NOW, fmt="prometheus_json")
        tables = {
            "telemetry": store.query("SELECT * FROM telemetry ORDER BY ALL"),
            "events": store.query("SELECT * EXCLUDE (attrs) FROM events ORDER BY ALL"),
            "gpus": store.query("SELECT * FROM gpus ORDER BY ALL"),
            "quarantine": store.query("SELECT line, reason FROM quarantine ORDER BY line"),
            "files": store.query(
                "SELECT lines, parsed, noise, quarantined, status FROM ingested_files"
            ),
        }
    return report.files[0], tables


def _not_called(*args: object, **kwargs: object) -> None:
    raise AssertionError("the exact (ijson) stream was used")


def _same(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> None:
    """Equal tables; quarantine reasons equal up to the JSON library's wording of an error."""
    for name in a:
        if name == "quarantine":
            assert a[name]["line"].to_list() == b[name]["line"].to_list()
            assert [r.split(":")[0] for r in a[name]["reason"]] == [
                r.split(":")[0] for r in b[name]["reason"]
            ]
        else:
            assert a[name].equals(b[name]), name


@pytest.mark.parametrize("layout", ["compact", "per_line", "pretty", "crlf"])
def test_streamed_rows_equal_whole_document_rows(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prom, "BATCH_POINTS", 700)  # many ijson batches
    monkeypatch.setattr(prom, "WINDOW_CHARS", 5000)  # many vectorized windows, series cut across
    monkeypatch.setattr(streamed, "STREAM_SPILL_ROWS", 1000)  # spilled to Parquet mid-document
    path = tmp_path / f"range-{layout}.json"
    text = export(23, 300, layout=layout)
    path.write_text(text, newline="")
    whole, t_whole = _ingest(path, tmp_path / "whole.duckdb", stream=False, monkeypatch=monkeypatch)
    if layout in ("compact", "per_line"):  # the vectorized windows read these, never ijson
        monkeypatch.setattr(prom, "stream_results", _not_called)
    got, t_stream = _ingest(path, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    _same(t_whole, t_stream)
    assert t_stream["telemetry"].height == 23 * 300
    assert t_stream["events"].height > 0  # the Xid series became events
    n_lines = len(text.split("\n")) - (1 if text.endswith("\n") else 0)
    blank = sum(1 for x in text.split("\n")[:n_lines] if x in ("", "\r"))
    assert (got.lines, got.parsed, got.noise) == (n_lines, n_lines - blank, blank)
    assert (whole.lines, whole.parsed, whole.noise) == (got.lines, got.parsed, blank)


def test_a_streamed_export_is_spilled_in_bounded_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultlens.ingest.pipeline import parse_file, plan

    monkeypatch.setattr(PrometheusJsonParser, "stream_min_bytes", 0)
    monkeypatch.setattr(prom, "WINDOW_CHARS", 5000)
    monkeypatch.setattr(streamed, "STREAM_SPILL_ROWS", 1000)
    path = tmp_path / "range.json"
    path.write_text(export(23, 300, layout="per_line"))
    with Store(":memory:") as store:
        task = plan(store, str(path), fmt="prometheus_json")
    parts = parse_file(task).parts["telemetry"]
    sizes = [pl.scan_parquet(p).select(pl.len()).collect().item() for p in parts]
    assert sum(sizes) == 23 * 300
    # each part holds the spill limit plus at most the window that crossed it (a window of
    # 5,000 characters holds one or two 300-point series)
    assert max(sizes) <= 1000 + 2 * 300 and len(parts) >= 23 * 300 // (1000 + 2 * 300)


def test_streamed_gzip_and_vector_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "range.json.gz"
    path.write_bytes(gzip.compress(export(9, 40, layout="pretty").encode()))
    _, t_whole = _ingest(path, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch)
    _, t_stream = _ingest(path, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    _same(t_whole, t_stream)
    vec = tmp_path / "vector.json"
    vec.write_text(export(9, 3, layout="compact", result_type="vector"))
    _, v_whole = _ingest(vec, tmp_path / "vw.duckdb", stream=False, monkeypatch=monkeypatch)
    _, v_stream = _ingest(vec, tmp_path / "vs.duckdb", stream=True, monkeypatch=monkeypatch)
    _same(v_whole, v_stream)
    assert v_stream["telemetry"].height == 9


@pytest.mark.parametrize("name", ["query-range.json", "query-range-half-written.json"])
def test_fixtures_stream_like_the_whole_read(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = DATA / name
    whole, t_whole = _ingest(src, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch)
    streamed, t_stream = _ingest(src, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    _same(t_whole, t_stream)
    assert (whole.lines, whole.parsed, whole.noise, whole.quarantined) == (
        streamed.lines,
        streamed.parsed,
        streamed.noise,
        streamed.quarantined,
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t[: len(t) * 2 // 3],  # half-written: cut mid-document
        lambda t: t.replace('"47.5"', '"warm"', 1),  # a value that is not a number
        lambda t: t.replace('"values":[[', '"values":[[1,2,3],[', 1),  # a sample not a pair
        lambda t: t + "garbage",  # trailing bytes after the document
    ],
)
def test_rejected_streamed_document_is_quarantined_whole(
    damage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prom, "BATCH_POINTS", 50)  # rows written before the damage
    monkeypatch.setattr(prom, "WINDOW_CHARS", 900)
    path = tmp_path / "bad.json"
    path.write_text(damage(export(12, 30, layout="per_line")))
    whole, t_whole = _ingest(path, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch)
    streamed, t_stream = _ingest(path, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    assert t_stream["telemetry"].height == 0 and t_stream["gpus"].height == 0
    assert whole.quarantined == streamed.quarantined == streamed.lines > 0
    assert t_whole["quarantine"]["line"].to_list() == t_stream["quarantine"]["line"].to_list()
    assert t_stream["quarantine"]["reason"][0].startswith("Prometheus JSON export rejected: ")


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"\n", b"\r", b"\r\n", b"a", b" ", b"{}"]), max_size=60),
    window=st.integers(min_value=1, max_value=9),
)
def test_line_census_counts_lines_as_the_reader_splits_them(
    data: list[bytes], window: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("census") / "f.json"
    raw = b"".join(data)
    path.write_bytes(raw)
    old = streamed.STREAM_WINDOW_BYTES
    streamed.STREAM_WINDOW_BYTES = window  # carries across windows at every position
    try:
        census = line_census(str(path), False)
    finally:
        streamed.STREAM_WINDOW_BYTES = old
    lines = [x for c in iter_chunks(path) for x in c.lines.to_list()]
    content = [i for i, x in enumerate(lines, start=1) if x]
    assert census.lines == len(lines)
    assert census.content == len(content)
    assert census.first_content == (content[0] if content else None)
    assert census.end_byte == len(raw)
