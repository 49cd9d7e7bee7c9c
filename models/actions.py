"""What to do about a risk score: watch, drain after jobs, or drain now, and the command for it.

The model's score sets the level; the Xid catalog can raise it: when the node logged an Xid whose
catalog action is ``reboot_node`` or ``drain_node`` (fallen off the bus, power, memory interface)
in the last 24 h and the score is at the operating threshold, the node is drained now rather than
after its jobs (Meta's health checks make the same split: high-severity -> immediate removal,
low-severity -> drain after the jobs finish). Commands are printed for a human, never executed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    import numpy as np


class RiskAction(StrEnum):
    NONE = "none"
    WATCH = "watch"
    DRAIN_AFTER_JOBS = "drain_after_jobs"
    DRAIN_NOW = "drain_now"


ACTION_RANK = {a: i for i, a in enumerate(RiskAction)}
# Feature columns that carry the catalog's "take the node out" signal.
CATALOG_DRAIN_COLUMNS = ("xid_drain_24h", "off_bus_24h")


def clear_level(threshold: float, clear: float | None) -> float:
    """The level an open alert must drop below to close: ``clear``, never above ``threshold``
    (None: the threshold itself, no hold)."""
    return threshold if clear is None else min(float(clear), threshold)


@dataclass(frozen=True)
class Thresholds:
    watch: float
    drain_after_jobs: float  # the operating threshold
    drain_now: float
    # An open drain alert stays open while the node's score stays at or above this (no flapping
    # as a score wavers around the operating threshold); None: it closes below the threshold
    # (models trained before the clear level existed).
    clear: float | None = None

    @property
    def hold(self) -> float:
        """The level an open drain alert must drop below to close."""
        return clear_level(self.drain_after_jobs, self.clear)

    def to_json(self) -> dict[str, float | None]:
        return {
            "watch": self.watch,
            "drain_after_jobs": self.drain_after_jobs,
            "drain_now": self.drain_now,
            "clear": self.clear,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Thresholds:
        clear = d.get("clear")
        return cls(
            float(d["watch"]),
            float(d["drain_after_jobs"]),
            float(d["drain_now"]),
            None if clear is None else float(clear),
        )


def decide(scores: np.ndarray, features: pl.DataFrame, thresholds: Thresholds) -> list[str]:
    """One action per row, from its score and the catalog columns of its features. A NaN or
    null score, or a null catalog count, raises nothing. (Polars expressions, not numpy:
    ``faultlens status`` imports this module through ``drains`` and numpy is 0.2 s of start-up.)"""
    cols = [c for c in CATALOG_DRAIN_COLUMNS if c in features.columns]
    frame = pl.DataFrame({"score": pl.Series(scores, dtype=pl.Float64)}).hstack(
        features.select(cols)
    )
    score = pl.col("score").fill_nan(None)
    catalog = pl.any_horizontal([pl.col(c) > 0 for c in cols]) if cols else pl.lit(False)
    now = (score >= thresholds.drain_now) | ((score >= thresholds.drain_after_jobs) & catalog)
    action = (
        pl.when(now)
        .then(pl.lit(RiskAction.DRAIN_NOW.value))
        .when(score >= thresholds.drain_after_jobs)
        .then(pl.lit(RiskAction.DRAIN_AFTER_JOBS.value))
        .when(score >= thresholds.watch)
        .then(pl.lit(RiskAction.WATCH.value))
        .otherwise(pl.lit(RiskAction.NONE.value))
    )
    return frame.select(action.alias("action"))["action"].to_list()


def command(node: str, action: str, reason: str, scheduler: str = "slurm") -> str | None:
    """The command an SRE would run (printed, never executed); None for watch / none."""
    if action not in (RiskAction.DRAIN_AFTER_JOBS, RiskAction.DRAIN_NOW):
        return None
    if scheduler == "kubernetes":
        if action == RiskAction.DRAIN_NOW:
            return f"kubectl drain {shlex.quote(node)} --ignore-daemonsets --delete-emptydir-data"
        return f"kubectl cordon {shlex.quote(node)}"
    # Always DRAIN, never DOWN: DOWN kills the jobs running on the node; DRAIN lets them
    # finish and takes no new ones (drain now: the reason says so, the SRE requeues by hand).
    if action == RiskAction.DRAIN_NOW:
        reason = f"drain now: {reason}"
    return f"scontrol update nodename={shlex.quote(node)} state=drain reason={shlex.quote(reason)}"
