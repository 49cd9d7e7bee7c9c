"""Reliability statistics of a dataset: rates, MTBF / MTTR, Weibull, repairs, lemons, survival.

**A failure** (the one definition, used by the demo, the dashboard, the report and
``faultlens reliability``) is either

- a hardware failure episode of ``models.target`` (Xid 79, DBE, fallen off the bus, node down
  with a hardware reason, ...) found in the logs, or
- an incident record (``incidents``) that is not a warning and not planned maintenance - its
  own ``incident`` event is then not counted a second time.

**The rate** is failures per 1000 node-days of the fleet model (``models.fleet``), over the
window; MTBF is node-hours per failure (``mtbf_h``), MTTR the mean repair time of the failures
that have one. The Weibull fit is over the times between consecutive failures of each node
(pooled; ``weibull_fleet``: between consecutive failures anywhere in the fleet), by maximum
likelihood with the location at 0 (``scipy.stats.weibull_min``); its 95% interval for the shape
uses the MLE's asymptotic variance ``6 k^2 / (pi^2 n)``. A shape below 1 is a decreasing hazard
(a failure makes the next one likelier soon); ``exponential_aic_delta`` > 0 means the Weibull
fits better than the exponential. The lemon share is the share of failures on the worst 1.5% of
the fleet's nodes. Kaplan-Meier survival (``scipy.stats.ecdf`` on right-censored lifetimes) comes
from ``lifetimes`` where the data gives them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from faultlens.ingest.schema import SITE_DATASET, IncidentCategory, Severity
from faultlens.ingest.store import Store
from faultlens.models.fleet import Fleet, file_filter, fleet
from faultlens.models.target import failure_episodes

log = logging.getLogger(__name__)

LEMON_FRACTION = 0.015
HOURS_PER_YEAR = 8766.0
# taxonomy category of a log-derived failure episode, by its cause
_EPISODE_CATEGORY = (
    (r"^xid(48|64|95|140)$|ecc|row_remap", IncidentCategory.GPU_MEMORY.value),
    (r"^xid|fallen|gpu_init|reset_required|nvlink|gsp", IncidentCategory.GPU.value),
    (r"network", IncidentCategory.NETWORK.value),
)

FAILURE_SCHEMA = {
    "node": pl.String,
    "ts": pl.Datetime("us"),
    "repair_h": pl.Float64,
    "level": pl.String,
    "class": pl.String,
    "category": pl.String,
}


def failures(
    store: Store,
    dataset: str,
    lo: datetime,
    hi: datetime,
    *,
    nodes: Sequence[str] = (),
    episodes: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Every failure (module doc) of ``dataset`` with ``lo <= ts < hi``, on ``nodes`` when given.

    ``episodes``: the window's failure episodes of ``models.target`` when the caller has them
    already (the dashboard reads them from its rollups); they are computed otherwise."""
    where, params = file_filter(dataset)
    inc = store.query(
        'SELECT node, start AS ts, repair_h, level, "class", category FROM incidents '
        f"WHERE {where} AND dataset = ? AND start >= ? AND start < ? "
        "AND coalesce(severity, '') <> ? AND coalesce(category, '') <> ?",
        [*params, dataset, lo, hi, Severity.WARNING.value, IncidentCategory.MAINTENANCE.value],
    ).cast(FAILURE_SCHEMA)
    frames = [inc]
    if dataset == SITE_DATASET:
        ep = failure_episodes(store, lo, hi) if episodes is None else episodes
        ep = ep.filter((pl.col("cause") != "incident") & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
        if ep.height:
            frames.append(_episode_failures(ep))
    out = pl.concat(frames).sort("ts")
    return out.filter(pl.col("node").is_in(list(nodes))) if nodes else out


def _episode_failures(ep: pl.DataFrame) -> pl.DataFrame:
    cat = pl.lit(IncidentCategory.HOST.value)
    for pattern, name in reversed(_EPISODE_CATEGORY):
        cat = pl.when(pl.col("cause").str.contains(pattern)).then(pl.lit(name)).otherwise(cat)
    return ep.select(
        "node",
        "ts",
        pl.lit(None, pl.Float64).alias("repair_h"),
        cat.alias("level"),
        pl.col("cause").alias("class"),
        cat.alias("category"),
    ).cast(FAILURE_SCHEMA)


def failure_rate(n_failures: int, node_days: float) -> float:
    """Failures per 1000 node-days (the one rate)."""
    return n_failures * 1000.0 / node_days if node_days > 0 else math.nan


@dataclass(frozen=True)
class FailureRate:
    """The failure rate of a window: what the demo, the dashboard, the report and
    ``faultlens reliability`` print."""

    failures: pl.DataFrame  # the failures of ``failures()``
    fleet: Fleet

    @property
    def n_failures(self) -> int:
        return self.failures.height

    @property
    def node_days(self) -> float:
        return self.fleet.node_days

    @property
    def per_1000_node_days(self) -> float:
        return failure_rate(self.n_failures, self.node_days)

    @property
    def mtbf_h(self) -> float:
        return self.node_days * 24.0 / self.n_failures if self.n_failures else math.inf


def failure_rate_in(
    store: Store,
    dataset: str = SITE_DATASET,
    window: tuple[datetime, datetime] | None = None,
    *,
    nodes: Sequence[str] = (),
    episodes: pl.DataFrame | None = None,
) -> FailureRate:
    """Failures (module doc) over node-days of the fleet model, over ``window`` (default: the
    dataset's own span), on ``nodes`` when given."""
    fl = fleet(store, dataset, window, nodes=nodes)
    lo, hi = fl.window
    return FailureRate(failures(store, dataset, lo, hi, nodes=nodes, episodes=episodes), fl)


@dataclass
class WeibullFit:
    shape: float
    scale: float
    shape_ci: tuple[float, float]
    n: int
    exponential_aic_delta: float  # AIC(exponential) - AIC(Weibull): > 0 favours Weibull

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": _r(self.shape),
            "scale": _r(self.scale),
            "shape_ci": [_r(self.shape_ci[0]), _r(self.shape_ci[1])],
            "n": self.n,
            "exponential_aic_delta": _r(self.exponential_aic_delta),
        }


