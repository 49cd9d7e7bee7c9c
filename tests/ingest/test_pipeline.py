"""The exactly-once registry: same file, grown file, rotated file, look-alike files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import infer_job, infer_node, ingest_paths
from faultlens.ingest.store import Store

NOW = datetime(2025, 3, 3, 12, 0, 0)
# A boot banner identical on every node of a homogeneous cluster: longer than the 4 KiB head.
BANNER = "".join(
    f"[    0.{i:06d}] ACPI: PCI Root Bridge [PC{i:02d}] (domain 0000 [bus {i:02x}-ff])\n"
    for i in range(80)
)


def _xid(node: int, code: int) -> str:
    return (
        f"[ 5107.64433{node}] NVRM: Xid (PCI:0000:{node:02x}:00): {code}, pid=42, "
        "name=python3, GPU has fallen off the bus.\n"
    )


def test_look_alike_files_are_each_ingested(tmp_path: Path, store: Store) -> None:
    assert len(BANNER.encode()) > 4096
    a, b = tmp_path / "a" / "dmesg", tmp_path / "b" / "dmesg"
    for path, node in ((a, 0x3B), (b, 0x5E)):
        path.parent.mkdir()
        path.write_text(BANNER + _xid(node, 79))
    by_folder = ParseContext(file="", node_pattern=r"/(?P<node>[ab])/dmesg$")
    report = ingest_paths(store, [str(a), str(b)], now=NOW, fmt="kernel", base_ctx=by_folder)
    assert [f.status for f in report.files] == ["ok", "ok"]
    got = store.query("SELECT node, gpu, code FROM events ORDER BY node").rows()
    assert got == [("a", "0000:3b:00.0", 79), ("b", "0000:5e:00.0", 79)]
    again = ingest_paths(store, [str(a), str(b)], now=NOW, fmt="kernel")
    assert [f.status for f in again.files] == ["unchanged", "unchanged"]


def test_rotated_copy_is_unchanged_and_growth_is_read_once(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "gpu07" / "kern.log"
    log.parent.mkdir()
    log.write_text(BANNER + _xid(0x3B, 48))
    ingest_paths(store, [str(log)], now=NOW, fmt="kernel")
    with log.open("a") as f:
        f.write(_xid(0x3B, 79))
    grown = ingest_paths(store, [str(log)], now=NOW, fmt="kernel").files[0]
    assert (grown.status, grown.lines, grown.parsed) == ("ok", 1, 1)
    rotated = log.rename(log.with_name("kern.log.1"))
    log.write_text(_xid(0x3B, 94))  # the new incarnation under the old name
    report = ingest_paths(store, [str(rotated), str(log)], now=NOW, fmt="kernel")
    assert [f.status for f in report.files] == ["unchanged", "ok"]
    codes = store.query("SELECT code, line FROM events ORDER BY code").rows()
    assert codes == [(48, 81), (79, 82), (94, 1)]


def test_per_node_and_per_job_folders() -> None:
    assert infer_node("/logs/nodes/gpu0001/kern.log") == "gpu0001"
    assert infer_node("/var/log/kern.log") is None
    assert infer_node("/logs/node-17/dmesg.txt") == "node-17"
    # a folder of one source's logs names no host (a shared corpus sorted by source)
    for folder in ("nccl", "telemetry", "misc", "xid"):
        assert infer_node(f"/corpus/{folder}/nccl-issue2076.log") is None, folder
    assert infer_node("/logs/jobs/100440/nccl.log") is None
    assert infer_job("/logs/jobs/100440/nccl.log") == "100440"
    assert infer_job("/logs/nodes/gpu0001/kern.log") is None
    # Slurm's default output names (sbatch --output slurm-%j.out, slurm-%A_%a.out for arrays)
    assert infer_job("/home/ana/runs/slurm-4242.out") == "4242"
    assert infer_job("/home/ana/runs/slurm-4242_7.err") == "4242_7"
    assert infer_job("/home/ana/runs/slurm-notes.out") is None
    assert infer_job("/var/log/slurm/slurmd.log") is None


def test_parsed_parts_are_partitioned_by_source_and_day(store, tmp_path) -> None:
    from faultlens.ingest.pipeline import load, parse_file, plan

    log = tmp_path / "kern.log"
    log.write_text(
        "2026-01-03T23:59:58+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
        "fallen off the bus.\n"
        "2026-01-04T00:00:02+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, "
        "DBE (double bit error) ECC error.\n"
    )
    task = plan(store, str(log), fmt="kernel")
    pf = parse_file(task, str(tmp_path))
    names = sorted(str(Path(p).relative_to(pf.scratch).parent) for p in pf.parts["events"])
    assert names == ["events/source=kernel/day=2026-01-03", "events/source=kernel/day=2026-01-04"]
    load(store, pf, now=datetime(2026, 2, 1))
    rows = store.query("SELECT code, source FROM events ORDER BY ts")
    assert rows.rows() == [(79, "kernel"), (48, "kernel")]  # no day / partition columns added


def test_a_binary_systemd_journal_fails_with_the_command_that_reads_it(store, tmp_path) -> None:
    # journald's files start with the signature "LPKSHHRH" (systemd's journal file format);
    # the rest here is binary filler, not a real journal
    journal = tmp_path / "system.journal"
    journal.write_bytes(b"LPKSHHRH" + bytes(range(256)) * 16)
    (f,) = ingest_paths(store, [str(journal)], now=datetime(2026, 12, 7)).files
    assert f.status == "failed"
    assert "binary systemd journal" in f.error
    assert f"journalctl --file {journal} -o export > system.journal.export" in f.error
