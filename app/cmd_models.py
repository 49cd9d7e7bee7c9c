"""`faultlens train` and `faultlens predict`: the failure predictor from the command line."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from faultlens.app.common import (
    DaskOption,
    DbOption,
    JsonOption,
    Table,
    boundary,
    dask_client,
    db_path,
    emit_json,
    open_store,
    stdout_console,
    utc_now,
)
from faultlens.ingest.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from faultlens.ingest.store import Store

err = Console(stderr=True)

ModelsDirOption = Annotated[
    Path | None,
    typer.Option(
        "--models-dir",
        help="Model registry folder [default: models/ beside the db].",
        show_default=False,
    ),
]
AsOfOption = Annotated[
    datetime | None,
    typer.Option(
        "--as-of",
        help="Use only data before this UTC time [default: the newest data in the database].",
        show_default=False,
    ),
]
SCHEDULERS = ("slurm", "kubernetes")


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command()(predict)


def _as_of(value: datetime | None, store: Store) -> datetime:
    """The given time, else just after the newest data (never the wall clock: logs that ended
    months ago must not look like a quiet fleet)."""
    from faultlens.models.freshness import default_as_of

    if value is not None:
        return value.replace(tzinfo=None)
    newest = default_as_of(store)
    if newest is None:
        raise ModelError("the database holds no events or telemetry: run `faultlens ingest` first")
    return newest


def train_doc(card: dict[str, Any]) -> dict[str, Any]:
    """The ``train --json`` document (DESIGN.md contract) from a model card."""
    keys = (*METRIC_KEYS, *COUNT_KEYS)
    return {
        "model_version": card["model_version"],
        "horizon_h": card["horizon_h"],
        "test_window": card["windows"]["test"],
        "metrics": {name: {k: m[k] for k in keys if k in m} for name, m in card["metrics"].items()},
        "thresholds": card["thresholds"],
        "calibration": card.get("calibration"),
        "k": card["k"],
    }


@boundary
def train(
    db: DbOption = None,
    horizon_h: Annotated[
        float, typer.Option("--horizon-h", help="Predict failures this many hours ahead.")
    ] = 24.0,
    as_of: AsOfOption = None,
    test_fraction: Annotated[
        float, typer.Option(help="Last share of time held out for the test.")
    ] = 0.25,
    k: Annotated[
        int | None,
        typer.Option(
            "--k", help="Nodes an SRE can drain per day, for precision@k [default: 1% of nodes]."
        ),
    ] = None,
    target_precision: Annotated[
        float,
        typer.Option(
            help="Alert precision the operating threshold aims for, on the rows it is fitted on."
        ),
    ] = 0.80,  # TrainConfig.target_precision (a test keeps the two equal)
    clear_fraction: Annotated[
        float,
        typer.Option(
            help="An open alert stays open until the score drops below this fraction of the "
            "operating threshold (0.5: the watch level; 1: it closes below the threshold).",
            min=0.0,
            max=1.0,
        ),
    ] = 0.3,  # TrainConfig.clear_fraction (a test keeps the two equal)
    models_dir: ModelsDirOption = None,
    seed: Annotated[int, typer.Option(help="Random seed (negative subsampling, trees).")] = 0,
    since: Annotated[
        datetime | None,
        typer.Option(
            "--since",
            help="Train on data from this UTC time on [default: all].",
            show_default=False,
        ),
    ] = None,
    max_memory_gb: Annotated[
        float,
        typer.Option(help="Stop before building the features if they would need more (GB)."),
    ] = 8.0,
    refit: Annotated[
        bool,
        typer.Option(
            help="With --cross-fit-folds 0: once the calibrator and thresholds are set, fit "
            "the trees again on the training and calibration windows together (the deployed "
            "model).",
        ),
    ] = True,  # TrainConfig.refit (a test keeps the two equal)
    cross_fit_folds: Annotated[
        int,
        typer.Option(
            "--cross-fit-folds",
            help="Fit the calibrator and the thresholds on out-of-fold scores of this many "
            "node groups over the training and calibration windows (0: on the calibration "
            "window alone, scored by trees fitted on the training window).",
        ),
    ] = 4,  # TrainConfig.cross_fit_folds (a test keeps the two equal)
    dask: DaskOption = None,
    workers: Annotated[int, typer.Option(help="Worker processes of a --dask local cluster.")] = 2,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Learn from this dataset's failure records instead of the logs (a public "
            "trace or a ticket export: which units fail within --horizon-h).",
            show_default=False,
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Train the failure predictor and compare it with the SRE rule and the lemon count.

    Builds node x hour features from the database, splits them in time (train / calibration /
    test, each a horizon apart), fits a calibrated LightGBM model on the training and
    calibration windows (the calibrator and the operating threshold from out-of-fold scores of
    --cross-fit-folds node groups; 0: from the calibration window alone), and reports PR-AUC,
    precision and recall at the operating threshold, precision@k and median lead time for the
    model and both baselines. The model and its card are saved in the model registry.
    Memory is planned first: a history whose feature tables would exceed --max-memory-gb
    stops at once (exit 2) naming the --since that fits.
    With --dask the trees are trained on a Dask cluster (lightgbm.dask); the features are
    built here, from the database. Exit code 5 when there is not enough history to train.
    With --dataset the model learns from incident records alone (models.survival: per GPU
    where the records name GPUs, else per node; a time split with 70% of the rows before it)
    and is compared with a Cox survival model, the lemon count and an age-only model (PR-AUC,
    concordance); nothing is saved.

    Example: faultlens train --db data/faultlens.duckdb --horizon-h 24 --json
    """
    if not 0 < test_fraction < 0.8 or horizon_h <= 0:
        raise ConfigError("--test-fraction must be in (0, 0.8) and --horizon-h positive")
    if dataset is not None:
        _train_records(db, dataset, horizon_h, seed, json)
        return
    # imported here: LightGBM / scikit-learn take seconds to import, which every other command
    # (``faultlens ingest`` from cron) would pay
    from faultlens.models.predictor import TrainConfig, train_failure_model
    from faultlens.models.registry import default_models_dir, save_model

    cfg = TrainConfig(
        horizon_h=horizon_h,
        test_fraction=test_fraction,
        k=k,
        target_precision=target_precision,
        clear_fraction=clear_fraction,
        seed=seed,
        since=since.replace(tzinfo=None) if since else None,
        max_memory_gb=max_memory_gb,
        refit=refit,
        cross_fit_folds=cross_fit_folds,
    )
    path = db_path(db)
    now = utc_now()
    with dask_client(dask, workers) as client, open_store(path, read_only=True) as store:
        result = train_failure_model(
            store, as_of=_as_of(as_of, store), cfg=cfg, now=now, client=client
        )
    folder = save_model(models_dir or default_models_dir(path), result.estimator, result.card)
    doc = train_doc(result.card)
    if json:
        emit_json(doc)
        return
    print_metrics(stdout_console(), doc)
    err.print(f"saved {doc['model_version']} in {folder}", highlight=False)


