"""End to end on a synthetic cluster: ingest its raw logs, attribute its failed jobs, and compare
with what the generator knows happened (a seed not used while building the attribution)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from faultlens.app.demo import synth_context
from faultlens.ingest.attribution import HARDWARE_CAUSES, compare_with_truth, refresh, taxonomy
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from faultlens.synth import SynthConfig, generate

SEED = 4242


@pytest.mark.slow
def test_attributed_causes_match_the_ground_truth(tmp_path: Path) -> None:
    cfg = SynthConfig(n_nodes=160, days=60, seed=SEED, write_training=False, write_telemetry=False)
    result = generate(cfg, tmp_path / "synth")
    logs = [str(p) for p in result.files if p.name not in ("topology.csv", "ground_truth.json")]
    with Store(tmp_path / "db.duckdb") as store:
        report = ingest_paths(store, logs, now=datetime(2026, 1, 1), base_ctx=synth_context())
        assert [f.path for f in report.files if f.status == "failed"] == []
        refresh(store)
        attributions = store.query("SELECT * FROM attributions")
        tax = taxonomy(store)
    truth = result.truth["interruptions"]
    cmp = compare_with_truth(attributions, truth)
    hw = [i for i in truth if i["category"] in {c.value for c in HARDWARE_CAUSES}]
    assert cmp["hardware_jobs"] == len(hw) >= 15
    assert cmp["hardware_match"] >= 0.95, cmp["mismatches"]
    # The taxonomy's shares of interruptions with evidence track the generator's realized mix.
    realized = Counter(i["category"] for i in truth)
    n_truth = sum(realized.values())
    got = {r["cause"]: r["share_infra_pct"] for r in tax.iter_rows(named=True)}
    for cause in ("gpu_hardware", "gpu_memory", "host"):
        assert abs(got.get(cause, 0.0) - 100.0 * realized[cause] / n_truth) <= 6.0, (cause, got)
