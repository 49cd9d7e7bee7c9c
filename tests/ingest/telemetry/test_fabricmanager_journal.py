"""Fabric manager in a node's journal (``telemetry.dcgm_logs.journal_rows``, routed by
``ingest.lines``): its NVSwitch errors, its service failing, its own failure messages; its other
lines are noise. The lines are written here in the shapes systemd and fabric manager use; the
expected rows are worked out by hand from them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store

LINES = [
    "Dec  7 18:33:50 hgx-03 systemd[1]: Starting NVIDIA fabric manager service...",  # 1 noise
    "Dec  7 18:33:56 hgx-03 nv-fabricmanager[8123]: detected NVSwitch non-fatal error 12028 on "
    "fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61",  # 2 sxid
    "Dec  7 18:33:56 hgx-03 nv-fabricmanager[8123]: Connected to 1 node.",  # 3 noise
    "Dec  7 18:33:57 hgx-03 nv-fabricmanager[8123]: fabric manager failed to open the NVSwitch "
    "driver interface",  # 4 its own failure
    "Dec  7 18:33:57 hgx-03 systemd[1]: nvidia-fabricmanager.service: Main process exited, "
    "code=exited, status=1/FAILURE",  # 5 service failed
    "Dec  7 18:33:57 hgx-03 systemd[1]: Failed to start NVIDIA fabric manager service.",  # 6
    "Dec  7 18:35:00 hgx-03 systemd[1]: nvidia-fabricmanager.service: Main process exited, "
    "code=exited, status=0/SUCCESS",  # 7 a clean exit: noise
    "Dec  7 18:35:01 hgx-03 systemd[1]: Started NVIDIA fabric manager service.",  # 8 noise
    "Dec  7 18:36:00 hgx-03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has "
    "fallen off the bus.",  # 9 the kernel's, as before
]


def test_fabric_manager_journal_lines(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "journal.log"
    log.write_text("\n".join(LINES) + "\n")
    ctx = ParseContext(file="", year=2026)
    (f,) = ingest_paths(store, [str(log)], now=datetime(2026, 12, 8), base_ctx=ctx).files
    assert (f.status, f.lines, f.parsed, f.noise, f.quarantined) == ("ok", 9, 5, 4, 0)
    rows = store.query(
        "SELECT line, ts, node, source, kind, subkind, code, severity FROM events ORDER BY line"
    ).rows()
    t = datetime(2026, 12, 7, 18, 33)
    assert rows == [
        (2, t.replace(second=56), "hgx-03", "fabricmanager", "sxid", "non-fatal", 12028, "warning"),
        (4, t.replace(second=57), "hgx-03", "fabricmanager", "telemetry_error", "fabricmanager",
         None, "error"),
        (5, t.replace(second=57), "hgx-03", "fabricmanager", "telemetry_error", "service_failed",
         None, "error"),
        (6, t.replace(second=57), "hgx-03", "fabricmanager", "telemetry_error", "service_failed",
         None, "error"),
        (9, datetime(2026, 12, 7, 18, 36), "hgx-03", "kernel", "xid", None, 79, "critical"),
    ]  # fmt: skip
    attrs = store.query("SELECT attrs FROM events WHERE line = 2").item()
    assert attrs == '{"switch_pci":"0000:86:00.0","switch_physical_id":3,"port":61,"fid":0}'
