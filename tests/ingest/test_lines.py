"""Line-oriented logs: every family found in one file, and no readable file rejected."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faultlens.ingest import lines
from faultlens.ingest.pipeline import UNRECOGNIZED, ingest_paths
from faultlens.ingest.store import Store

DATA = Path(__file__).resolve().parents[1] / "data" / "lines"
NOW = datetime(2025, 1, 1)


def _events(store: Store) -> list[tuple]:
    return store.query(
        "SELECT line, source, kind, code, gpu FROM events ORDER BY line, kind"
    ).rows()


def test_every_family_of_a_mixed_node_log_is_found(store: Store) -> None:
    (f,) = ingest_paths(store, [str(DATA / "mixed-node.log")], now=NOW).files
    assert (f.status, f.format, f.lines, f.warning) == ("ok", "lines", 8, None)
    assert _events(store) == [
        (1, "kernel", "xid", 79, "0000:3b:00.0"),
        (3, "nccl", "nccl_error", None, "0"),
        (5, "pytorch", "nccl_timeout", None, None),
        (6, "slurm", "node_not_responding", None, None),
        (7, "kernel", "kernel_panic", None, None),
    ]
    # line 4 (NCCL INFO with the NIC list, which holds the kernel literal "mlx5") is NCCL's
    assert f.parsed == 6 and f.quarantined == 0 and f.noise == 2


def test_a_file_of_no_known_format_is_scanned_not_rejected(store: Store) -> None:
    (f,) = ingest_paths(store, [str(DATA / "unknown-format.txt")], now=NOW).files
    assert (f.status, f.format, f.warning) == ("ok", "lines", UNRECOGNIZED)
    assert _events(store) == [
        (3, "kernel", "xid", 48, "0000:18:00.0"),
        (4, "kernel", "kernel_panic", None, None),
    ]
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (5, 2, 3, 0)


def test_binary_input_still_fails(store: Store, tmp_path: Path) -> None:
    blob = tmp_path / "core.bin"
    blob.write_bytes(bytes(range(256)) * 64)
    (f,) = ingest_paths(store, [str(blob)], now=NOW).files
    assert f.status == "failed" and "binary" in (f.error or "")


def test_routing_prefers_the_anchor_over_a_stray_literal() -> None:
    cand = pl.DataFrame(
        {
            "line": [1, 2, 3, 4, 5, 6],
            "raw": [
                "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",  # kernel literal mlx5
                "kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
                "[2024-05-01T10:06:00.000] update_node: node g2 reason set to: Xid 79",
                "Feb 02 09:51:48 g1 slurmd[1]: slurmd: error: Waiting for gres.conf",
                "[2024-05-01 10:06:00] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off",
                "sshd[1]: Accepted publickey",
            ],
            "follows": [False] * 6,
        }
    )
    assert lines.route(cand)["family"].to_list() == [
        "nccl",
        "kernel",
        "slurm",
        "slurm",
        "kernel",
        None,
    ]


def test_routing_is_the_first_rule_that_applies() -> None:
    """``route`` tries each rule on the lines no earlier rule took; the reference is one
    when / then chain over every rule, on every line of the hand-written fixtures."""
    texts = [
        line
        for path in sorted(DATA.parent.rglob("*"))
        if path.is_file()
        for line in path.read_text(errors="replace").splitlines()
    ]
    texts += ["h:1:2 [0] NCCL WARN RAS peer lost", "watchdog: BUG: soft lockup - CPU#3 stuck"]
    cand = pl.DataFrame({"raw": texts}).with_columns(
        line=pl.int_range(pl.len()), follows=pl.int_range(pl.len()) % 5 == 0
    )
    chain: Any = pl
    for cond, family in lines.route_rules():
        chain = chain.when(cond).then(pl.lit(family))
    want = cand.select(chain.otherwise(pl.lit(None, pl.String)))
    got = lines.route(cand)["family"]
    assert got.to_list() == want.to_series().to_list()
    assert set(got.drop_nulls()) == {"kernel", "nccl", "ras", "slurm", "k8s"}


_MIXED_PARTS = (
    DATA / "mixed-node.log",
    DATA.parent / "nccl" / "distbackend-blocks.log",
    DATA.parent / "kernel" / "syslog-host-storage-thermal-nic-panic.log",
    DATA.parent / "families" / "torch-watchdog-elastic.log",
    DATA.parent / "slurm" / "slurm-daemon-merge-cases.log",
    DATA.parent / "nccl" / "pdsh-nccl-timestamped.log",
)
_COLUMNS = "line, source, kind, subkind, code, gpu, ts, ts_flag, node, severity, message, attrs"


def _mixed_file(tmp_path: Path, copies: int) -> Path:
    text = "".join(p.read_text() for p in _MIXED_PARTS)
    path = tmp_path / "many-chunks.log"
    path.write_text(text * copies)
    return path


def _ingest_mixed(path: Path, db: Path) -> tuple[pl.DataFrame, list[tuple]]:
    with Store(str(db)) as store:
        (f,) = ingest_paths(store, [str(path)], now=NOW).files
        assert f.status == "partial"  # the Slurm cases hold invalid stamps, quarantined
        events = store.query(f"SELECT {_COLUMNS} FROM events ORDER BY line, kind, node, message")
        quarantined = store.query("SELECT line, reason FROM quarantine ORDER BY line").rows()
    return events, quarantined


@pytest.mark.parametrize("batch_rows", [1, lines.BATCH_ROWS])
def test_many_chunks_through_the_prepare_thread_equal_one_pass(
    tmp_path, monkeypatch, batch_rows
) -> None:
    """The driver routes and reads prefixes a chunk ahead in a thread of its own; with 4 KiB scan
    blocks (dozens of chunks, each family's state carried across them: NCCL blocks, pending
    Slurm reasons, kernel records; with ``batch_rows`` 1 each chunk is parsed on its own, else
    they are gathered into one batch) the events equal those of the file read as one chunk
    with everything on the caller's thread."""
    from faultlens.ingest import pipeline

    path = _mixed_file(tmp_path, copies=8)
    assert path.stat().st_size > 20 * 4096
    monkeypatch.setattr(pipeline, "PREPARE_IN_THREAD", False)
    want, want_q = _ingest_mixed(path, tmp_path / "one.duckdb")
    monkeypatch.setattr(pipeline, "PREPARE_IN_THREAD", True)
    monkeypatch.setattr(pipeline, "SCAN_BLOCK_BYTES", 4096)
    monkeypatch.setattr(lines, "BATCH_ROWS", batch_rows)
    got, got_q = _ingest_mixed(path, tmp_path / "chunks.duckdb")
    assert got.height == want.height > 8 * 20
    assert got.rows() == want.rows()
    assert got_q == want_q and len(got_q) % 8 == 0 and got_q