def _r(x: float, nd: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def fit_weibull(gaps_h: np.ndarray) -> WeibullFit | None:
    """Weibull (location 0) by maximum likelihood over positive gaps; None below 3 gaps."""
    from scipy import stats  # on demand: scipy costs a second at import

    x = np.asarray(gaps_h, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if len(x) < 3:
        return None
    shape, _, scale = stats.weibull_min.fit(x, floc=0.0)
    half = 1.96 * shape * math.sqrt(6.0 / (math.pi**2 * len(x)))
    ll_w = float(np.sum(stats.weibull_min.logpdf(x, shape, 0.0, scale)))
    ll_e = float(np.sum(stats.expon.logpdf(x, 0.0, x.mean())))
    return WeibullFit(
        shape=float(shape),
        scale=float(scale),
        shape_ci=(float(shape - half), float(shape + half)),
        n=len(x),
        exponential_aic_delta=(2 * 1 - 2 * ll_e) - (2 * 2 - 2 * ll_w),
    )


def gaps_per_node(frame: pl.DataFrame) -> np.ndarray:
    """Hours between consecutive failures of the same node."""
    if frame.height < 2:
        return np.zeros(0)
    g = frame.sort("node", "ts").select(
        (pl.col("ts").diff().over("node").dt.total_seconds() / 3600.0).alias("g")
    )
    return g["g"].drop_nulls().to_numpy()


def gaps_fleet(frame: pl.DataFrame) -> np.ndarray:
    ts = frame["ts"].sort()
    return (ts.diff().dt.total_seconds() / 3600.0).drop_nulls().to_numpy()


def lemon_share(frame: pl.DataFrame, fleet_nodes: int, fraction: float = LEMON_FRACTION) -> float:
    """Share of failures on the worst ``fraction`` of the fleet's nodes (at least one node)."""
    if frame.height == 0:
        return math.nan
    k = max(1, math.ceil(fleet_nodes * fraction))
    counts = frame.group_by("node").len().sort("len", descending=True)["len"]
    return float(counts.head(k).sum()) / frame.height


def by_category(frame: pl.DataFrame, node_hours: float) -> list[dict[str, Any]]:
    if frame.height == 0:
        return []
    g = (
        frame.group_by("level", "class", "category")
        .agg(pl.len().alias("count"), pl.col("repair_h").mean().alias("mttr_h"))
        .sort("count", "level", "class", descending=[True, False, False], nulls_last=True)
    )
    total = frame.height
    return [
        {
            "level": r["level"],
            "class": r["class"],
            "category": r["category"],
            "count": int(r["count"]),
            "share": round(r["count"] / total, 6),
            "mtbf_h": _r(node_hours / r["count"], 3),
            "mttr_h": _r(r["mttr_h"], 3) if r["mttr_h"] is not None else None,
        }
        for r in g.iter_rows(named=True)
    ]


def repair_summary(repair_h: pl.Series) -> dict[str, float | None]:
    r = repair_h.drop_nulls().drop_nans()
    r = r.filter(r >= 0)
    if r.len() == 0:
        return {"median": None, "mean": None, "p90": None, "n": 0}
    return {
        "median": _r(float(r.median()), 3),
        "mean": _r(float(r.mean()), 3),
        "p90": _r(float(r.quantile(0.9, "linear")), 3),
        "n": r.len(),
    }


@dataclass
class Reliability:
    dataset: str
    window: tuple[datetime, datetime]
    fleet: Fleet
    failures: pl.DataFrame
    weibull: WeibullFit | None
    weibull_fleet: WeibullFit | None
    lemon_share: float
    survival: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return FailureRate(self.failures, self.fleet).per_1000_node_days

    @property
    def mtbf_h(self) -> float:
        return FailureRate(self.failures, self.fleet).mtbf_h

    def to_json(self) -> dict[str, Any]:
        empty = {"shape": None, "scale": None, "shape_ci": [None, None]}
        return {
            "dataset": self.dataset,
            "window": [self.window[0].isoformat(), self.window[1].isoformat()],
            "nodes": self.fleet.nodes,
            "node_days": round(self.fleet.node_days, 3),
            "fleet": self.fleet.to_json() | {"note": self.fleet.note},
            "incidents": self.failures.height,
            "failures_per_1000_node_days": _r(self.rate, 4),
            "mtbf_h": _r(self.mtbf_h, 3),
            "by_category": by_category(self.failures, self.fleet.node_days * 24.0),
            "repair_h": repair_summary(self.failures["repair_h"]),
            "weibull": self.weibull.to_json() if self.weibull else empty,
            "weibull_fleet": self.weibull_fleet.to_json() if self.weibull_fleet else empty,
            "lemon_share": _r(self.lemon_share, 4),
            "survival": self.survival,
        }


def reliability(
    store: Store,
    dataset: str = SITE_DATASET,
    window: tuple[datetime, datetime] | None = None,
) -> Reliability:
    """The statistics of the module doc for ``dataset`` (default window: the data's own span)."""
    rate = failure_rate_in(store, dataset, window)
    fl, frame = rate.fleet, rate.failures
    lo, hi = fl.window
    return Reliability(
        dataset=dataset,
        window=(lo, hi),
        fleet=fl,
        failures=frame,
        weibull=fit_weibull(gaps_per_node(frame)),
        weibull_fleet=fit_weibull(gaps_fleet(frame)),
        lemon_share=lemon_share(frame, fl.nodes),
        survival=survival(store, dataset),
    )


def lifetimes(store: Store, dataset: str) -> pl.DataFrame:
    where, params = file_filter(dataset)
    return store.query(
        "SELECT unit, batch, life_h, failed, cause FROM lifetimes "
        f"WHERE {where} AND dataset = ? AND life_h IS NOT NULL AND life_h >= 0",
        [*params, dataset],
    )


def kaplan_meier(life_h: np.ndarray, failed: np.ndarray) -> pl.DataFrame:
    """Kaplan-Meier survival (time_h, survival) of right-censored lifetimes."""
    from scipy import stats  # on demand: scipy costs a second at import

    life_h = np.asarray(life_h, dtype=float)
    failed = np.asarray(failed, dtype=bool)
    if len(life_h) == 0 or not failed.any():
        return pl.DataFrame({"time_h": [0.0], "survival": [1.0]})
    data = stats.CensoredData(uncensored=life_h[failed], right=life_h[~failed])
    sf = stats.ecdf(data).sf
    return pl.DataFrame({"time_h": sf.quantiles, "survival": sf.probabilities})


def survival(store: Store, dataset: str) -> dict[str, Any]:
    """Per batch (all units when none is given): units, unit-years, failures, failures per
    unit-year and the Kaplan-Meier survival at 1, 3 and 5 years."""
    life = lifetimes(store, dataset)
    if life.height == 0:
        return {}
    life = life.with_columns(pl.col("batch").fill_null("all"))
    out: dict[str, Any] = {
        "units": life.height,
        "unit_years": _r(life["life_h"].sum() / HOURS_PER_YEAR, 1),
    }
    groups = []
    for (batch,), part in life.group_by("batch", maintain_order=True):
        km = kaplan_meier(part["life_h"].to_numpy(), part["failed"].fill_null(False).to_numpy())
        years = part["life_h"].sum() / HOURS_PER_YEAR
        n_failed = int(part["failed"].fill_null(False).sum())
        groups.append(
            {
                "batch": batch,
                "units": part.height,
                "unit_years": _r(years, 1),
                "failures": n_failed,
                "failures_per_unit_year": _r(n_failed / years if years else math.nan, 5),
                "km_survival": {f"{y}y": _r(_surv_at(km, y * HOURS_PER_YEAR)) for y in (1, 3, 5)},
            }
        )
    out["by_batch"] = sorted(groups, key=lambda g: str(g["batch"]))
    return out


def _surv_at(km: pl.DataFrame, t_h: float) -> float:
    before = km.filter(pl.col("time_h") <= t_h)
    return float(before["survival"][-1]) if before.height else 1.0


def km_curves(store: Store, dataset: str) -> pl.DataFrame:
    """Kaplan-Meier curves per batch, for plotting: batch, time_h, survival."""
    life = lifetimes(store, dataset).with_columns(pl.col("batch").fill_null("all"))
    parts = []
    for (batch,), part in life.group_by("batch", maintain_order=True):
        km = kaplan_meier(part["life_h"].to_numpy(), part["failed"].fill_null(False).to_numpy())
        parts.append(km.with_columns(pl.lit(batch).alias("batch")))
    return (
        pl.concat(parts)
        if parts
        else pl.DataFrame(schema={"time_h": pl.Float64, "survival": pl.Float64, "batch": pl.String})
    )


def fit_profile(rel: Reliability) -> dict[str, Any]:
    """A ``synth --profile`` document from a dataset's statistics: the rate, the per-node Weibull
    shape, a log-normal repair (median, and sigma from the p90: ln(p90 / median) / 1.2816) and
    the lemon concentration, with where they were fitted."""
    doc = rel.to_json()
    rep = doc["repair_h"]
    median = rep["median"] if rep["median"] else 12.0
    sigma = 0.6
    if rep["median"] and rep["p90"] and rep["p90"] > rep["median"] > 0:
        sigma = math.log(rep["p90"] / rep["median"]) / 1.2816
    shape = doc["weibull"]["shape"] or 1.0
    share = doc["lemon_share"] if doc["lemon_share"] is not None else LEMON_FRACTION
    return {
        "failures_per_1000_node_days": doc["failures_per_1000_node_days"] or 0.0,
        "weibull_shape": round(float(shape), 4),
        "repair_median_h": round(float(median), 4),
        "repair_sigma": round(float(sigma), 4),
        "lemon_fraction": LEMON_FRACTION,
        "lemon_share": round(float(min(max(share, LEMON_FRACTION + 1e-6), 0.99)), 4),
        "source": {
            "dataset": rel.dataset,
            "window": doc["window"],
            "failures": doc["incidents"],
            "node_days": doc["node_days"],
            "fleet": doc["fleet"]["note"],
            "weibull_shape_ci": doc["weibull"]["shape_ci"],
            "repairs_known": rep["n"],
        },
    }
