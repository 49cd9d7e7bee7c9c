"""The replay engine: interruption traces, recovery strategies, scoring and sweeps."""

from __future__ import annotations

from faultlens.replay.model import Badput, JobSpec, Trace, daly_interval, young_interval
from faultlens.replay.ranking import Ranking, demo_ranking
from faultlens.replay.score import Score, predictor_value_gpu_h, rank, replay
from faultlens.replay.strategies import (
    ALL_STRATEGIES,
    DEMO_STRATEGIES,
    STRATEGIES,
    Strategy,
    resolve,
)
from faultlens.replay.traces import from_db, from_ground_truth

__all__ = [
    "ALL_STRATEGIES",
    "DEMO_STRATEGIES",
    "STRATEGIES",
    "Badput",
    "JobSpec",
    "Score",
    "Strategy",
    "Trace",
    "daly_interval",
    "Ranking",
    "demo_ranking",
    "from_db",
    "from_ground_truth",
    "predictor_value_gpu_h",
    "rank",
    "replay",
    "resolve",
    "young_interval",
]
