"""Every real telemetry file of the corpus through the ingest pipeline, with concrete values."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.telemetry.common import gpu_inventory, resolve_gpu_indices

NOW = datetime(2025, 1, 1)
EXPECTED_FORMAT = {
    "dcgm-exporter-issue250-prometheus-v100.prom": "dcgm_exporter",
    "dcgm-exporter-pr239-xid-errors-count-injected.prom": "dcgm_exporter",
    "dcgm-issue149-nv-hostengine-sysmon-errors.log": "nv_hostengine",
    "dcgmi-dcgm-issue198-nvlink-status-and-diag-r2.txt": "dcgmi",
    "dcgmi-diag-go-dcgm-issue52-r2-metadata-deployment.txt": "dcgmi",
    "fabricmanager-gpud-testdata-nvswitch-nonfatal-12028.log": "fabricmanager",
    "nvidia-smi-capture-bundle-nvidia-gpu-exporter-h100-590.48.01.txt": "nvidia_smi_bundle",
    "nvidia-smi-nvlink-s-azurehpc-nhc-a100-12-links.txt": "nvidia_smi_nvlink",
    "nvidia-smi-q-d-page-retirement-azurehpc-nhc-8gpu-535.86.10.txt": "nvidia_smi_q",
    "nvidia-smi-q-dcgm-issue152-a100-mig-535.txt": "nvidia_smi_q",
    "nvidia-smi-q-gpud-testdata-8xh100-535.161.08.txt": "nvidia_smi_q",
    "nvidia-smi-q-gpud-testdata-8xrtx4090-535.154.05.txt": "nvidia_smi_q",
    "nvidia-smi-q-gpud-testdata-titanv-560.35.03.txt": "nvidia_smi_q",
    "nvidia-smi-q-ogkm-issue421-clocks-fragment.txt": "nvidia_smi_q",
    "nvidia-smi-q-x-netdata-issue2922-xml-fragment.xml": "nvidia_smi_xml",
    "nvidia-smi-table-gpud-testdata-8xh100-550.90.07.txt": "nvidia_smi_table",
    "nvvs-dcgm-issue272-debug-log.log": "nv_hostengine",
}


def real_line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def ingest_one(store, path: Path, node: str | None = None):
    report = ingest_paths(store, [str(path)], now=NOW, base_ctx=ParseContext(file="", node=node))
    (f,) = report.files
    return f


def metric(store, file_node: str, gpu: int, name: str) -> float:
    return store.scalar(
        "SELECT value FROM telemetry WHERE node = ? AND gpu = ? AND metric = ? ORDER BY ts LIMIT 1",
        [file_node, gpu, name],
    )


def test_every_telemetry_file_is_accounted_for(corpus, store):
    files = sorted((corpus / "telemetry").iterdir())
    assert {f.name for f in files} == set(EXPECTED_FORMAT)
    report = ingest_paths(store, [str(corpus / "telemetry")], now=NOW)
    assert len(report.files) == len(files)
    for f in report.files:
        name = Path(f.path).name
        assert f.status in ("ok", "partial"), (name, f.error)
        assert f.format == EXPECTED_FORMAT[name], name
        assert f.lines == real_line_count(Path(f.path)), name
        assert f.parsed + f.noise + f.quarantined == f.lines, name
    assert store.count("quarantine") == 0


def test_dcgm_exporter_v100_scrape(corpus, store):
    f = ingest_one(store, corpus / "telemetry/dcgm-exporter-issue250-prometheus-v100.prom")
    assert (f.lines, f.parsed, f.noise) == (11, 7, 4)
    assert metric(store, "r6i3n0", 2, "DCGM_FI_DEV_POWER_MGMT_LIMIT") == 300.0
    assert metric(store, "r6i3n0", 1, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == 0.0
    assert store.count("telemetry") == 7
    inv = gpu_inventory(store)
    assert inv["gpu_index"].to_list() == [0, 1, 2, 3]
    row = inv.filter(inv["gpu_index"] == 2).row(0, named=True)
    assert row["uuid"] == "GPU-a9079f15-493e-6c1c-c78c-73ec2b840cba"
    assert row["model"] == "Tesla V100-SXM2-32GB"
    # no stamp in the scrape: the file's mtime is the sample time
    mtime = datetime.utcfromtimestamp(
        (corpus / "telemetry/dcgm-exporter-issue250-prometheus-v100.prom").stat().st_mtime
    )
    ts = store.scalar("SELECT min(ts) FROM telemetry")
    assert abs((ts - mtime).total_seconds()) < 1


def test_dcgm_exporter_injected_xid(corpus, store):
    ingest_one(store, corpus / "telemetry/dcgm-exporter-pr239-xid-errors-count-injected.prom")
    ev = store.query("SELECT * FROM events").row(0, named=True)
    assert (ev["kind"], ev["code"], ev["node"], ev["gpu_index"]) == ("xid", 42, "workstation", 0)
    assert ev["ts_flag"] == "file_mtime"
    assert ev["line"] == 3
    assert store.scalar("SELECT driver_version FROM gpus") == "545.29.02"


def test_nvidia_smi_q_8xh100_inventory(corpus, store):
    f = ingest_one(
        store, corpus / "telemetry/nvidia-smi-q-gpud-testdata-8xh100-535.161.08.txt", node="hgx-01"
    )
    assert f.lines == 1647
    inv = gpu_inventory(store)
    assert inv.height == 8
    assert inv["pci_bus_id"].to_list() == [
        "0000:19:00.0",
        "0000:3b:00.0",
        "0000:4c:00.0",
        "0000:5d:00.0",
        "0000:9b:00.0",
        "0000:bb:00.0",
        "0000:cb:00.0",
        "0000:db:00.0",
    ]
    first = inv.row(0, named=True)
    assert first["serial"] == "1650124031592"
    assert first["uuid"] == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert first["vbios_version"] == "96.00.74.00.0D"
    assert first["driver_version"] == "535.161.08"
    assert first["first_seen"] == datetime(2024, 7, 31, 11, 22, 39)
    assert metric(store, "hgx-01", 0, "DCGM_FI_DEV_GPU_TEMP") == 29.0
    assert metric(store, "hgx-01", 0, "DCGM_FI_DEV_POWER_USAGE") == 67.74
    assert metric(store, "hgx-01", 0, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == 67.0
    assert metric(store, "hgx-01", 0, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") == 0.0
    assert metric(store, "hgx-01", 0, "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_MAX") == 2560.0
    assert metric(store, "hgx-01", 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") == 0.0
    # HW Slowdown (0x8) and HW Power Brake Slowdown (0x80) are Active on GPU 0
    assert metric(store, "hgx-01", 0, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") == 0x88


def test_page_retirement_counts(corpus, store):
    name = "nvidia-smi-q-d-page-retirement-azurehpc-nhc-8gpu-535.86.10.txt"
    ingest_one(store, corpus / "telemetry" / name, node="azure-1")
    rows = store.query(
        "SELECT gpu, metric, value FROM telemetry WHERE metric LIKE 'DCGM_FI_DEV_RETIRED_%' "
        "ORDER BY gpu, metric"
    )
    assert rows.height == 24
    assert set(rows["value"].to_list()) == {0.0}
    assert sorted(set(rows["gpu"].to_list())) == list(range(8))
    assert (
        store.query("SELECT pci_bus_id FROM gpus ORDER BY gpu_index")["pci_bus_id"].to_list()[-1]
        == "0008:00:00.0"
    )


def test_titanv_and_xml_fragment(corpus, store):
    ingest_one(
        store, corpus / "telemetry/nvidia-smi-q-gpud-testdata-titanv-560.35.03.txt", node="ws"
    )
    assert metric(store, "ws", 0, "DCGM_FI_DEV_GPU_TEMP") == 44.0
    assert metric(store, "ws", 0, "DCGM_FI_DEV_MEMORY_TEMP") == 41.0
    assert store.scalar("SELECT model FROM gpus") == "NVIDIA TITAN V"
    f = ingest_one(
        store,
        corpus / "telemetry/nvidia-smi-q-x-netdata-issue2922-xml-fragment.xml",
        node="xmlnode",
    )
    assert (f.format, f.parsed, f.quarantined) == ("nvidia_smi_xml", 20, 0)
    vals = dict(
        store.query("SELECT metric, value FROM telemetry WHERE node = 'xmlnode'").iter_rows()
    )
    assert vals["DCGM_FI_DEV_PCIE_RX_THROUGHPUT"] == 185000.0
    assert vals["DCGM_FI_DEV_PSTATE"] == 5.0
    assert vals["DCGM_FI_DEV_FB_USED"] == 912.0
    assert vals["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 1.0  # gpu_idle Active


def test_dcgmi_diag_and_nvlink(corpus, store):
    ingest_one(
        store, corpus / "telemetry/dcgmi-dcgm-issue198-nvlink-status-and-diag-r2.txt", node="n198"
    )
    nv = store.query("SELECT gpu_index, message FROM events WHERE kind = 'nvlink' ORDER BY 1")
    assert nv.rows() == [
        (0, "18 of 18 NVLink links down (dcgmi nvlink)"),
        (1, "18 of 18 NVLink links down (dcgmi nvlink)"),
    ]
    assert metric(store, "n198", 1, "NVLINK_LINKS_DOWN") == 18.0
    ingest_one(
        store,
        corpus / "telemetry/dcgmi-diag-go-dcgm-issue52-r2-metadata-deployment.txt",
        node="n52",
    )
    diag = store.query(
        "SELECT subkind, severity, message FROM events WHERE node = 'n52' "
        "AND kind = 'diag' ORDER BY line"
    )
    assert diag.height == 7
    assert diag.row(0) == ("pass", "info", "Deployment: Denylist: Pass")
    assert diag.row(6)[2] == "Deployment: Page Retirement/Row Remap: Pass"


def test_hostengine_and_fabricmanager(corpus, store):
    ingest_one(
        store, corpus / "telemetry/dcgm-issue149-nv-hostengine-sysmon-errors.log", node="dgx-a100"
    )
    he = store.query("SELECT * FROM events ORDER BY line")
    assert he.height == 5
    assert he["severity"].unique().to_list() == ["error"]
    assert he.row(2, named=True)["message"] == "Failed to load module 9"
    assert he.row(0, named=True)["ts"] == datetime(2024, 2, 1, 14, 12, 1, 205000)
    assert he.row(0, named=True)["subkind"] == "SysMon"
    name = "fabricmanager-gpud-testdata-nvswitch-nonfatal-12028.log"
    f = ingest_one(store, corpus / "telemetry" / name, node="hgx-fm")
    assert (f.parsed, f.quarantined) == (18, 0)
    sx = store.query("SELECT * FROM events WHERE kind = 'sxid' ORDER BY line")
    assert sx.height == 18
    first = sx.row(0, named=True)
    assert (first["code"], first["subkind"], first["line"]) == (12028, "non-fatal", 191)
    assert first["ts"] == datetime(2024, 12, 19, 19, 17, 49)
    assert '"switch_pci":"0000:83:00.0"' in first["attrs"] and '"port":34' in first["attrs"]


def test_table_bundle_and_nvlink_s(corpus, store):
    ingest_one(
        store, corpus / "telemetry/nvidia-smi-table-gpud-testdata-8xh100-550.90.07.txt", node="t1"
    )
    assert metric(store, "t1", 1, "DCGM_FI_DEV_GPU_TEMP") == 24.0
    assert metric(store, "t1", 5, "DCGM_FI_DEV_POWER_USAGE") == 74.0
    assert metric(store, "t1", 0, "DCGM_FI_DEV_FB_TOTAL") == 81559.0
    assert (
        store.query("SELECT pci_bus_id FROM gpus WHERE node = 't1' AND gpu_index = 7").item()
        == "0000:db:00.0"
    )
    name = "nvidia-smi-capture-bundle-nvidia-gpu-exporter-h100-590.48.01.txt"
    ingest_one(store, corpus / "telemetry" / name, node="cap")
    inv = gpu_inventory(store).filter(gpu_inventory(store)["node"] == "cap")
    assert inv.height == 1 and inv["pci_bus_id"][0] == "0000:00:09.0"
    assert (
        store.scalar(
            "SELECT max(value) FROM telemetry WHERE node = 'cap' "
            "AND metric = 'DCGM_FI_DEV_POWER_USAGE'"
        )
        > 69
    )
    ingest_one(
        store, corpus / "telemetry/nvidia-smi-nvlink-s-azurehpc-nhc-a100-12-links.txt", node="a100"
    )
    assert metric(store, "a100", 7, "NVLINK_LINKS_UP") == 12.0
    assert metric(store, "a100", 7, "NVSMI_NVLINK_SPEED_GBPS_MIN") == 25.0


def test_xid_pci_events_resolve_to_index(corpus, store):
    ingest_one(
        store, corpus / "telemetry/nvidia-smi-q-gpud-testdata-8xh100-535.161.08.txt", node="hgx-01"
    )
    store.execute(
        "INSERT INTO events (ts, node, gpu, source, kind, code) VALUES "
        "('2024-07-31 12:00:00', 'hgx-01', '0000:4c:00.0', 'kernel', 'xid', 79)"
    )
    assert resolve_gpu_indices(store) == 1
    assert resolve_gpu_indices(store) == 0  # idempotent
    assert store.scalar("SELECT gpu_index FROM events WHERE code = 79") == 2


@pytest.mark.parametrize("name", sorted(EXPECTED_FORMAT))
def test_reingest_changes_nothing(corpus, store, name):
    path = corpus / "telemetry" / name
    ingest_one(store, path, node="n")
    before = {t: store.count(t) for t in ("telemetry", "gpus", "events")}
    assert ingest_one(store, path, node="n").status == "unchanged"
    assert {t: store.count(t) for t in before} == before
