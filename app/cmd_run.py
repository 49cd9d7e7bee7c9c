"""`faultlens run`: the scheduled prediction job (cron, systemd timer, Kubernetes CronJob)."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from faultlens.app.common import (
    DbOption,
    ExitCode,
    boundary,
    emit_json,
    live_write_s,
    utc_now,
)


def register(app: typer.Typer) -> None:
    app.command()(run)


@boundary
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="faultlens.toml of the job.")],
    db: DbOption = None,
    as_of: Annotated[
        datetime | None,
        typer.Option(
            "--as-of",
            help="Predict as of this UTC time [default: the newest data].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the scheduled job once: ingest new log lines, predict, export, alert.

    Ingests the configured paths (only what is new), scores every node and GPU, writes the
    Prometheus textfile atomically, and sends alerts to Alertmanager's v2 API: each alert once,
    refreshed before it lapses, resolved when the risk drops. Prints JSON lines (one per alert,
    then a run summary) on stdout. Holds a lock so two runs never overlap.
    A log source that went quiet is a "logs stopped" alert of its own.
    Exit codes: 0 nothing needs a human; 4 new drain alerts or logs stopped; 3 some inputs
    failed; 1 Alertmanager unreachable or another error; 5 no trained model; 6 busy (another
    run holds the lock, or an ingest kept the database longer than db_wait_s): try again later.

    Example: faultlens run --config /etc/faultlens/faultlens.toml
    """
    from faultlens.app.run import (  # imported here: it loads LightGBM (seconds)
        load_config,
        run_once,
    )

    cfg = replace(load_config(config, db=db, environ=os.environ), live_write_s=live_write_s())
    now = utc_now()
    outcome = run_once(
        cfg, now=now, as_of=as_of.replace(tzinfo=None) if as_of else None, emit=emit_json
    )
    if outcome.delivery_failed:
        raise typer.Exit(ExitCode.ERROR)
    if outcome.ingest_failed:
        raise typer.Exit(ExitCode.PARTIAL)
    if outcome.needs_human:
        raise typer.Exit(ExitCode.ATTENTION)
