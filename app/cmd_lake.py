"""`faultlens lake export` and `faultlens lake attach`: the Parquet-lake mode."""

from __future__ import annotations

from typing import Annotated

import typer

from faultlens.app.common import DbOption, JsonOption, boundary, db_path, emit_json, open_store

lake_app = typer.Typer(
    help="Parquet-lake mode: export the tables as partitioned Parquet, or serve them from it.",
    no_args_is_help=True,
)

LocationArg = Annotated[
    str, typer.Argument(help="Folder, or s3:// / gs:// / https:// location (via DuckDB httpfs).")
]


def register(app: typer.Typer) -> None:
    app.add_typer(lake_app, name="lake")


@lake_app.command("export")
@boundary
def export(location: LocationArg, db: DbOption = None, json: JsonOption = False) -> None:
    """Write every table as Parquet, partitioned by source and day (hive layout).

    Re-exporting replaces what the previous export wrote.

    Example: faultlens lake export /data/lake --db data/faultlens.duckdb
    """
    from faultlens.ingest.lake import export_lake

    with open_store(db_path(db), read_only=True) as store:
        manifest = export_lake(store, location)
    if json:
        emit_json(manifest)
    else:
        for name, t in manifest["tables"].items():
            typer.echo(f"{name}\t{t['rows']}\t{','.join(t['partition_by']) or '-'}")


@lake_app.command("attach")
@boundary
def attach(location: LocationArg, db: DbOption = None, json: JsonOption = False) -> None:
    """Make a (fresh) database serve the parsed tables from a lake as views.

    The small tables (ingested files, Xid catalog, predictions) are copied in and stay writable.

    Example: faultlens lake attach /data/lake --db data/history.duckdb
    """
    from faultlens.ingest.lake import attach_lake

    done = attach_lake(db_path(db), location)
    if json:
        emit_json({"db": str(db_path(db)), "location": location, "tables": done})
    else:
        for name, how in done.items():
            typer.echo(f"{name}\t{how}")
