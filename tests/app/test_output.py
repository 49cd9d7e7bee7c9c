"""Output that fits: piped tables are TSV with whole values; JSON numbers are numbers."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.app.common import table_tsv

runner = CliRunner()  # its stdout is not a terminal, as in a pipe

XID = "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
UNREADABLE = "NVRM: Xid (PCI:zz garbage\n"


def _ingest(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "a-rather-long-log-file-name-from-node-gpu0042.log"
    log.write_text(XID * 3 + UNREADABLE)
    db = tmp_path / "t.duckdb"
    return log, db


def test_piped_ingest_table_is_tsv_with_the_whole_path(tmp_path: Path) -> None:
    log, db = _ingest(tmp_path)
    result = runner.invoke(app, ["ingest", "--format", "kernel", str(log), "--db", str(db)])
    assert result.exit_code == 0, result.output
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert rows[0] == [
        "file",
        "format",
        "status",
        "lines",
        "parsed",
        "noise",
        "quarantined",
        "no time",
        "no node",
    ]
    # the three Xid lines carry neither a time nor a host: kept, and counted as such
    assert rows[1] == [str(log), "kernel", "partial", "4", "3", "0", "1", "3", "3"]


def test_status_json_counts_are_numbers(tmp_path: Path) -> None:
    log, db = _ingest(tmp_path)
    runner.invoke(app, ["ingest", "--format", "kernel", str(log), "--db", str(db), "-q"])
    doc = json.loads(runner.invoke(app, ["status", "--db", str(db), "--json"]).stdout)
    (files,) = doc["files"]
    assert files == {
        "status": "partial",
        "files": 1,
        "lines": 4,
        "parsed": 3,
        "noise": 0,
        "quarantined": 1,
    }
    assert doc["tables"]["events"] == 3 and doc["tables"]["quarantine"] == 1


def test_table_tsv_keeps_values_whole_on_one_line() -> None:
    table = Table("node", "why", title="top nodes")
    long_value = "x" * 300
    table.add_row("gpu0001", "a\tb\nc")
    table.add_row("gpu0002", long_value)
    assert table_tsv(table) == f"# top nodes\nnode\twhy\ngpu0001\ta b c\ngpu0002\t{long_value}\n"
