"""`faultlens dashboard` (the Streamlit app) and `faultlens report` (HTML / PDF)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from app.common import DbOption, ExitCode, boundary, db_path, utc_now
from ingest.errors import ConfigError

DASHBOARD = Path(__file__).resolve().parent / "dashboard" / "main.py"


def register(app: typer.Typer) -> None:
    app.command()(dashboard)
    app.command()(report)


@boundary
def dashboard(
    db: DbOption = None,
    host: Annotated[str, typer.Option("--host", help="Bind address (localhost only unless "
                                      "you ask).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.", min=1, max=65535)] = 8501,
    models_dir: Annotated[Path | None, typer.Option("--models-dir", help="Model registry "
                          "[default: models/ next to the database].")] = None,
) -> None:
    """Start the Streamlit dashboard: overview, events, node, jobs, predictions, stragglers,
    recovery what-if and data health, each with time / cluster / node / GPU / job filters.

    It reads a private snapshot of the database, refreshed when the file changes, so it runs
    beside `faultlens ingest` and `faultlens run` without blocking them. Ctrl-C stops it.

    Example: faultlens dashboard --db data/faultlens.duckdb --port 8501
    """
    env = dict(os.environ)
    env["FAULTLENS_DB"] = str(db_path(db).resolve())
    if models_dir is not None:
        env["FAULTLENS_MODELS_DIR"] = str(models_dir.resolve())
    cmd = [sys.executable, "-m", "streamlit", "run", str(DASHBOARD),
           "--server.address", host, "--server.port", str(port), "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           "--global.developmentMode", "false", "--client.toolbarMode", "viewer",
           # no forced full garbage collection after every run: it holds the interpreter lock
           # while the run's last messages wait to be sent (~0.2 s per filter change)
           "--runner.postScriptGC", "false"]
    typer.echo(f"faultlens dashboard on http://{host}:{port} (Ctrl-C to stop)", err=True)
    try:
        code = subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


@boundary
def report(
    db: DbOption = None,
    since: Annotated[str, typer.Option("--since", help="Window: a duration back from the last "
                                       "data (7d, 36h, 2w) or a UTC date.")] = "7d",
    out: Annotated[Path | None, typer.Option("--out", help="Output file [default: "
                   "data/reports/faultlens-report-<time>.<format>].")] = None,
    fmt: Annotated[str, typer.Option("--format", help="html or pdf.")] = "html",
    models_dir: Annotated[Path | None, typer.Option("--models-dir", help="Model registry "
                          "[default: models/ next to the database].")] = None,
) -> None:
    """Write the reliability report: the dashboard's views over a window as one self-contained
    HTML file (opens offline) or a PDF (headless Chromium). Prints the file's path on stdout.

    Example: faultlens report --since 7d --format html --out weekly.html
    """
    from reports import build_report, parse_since

    if fmt not in ("html", "pdf"):
        raise ConfigError(f"--format {fmt!r}: html or pdf")
    path = db_path(db)
    if not path.exists():
        typer.echo(f"faultlens: no database at {path}: run `faultlens demo` or `faultlens "
                   "ingest` first", err=True)
        raise typer.Exit(ExitCode.NO_DATA)
    now = utc_now()
    target = out or path.resolve().parent / "reports" / f"faultlens-report-{now:%Y%m%dT%H%M}.{fmt}"
    written = build_report(path, target, since=parse_since(since), now=now, fmt=fmt,
                           models_dir=models_dir or path.resolve().parent / "models")
    typer.echo(str(written))
