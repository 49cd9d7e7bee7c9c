"""`faultlens reliability`: failure rates, MTBF / MTTR, Weibull, repairs, lemons, survival."""

from __future__ import annotations

import json as json_mod
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from faultlens.app.common import (
    SITE_DATASET,
    DbOption,
    ExitCode,
    JsonOption,
    boundary,
    db_path,
    emit_json,
)
from faultlens.ingest.errors import ConfigError

if TYPE_CHECKING:  # imported by the command itself: `faultlens --help` loads no DuckDB
    from faultlens.models.reliability import Reliability

err = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command("reliability")(reliability_cmd)


DatasetOption = Annotated[
    str, typer.Option("--dataset", help="Dataset to analyse (ingest --dataset NAME).")
]


@boundary
def reliability_cmd(
    db: DbOption = None,
    dataset: DatasetOption = SITE_DATASET,
    since: Annotated[datetime | None, typer.Option(help="Start of the window (UTC).")] = None,
    until: Annotated[datetime | None, typer.Option(help="End of the window (UTC).")] = None,
    top: Annotated[int, typer.Option(help="Categories in the table (not --json).", min=1)] = 12,
    fit_profile: Annotated[
        Path | None,
        typer.Option(
            "--fit-profile", help="Also write a synth failure profile (JSON) fitted on this data."
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Reliability of a dataset's fleet: failures per 1000 node-days, MTBF and MTTR by category
    and component, a Weibull fit of the time between failures (per node and fleet-wide, with a
    95% interval for the shape, against the exponential), the repair-time distribution, the
    share of failures on the worst 1.5% of nodes, and Kaplan-Meier survival where unit lifetimes
    are known. A failure is a hardware failure episode in the logs or an incident record that is
    neither a warning nor planned maintenance; node-days come from the fleet model, which says
    where it came from (and when it is only the failing nodes). The window defaults to the
    dataset's own span. --fit-profile FILE writes the rate, Weibull shape, repair distribution
    and lemon share as a profile that `faultlens synth --profile FILE` reads. Exit code 5 when
    the dataset has no failures.

    Example: faultlens reliability --dataset lanl --json
    """
    from faultlens.ingest.store import Store
    from faultlens.models.fleet import data_window
    from faultlens.models.reliability import fit_profile as make_profile
    from faultlens.models.reliability import reliability

    with Store(db_path(db), read_only=True) as store:
        span = data_window(store, dataset)
        if span is None:
            known = store.query("SELECT DISTINCT dataset FROM dataset_files ORDER BY 1")
            names = ", ".join([SITE_DATASET, *known["dataset"].to_list()])
            if dataset != SITE_DATASET and dataset not in names.split(", "):
                raise ConfigError(f"no dataset {dataset!r}; known: {names}")
            err.print(f"no records in dataset {dataset!r}: run `faultlens ingest` first")
            raise typer.Exit(ExitCode.NO_DATA)
        lo = since.replace(tzinfo=None) if since else span[0]
        hi = until.replace(tzinfo=None) if until else span[1]
        if hi <= lo:
            raise ConfigError("--until must be after --since")
        rel = reliability(store, dataset, (lo, hi))
    if fit_profile is not None and rel.failures.height:
        fit_profile.parent.mkdir(parents=True, exist_ok=True)
        fit_profile.write_text(json_mod.dumps(make_profile(rel), indent=2) + "\n")
        err.print(f"wrote failure profile {fit_profile}", highlight=False)
    if rel.fleet.thin:
        err.print(f"note: {rel.fleet.note}", highlight=False)
    if json:
        emit_json(rel.to_json())
    else:
        _print(rel, top)
    if rel.failures.height == 0:
        raise typer.Exit(ExitCode.NO_DATA)


def _fmt(x: float | None, spec: str = ",.1f") -> str:
    return "-" if x is None else format(x, spec)


def _print(rel: Reliability, top: int) -> None:
    doc = rel.to_json()
    out = Console()
    lo, hi = rel.window
    out.print(
        f"[bold]{rel.dataset}[/bold]: {lo:%Y-%m-%d} to {hi:%Y-%m-%d}, {rel.fleet.note}",
        highlight=False,
    )
    out.print(
        f"{doc['incidents']:,} failures over {doc['node_days']:,.0f} node-days: "
        f"{_fmt(doc['failures_per_1000_node_days'], '.3f')} per 1000 node-days, "
        f"MTBF per node {_fmt(doc['mtbf_h'], ',.0f')} h, "
        f"worst 1.5% of nodes hold {_fmt(doc['lemon_share'], '.1%')} of failures"
    )
    rep = doc["repair_h"]
    out.print(
        f"repair: median {_fmt(rep['median'], '.2f')} h, mean {_fmt(rep['mean'], '.2f')} h, "
        f"p90 {_fmt(rep['p90'], '.2f')} h ({rep['n']:,} with a repair time)"
    )
    for name in ("weibull", "weibull_fleet"):
        w = doc[name]
        if w["shape"] is not None:
            lo_ci, hi_ci = w["shape_ci"]
            where = "per node" if name == "weibull" else "fleet-wide"
            hazard = "decreasing" if hi_ci < 1 else ("increasing" if lo_ci > 1 else "constant")
            out.print(
                f"time between failures {where}: Weibull shape {w['shape']:.3f} "
                f"[{lo_ci:.3f}, {hi_ci:.3f}], scale {w['scale']:,.1f} h ({hazard} hazard; "
                f"AIC better than exponential by {w['exponential_aic_delta']:,.0f})"
            )
    table = Table(title="Failures by category")
    for col in ("level", "class", "category", "count", "share", "MTBF h", "MTTR h"):
        table.add_column(
            col, justify="right" if col[0].isupper() or col in ("count", "share") else "left"
        )
    for r in doc["by_category"][:top]:
        table.add_row(
            str(r["level"]),
            str(r["class"]),
            str(r["category"]),
            f"{r['count']:,}",
            f"{r['share']:.1%}",
            _fmt(r["mtbf_h"], ",.0f"),
            _fmt(r["mttr_h"], ".2f"),
        )
    out.print(table)
    for b in rel.survival.get("by_batch", []):
        km = b["km_survival"]
        out.print(
            f"units {b['batch']}: {b['units']:,} units, {b['unit_years']:,.0f} unit-years, "
            f"{b['failures']:,} failed ({_fmt(b['failures_per_unit_year'], '.4f')} per "
            f"unit-year); survival 1y {_fmt(km['1y'], '.3f')}, 3y {_fmt(km['3y'], '.3f')}, "
            f"5y {_fmt(km['5y'], '.3f')}"
        )
