"""`faultlens replay`: score recovery strategies against the recorded interruptions."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from faultlens.app.common import (
    SITE_DATASET,
    DbOption,
    ExitCode,
    JsonOption,
    boundary,
    db_path,
    emit_json,
    open_store,
    stdout_console,
)
from faultlens.ingest.errors import ConfigError

err = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_cmd)


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """``PARAM=START:STOP:N`` -> (param, N evenly spaced values)."""
    import numpy as np

    try:
        name, rng = text.split("=", 1)
        start, stop, n = rng.split(":")
        values = np.linspace(float(start), float(stop), int(n)).tolist()
    except ValueError as e:
        raise ConfigError(f"--sweep wants PARAM=START:STOP:N, got {text!r}") from e
    if int(n) < 1:
        raise ConfigError("--sweep needs N >= 1")
    return name.strip(), values


@boundary
def replay_cmd(
    db: DbOption = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            help="Strategies, comma-separated; combine with '+' [default: all of them].",
            show_default=False,
        ),
    ] = None,
    sweep: Annotated[
        str | None, typer.Option(help="PARAM=START:STOP:N, e.g. interval_min=5:240:48.")
    ] = None,
    job_gpus: Annotated[
        int | None, typer.Option(help="GPUs of the job [default: the fleet].")
    ] = None,
    checkpoint_write_s: Annotated[float | None, typer.Option(help="Checkpoint write time.")] = None,
    checkpoint_async: Annotated[
        bool, typer.Option(help="Checkpoints persist in the background.")
    ] = False,
    interval_min: Annotated[float | None, typer.Option(help="Checkpoint interval.")] = None,
    restart_s: Annotated[
        float | None, typer.Option(help="Restart overhead per interruption.")
    ] = None,
    repair_h: Annotated[float | None, typer.Option(help="Repair time of a failed node.")] = None,
    spares: Annotated[int | None, typer.Option(help="Hot spares [default: 4 per 1,024].")] = None,
    replacement: Annotated[
        str,
        typer.Option(
            help="instant: a healthy node at once; pool: failed nodes go to repair (their own "
            "repair time, else --repair-h) and the job waits when the pool is empty."
        ),
    ] = "instant",
    pool_nodes: Annotated[
        int | None,
        typer.Option(help="Idle nodes in the pool [default: the fleet beyond the job].", min=0),
    ] = None,
    since: Annotated[datetime | None, typer.Option(help="Start of the window (UTC).")] = None,
    until: Annotated[datetime | None, typer.Option(help="End of the window (UTC).")] = None,
    trace: Annotated[
        Path | None, typer.Option(help="Replay a synthetic ground-truth JSON instead of the db.")
    ] = None,
    dataset: Annotated[
        str, typer.Option(help="Dataset to replay (ingest --dataset NAME).")
    ] = SITE_DATASET,
    fleet_gpus: Annotated[
        int | None,
        typer.Option("--fleet-gpus", help="GPUs of the fleet [default: the fleet model's].", min=1),
    ] = None,
    gpus_per_node: Annotated[
        int | None,
        typer.Option("--gpus-per-node", help="GPUs per node [default: the fleet model's].", min=1),
    ] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples for the ETTR CI.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the resampling.")] = 0,
    json: JsonOption = False,
) -> None:
    """Replay the recorded interruptions under recovery strategies and rank them.

    For each strategy: ETTR (with a bootstrap 95% interval), goodput and badput GPU-hours
    (checkpoint save, restore, lost progress, restart, waiting for a node, reduced throughput),
    restarts and the dollars lost. For checkpoint and young-daly the downtime of an interruption
    is the restart overhead alone (the scheduler hands the job a healthy node), as in Meta's ETTR
    model (--replacement instant, the default); with --replacement pool every strategy draws
    replacement nodes from a pool (idle fleet nodes, plus the hot spares) and failed nodes come
    back after their own repair time (from incident records) or --repair-h. The fleet comes from
    the fleet model (--fleet-gpus / --gpus-per-node override it); stderr and the JSON's trace
    say which fleet was used. Exit code 5 when there are no interruptions to replay.

    Example: faultlens replay --strategy checkpoint,hot-spares+in-memory --json
    """
    from faultlens.app.replay_view import replay_table
    from faultlens.replay import ALL_STRATEGIES, JobSpec, from_db, from_ground_truth, rank
    from faultlens.replay.score import parse_param, sweep_best
    from faultlens.replay.score import replay as run_replay
    from faultlens.replay.strategies import resolve
    from faultlens.replay.traces import fleet_note, override_fleet

    changes = {
        "gpus": job_gpus,
        "checkpoint_write_s": checkpoint_write_s,
        "interval_min": interval_min,
        "restart_s": restart_s,
        "repair_h": repair_h,
        "spares": spares,
        "replacement": replacement,
        "pool_nodes": pool_nodes,
    }
    job = JobSpec(checkpoint_async=checkpoint_async).with_(
        **{k: v for k, v in changes.items() if v is not None}
    )
    # usage errors exit 2 before anything is opened
    strategy = strategy or ",".join(ALL_STRATEGIES)
    names = [s.strip() for s in strategy.split(",") if s.strip()]
    if not names:
        raise ConfigError("--strategy names no strategy")
    for name in names:
        resolve(name)
    sweep_spec = parse_sweep(sweep) if sweep else None
    if sweep_spec is not None:
        parse_param(sweep_spec[0])
    if trace is not None:
        tr = from_ground_truth(trace)
        if fleet_gpus or gpus_per_node:
            tr = override_fleet(tr, fleet_gpus, gpus_per_node)
    else:
        with open_store(db_path(db), read_only=True) as store:
            tr = from_db(
                store,
                since.replace(tzinfo=None) if since else None,
                until.replace(tzinfo=None) if until else None,
                dataset=dataset,
                fleet_gpus=fleet_gpus,
                gpus_per_node=gpus_per_node,
                alert_threshold=job.alert_threshold,
            )
    note = fleet_note(tr)
    typer.echo(f"faultlens: {note}", err=True)
    if tr.n_events == 0:
        typer.echo(
            "faultlens: no interruptions to replay in this window: run `faultlens ingest` "
            "or `faultlens demo` first, or widen --since/--until",
            err=True,
        )
        raise typer.Exit(ExitCode.NO_DATA)
    scores = run_replay(tr, names, job, sweep=sweep_spec, resamples=resamples, seed=seed)
    if json:
        emit_json(
            {
                "strategies": [s.to_json() for s in scores],
                "best": sweep_best(scores),
                "trace": {
                    "source": tr.source,
                    "interruptions": tr.n_events,
                    "window_h": round(tr.span_h, 3),
                    "fleet_nodes": tr.fleet_nodes,
                    "fleet_gpus": tr.fleet_nodes * tr.gpus_per_node,
                    "gpus_per_node": tr.gpus_per_node,
                    "fleet_source": tr.fleet_source,
                    "fleet_note": note,
                },
            }
        )
        return
    stdout_console().print(replay_table(scores if sweep else rank(scores), tr))
