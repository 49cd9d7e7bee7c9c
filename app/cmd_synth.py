"""`faultlens synth` and `faultlens demo`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from faultlens.app.common import (
    DbOption,
    ExitCode,
    JsonOption,
    boundary,
    db_path,
    emit_json,
    is_tty,
    stdout_console,
    utc_now,
)
from faultlens.ingest.errors import ConfigError

err = Console(stderr=True)

NodesOption = Annotated[int, typer.Option("--nodes", help="Nodes (8 GPUs each).", min=1)]
DaysOption = Annotated[float, typer.Option("--days", help="Days of history.", min=0.01)]
SeedOption = Annotated[int, typer.Option("--seed", help="Random seed (same seed, same bytes).")]
StartOption = Annotated[
    datetime, typer.Option("--start", help="Start of the simulated window (UTC).")
]
RateOption = Annotated[
    float | None,
    typer.Option("--rate", help="Failures per 1000 node-days [default: Llama 3's 3.79]."),
]


def register(app: typer.Typer) -> None:
    app.command()(synth)
    app.command()(demo)


def _config(
    nodes: int,
    days: float,
    seed: int,
    start: datetime,
    rate: float | None,
    profile: Path | None = None,
):
    from faultlens.synth import SynthConfig

    cfg = SynthConfig(n_nodes=nodes, days=days, seed=seed, start=start.replace(tzinfo=None))
    if profile is not None:
        from faultlens.synth.profile import ProfileError, apply_profile, load_profile

        try:
            apply_profile(cfg, load_profile(profile))
        except ProfileError as e:
            raise ConfigError(str(e)) from e
    if rate is not None:
        if rate < 0:
            raise ConfigError("--rate must be >= 0")
        cfg.failures_per_1000_node_days = rate
    return cfg


@boundary
def synth(
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("data/synth"),
    nodes: NodesOption = 64,
    days: DaysOption = 14.0,
    seed: SeedOption = 0,
    start: StartOption = datetime(2025, 1, 1),
    rate: RateOption = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            help="Failure profile (reliability --fit-profile): Weibull timing, repairs, lemons.",
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Write a synthetic GPU cluster's raw logs in the real formats, plus its ground truth.

    Per-node kernel logs with Xid lines among ordinary noise, a sacct dump and a slurmctld log,
    per-job NCCL / PyTorch logs, telemetry exports, nvidia-smi inventories, a topology, and
    OUT/ground_truth.json (failures, interruptions, precursors, lemon nodes, stragglers, the config
    and the cause mix). The failure model is calibrated to the Llama 3 root-cause table; with
    --profile FILE the failure timing (Weibull inter-failure times), repair times and lemon
    concentration follow a profile fitted on real data (--rate still overrides its rate).

    Example: faultlens synth --nodes 64 --days 14 --seed 1 --out data/synth
    """
    from faultlens.synth import generate

    cfg = _config(nodes, days, seed, start, rate, profile)
    result = generate(cfg, out)
    if json:
        emit_json(result.to_json())
        return
    s = result.truth["summary"]
    typer.echo(f"wrote {len(result.files)} files to {out}")
    typer.echo(f"ground truth: {result.ground_truth}")
    typer.echo(
        f"{s['n_failures']} failures ({s['failures_per_1000_node_days']:.2f} per 1000 "
        f"node-days), {s['n_interruptions']} job interruptions, {s['n_jobs']} jobs"
    )


@boundary
def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for the generated logs.")] = Path(
        "data/synth"
    ),
    nodes: NodesOption = 128,
    days: DaysOption = 60.0,
    seed: SeedOption = 0,
    start: StartOption = datetime(2025, 1, 1),
    rate: RateOption = None,
    telemetry_min: Annotated[
        float, typer.Option("--telemetry-min", help="Minutes between telemetry samples.", min=1)
    ] = 60.0,
    db: DbOption = None,
    workers: Annotated[int, typer.Option(help="Parse files in N processes.", min=1)] = 1,
    json: JsonOption = False,
) -> None:
    """Generate a synthetic cluster, ingest it, and show what faultlens finds in it.

    Writes the synthetic logs to --out, rebuilds the database (--db) from them from scratch, then
    runs every demo stage and prints its summary: events by kind, top Xids, nodes with the most
    hardware errors, jobs by state, failures per 1000 node-days next to the ground truth. A database
    that holds anything other than demo output is never deleted (exit code 2: pass another --db).

    The default size (128 nodes x 60 days, hourly telemetry) runs in about a minute on two cores.

    Example: faultlens demo --nodes 64 --days 14 --db /tmp/demo.duckdb
    """
    from faultlens.app.demo import run_demo

    cfg = _config(nodes, days, seed, start, rate)
    cfg.telemetry_interval_min = telemetry_min
    # --json: the stages' tables go to stderr, stdout is the one JSON document
    console = Console(stderr=True) if json else stdout_console(highlight=False)

    def progress(msg: str) -> None:
        if is_tty():
            err.print(f"[dim]{msg}[/dim]")

    result = run_demo(
        cfg, out, db_path(db), now=utc_now(), console=console, workers=workers, on_progress=progress
    )
    totals = result.ingest.totals
    for f in result.ingest.files:
        if f.status == "failed":
            err.print(f"[red]failed[/red] {f.path}: {f.error}", highlight=False)
    if json:
        emit_json(
            {
                "out": str(result.out),
                "db": str(result.db),
                "ingest": totals,
                "summary": result.summary,
            }
        )
    else:
        console.print(
            f"ingested {totals['files']} files: {totals['lines']:,} lines, {totals['parsed']:,} "
            f"parsed, {totals['noise']:,} noise, {totals['quarantined']:,} quarantined, "
            f"{totals['failed']} failed",
            highlight=False,
        )
    if totals["failed"]:
        raise typer.Exit(ExitCode.PARTIAL)
