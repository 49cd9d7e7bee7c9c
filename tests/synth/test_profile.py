"""Synth failure profiles: Weibull inter-failure times, heavy-tailed repairs, lemon
concentration, fitted from a database and read back by synth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from faultlens.models.reliability import fit_weibull
from faultlens.synth.cluster import build_nodes
from faultlens.synth.config import SynthConfig
from faultlens.synth.failures import sample_hw_failures
from faultlens.synth.profile import ProfileError, apply_profile, lemon_multiplier, load_profile

PROFILE = {
    "failures_per_1000_node_days": 40.0,
    "weibull_shape": 0.6,
    "repair_median_h": 20.0,
    "repair_sigma": 1.4,
    "lemon_fraction": 0.015,
    "lemon_share": 0.15,
}


def _failures(cfg: SynthConfig) -> list:
    rng = np.random.default_rng(cfg.seed)
    return sample_hw_failures(cfg, build_nodes(cfg, rng), rng)


def _gaps_h(failures: list) -> np.ndarray:
    by_node: dict[int, list[float]] = {}
    for f in failures:
        by_node.setdefault(f.node, []).append(f.ts_s)
    return np.concatenate([np.diff(sorted(t)) / 3600 for t in by_node.values() if len(t) > 1])


def test_a_profile_gives_weibull_timing_and_heavy_repairs(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PROFILE))
    cfg = apply_profile(SynthConfig(n_nodes=200, days=365, seed=2), load_profile(path))
    failures = _failures(cfg)
    fit = fit_weibull(_gaps_h(failures))
    assert fit is not None and fit.shape_ci[1] < 0.9  # decreasing hazard, as profiled
    # (a leaf switch's failures keep their own 1-6 h repairs)
    repairs = np.array([f.repair_s for f in failures if f.cause.category != "network"]) / 3600
    assert np.median(repairs) == pytest.approx(PROFILE["repair_median_h"], rel=0.2)
    assert repairs.mean() > 1.5 * np.median(repairs)  # a heavy tail
    poisson = _failures(
        SynthConfig(n_nodes=200, days=365, seed=2, failures_per_1000_node_days=40.0)
    )
    base = fit_weibull(_gaps_h(poisson))
    assert base is not None and base.shape > fit.shape_ci[1]
    # the same long-run rate as the Poisson model (a renewal process of the same mean gap)
    assert len(failures) == pytest.approx(len(poisson), rel=0.2)


def test_lemon_multiplier_inverts_the_share() -> None:
    f, share = 0.015, 0.15
    m = lemon_multiplier(f, share)
    assert f * m / (f * m + 1 - f) == pytest.approx(share)


def test_bad_profiles_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**PROFILE, "weibull_shape": "x"}))
    with pytest.raises(ProfileError):
        load_profile(path)
