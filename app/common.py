"""Shared pieces of the CLI: exit codes, the --db option, output helpers, the error boundary."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import IntEnum
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import rich.table
import typer
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.text import Text

from faultlens.ingest.errors import (
    ConfigError,
    FaultlensError,
    InputError,
    LockedError,
    ModelError,
    StoreError,
)

if TYPE_CHECKING:  # DuckDB and polars load on demand: `faultlens --help` needs neither
    from faultlens.ingest.store import Store

log = logging.getLogger("faultlens")


class ExitCode(IntEnum):
    """Documented exit codes of every faultlens command."""

    OK = 0  # everything worked
    ERROR = 1  # faultlens could not do its job (database, internal error)
    USAGE = 2  # bad command line or configuration
    PARTIAL = 3  # some inputs failed, the others were processed
    ATTENTION = 4  # it worked and found something a human must act on (faultlens run)
    NO_DATA = 5  # nothing to work on yet: run ingest / demo / train first
    LOCKED = 6  # busy: a run holds the lock or another process writes the db; try again later


DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="DuckDB database file [default: $FAULTLENS_DB or data/faultlens.duckdb]",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]


def default_db_path() -> Path:
    """``$FAULTLENS_DB`` if set, else ``data/faultlens.duckdb``."""
    from faultlens.ingest.store import DEFAULT_DB

    env = os.environ.get("FAULTLENS_DB")
    return Path(env) if env else DEFAULT_DB


def db_path(db: Path | None) -> Path:
    return db if db is not None else default_db_path()


def open_store(path: str | Path, *, read_only: bool = False) -> Store:
    """The database, with the memory limit ``$FAULTLENS_DUCKDB_MEMORY`` (default 1GB) sets."""
    from faultlens.ingest.store import DEFAULT_MEMORY, Store

    memory = os.environ.get("FAULTLENS_DUCKDB_MEMORY") or DEFAULT_MEMORY
    return Store(path, read_only=read_only, memory_limit=memory)


def live_write_s() -> float:
    """``$FAULTLENS_LIVE_WRITE_S``: a log modified this recently is still being written, and is
    read only to its last complete line (default 30 s)."""
    from faultlens.ingest.reader import LIVE_WRITE_S

    try:
        return float(os.environ.get("FAULTLENS_LIVE_WRITE_S", LIVE_WRITE_S))
    except ValueError as e:
        raise ConfigError("FAULTLENS_LIVE_WRITE_S must be a number of seconds") from e


def utc_now() -> datetime:
    """The CLI boundary is the only place that reads the clock."""
    return datetime.now(UTC).replace(tzinfo=None)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, default=str, indent=None) + "\n")
    sys.stdout.flush()


def is_tty() -> bool:
    return sys.stderr.isatty()


PIPE_WIDTH = 100_000  # piped output is never cut: lines are as long as their values


class DataConsole(Console):
    """stdout for people and programs: on a terminal, rich tables at the terminal's width;
    piped or redirected, each table as TSV (a ``# title`` line, a header, one row per line) with
    whole values, and text lines unwrapped."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        if (
            objects
            and not self.is_terminal
            and all(isinstance(o, rich.table.Table) for o in objects)
        ):
            for table in objects:
                self.file.write(table_tsv(table))
            self.file.flush()
            return
        super().print(*objects, **kwargs)


def table_tsv(table: rich.table.Table) -> str:
    """A rich table as TSV (tabs and newlines inside values become spaces; string cells are
    rich markup, as on a terminal, and are printed as their plain text)."""

    def cell(value: Any) -> str:
        if isinstance(value, Text):
            text = value.plain
        else:
            try:
                text = Text.from_markup(str(value)).plain
            except MarkupError:
                text = str(value)
        return text.replace("\t", " ").replace("\n", " ")

    lines = [f"# {cell(table.title)}"] if table.title else []
    lines.append("\t".join(cell(c.header) for c in table.columns))
    columns = [list(c.cells) for c in table.columns]
    lines.extend("\t".join(cell(col[i]) for col in columns) for i in range(table.row_count))
    return "\n".join(lines) + "\n"


def stdout_console(**kwargs: Any) -> DataConsole:
    """The console commands print their data to (``DataConsole``)."""
    if not sys.stdout.isatty():
        kwargs.setdefault("width", PIPE_WIDTH)
    return DataConsole(**kwargs)


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


F = TypeVar("F", bound=Callable[..., Any])


# Error class -> exit code, most specific first; the one table the boundary and README follow.
EXIT_CODES: tuple[tuple[type[FaultlensError], ExitCode], ...] = (
    (LockedError, ExitCode.LOCKED),
    (ConfigError, ExitCode.USAGE),
    (ModelError, ExitCode.NO_DATA),
    (InputError, ExitCode.PARTIAL),
    (StoreError, ExitCode.ERROR),
    (FaultlensError, ExitCode.ERROR),
)


def exit_code_of(error: FaultlensError) -> ExitCode:
    """The documented exit code of one of our errors (``EXIT_CODES``, first match)."""
    return next(code for cls, code in EXIT_CODES if isinstance(error, cls))


def boundary(fn: F) -> F:
    """Turn our exceptions into a one-line message on stderr and a documented exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            typer.echo("faultlens: interrupted", err=True)
            raise typer.Exit(130) from None
        except FaultlensError as e:
            typer.echo(f"faultlens: {e}", err=True)
            raise typer.Exit(exit_code_of(e)) from e

    return wrapper  # type: ignore[return-value]


DaskOption = Annotated[
    str | None,
    typer.Option(
        "--dask",
        help="Run on an existing Dask cluster (tcp://host:8786), or 'local' for a LocalCluster "
        "of --workers processes.",
        show_default=False,
    ),
]


@contextmanager
def dask_client(dask: str | None, workers: int) -> Iterator[Any]:
    """A Dask client (existing cluster, or a LocalCluster of ``workers`` processes), or None."""
    if dask is None:
        yield None
        return
    from distributed import Client, LocalCluster

    if dask == "local":
        with (
            LocalCluster(
                n_workers=max(workers, 1),
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client
    else:
        with Client(dask) as client:
            yield client


# ``ingest.schema.SITE_DATASET``, repeated here so command signatures need not import the schema
# (polars) for ``--help``; tests/app/test_quick_start.py checks the two agree.
SITE_DATASET = "site"


# ANSI / VT escape sequences (CSI, OSC with its BEL or ST end, two-byte ESC forms), then any other
# C0 / C1 control character: what a log line could use to rewrite a terminal (move the cursor,
# set the title, hide text, paste into the clipboard with OSC 52).
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(value: Any) -> str:
    """``value`` as inert terminal text: escape sequences and control characters removed,
    line breaks and tabs as spaces, rich markup (``[link=...]``) escaped."""
    text = "" if value is None else str(value)
    text = _CONTROLS.sub("", _ESCAPES.sub("", text)).replace("\n", " ").replace("\t", " ")
    return escape(text)


class Table(rich.table.Table):
    """``rich.table.Table`` whose string cells go through ``terminal_text``: what the CLI
    prints from logs (node names, file names, messages) cannot drive the terminal."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(
            *(terminal_text(r) if isinstance(r, str) else r for r in renderables), **kwargs
        )
