"""Errors by kind: usage errors exit 2 before anything is opened; one table maps errors to codes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.app.common import EXIT_CODES, ExitCode, exit_code_of
from faultlens.ingest import errors
from tests.conftest import REPO

runner = CliRunner()

# The kernel parser's anchor ("NVRM: Xid") with nothing a parser can read after it: quarantined.
UNREADABLE_XID = "NVRM: Xid (PCI:zz garbage\nNVRM: Xid 79 what\n"
READABLE_XID = "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_unknown_format_exits_2_and_creates_no_database(tmp_path: Path) -> None:
    db = tmp_path / "fresh.duckdb"
    log = _write(tmp_path, "kern.log", READABLE_XID)
    result = runner.invoke(app, ["ingest", "--format", "nope", str(log), "--db", str(db)])
    assert result.exit_code == ExitCode.USAGE == 2
    assert "unknown --format 'nope'" in result.output
    assert not db.exists()


def test_missing_xid_catalog_exits_2_and_creates_no_database(tmp_path: Path) -> None:
    db = tmp_path / "fresh.duckdb"
    log = _write(tmp_path, "kern.log", READABLE_XID)
    args = ["ingest", "--xid-catalog", str(tmp_path / "none.csv"), str(log), "--db", str(db)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "bogus"], "unknown strategy 'bogus'"),
        (["--strategy", "checkpoint,bogus+elastic"], "unknown strategy 'bogus'"),
        (["--sweep", "interval_min=5"], "--sweep wants"),
        (["--sweep", "bogus=1:2:3"], "cannot sweep 'bogus'"),
    ],
)
def test_replay_usage_errors_exit_2_before_the_database_is_opened(
    tmp_path: Path, args: list[str], message: str
) -> None:
    # The database does not exist: opening it first would exit 1 ("no database at").
    result = runner.invoke(app, ["replay", *args, "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_partial_file_with_nothing_parsed_exits_3(tmp_path: Path) -> None:
    log = _write(tmp_path, "kern.log", UNREADABLE_XID)
    db = tmp_path / "t.duckdb"
    result = runner.invoke(app, ["ingest", "--format", "kernel", str(log), "--db", str(db), "-q"])
    assert result.exit_code == ExitCode.PARTIAL == 3, result.output


def test_partial_file_with_some_lines_parsed_exits_0(tmp_path: Path) -> None:
    log = _write(tmp_path, "kern.log", READABLE_XID + UNREADABLE_XID)
    db = tmp_path / "t.duckdb"
    result = runner.invoke(app, ["ingest", "--format", "kernel", str(log), "--db", str(db), "-q"])
    assert result.exit_code == 0, result.output


def test_every_error_class_has_its_code() -> None:
    expected = {
        errors.LockedError: 6,
        errors.ConfigError: 2,
        errors.ModelError: 5,
        errors.InputError: 3,
        errors.StoreError: 1,
        errors.FaultlensError: 1,
    }
    for cls, code in expected.items():
        assert exit_code_of(cls("x")) == code, cls
    declared = {
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, errors.FaultlensError)
    }
    assert declared == {cls for cls, _ in EXIT_CODES}


def test_readme_exit_code_table_lists_every_code() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\|\s*(\d+)\s*\|\s*(.+?)\s*\|$", section, flags=re.M))
    assert {int(code) for code in rows} == {int(c) for c in ExitCode} | {130}
    for cls, code in EXIT_CODES:
        assert f"`{cls.__name__}`" in rows[str(int(code))], (cls.__name__, code)
