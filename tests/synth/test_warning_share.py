"""The warning-share parameters of the synthetic cluster: the share of node hardware failures that
leave precursors, and how early they come."""

from __future__ import annotations

from dataclasses import replace

from faultlens.synth.config import LLAMA3_CAUSES, SynthConfig, default_warning_share
from faultlens.synth.generate import simulate

# Large enough for a few hundred hardware failures, small enough to simulate in seconds.
BASE = SynthConfig(n_nodes=512, days=90.0, seed=7, failures_per_1000_node_days=8.0)


def _hw_share(config: SynthConfig) -> tuple[float, int]:
    cluster = simulate(config)
    hw = [f for f in cluster.failures if f.primary is None and not f.cause.needs_job]
    return sum(f.has_precursors for f in hw) / len(hw), len(hw)


def _leads_h(config: SynthConfig) -> list[float]:
    cluster = simulate(config)
    at = {f.fid: f.ts_s for f in cluster.failures}
    return [(at[e.fid] - e.ts_s) / 3600 for e in cluster.events if e.precursor]


def test_default_share_is_the_cause_table_weighting() -> None:
    # Hand-computed from the Llama 3 rows (counts x precursor_p over the non-software rows).
    hw = [c for c in LLAMA3_CAUSES if not c.needs_job]
    expected = sum(c.count * c.precursor_p for c in hw) / sum(c.count for c in hw)
    assert abs(default_warning_share(LLAMA3_CAUSES) - expected) < 1e-12
    assert 0.5 < expected < 0.65
    assert BASE.precursor_scale() == 1.0


def test_warning_share_sets_the_share_of_failures_that_warn() -> None:
    default, n = _hw_share(BASE)
    low, n_low = _hw_share(replace(BASE, warning_share=0.15))
    assert n >= 200 and n_low >= 200
    assert 0.5 <= default <= 0.75
    assert 0.08 <= low <= 0.22
    all_warn, _ = _hw_share(replace(BASE, warning_share=1.0))
    # causes with precursor_p 0 (power supply, host maintenance, SDC) never warn
    assert 0.8 <= all_warn < 1.0


def test_lead_scale_shortens_the_warning_lead() -> None:
    full = _leads_h(BASE)
    half = _leads_h(replace(BASE, warning_lead_scale=0.5))
    assert full and half
    assert max(half) <= 0.5 * 96 + 1e-6  # the longest configured lead is 96 h (EDAC)
    assert max(full) > 0.5 * 96
    assert sum(half) / len(half) < 0.6 * sum(full) / len(full)
