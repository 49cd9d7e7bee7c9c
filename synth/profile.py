"""A failure profile: the timing of a real cluster's failures, for ``synth --profile FILE``.

A profile is a small JSON document (written by ``faultlens reliability --fit-profile FILE``):

- ``failures_per_1000_node_days``: the rate;
- ``weibull_shape``: the shape of the time between failures of a node (1 = Poisson; below 1 a
  failure makes the next one likelier soon, as in every real trace checked);
- ``repair_median_h`` / ``repair_sigma``: a log-normal repair time (a heavy tail);
- ``lemon_fraction`` / ``lemon_share``: the worst ``lemon_fraction`` of nodes carry
  ``lemon_share`` of the failures;
- ``source``: where it was fitted (dataset, window, counts), for the README's provenance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from faultlens.synth.config import SynthConfig

KEYS = (
    "failures_per_1000_node_days",
    "weibull_shape",
    "repair_median_h",
    "repair_sigma",
    "lemon_fraction",
    "lemon_share",
)


class ProfileError(ValueError):
    """A profile file that cannot be read or holds impossible values."""


def lemon_multiplier(fraction: float, share: float) -> float:
    """The lemon / healthy rate ratio that puts ``share`` of failures on ``fraction`` of nodes:
    share = f m / (f m + 1 - f)."""
    if not 0 < fraction < 1 or not 0 < share < 1:
        raise ProfileError("lemon_fraction and lemon_share must be between 0 and 1")
    return max(1.0, share * (1 - fraction) / (fraction * (1 - share)))


def load_profile(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ProfileError(f"cannot read profile {path}: {e}") from e
    missing = [k for k in KEYS if not isinstance(doc.get(k), int | float)]
    if missing:
        raise ProfileError(f"profile {path} lacks numbers for: {', '.join(missing)}")
    if doc["weibull_shape"] <= 0 or doc["repair_median_h"] < 0 or doc["repair_sigma"] < 0:
        raise ProfileError(f"profile {path}: shape must be > 0, repairs >= 0")
    return doc


def apply_profile(config: SynthConfig, doc: dict[str, Any]) -> SynthConfig:
    """``config`` with the profile's rate, timing, repairs and lemons."""
    config.failures_per_1000_node_days = float(doc["failures_per_1000_node_days"])
    config.interfailure_shape = float(doc["weibull_shape"])
    config.repair_median_h = float(doc["repair_median_h"])
    config.repair_sigma = float(doc["repair_sigma"])
    config.lemon_fraction = float(doc["lemon_fraction"])
    config.lemon_multiplier = lemon_multiplier(config.lemon_fraction, float(doc["lemon_share"]))
    config.extra = {**config.extra, "profile": doc.get("source", {})}
    return config


def weibull_scale(mean: float, shape: float) -> float:
    """The scale of a Weibull with this mean."""
    return mean / math.gamma(1.0 + 1.0 / shape)
