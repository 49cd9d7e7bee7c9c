"""Every command has --help ending in an example, and README names it."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from tests.conftest import REPO

runner = CliRunner()
COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands)
# Command groups (``faultlens lake export``): each subcommand is checked like a command.
SUBCOMMANDS = sorted(
    (g.name, c.name or c.callback.__name__)
    for g in app.registered_groups
    for c in g.typer_instance.registered_commands
)


def test_the_contract_commands_exist() -> None:
    assert {"ingest", "status"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help_with_example_and_is_in_readme(name: str) -> None:
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    assert "--db" in result.output or name in ("synth",)
    readme = (REPO / "README.md").read_text()
    assert re.search(rf"`faultlens {name}\b", readme), f"README does not mention faultlens {name}"


@pytest.mark.parametrize(("group", "name"), SUBCOMMANDS)
def test_subcommand_has_help_with_example_and_is_in_readme(group: str, name: str) -> None:
    result = runner.invoke(app, [group, name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    readme = (REPO / "README.md").read_text()
    assert re.search(rf"`faultlens {group} {name}\b", readme), f"README lacks {group} {name}"


def test_the_contract_commands_are_all_there() -> None:
    assert {
        "ingest",
        "synth",
        "demo",
        "train",
        "predict",
        "stragglers",
        "replay",
        "report",
        "dashboard",
        "run",
        "status",
    } <= set(COMMANDS)


def test_status_on_missing_database_is_a_one_line_error(tmp_path) -> None:
    result = runner.invoke(app, ["status", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 1
    assert "no database at" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("name", COMMANDS)
def test_help_is_prose_without_markup_debris(name: str) -> None:
    result = runner.invoke(app, [name, "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert not re.search(r"\S \.(\s|$)", result.output), result.output  # "stamps ." left by markup


def test_help_rewraps_docstring_lines_to_the_terminal() -> None:
    # In the docstring "... A file that cannot be" ends a line and "read is reported" begins one.
    wide = runner.invoke(app, ["ingest", "--help"], terminal_width=120).output
    assert "A file that cannot be read is reported as failed" in wide
    assert "[default: file mtime]" in wide  # bracketed text is kept, not eaten as markup


def test_readme_points_at_the_projects_own_docs() -> None:
    readme = (REPO / "README.md").read_text()
    assert "DESIGN.md" not in readme  # a clone has no ../shared
    shapes = (REPO / "docs" / "json.md").read_text()
    for name in COMMANDS:
        if "--json" in runner.invoke(app, [name, "--help"]).output:
            assert f"| `{name}` |" in shapes, f"docs/json.md lacks the shape of {name} --json"


def test_ingest_suggests_the_folders_node_and_never_applies_it(tmp_path, monkeypatch) -> None:
    """A host-less kernel log in a folder named like a node: the events stay node-less (the
    folder is never taken as the node), and stderr says which --reparse would name it."""
    import duckdb

    monkeypatch.setenv("FAULTLENS_LIVE_WRITE_S", "0")
    log = tmp_path / "nodes" / "gpu0042" / "kern.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "[  12.345678] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, "
        "GPU has fallen off the bus.\n"
    )
    db = tmp_path / "x.duckdb"
    result = runner.invoke(app, ["ingest", str(log), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"its folder suggests 'gpu0042': --reparse {log} --node gpu0042" in result.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        nodes = con.execute("SELECT node FROM events WHERE kind = 'xid'").fetchall()
    assert nodes == [(None,)]
