"""`faultlens dashboard` (the Streamlit app) and `faultlens report` (HTML / PDF)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from faultlens.app.common import DbOption, ExitCode, boundary, db_path, utc_now
from faultlens.ingest.errors import ConfigError

DASHBOARD = Path(__file__).resolve().parent / "dashboard" / "main.py"


def register(app: typer.Typer) -> None:
    app.command()(dashboard)
    app.command()(report)


@boundary
def dashboard(
    db: DbOption = None,
    host: Annotated[
        str, typer.Option("--host", help="Bind address (localhost only unless you ask).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.", min=1, max=65535)] = 8501,
    models_dir: Annotated[
        Path | None,
        typer.Option(
            "--models-dir", help="Model registry \\[default: models/ next to the database]."
        ),
    ] = None,
    logs: Annotated[
        list[Path] | None,
        typer.Option(
            "--logs",
            metavar="DIR",
            help="A log folder the dashboard may read source lines from "
            "(repeatable). Files outside every configured folder (symlinks resolved) are never "
            "read.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            metavar="FILE",
            help="faultlens.toml: its \\[ingest] paths are log "
            "folders too, its database is used when --db is not given, and its \\[dashboard] "
            "table sets auth, trusted_proxies, proxy_header, operators, secrets_file.",
        ),
    ] = None,
    auth: Annotated[
        str | None,
        typer.Option(
            "--auth",
            help="Login: none (loopback only), proxy (a login proxy names the user in a "
            "header) or oidc (Streamlit's OpenID Connect login) \\[default: none].",
            show_default=False,
        ),
    ] = None,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-proxy",
            metavar="ADDR",
            help="With --auth proxy: address or network the proxy connects from (repeatable) "
            "\\[default: 127.0.0.1 and ::1].",
            show_default=False,
        ),
    ] = None,
    proxy_header: Annotated[
        str | None,
        typer.Option(
            "--proxy-header",
            help="With --auth proxy: the header naming the user \\[default: X-Forwarded-User].",
            show_default=False,
        ),
    ] = None,
    operator: Annotated[
        list[str] | None,
        typer.Option(
            "--operator",
            metavar="USER",
            help="A user who may also see raw log lines (repeatable); without any, everyone "
            "signed in may.",
        ),
    ] = None,
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth",
            help="Serve a network address without any login (warns on every start).",
        ),
    ] = False,
) -> None:
    """Start the Streamlit dashboard: overview, events, node, jobs, predictions, stragglers,
    recovery what-if and data health, each with time / cluster / node / GPU / job filters.

    It reads a private snapshot of the database, refreshed when the file changes, so it runs
    beside `faultlens ingest` and `faultlens run` without blocking them. Ctrl-C stops it.

    The Events and Data health pages show the lines around a selected event or quarantined line,
    read from its log file, only for files under --logs folders or the --config \\[ingest] paths.

    On any address but loopback a login is required (exit code 2 otherwise): --auth proxy
    behind oauth2-proxy / nginx, or --auth oidc (README "Deploying for a team").

    Example: faultlens dashboard --db data/faultlens.duckdb --port 8501 --logs /var/log/cluster
    """
    from faultlens.app.dashboard.auth import AUTH_ENV, check_bind, settings_from
    from faultlens.reports.source_context import ROOTS_ENV, resolve_roots

    env = dict(os.environ)
    entries: list[str] = [str(p) for p in logs or []]
    section: dict = {}
    if config is not None:
        from faultlens.app.run import load_config, load_section

        cfg = load_config(config, db=db)
        entries += cfg.ingest_paths
        db = cfg.db
        section = load_section(config, "dashboard")
    settings = settings_from(
        section,
        auth=auth,
        trusted_proxies=trusted_proxy,
        proxy_header=proxy_header,
        operators=operator,
        insecure=insecure_no_auth,
    )
    secrets = _secrets_file(section, config)
    for warning in check_bind(host, settings, secrets):
        typer.echo(warning, err=True)
    env[AUTH_ENV] = settings.to_env()
    env["FORWARDED_ALLOW_IPS"] = ""  # the peer address stays the TCP peer (proxy mode's check)
    env["FAULTLENS_DB"] = str(db_path(db).resolve())
    env[ROOTS_ENV] = json.dumps([str(r) for r in resolve_roots(entries)])
    if models_dir is not None:
        env["FAULTLENS_MODELS_DIR"] = str(models_dir.resolve())
    cmd = [
        sys.executable,
        "-m",
        "faultlens.app.dashboard.serve",  # Streamlit's command line, the first page preloaded
        "run",
        str(DASHBOARD),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--global.developmentMode",
        "false",
        "--client.toolbarMode",
        "viewer",
        # no forced full garbage collection after every run: it holds the interpreter lock
        # while the run's last messages wait to be sent (~0.2 s per filter change)
        "--runner.postScriptGC",
        "false",
    ]
    if secrets is not None:
        cmd += ["--secrets.files", str(secrets)]
    typer.echo(f"faultlens dashboard on http://{host}:{port} (Ctrl-C to stop)", err=True)
    if not entries:
        typer.echo(
            "no log folders configured (--logs DIR or --config): source lines of events "
            "are not shown",
            err=True,
        )
    raise typer.Exit(run_server(cmd, env))


STOP_GRACE_S = 10.0  # how long the Streamlit child gets to stop before it is killed


def run_server(cmd: list[str], env: dict[str, str]) -> int:
    """Run the Streamlit server as our child; SIGTERM or SIGHUP to us stops it too (a service
    manager stops the command, not its child), Ctrl-C as before. Returns its exit code."""
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum: int, _frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return proc.wait()
    except KeyboardInterrupt:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return 0
    finally:
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _secrets_file(section: dict, config: Path | None) -> Path | None:
    """The Streamlit secrets file of ``--auth oidc``: ``[dashboard] secrets_file`` (relative to
    the config's folder) or ``.streamlit/secrets.toml`` in the working folder."""
    if section.get("secrets_file"):
        base = config.resolve().parent if config is not None else Path.cwd()
        return (base / str(section["secrets_file"])).resolve()
    default = Path(".streamlit/secrets.toml")
    return default.resolve() if default.is_file() else None


@boundary
def report(
    db: DbOption = None,
    since: Annotated[
        str,
        typer.Option(
            "--since",
            help="Window: a duration back from the last data (7d, 36h, 2w) or a UTC date.",
        ),
    ] = "7d",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Output file [default: data/reports/faultlens-report-<time>.<format>]."
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="html or pdf.")] = "html",
    models_dir: Annotated[
        Path | None,
        typer.Option(
            "--models-dir", help="Model registry \\[default: models/ next to the database]."
        ),
    ] = None,
) -> None:
    """Write the reliability report: the dashboard's views over a window as one self-contained
    HTML file (opens offline) or a PDF (headless Chromium). Prints the file's path on stdout.

    Example: faultlens report --since 7d --format html --out weekly.html
    """
    from faultlens.reports import build_report, parse_since

    if fmt not in ("html", "pdf"):
        raise ConfigError(f"--format {fmt!r}: html or pdf")
    path = db_path(db)
    if not path.exists():
        typer.echo(
            f"faultlens: no database at {path}: run `faultlens demo` or `faultlens ingest` first",
            err=True,
        )
        raise typer.Exit(ExitCode.NO_DATA)
    now = utc_now()
    target = out or path.resolve().parent / "reports" / f"faultlens-report-{now:%Y%m%dT%H%M}.{fmt}"
    written = build_report(
        path,
        target,
        since=parse_since(since),
        now=now,
        fmt=fmt,
        models_dir=models_dir or path.resolve().parent / "models",
    )
    typer.echo(str(written))
