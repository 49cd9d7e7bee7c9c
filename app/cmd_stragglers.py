"""`faultlens stragglers`: slow GPUs and nodes per job, their cause, and the GPU-hours they cost."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from faultlens.app.common import (
    DbOption,
    ExitCode,
    JsonOption,
    boundary,
    db_path,
    emit_json,
    open_store,
    stdout_console,
)
from faultlens.models.stragglers import StragglerReport, detect

err = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command()(stragglers)


@boundary
def stragglers(
    db: DbOption = None,
    job: Annotated[str | None, typer.Option("--job", help="Only this job id.")] = None,
    since: Annotated[
        datetime | None, typer.Option("--since", help="Only jobs that ended after this (UTC).")
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Rows in the table (not --json).", min=1)] = 20,
    json: JsonOption = False,
) -> None:
    """Detect stragglers: GPUs or nodes slower than their peers in the same job, for k windows
    in a row, with the cause the telemetry shows (thermal, power, clocks, link, host), the job's
    slowdown while they straggled, and the GPU-hours they wasted.

    Needs jobs (Slurm), per-GPU telemetry (DCGM / Prometheus) and, for the cost, training-progress
    logs. Exit code 5 when the database holds no job telemetry to compare.

    Example: faultlens stragglers --since 2025-01-01 --json
    """
    with open_store(db_path(db), read_only=True) as store:
        report = detect(store, job_id=job, since=since.replace(tzinfo=None) if since else None)
    if report.windows.height == 0:
        err.print("no per-GPU telemetry inside any job window: ingest jobs and telemetry first")
        if json:
            emit_json({"stragglers": []})
        raise typer.Exit(ExitCode.NO_DATA)
    if json:
        emit_json(report.to_json())
        return
    _print(report, top)


def _print(report: StragglerReport, top: int) -> None:
    out = stdout_console()
    if report.stragglers.height == 0:
        out.print(f"no stragglers in {report.windows['job_id'].n_unique()} jobs")
        return
    table = Table(title="Stragglers (worst first)")
    for col in ("job", "node", "gpu", "cause", "slowdown", "wasted GPU-h", "since"):
        table.add_column(
            col, justify="right" if col in ("gpu", "slowdown", "wasted GPU-h") else "left"
        )
    for r in report.stragglers.head(top).iter_rows(named=True):
        table.add_row(
            r["job_id"],
            r["node"],
            "node" if r["gpu"] is None else str(r["gpu"]),
            r["cause"],
            f"{r['slowdown']:.2f}x",
            f"{r['wasted_gpu_h']:.1f}",
            f"{r['onset']:%Y-%m-%d %H:%M}",
        )
    out.print(table)
    total = report.jobs["wasted_gpu_h"].sum()
    out.print(
        f"{report.stragglers.height} stragglers in {report.jobs.height} jobs "
        f"wasted {total:.1f} GPU-hours"
    )