def _train_records(db: Path | None, dataset: str, horizon_h: float, seed: int, json: bool) -> None:
    from faultlens.models.survival import RecordsConfig, train_records_model

    with open_store(db_path(db), read_only=True) as store:
        doc = train_records_model(store, dataset, RecordsConfig(horizon_h=horizon_h, seed=seed))
    if json:
        emit_json(doc)
        return
    t = Table(
        "scorer",
        "PR-AUC",
        "concordance",
        title=f"{dataset}: a {doc['unit']} fails within {horizon_h:g} h; test from "
        f"{doc['split_at'][:10]} ({doc['positives']['test']} positive of {doc['rows']['test']} "
        f"rows, prevalence {doc['prevalence_test']:.4f})",
    )
    for name, m in doc["metrics"].items():
        t.add_row(name, _fmt(m["pr_auc"]), _fmt(m["concordance"]))
    stdout_console().print(t)


def print_metrics(out: Console, doc: dict[str, Any]) -> None:
    out.print(
        metrics_table(
            doc["metrics"],
            f"{doc['model_version']}: failure within {doc['horizon_h']:g} h, test "
            f"{doc['test_window'][0][:16]} .. {doc['test_window'][1][:16]}",
        )
    )
    from faultlens.reports.q_detail import threshold_note

    line = threshold_note(doc)
    if line:
        out.print(line, highlight=False)


METRIC_KEYS = ("pr_auc", "precision", "recall", "precision_at_k", "median_lead_time_h")
COUNT_KEYS = ("alerts", "true_alerts", "failure_episodes", "caught")
# Fewer alerts (for precision) or failure episodes (for recall) than this: the table shows the
# counts, not a ratio - one true alert of two is not "precision 0.500".
MIN_SUPPORT = 5


