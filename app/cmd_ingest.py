"""`faultlens ingest` and `faultlens status`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from faultlens.app.common import (
    DaskOption,
    DbOption,
    ExitCode,
    JsonOption,
    Table,
    boundary,
    dask_client,
    db_path,
    emit_json,
    is_tty,
    live_write_s,
    open_store,
    stdout_console,
    terminal_text,
    utc_now,
)
from faultlens.ingest.errors import ConfigError

if TYPE_CHECKING:  # the commands import what they use: `faultlens --help` loads no DuckDB
    import polars as pl

    from faultlens.ingest.pipeline import FileReport
    from faultlens.ingest.store import Store

err = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(status)
    app.command("refresh")(refresh_cmd)


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
    tz: Annotated[
        str | None,
        typer.Option(
            "--tz",
            metavar="ZONE",
            help="Time zone of stamps that carry none (syslog, ISO without offset, dmesg -T, "
            "glog, Slurm, sacct, nvidia-smi), e.g. Europe/Berlin [default: UTC]. Stamps with "
            "an offset and Unix times are exact whatever it says.",
        ),
    ] = None,
    tz_path: Annotated[
        list[str] | None,
        typer.Option(
            "--tz-path",
            metavar="GLOB=ZONE",
            help="Files whose path matches GLOB read their zone-less stamps as ZONE (repeatable, "
            "the first match wins; other files take --tz), e.g. '*/eu-*/*=Europe/Berlin'. A "
            "relative GLOB is from the current folder; `*` crosses folders.",
        ),
    ] = None,
    tz_host: Annotated[
        list[str] | None,
        typer.Option(
            "--tz-host",
            metavar="GLOB=ZONE",
            help="Lines whose syslog head (RFC 3164: no zone) names a host matching GLOB read "
            "that stamp as ZONE (repeatable, the first match wins; other lines take the "
            "file's zone), e.g. 'gpu-eu-*=Europe/Berlin': one central syslog file of nodes in "
            "several zones. GLOB is over node names as faultlens keeps them (lower case, no "
            "domain); `*` any run of characters, `?` one.",
        ),
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
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            metavar="FILE",
            help="faultlens.toml: its database, and its \\[prometheus] url (pulled like "
            "--prometheus) with the http_config credentials (TLS, basic auth, bearer token).",
        ),
    ] = None,
    follow_symlinks: Annotated[
        bool,
        typer.Option(
            "--follow-symlinks", help="Follow symlinks in folders that lead out of the folder."
        ),
    ] = False,
    dataset: Annotated[
        str | None,
        typer.Option(help="Dataset of these files (a public trace); [default: the site's own]."),
    ] = None,
    epoch: Annotated[
        datetime | None,
        typer.Option(help="Time zero (UTC) of records whose times are offsets (s, h or d)."),
    ] = None,
    map_: Annotated[
        str | None,
        typer.Option(
            "--map",
            help="Incident columns by role: node=server,start=opened,levels=A;B,time_unit=h.",
        ),
    ] = None,
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

    Incident records (tickets, repair logs, public failure data: CSV, JSON, JSON lines) go to
    --dataset NAME when they are not the site's own; --epoch places offset times, --map names
    columns the reader does not know.

    With --prometheus URL, DCGM series are pulled from that server's HTTP API (query_range in
    time windows, resumable; a second pull only fetches what is new).

    Example: faultlens ingest /var/log/kern.log sacct.txt --db data/faultlens.duckdb

    Example: faultlens ingest --reparse dmesg.txt --boot-time 2024-05-01T08:00:00 --node gpu-07
    """
    http = None
    if config is not None:
        from faultlens.app.run import load_config

        cfg = load_config(config, db=db)
        db, http = cfg.db, cfg.prometheus_http
        prometheus = prometheus or cfg.prometheus_url
    if prometheus is not None:
        from faultlens.app.cmd_prom import pull_prometheus

        pull_prometheus(
            prometheus, since=since, db=db, node=node, json=json, quiet=quiet, http=http
        )
        if not paths:
            return
    if not paths:
        raise typer.BadParameter("give PATHS to ingest, or --prometheus URL")
    _check_format(format)  # a usage error exits 2 before the database is created
    site_catalog = _site_catalog(xid_catalog)
    live_s = live_write_s()

    from faultlens.ingest.attribution import refresh
    from faultlens.ingest.base import ParseContext
    from faultlens.ingest.catalog import load_catalog
    from faultlens.ingest.pipeline import expand_paths, ingest_paths

    ctx = ParseContext(
        file="",
        node=node,
        node_pattern=node_from_path,
        year=year,
        boot_time=boot_time.replace(tzinfo=None) if boot_time else None,
        columns=[c.strip() for c in columns.split(",")] if columns else None,
        delimiter=delimiter,
        options=_incident_options(dataset, epoch, map_) | _zone_option(tz, tz_path, tz_host),
    )
    show = is_tty() and not quiet and not json
    with dask_client(dask, workers) as executor, open_store(db_path(db)) as store:
        if site_catalog is not None or store.count("xid_catalog") == 0:
            store.load_xid_catalog(site_catalog if site_catalog is not None else load_catalog())
        n_files = len(expand_paths(paths, follow_symlinks=follow_symlinks)) if show else 0
        with _file_progress(n_files) as on_file:
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
                follow_symlinks=follow_symlinks,
                live_write_s=live_s,
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
            err.print(
                f"[red]failed[/red] {terminal_text(f.path)}: {terminal_text(f.error)}",
                highlight=False,
            )

        elif f.warning:
            err.print(
                f"[yellow]warning[/yellow] {terminal_text(f.path)}: {terminal_text(f.warning)}",
                highlight=False,
            )
    _print_unplaced(report.files)
    if any(_lost(f) for f in report.files):
        raise typer.Exit(ExitCode.PARTIAL)


