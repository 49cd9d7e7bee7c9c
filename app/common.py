"""Shared pieces of the CLI: exit codes, the --db option, output helpers, the error boundary."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import IntEnum
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from faultlens.ingest.errors import (
    ConfigError,
    FaultlensError,
    InputError,
    LockedError,
    ModelError,
    StoreError,
)
from faultlens.ingest.store import default_db_path

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


def db_path(db: Path | None) -> Path:
    return db if db is not None else default_db_path()


def utc_now() -> datetime:
    """The CLI boundary is the only place that reads the clock."""
    return datetime.now(UTC).replace(tzinfo=None)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, default=str, indent=None) + "\n")
    sys.stdout.flush()


def is_tty() -> bool:
    return sys.stderr.isatty()


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


@contextmanager
def progress_bar(
    total: float, description: str, enabled: bool
) -> Iterator[Callable[[float], None]]:
    """A rich progress bar on stderr when it is a terminal; silent otherwise (cron)."""
    if not enabled:
        yield lambda _n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


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