def metrics_table(metrics: dict[str, dict[str, Any]], title: str) -> Table:
    """One row per scorer (the model and its baselines), the train contract's metrics; a ratio
    without support (``MIN_SUPPORT``) is shown as its counts, a metric with none as why."""
    t = Table(
        "scorer", "PR-AUC", "precision", "recall", "precision@k", "median lead (h)", title=title
    )
    for name, m in metrics.items():
        t.add_row(
            name,
            _fmt(m["pr_auc"]) if m["pr_auc"] is not None else "no failures",
            _ratio(m, "precision", "true_alerts", "alerts", "alerts", "true"),
            _ratio(m, "recall", "caught", "failure_episodes", "failures", "caught"),
            _fmt(m["precision_at_k"]),
            _fmt(m["median_lead_time_h"]) if m["median_lead_time_h"] is not None else "none caught",
        )
    return t


def _ratio(m: dict[str, Any], key: str, num: str, den: str, what: str, counted: str) -> str:
    """The ratio ``m[key]`` with its counts; only the counts below ``MIN_SUPPORT`` ("2 of 3
    alerts true")."""
    if den not in m:  # an older model card without the counts
        return _fmt(m[key])
    n, d = int(m[num]), int(m[den])
    if d == 0:
        return f"no {what}"
    if d < MIN_SUPPORT:
        return f"{n} of {d} {what} {counted} (too few)"
    return f"{m[key]:.3f} ({n}/{d})"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


@boundary
def predict(
    db: DbOption = None,
    as_of: AsOfOption = None,
    models_dir: ModelsDirOption = None,
    model_version: Annotated[
        str | None, typer.Option("--model-version", help="Registry version [default: latest].")
    ] = None,
    scheduler: Annotated[str, typer.Option(help="Command style: slurm or kubernetes.")] = "slurm",
    top: Annotated[int, typer.Option(help="Alerts shown in the table.")] = 20,
    json: JsonOption = False,
) -> None:
    """Score every node and GPU for a hardware failure within the model's horizon.

    As of --as-of, by default just after the newest data in the database (not the clock).
    Writes every score to the `predictions` table under one run id, and lists the alerts
    (watch / drain after jobs / drain now) with the features that drove each score and the
    `scontrol` or `kubectl` command an SRE would run. Commands are printed, never executed.

    Example: faultlens predict --as-of 2025-03-01T12:00 --json
    """
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"--scheduler must be one of {', '.join(SCHEDULERS)}")
    from faultlens.models.predictor import predict_failures, save_predictions
    from faultlens.models.registry import default_models_dir, load_model

    path = db_path(db)
    model = load_model(models_dir or default_models_dir(path), model_version)
    with open_store(path) as store:
        pred = predict_failures(
            store, model.estimator, model.card, as_of=_as_of(as_of, store), scheduler=scheduler
        )
        save_predictions(store, pred, model.card["horizon_h"])
    if json:
        emit_json(pred.to_json())
        return
    print_alerts(stdout_console(), pred.to_json(), top)


def print_alerts(out: Console, doc: dict[str, Any], top: int) -> None:
    t = Table(
        "node",
        "gpu",
        "score",
        "action",
        "why",
        "Slurm now",
        "command",
        title=f"{doc['run_id']} as of {doc['as_of']}: {len(doc['alerts'])} alerts",
    )
    for a in doc["alerts"][:top]:
        state = a.get("slurm_state")
        t.add_row(
            a["node"],
            a["gpu"] or "-",
            f"{a['score']:.3f}",
            a["action"],
            "; ".join(a.get("reasons") or []) or "-",
            f"{state['state']} since {state['since'][:16]}" if state else "no state event",
            a.get("command") or "",
        )
    out.print(t)
    for a in doc["alerts"][:top]:
        if a.get("evidence") or a.get("runbook"):
            out.print(f"[bold]{a['node']}[/bold]", highlight=False)
        if a.get("runbook"):
            rb = a["runbook"]
            out.print(f"  runbook: Xid {rb['xid']} x{rb['n']} -> {rb['action']}: {rb['notes']}")
        for ev in a.get("evidence") or []:
            out.print(f"  {ev['ts'][:19]}  {ev['what']:<16} {ev['at']}", highlight=False)
