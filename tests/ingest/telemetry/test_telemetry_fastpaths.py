"""The telemetry fast paths: the per-file series cache and its collision fallback (dcgm-exporter
scrapes), and the vectorized Prometheus ``query_range`` JSON path against the reference one."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import faultlens.ingest.telemetry.dcgm as dcgm
from faultlens.ingest.base import ParseContext, Quarantined
from faultlens.ingest.telemetry.common import samples_to_tables
from faultlens.ingest.telemetry.dcgm import DcgmExporterParser
from faultlens.ingest.telemetry.prom import (
    PrometheusJsonParser,
    fast_frames,
    parse_export,
    result_to_frames,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "telemetry"
CTX = ParseContext(file="f", node="n0", mtime=datetime(2024, 7, 1))


def scrape(scrapes: int, gpus: int = 3) -> list[str]:
    out = []
    for k in range(scrapes):
        out += [
            "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
            "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        ]
        for metric in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"):
            for g in range(gpus):
                xid = metric.endswith("XID_ERRORS")
                value = (79 if (g, k) == (1, 2) else 0) if xid else 40 + g + k
                out.append(
                    f'{metric}{{gpu="{g}",UUID="GPU-{g:04d}",pci_bus_id="00000000:'
                    f'{0x19 + g:02X}:00.0",Hostname="node-{g % 2}"}} {value} '
                    f"{1721001600000 + 15000 * k}"
                )
    return out


def canon(frame: pl.DataFrame | None) -> list[tuple]:
    """Sorted telemetry rows, NaN as a string so that rows compare equal."""
    if frame is None:
        return []
    rows = frame.select("ts", "node", "gpu", "metric", "value").rows()
    return sorted(((*r[:-1], "nan" if r[-1] != r[-1] else r[-1]) for r in rows), key=repr)


def rows(result) -> list[tuple]:
    return canon(result.tables.get("telemetry"))


def chunked(lines: list[str], size: int) -> tuple[list[tuple], list[dict]]:
    p = DcgmExporterParser()
    state = p.new_state(CTX)
    out, events = [], []
    for i in range(0, len(lines), size):
        r = p.parse_chunk(pl.Series(lines[i : i + size], dtype=pl.String), i + 1, CTX, state)
        out += rows(r)
        if "events" in r.tables:
            events += r.tables["events"].select("ts", "node", "code", "line").to_dicts()
    return sorted(out), events


def test_series_cache_gives_the_same_rows_chunk_by_chunk():
    lines = scrape(5)
    whole, events = chunked(lines, len(lines))
    assert len(whole) == 5 * 2 * 3
    assert (datetime(2024, 7, 15, 0, 0, 30), "node-1", 1, "DCGM_FI_DEV_XID_ERRORS", 79.0) in whole
    assert chunked(lines, 7) == (whole, events)
    assert events == [
        {"ts": datetime(2024, 7, 15, 0, 0, 30), "node": "node-1", "code": 79, "line": 23}
    ]  # 3rd scrape (lines 17-24): 2 comments, 3 temps, Xid


def test_a_hash_collision_falls_back_to_keys_by_text(monkeypatch):
    lines = scrape(3)
    expected = chunked(lines, len(lines))

    def colliding(head: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
        return head.hash(0).reinterpret(signed=True) % 2, head.hash(1).reinterpret(signed=True)

    monkeypatch.setattr(dcgm, "_head_hashes", colliding)
    assert chunked(lines, len(lines)) == expected
    assert chunked(lines, 5) == expected


def test_non_ascii_labels_take_the_reference_path():
    line = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",modelName="Réf GPU",Hostname="gpü-1"} 41 1721001600000'
    p = DcgmExporterParser()
    r = p.parse_chunk(pl.Series([line]), 1, CTX, p.new_state(CTX))
    assert rows(r) == [(datetime(2024, 7, 15), "gpü-1", 0, "DCGM_FI_DEV_GPU_TEMP", 41.0)]


# -- Prometheus query_range JSON -------------------------------------------------------------------


def export(series: list[dict], **top: object) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": series}, **top}


def series(metric: str, gpu: int, points: list) -> dict:
    return {
        "metric": {
            "__name__": metric,
            "gpu": str(gpu),
            "Hostname": "gpu-001.local",
            "UUID": f"GPU-{gpu}",
            "instance": "10.0.0.1:9400",
        },
        "values": points,
    }


def compact(doc: dict) -> str:
    """One series per line, as the demo's synthetic cluster and ``jq -c`` write it."""
    head = json.dumps({k: v for k, v in doc.items() if k != "data"}, separators=(",", ":"))
    body = ",\n".join(json.dumps(s, separators=(",", ":")) for s in doc["data"]["result"])
    return head[:-1] + ',"data":{"resultType":"matrix","result":[\n' + body + "\n]}}\n"


