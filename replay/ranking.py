"""The replay stage of ``faultlens demo`` as data: the ranking of every strategy on a cluster's
history and the failure predictor's value (``app.replay_view`` renders it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultlens.ingest.store import Store
from faultlens.replay.model import JobSpec, Trace
from faultlens.replay.score import Score, predictor_value_gpu_h, rank, replay
from faultlens.replay.strategies import DEMO_STRATEGIES

log = logging.getLogger(__name__)


@dataclass
class Ranking:
    trace: Trace
    ranked: list[Score]
    predictor_value_gpu_h: float
    usd_per_gpu_h: float

    def to_json(self) -> dict[str, Any]:
        if not self.ranked:
            return {"ranking": [], "predictor_value_gpu_h": 0.0, "interruptions": 0}
        return {
            "ranking": [s.to_json() for s in self.ranked],
            "predictor_value_gpu_h": self.predictor_value_gpu_h,
            "interruptions": self.trace.n_events,
            "best": self.ranked[0].name,
        }


def demo_ranking(
    store: Store,
    truth: str | Path | dict | None,
    job: JobSpec | None = None,
    resamples: int = 20,
) -> Ranking:
    """Rank the strategies on the database's interruptions (falling back to the ground-truth
    file ``truth`` when the database has none) and price the failure predictor."""
    from faultlens.replay.traces import from_db, from_ground_truth

    job = job or JobSpec()
    trace = from_db(store, alert_threshold=job.alert_threshold)
    if trace.n_events == 0 and isinstance(truth, str | Path) and Path(truth).exists():
        trace = from_ground_truth(truth)
    if trace.n_events == 0:
        return Ranking(trace, [], 0.0, job.usd_per_gpu_h)
    ranked = rank(replay(trace, DEMO_STRATEGIES, job, resamples=resamples))
    value = predictor_value_gpu_h(trace, job)
    return Ranking(trace, ranked, value, job.usd_per_gpu_h)
