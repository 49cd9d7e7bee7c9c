"""Kernel messages of issue 12 item 6, from files written from the message formats: every event
checked by its line number (Xid 154 recovery actions, SXid detail lines, Xid 144-150 with
irregular spacing, ...)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl

from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store

DATA = Path(__file__).resolve().parents[2] / "data" / "families"
NOW = datetime(2025, 6, 1)


def _events(store: Store, name: str) -> dict[int, dict]:
    (f,) = ingest_paths(store, [str(DATA / name)], now=NOW).files
    assert f.status == "ok", f.error
    rows = store.query("SELECT * FROM events ORDER BY line, kind").to_dicts()
    by_line: dict[int, dict] = {}
    for row in rows:
        assert row["line"] not in by_line, f"two events from line {row['line']}"
        by_line[row["line"]] = row
    return by_line


def _attrs(row: dict) -> dict:
    return json.loads(row["attrs"] or "{}")


def test_xid_154_takes_the_recovery_action_it_names(store: Store) -> None:
    ev = _events(store, "xid-recovery-sxid.log")
    got = {n: (ev[n]["code"], ev[n]["severity"], ev[n]["action"]) for n in (1, 2, 3, 4)}
    assert got == {
        1: (154, "error", "reset_gpu"),
        2: (154, "critical", "drain_node"),
        3: (154, "critical", "reboot_node"),
        4: (154, "info", "none"),  # back to "None": the GPU recovered
    }
    assert _attrs(ev[2])["recovery"] == "Drain and Reset"
    assert ev[1]["gpu"] == "0000:2a:00.0" and ev[3]["gpu"] == "0000:3a:00.0"


def test_sxid_detail_lines_take_their_tagged_line_severity(store: Store) -> None:
    ev = _events(store, "xid-recovery-sxid.log")
    sxid = {n: (ev[n]["code"], ev[n]["severity"], ev[n]["action"]) for n in (6, 7, 8, 9, 10)}
    assert sxid == {
        6: (12028, "warning", "none"),
        7: (12028, "warning", "none"),  # Severity 0 Engine instance ... of a Non-fatal SXid
        8: (12028, "warning", "none"),  # Data {...}
        9: (20034, "critical", "reset_gpu"),
        10: (20034, "critical", "reset_gpu"),
    }
    assert _attrs(ev[8])["data"] == ["0x50610002", "0x10100030", "0x00000000"]


def test_a_lone_sxid_detail_line_is_a_warning_not_an_error(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(
        "2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, "
        "Data {0x000001c0, 0x00bd5c8a}\n"
    )
    (f,) = ingest_paths(store, [str(log)], now=NOW).files
    rows = store.query("SELECT line, code, severity, action FROM events").rows()
    assert rows == [(1, 12028, "warning", None)]


def test_nvlink_xids_with_irregular_spacing(store: Store) -> None:
    ev = _events(store, "xid-recovery-sxid.log")
    got = {
        n: (ev[n]["code"], ev[n]["kind"], ev[n]["subkind"], _attrs(ev[n]).get("unit"))
        for n in (11, 12, 13)
    }
    assert got == {
        11: (149, "nvlink", "Fatal", "NETIR_LINK_EVT"),
        12: (144, "nvlink", "Nonfatal", "SAW_MVB"),
        13: (145, "nvlink", "Nonfatal", "RLW_REMAP"),
    }
    assert _attrs(ev[11])["words"] == ["0x026001c6", "0x00000000", "0x00000000"]
    assert (_attrs(ev[11])["link"], _attrs(ev[12])["link"], _attrs(ev[13])["link"]) == (4, -1, 11)
    assert _attrs(ev[13])["words"] == ["0x00000002", "0x00000000"]


def test_every_line_of_the_file_is_accounted(store: Store) -> None:
    (f,) = ingest_paths(store, [str(DATA / "xid-recovery-sxid.log")], now=NOW).files
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (13, 12, 1, 0)
    lines = store.query("SELECT line FROM events").to_series().sort().to_list()
    assert lines == [n for n in range(1, 14) if n != 5]
    assert pl.Series(lines).is_unique().all()


def _kinds(store: Store, name: str) -> list[tuple]:
    (f,) = ingest_paths(store, [str(DATA / name)], now=NOW).files
    assert f.status == "ok" and f.quarantined == 0, f.error
    return store.query(
        "SELECT line, kind, subkind, severity, action, ts_flag FROM events ORDER BY line"
    ).rows()


def test_pstore_dump_with_raw_dmesg_priorities(store: Store) -> None:
    """``<N>[uptime]`` (``dmesg -r``, pstore's ``dmesg-ramoops-N``): the priority is no syslog
    header, so the message after the stamp is read, and nothing is taken for a host."""
    assert _kinds(store, "pstore-dmesg-ramoops-0") == [
        (3, "hung_task", "soft_lockup", "error", "none", "boot_relative"),
        (5, "kernel_panic", "oops", "critical", "reboot_node", "boot_relative"),
        (6, "kernel_panic", "oops", "critical", "reboot_node", "boot_relative"),
        (8, "hung_task", "hard_lockup", "critical", "reboot_node", "boot_relative"),
        (9, "kernel_panic", "hardlockup", "critical", "reboot_node", "boot_relative"),
    ]
    assert store.query("SELECT count(*) FROM events WHERE node IS NOT NULL").item() == 0
    soft = store.query("SELECT pid, process, attrs FROM events WHERE line = 3").row(0)
    assert soft[:2] == (48213, "python3")
    assert json.loads(soft[2]) == {"cpu": 17, "stuck_s": 22}


def test_panics_oopses_and_lockups_in_every_dmesg_form(store: Store) -> None:
    rows = _kinds(store, "dmesg-forms.log")
    assert [r[:3] for r in rows] == [
        (1, "hung_task", "soft_lockup"),  # dmesg
        (2, "kernel_panic", "softlockup"),  # dmesg -x (facility : level :)
        (3, "kernel_panic", "oops"),  # dmesg -T with facility and level
        (4, "kernel_panic", "oops"),  # dmesg -T
        (5, "hung_task", "rcu_stall"),  # dmesg -r
        (6, "kernel_panic", "oops"),  # dmesg --time-format iso
        (7, "hung_task", "soft_lockup"),  # /dev/kmsg record
        (8, "hung_task", "hard_lockup"),  # syslog
    ]
    kmsg = store.query("SELECT process, pid FROM events WHERE line = 7").row(0)
    assert kmsg == ("nccl-proxy", 7781)
    assert store.query("SELECT node FROM events WHERE line = 8").item() == "gpu-b07"


def test_gsp_and_rm_timeouts_and_heartbeat_losses_without_an_xid(store: Store) -> None:
    ev = _events(store, "gsp-no-xid.log")
    got = {n: (ev[n]["kind"], ev[n]["subkind"], ev[n]["code"]) for n in range(1, 6)}
    assert got == {
        1: ("gsp_timeout", "heartbeat", None),
        2: ("gsp_timeout", "heartbeat", None),
        3: ("gsp_timeout", "heartbeat", None),  # LibOS
        4: ("gsp_timeout", "rc_watchdog", None),
        5: ("gsp_timeout", "timeout", None),
    }
    assert _attrs(ev[1])["function"] == "_kgspIsHeartbeatTimedOut"
    assert {ev[n]["node"] for n in range(1, 8)} == {"gpu-d11"}
    # the recovery an Xid 154 names in other words ("OS Reboot"; no "from" part)
    assert (ev[6]["severity"], ev[6]["action"]) == ("critical", "reboot_node")
    assert (ev[7]["severity"], ev[7]["action"]) == ("error", "reset_gpu")


def _k8s(store: Store, name: str) -> list[tuple]:
    (f,) = ingest_paths(store, [str(DATA / name)], now=NOW).files
    assert f.status == "ok" and f.quarantined == 0, f.error
    return store.query(
        "SELECT line, source, kind, subkind, severity, node, ts FROM events ORDER BY line"
    ).rows()


def test_kubernetes_node_conditions_from_kubectl_get_events(store: Store) -> None:
    rows = _k8s(store, "kubectl-get-events.txt")
    assert [r[:6] for r in rows] == [
        (2, "k8s", "node_not_responding", "not_ready", "warning", "gpu-node-07"),
        (3, "k8s", "node_down", "rebooted", "error", "gpu-node-07"),
        (4, "k8s", "node_drain", "disk_pressure", "warning", "gpu-node-07"),
        # line 5: NodeHasNoDiskPressure, the pressure gone: noise
        (6, "k8s", "node_resume", "ready", "info", "gpu-node-07"),
        (7, "k8s", "node_not_responding", "not_ready", "warning", "gpu-node-11"),  # kubelet
    ]
    assert [r[6] for r in rows[:4]] == [None] * 4  # "12m ago" says nothing absolute
    boot = store.query("SELECT attrs FROM events WHERE line = 3").item()
    assert json.loads(boot)["boot_id"] == "0e6f2a9c-7d1b-4c55-9a1e-2f3b4c5d6e7f"


def test_kubernetes_node_conditions_from_kubectl_describe_node(store: Store) -> None:
    rows = _k8s(store, "kubectl-describe-node.txt")
    assert [r[:6] for r in rows] == [
        (41, "k8s", "node_drain", "memory_pressure", "warning", "gpu-node-09"),
        # 42, 43: DiskPressure / PIDPressure False, a healthy state: noise
        (44, "k8s", "node_not_responding", "not_ready", "warning", "gpu-node-09"),
        (66, "k8s", "node_down", "rebooted", "error", "gpu-node-09"),
        (67, "k8s", "node_not_responding", "not_ready", "warning", "gpu-node-09"),
    ]
    # the LastTransitionTime, in UTC
    assert rows[0][6] == datetime(2025, 3, 3, 9, 41, 10)
    assert rows[1][6] == datetime(2025, 3, 3, 9, 45, 0)