@boundary
def refresh_cmd(
    db: DbOption = None,
    full: Annotated[
        bool, typer.Option("--full", help="Rebuild everything instead of only what is new.")
    ] = False,
    json: JsonOption = False,
) -> None:
    """Join events to GPUs and jobs and attribute failed jobs (ingest does this after each load).

    Incremental: only the rows loaded since the last refresh, and the failed jobs whose
    attribution window they fall in, are touched; old rows that changed under it (a reparse,
    a learned boot time, a new Xid catalog) make it rebuild everything. --full always rebuilds.
    Prints what was done (mode, and why a full rebuild).

    Example: faultlens refresh --full --db data/faultlens.duckdb
    """
    from faultlens.ingest.attribution import refresh

    with open_store(db_path(db)) as store:
        done = refresh(store, full=full)
    if json:
        emit_json(done)
    else:
        typer.echo(" ".join(f"{k}={v}" for k, v in done.items() if v != ""))


def _incident_options(
    dataset: str | None, epoch: datetime | None, mapping: str | None
) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if dataset:
        options["dataset"] = dataset.strip()
    if epoch is not None:
        options["epoch"] = epoch.replace(tzinfo=None)
    if mapping:
        pairs = [p.split("=", 1) for p in mapping.split(",") if p.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ConfigError(f"--map wants ROLE=COLUMN[,ROLE=COLUMN...], got {mapping!r}")
        options["map"] = {k.strip(): v.strip() for k, v in pairs}
    return options


def _zone_option(
    tz: str | None, tz_path: list[str] | None = None, tz_host: list[str] | None = None
) -> dict[str, Any]:
    """``{"tz": ZONE, "tz_paths": [(GLOB, ZONE), ...], "tz_hosts": [(GLOB, ZONE), ...]}`` for
    zones this machine knows (a usage error otherwise), each part only when given."""
    from faultlens.ingest.zones import check_zone, zone_hosts, zone_options, zone_paths

    try:
        zone = check_zone(tz)
    except ValueError as e:
        raise ConfigError(f"--tz: {e}") from e
    checked = []
    for flag, given, check in (
        ("--tz-path", tz_path, lambda pairs: zone_paths(pairs, Path.cwd())),
        ("--tz-host", tz_host, zone_hosts),
    ):
        pairs = [p.rsplit("=", 1) if "=" in p else (p, "") for p in given or ()]
        try:
            checked.append(check(pairs))
        except ValueError as e:
            raise ConfigError(f"{flag}: {e}") from e
    return zone_options(zone, *checked)


def _lost(f: FileReport) -> bool:
    """A file whose data did not arrive: it failed, or it is partial with nothing parsed."""
    return f.status == "failed" or (f.status == "partial" and f.parsed == 0)


def _site_catalog(path: Path | None) -> pl.DataFrame | None:
    """The site's Xid catalog, read before anything is opened (a bad one is a usage error)."""
    if path is None:
        return None
    import polars as pl

    from faultlens.ingest.catalog import load_catalog

    try:
        return load_catalog(path)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise ConfigError(f"--xid-catalog {path}: {e}") from e


def _check_format(fmt: str | None) -> None:
    from faultlens.ingest import registry

    if fmt is not None and fmt not in registry.names():
        raise ConfigError(f"unknown --format {fmt!r}; known: {', '.join(registry.names())}")


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
    from faultlens.ingest.pipeline import infer_node

    for f in no_node:  # a folder that looks like a node: say so, never apply it
        hint = infer_node(f.path)
        if hint:
            err.print(
                f"{f.path}: {f.events_no_node:,} events without a node; its folder suggests "
                f"{hint!r}: --reparse {f.path} --node {hint} (or --node-from-path REGEX)",
                highlight=False,
                soft_wrap=True,  # a path to paste: never cut by the terminal's width
            )


def _print_report(files: list[FileReport]) -> None:
    out = stdout_console()
    # the zone each file's zone-less stamps were read in, when a zone was given at all
    zones = any(f.zone for f in files)
    table = Table(
        "file",
        "format",
        "status",
        "lines",
        "parsed",
        "noise",
        "quarantined",
        "no time",
        "no node",
        *(["zone"] if zones else []),
    )
    for f in files:
        table.add_row(
            f.path,
            f.format or "-",
            f.status,
            str(f.lines),
            str(f.parsed),
            str(f.noise),
            str(f.quarantined),
            str(f.events_no_ts),
            str(f.events_no_node),
            *([f.zone or "UTC"] if zones else []),
        )
    out.print(table)


@boundary
def status(db: DbOption = None, json: JsonOption = False) -> None:
    """What the database holds: rows per table, ingested files, and what was quarantined.

    Also the newest row per source and per node and source, with its age from now: a log
    pipeline that stopped shows up here (and as a "logs stopped" alert of `faultlens run`).

    Example: faultlens status --db data/faultlens.duckdb
    """
    from faultlens.models.drains import drain_summary
    from faultlens.models.freshness import freshness_doc, source_last_seen

    with open_store(db_path(db), read_only=True) as store:
        doc = status_doc(store)
        doc["last_seen"] = freshness_doc(source_last_seen(store), utc_now())
        doc["drains"] = drain_summary(store)
    if json:
        emit_json(doc)
        return
    out = stdout_console()
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
    _print_last_seen(out, doc["last_seen"])
    d = doc["drains"]
    if d["suggested"]:
        t = Table("outcome", "suggestions", title="suggested drains and what followed")
        for outcome, n in d["by_outcome"].items():
            t.add_row(outcome, str(n))
        out.print(t)
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


def _print_last_seen(out: Console, fresh: dict) -> None:
    if not fresh["by_source"]:
        return
    t = Table(
        "source",
        "nodes",
        "newest row",
        "age (h)",
        "stalest node's newest",
        "age (h)",
        title="newest row per source (age from now)",
    )
    for r in fresh["by_source"]:
        t.add_row(
            r["source"],
            str(r["nodes"]),
            r["newest"],
            f"{r['newest_age_h']:,.1f}",
            r["stalest"],
            f"{r['stalest_age_h']:,.1f}",
        )
    out.print(t)
    n = Table("node", "source", "newest row", "age (h)", title="stalest node / source pairs")
    for r in fresh["by_node"][:10]:
        n.add_row(r["node"], r["source"], r["last_seen"], f"{r['age_h']:,.1f}")
    out.print(n)


def status_doc(store: Store, summary: str | None = None) -> dict:
    """The status document, from small tables only: row counts (DuckDB keeps them per table),
    the ingested-files registry, the quarantine and ``event_summary`` (what each file gave), never
    a scan of ``events`` or ``telemetry``. ``summary`` is the summary's source (default:
    ``store.summary_source()``; ``bench_status`` passes the tables' own aggregate, the baseline).
    """
    from faultlens.ingest.schema import TABLES

    src = summary or store.summary_source()
    present = {
        r["table_name"]
        for r in store.records(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    }  # a database made before a table was declared, opened read-only, lacks it
    tables = {name: store.count(name) for name in TABLES if name in present}
    by_kind = store.records(
        f"SELECT source, kind, sum(n)::BIGINT AS n FROM {src} WHERE tbl = 'events' "
        "GROUP BY ALL ORDER BY n DESC, source, kind"
    )
    files = store.records(
        # sums are HUGEINT in DuckDB: cast, so that JSON gets numbers, not strings
        "SELECT status, count(*) AS files, sum(lines)::BIGINT AS lines, "
        "sum(parsed)::BIGINT AS parsed, sum(noise)::BIGINT AS noise, "
        "sum(quarantined)::BIGINT AS quarantined FROM ingested_files GROUP BY ALL ORDER BY status"
    )
    quarantine = store.records(
        "SELECT reason, count(*) AS n, min(file) AS file FROM quarantine GROUP BY ALL "
        "ORDER BY n DESC LIMIT 20"
    )
    unplaced = store.records(
        "SELECT file, untimed AS no_ts, nodeless AS no_node FROM (SELECT file, "
        "sum(no_ts)::BIGINT AS untimed, coalesce(sum(n) FILTER (WHERE node IS NULL), 0)::BIGINT "
        f"AS nodeless FROM {src} WHERE tbl = 'events' GROUP BY file) "
        "WHERE untimed > 0 OR nodeless > 0 ORDER BY untimed + nodeless DESC, file"
    )
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
