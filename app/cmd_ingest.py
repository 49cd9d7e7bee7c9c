"""`faultlens ingest` and `faultlens status`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from faultlens.app.common import (
    DaskOption,
    DbOption,
    ExitCode,
    JsonOption,
    boundary,
    dask_client,
    db_path,
    emit_json,
    is_tty,
    utc_now,
)
from faultlens.ingest.attribution import refresh
from faultlens.ingest.base import ParseContext
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.pipeline import FileReport, expand_paths, ingest_paths
from faultlens.ingest.store import Store

err = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(status)


@boundary
def ingest(
    paths: Annotated[
        list[str] | None, typer.Argument(help="Files, folders, globs; .gz is read as is.")
    ] = None,
    db: DbOption = None,
    format: Annotated[
        str | None, typer.Option("--format", help="Force a parser instead of sniffing.")
    ] = None,
    node: Annotated[
        str | None, typer.Option(help="Node name for logs that do not name one (dmesg).")
    ] = None,
    node_from_path: Annotated[
        str | None,
        typer.Option(
            "--node-from-path",
            help="Regex over each file's path whose 'node' group names the node of lines that "
            "name none, e.g. '/nodes/(?P<node>[^/]+)/'. A folder is never a node by default.",
        ),
    ] = None,
    reparse: Annotated[
        bool,
        typer.Option(
            "--reparse",
            help="Parse the files again and replace their rows in one transaction (with a "
            "corrected --node / --boot-time / --columns).",
        ),
    ] = False,
    year: Annotated[
        int | None, typer.Option(help="Year for year-less syslog stamps [default: file mtime].")
    ] = None,
    boot_time: Annotated[
        datetime | None,
        typer.Option("--boot-time", help="Boot time (UTC) for boot-relative dmesg stamps."),
    ] = None,
    columns: Annotated[
        str | None,
        typer.Option(help="Comma-separated column names for headerless sacct output."),
    ] = None,
    delimiter: Annotated[
        str | None, typer.Option(help="Field delimiter of sacct -P output [default: |].")
    ] = None,
    xid_catalog: Annotated[
        Path | None, typer.Option("--xid-catalog", help="Site Xid catalog CSV.")
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Parse files in N processes (with --dask: a local Dask cluster).")
    ] = 1,
    dask: DaskOption = None,
    scratch: Annotated[
        Path | None,
        typer.Option(help="Folder for parsed parts; must be shared with remote Dask workers."),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option("--prometheus", help="Also pull DCGM series from this Prometheus server."),
    ] = None,
    since: Annotated[
        str, typer.Option(help="With --prometheus: how far back (30m, 12h, 7d).")
    ] = "7d",
    json: JsonOption = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress, no table.")] = False,
) -> None:
    """Ingest logs (kernel / Xid, Slurm, ...) into the database; each file exactly once.

    Every line is parsed, counted as noise, or quarantined with a reason. Every line-oriented
    log is searched for every family (kernel, NCCL / PyTorch, Slurm); a file of no known format
    is scanned for known messages (a warning, not a failure). A file that cannot be read is
    reported as failed and the others are still ingested (exit code 3). Re-ingesting a file
    changes nothing; a log that has grown is read from where the last run stopped; --reparse
    replaces a file's rows. Events without a time or a node are kept, flagged and counted.

    With --prometheus URL, DCGM series are pulled from that server's HTTP API (query_range in
    time windows, resumable; a second pull only fetches what is new).

    Example: faultlens ingest /var/log/kern.log sacct.txt --db data/faultlens.duckdb

    Example: faultlens ingest --reparse dmesg.txt --boot-time 2024-05-01T08:00:00 --node gpu-07
    """
    if prometheus is not None:
        from faultlens.app.cmd_prom import pull_prometheus

        pull_prometheus(prometheus, since=since, db=db, node=node, json=json, quiet=quiet)
        if not paths:
            return
    if not paths:
        raise typer.BadParameter("give PATHS to ingest, or --prometheus URL")
    ctx = ParseContext(
        file="",
        node=node,
        node_pattern=node_from_path,
        year=year,
        boot_time=boot_time.replace(tzinfo=None) if boot_time else None,
        columns=[c.strip() for c in columns.split(",")] if columns else None,
        delimiter=delimiter,
    )
    show = is_tty() and not quiet and not json
    with dask_client(dask, workers) as executor, Store(db_path(db)) as store:
        if xid_catalog is not None or store.count("xid_catalog") == 0:
            store.load_xid_catalog(load_catalog(xid_catalog))
        with _file_progress(len(expand_paths(paths)) if show else 0) as on_file:
            report = ingest_paths(
                store,
                paths,
                now=utc_now(),
                fmt=format,
                base_ctx=ctx,
                workers=workers,
                on_file=on_file,
                executor=executor,
                scratch=str(scratch) if scratch else None,
                reparse=reparse,
            )
        if any(f.status in ("ok", "partial") for f in report.files):
            refresh(store)  # join the new events to GPUs and jobs, re-attribute failed jobs
    if json:
        emit_json(report.to_json())
    elif not quiet:
        _print_report(report.files)
    for f in report.files:
        if f.status == "failed":
            err.print(f"[red]failed[/red] {f.path}: {f.error}", highlight=False)
        elif f.warning:
            err.print(f"[yellow]warning[/yellow] {f.path}: {f.warning}", highlight=False)
    _print_unplaced(report.files)
    if any(f.status == "failed" for f in report.files):
        raise typer.Exit(ExitCode.PARTIAL)


@contextmanager
def _file_progress(total: int) -> Iterator[Any]:
    """A per-file progress bar on stderr (``total`` files), or no callback when ``total`` is 0."""
    if not total:
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err, transient=True) as progress:
        bar = progress.add_task("ingest", total=total)
        yield lambda _report: progress.advance(bar)


def _print_unplaced(files: list[FileReport]) -> None:
    """One stderr line for the events kept without a time or a node, and the files they are in."""
    no_ts = [f for f in files if f.events_no_ts]
    no_node = [f for f in files if f.events_no_node]
    if not (no_ts or no_node):
        return
    err.print(
        f"{sum(f.events_no_ts for f in no_ts):,} events without a time in {len(no_ts)} files, "
        f"{sum(f.events_no_node for f in no_node):,} without a node in {len(no_node)} files "
        "(kept and flagged; fix with --reparse PATH --boot-time / --node; `faultlens status` "
        "lists them)",
        highlight=False,
    )


def _print_report(files: list[FileReport]) -> None:
    out = Console()
    table = Table(
        "file", "format", "status", "lines", "parsed", "noise", "quarantined", "no time", "no node"
    )
    for f in files:
        table.add_row(
            Path(f.path).name,
            f.format or "-",
            f.status,
            str(f.lines),
            str(f.parsed),
            str(f.noise),
            str(f.quarantined),
            str(f.events_no_ts),
            str(f.events_no_node),
        )
    out.print(table)


@boundary
def status(db: DbOption = None, json: JsonOption = False) -> None:
    """What the database holds: rows per table, ingested files, and what was quarantined.

    Example: faultlens status --db data/faultlens.duckdb
    """
    with Store(db_path(db), read_only=True) as store:
        doc = status_doc(store)
    if json:
        emit_json(doc)
        return
    out = Console()
    t = Table("table", "rows", title=f"faultlens database {db_path(db)}")
    for name, n in doc["tables"].items():
        t.add_row(name, f"{n:,}")
    out.print(t)
    if doc["events_by_kind"]:
        k = Table("source", "kind", "events", title="events by kind")
        for r in doc["events_by_kind"]:
            k.add_row(r["source"], r["kind"], f"{r['n']:,}")
        out.print(k)
    f = Table("status", "files", "lines", "parsed", "noise", "quarantined", title="ingested files")
    for r in doc["files"]:
        f.add_row(
            r["status"],
            str(r["files"]),
            f"{r['lines']:,}",
            f"{r['parsed']:,}",
            f"{r['noise']:,}",
            f"{r['quarantined']:,}",
        )
    out.print(f)
    u = doc["unplaced"]
    if u["no_ts"] or u["no_node"]:
        t = Table("file", "no time", "no node", title="events without a time or a node (kept)")
        for r in u["files"]:
            t.add_row(Path(r["file"]).name, f"{r['no_ts']:,}", f"{r['no_node']:,}")
        out.print(t)
        out.print(f"{u['no_ts']:,} events without a time, {u['no_node']:,} without a node")
    if doc["quarantine"]:
        q = Table("reason", "lines", "example file", title="quarantine")
        for r in doc["quarantine"]:
            q.add_row(r["reason"], str(r["n"]), Path(r["file"]).name)
        out.print(q)


def status_doc(store: Store) -> dict:
    from faultlens.ingest.schema import TABLES

    tables = {name: store.count(name) for name in TABLES}
    by_kind = store.query(
        "SELECT source, kind, count(*) AS n FROM events GROUP BY ALL ORDER BY n DESC"
    ).to_dicts()
    files = store.query(
        "SELECT status, count(*) AS files, sum(lines) AS lines, sum(parsed) AS parsed, "
        "sum(noise) AS noise, sum(quarantined) AS quarantined FROM ingested_files GROUP BY ALL "
        "ORDER BY status"
    ).to_dicts()
    quarantine = store.query(
        "SELECT reason, count(*) AS n, min(file) AS file FROM quarantine GROUP BY ALL "
        "ORDER BY n DESC LIMIT 20"
    ).to_dicts()
    unplaced = store.query(
        "SELECT file, count(*) FILTER (WHERE ts IS NULL) AS no_ts, "
        "count(*) FILTER (WHERE node IS NULL) AS no_node FROM events GROUP BY file "
        "HAVING no_ts > 0 OR no_node > 0 ORDER BY no_ts + no_node DESC, file"
    ).to_dicts()
    return {
        "tables": tables,
        "events_by_kind": by_kind,
        "files": files,
        "quarantine": quarantine,
        "unplaced": {
            "no_ts": sum(r["no_ts"] for r in unplaced),
            "no_node": sum(r["no_node"] for r in unplaced),
            "files": unplaced[:20],
        },
    }
