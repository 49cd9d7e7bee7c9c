"""`faultlens stragglers`: slow GPUs and nodes per job, their cause, and the GPU-hours they cost."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from faultlens.app.common import (
    DbOption,
    ExitCode,
    JsonOption,
    Table,
    boundary,
    db_path,
    emit_json,
    open_store,
    stdout_console,
)

if TYPE_CHECKING:
    from faultlens.models.stragglers import StragglerReport

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
    predict: Annotated[
        bool,
        typer.Option(
            "--predict",
            help="Also predict which GPUs straggle in the next window (trained on these jobs' "
            "windows, evaluated on a time split beside the previous-window baseline).",
        ),
    ] = False,
    json: JsonOption = False,
) -> None:
    """Detect stragglers: GPUs or nodes slower than their peers in the same job, for k windows
    in a row, with the cause the telemetry shows (thermal, power, clocks, link, host), the job's
    slowdown while they straggled, and the GPU-hours they wasted.

    Needs jobs (Slurm), per-GPU telemetry (DCGM / Prometheus) and, for the cost, training-progress
    logs. With --predict, the straggler predictor is trained on the windows of these jobs and
    lists the GPUs likely to straggle in the next window, with its test-split PR-AUC beside the
    "straggled in the previous window" baseline. Exit code 5 when the database holds no job
    telemetry to compare.

    Example: faultlens stragglers --since 2025-01-01 --predict --json
    """
    from faultlens.models.stragglers import detect

    with open_store(db_path(db), read_only=True) as store:
        report = detect(store, job_id=job, since=since.replace(tzinfo=None) if since else None)
    if report.windows.height == 0:
        err.print("no per-GPU telemetry inside any job window: ingest jobs and telemetry first")
        if json:
            emit_json({"stragglers": []})
        raise typer.Exit(ExitCode.NO_DATA)
    forecast = _forecast(report) if predict else None
    if json:
        doc = report.to_json()
        if forecast is not None:
            doc["prediction"] = _forecast_doc(forecast)
        emit_json(doc)
        return
    _print(report, top)
    if forecast is not None:
        _print_forecast(forecast, top)


def _forecast(report: StragglerReport) -> dict | None:
    from faultlens.models.straggler_predict import forecast  # scikit-learn: imported on demand

    try:
        return forecast(report.windows)
    except ValueError as e:  # too few windows
        err.print(f"straggler prediction skipped: {e}")
        return None


def _forecast_doc(fc: dict | None) -> dict | None:
    if fc is None:
        return None
    import polars as pl

    nxt = fc["next"].with_columns(pl.col("win_start").dt.to_string("%Y-%m-%dT%H:%M:%S"))
    return {
        "evaluation": fc["evaluation"],
        "threshold": fc["threshold"],
        "scored": fc["scored"],
        "next": nxt.to_dicts(),
    }


def _print_forecast(fc: dict, top: int) -> None:
    out = Console()
    ev = fc["evaluation"]
    t = Table("scorer", "PR-AUC", "precision", "recall", title="straggler predictor, test split")
    for name, m in ev["metrics"].items():
        t.add_row(name, *(f"{m[k]:.3f}" for k in ("pr_auc", "precision", "recall")))
    out.print(t)
    nxt = Table(
        "job", "node", "gpu", "score", "latest window", title="likely to straggle next window"
    )
    for r in fc["next"].head(top).iter_rows(named=True):
        nxt.add_row(
            r["job_id"], r["node"], str(r["gpu"]), f"{r['score']:.2f}", f"{r['win_start']:%H:%M}"
        )
    out.print(nxt)
    out.print(f"{fc['next'].height} of {fc['scored']} GPUs at or above {fc['threshold']:g}")


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
