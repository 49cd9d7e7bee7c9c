"""nvidia-smi pieces as people paste them (issue 12 item 6), from files written from the formats:
``nvidia-smi -q | grep -A N`` excerpts with no header, and ``-q -x`` minor numbers, serials and
MIG devices' own memory."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store

DATA = Path(__file__).resolve().parents[2] / "data" / "telemetry"
NOW = datetime(2025, 6, 1)


def _ingest(store: Store, name: str):
    (f,) = ingest_paths(store, [str(DATA / name)], now=NOW).files
    assert f.status == "ok" and f.quarantined == 0, f.error
    return f


def test_a_grep_excerpt_of_nvidia_smi_q(store: Store) -> None:
    f = _ingest(store, "nvsmi-q-grep-fragment.txt")
    assert (f.format, f.lines, f.parsed) == ("nvidia_smi_q", 15, 15)
    temps = store.query(
        "SELECT gpu, value FROM telemetry WHERE metric = 'DCGM_FI_DEV_GPU_TEMP' ORDER BY gpu"
    ).rows()
    # the index is each GPU's minor number (/dev/nvidiaN), not its place among grep's groups
    assert temps == [(4, 71.0), (5, 88.0)]
    gpus = store.query("SELECT gpu_index, pci_bus_id FROM gpus ORDER BY gpu_index").rows()
    assert gpus == [(4, "0000:18:00.0"), (5, "0000:2a:00.0")]
    # the last group names no GPU: its rows are kept without one, never given a guessed index
    remap = store.query(
        "SELECT gpu, value FROM telemetry WHERE metric = 'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS'"
    ).rows()
    assert remap == [(None, 2.0)]
    assert store.query("SELECT line, kind, subkind FROM events").rows() == [
        (14, "row_remap", "remap_pending")
    ]


def test_nvidia_smi_xml_serial_minor_number_and_mig_memory(store: Store) -> None:
    f = _ingest(store, "nvsmi-qx-mig.xml")
    assert f.format == "nvidia_smi_xml"
    assert store.query("SELECT gpu_index, serial, uuid FROM gpus").rows() == [
        (0, "1652921013471", "GPU-5b0c9a5e-1f2d-4c3b-9a8e-7d6c5b4a3f21")
    ]
    fb = dict(
        store.query(
            "SELECT metric, value FROM telemetry WHERE metric LIKE '%FB_USED' OR "
            "metric LIKE '%FB_TOTAL'"
        ).rows()
    )
    assert fb == {
        "DCGM_FI_DEV_FB_USED": 31012.0,  # the whole GPU's, not a MIG device's
        "DCGM_FI_DEV_FB_TOTAL": 81920.0,
        "NVSMI_MIG_GI1_FB_USED": 31000.0,
        "NVSMI_MIG_GI1_FB_TOTAL": 40192.0,
        "NVSMI_MIG_GI2_FB_USED": 12.0,
        "NVSMI_MIG_GI2_FB_TOTAL": 40192.0,
    }


def test_an_xml_fragment_takes_its_minor_number_as_index(store: Store) -> None:
    _ingest(store, "nvsmi-qx-fragment.xml")
    assert store.query("SELECT gpu_index, serial FROM gpus").rows() == [(6, "1652921013472")]
    rows = store.query("SELECT gpu, metric, value FROM telemetry ORDER BY metric").rows()
    assert rows == [(6, "DCGM_FI_DEV_FB_TOTAL", 81920.0), (6, "DCGM_FI_DEV_FB_USED", 1024.0)]