def reference_rows(text: str) -> list[tuple]:
    samples, labels = result_to_frames(parse_export(text), 1)
    t = samples_to_tables(samples, labels, CTX, source=PrometheusJsonParser.source)
    return canon(t.get("telemetry"))


def parse(text: str):
    return PrometheusJsonParser().parse_chunk(
        pl.Series(text.splitlines(), dtype=pl.String), 1, CTX, None
    )


def lines_of(text: str) -> pl.Series:
    return pl.Series(text.splitlines(), dtype=pl.String)


POINTS = [[1721001600, "41"], [1721001615.5, "NaN"], [1721001630, "+Inf"], [1.7210016e9, "1e3"]]


def test_json_fast_path_agrees_with_the_reference_path():
    doc = export(
        [series("DCGM_FI_DEV_GPU_TEMP", g, POINTS) for g in range(3)]
        + [series("DCGM_FI_DEV_POWER_USAGE", 0, [])]
    )
    text = compact(doc)
    assert fast_frames(lines_of(text), 1) is not None
    got = rows(parse(text))
    assert got == reference_rows(text)
    assert len(got) == 12
    assert (datetime(2024, 7, 15), "gpu-001", 0, "DCGM_FI_DEV_GPU_TEMP", 41.0) in got
    assert (datetime(2024, 7, 15, 0, 0, 15, 500000), "gpu-001", 2, "DCGM_FI_DEV_GPU_TEMP") in [
        r[:4] for r in got
    ]
    fixture = (DATA / "query-range.json").read_text()
    assert fast_frames(lines_of(fixture), 1) is not None
    assert rows(parse(fixture)) == reference_rows(fixture)


@pytest.mark.parametrize(
    "variant",
    [
        "pretty",
        "vector",
        "escaped value",
        "quoted ts",
        "warnings",
        "values first",
        "bare value",
    ],
)
def test_json_layouts_the_fast_path_declines_still_parse(variant):
    doc = export([series("DCGM_FI_DEV_GPU_TEMP", g, POINTS[:2]) for g in range(2)])
    text = compact(doc)
    if variant == "pretty":
        text = json.dumps(doc, indent=2)
    elif variant == "vector":
        text = text.replace('"matrix"', '"vector"').replace(
            '"values":[[1721001600,"41"],', '"value":[1721001600,"41"],"x":['
        )
    elif variant == "escaped value":
        text = text.replace('"41"', '"4\\u0031"')
    elif variant == "quoted ts":
        text = text.replace("[1721001600,", '["1721001600",')
    elif variant == "warnings":
        text = compact(export(doc["data"]["result"], warnings=["w"]))
        text = json.dumps(json.loads(text), separators=(",", ":"))
    elif variant == "values first":
        text = text.replace('{"metric":', '{"values":[],"metric":')
    elif variant == "bare value":
        text = text.replace('"41"', "41")
    assert fast_frames(lines_of(text), 1) is None
    got = rows(parse(text))
    assert got == reference_rows(text)
    assert (datetime(2024, 7, 15), "gpu-001", 1, "DCGM_FI_DEV_GPU_TEMP", 41.0) in got


@pytest.mark.parametrize("cut", [-2, -30, -60])
def test_a_cut_json_export_is_quarantined_whole(cut):
    text = compact(export([series("DCGM_FI_DEV_GPU_TEMP", g, POINTS) for g in range(3)]))
    text = text.rstrip("\n")[:cut] + "\n"
    r = parse(text)
    assert r.tables == {} and r.quarantined == len(text.splitlines())
    assert r.quarantine["reason"][0].startswith("Prometheus JSON export rejected: invalid JSON")
    assert isinstance(PrometheusJsonParser().parse_line(text.splitlines()[0], CTX), Quarantined)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(
                st.sampled_from(["gpu", "Hostname", "UUID", "err_msg", "job"]),
                st.text(alphabet='ab1 }{,[]:"\\é', max_size=6),
                max_size=4,
            ),
            st.lists(
                st.tuples(
                    st.one_of(st.integers(0, 2 * 10**9), st.floats(0, 2e9, allow_nan=False)),
                    st.one_of(
                        st.floats(allow_nan=False, width=32).map(repr),
                        st.sampled_from(["NaN", "+Inf", "-Inf", "1e3"]),
                    ),
                ),
                max_size=5,
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)
def test_json_paths_agree_on_generated_exports(items, one_line):
    doc = export(
        [
            {
                "metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", **labels},
                "values": [[t, v] for t, v in points],
            }
            for labels, points in items
        ]
    )
    text = json.dumps(doc, separators=(",", ":")) if one_line else compact(doc)
    assert rows(parse(text)) == reference_rows(text)
