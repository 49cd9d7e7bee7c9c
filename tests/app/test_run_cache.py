"""A scheduled run with nothing new reuses the last prediction; anything new scores again.

The reference for every reused run is a prediction computed from scratch
(``models.predictor.predict_failures``) on the same database, never the cache's own output.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from faultlens.app.run import RunConfig, run_once
from faultlens.ingest.store import Store
from faultlens.ingest.watermarks import data_mark
from faultlens.models.predictor import TrainConfig, predict_failures, train_failure_model
from faultlens.models.registry import load_model, save_model
from tests.models.synthetic import random_cluster

NOW = datetime(2030, 1, 1)


def _xid(ts: datetime, node: str) -> str:
    return (
        f"{ts:%Y-%m-%dT%H:%M:%S}+00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, datetime]:
    folder = tmp_path_factory.mktemp("cache")
    db = folder / "f.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=24, days=35, seed=5)
        result = train_failure_model(store, as_of=truth["end"], cfg=TrainConfig())
        save_model(folder / "models", result.estimator, result.card)
    return db, folder / "models", truth["end"]


def _copy(trained, tmp_path: Path) -> RunConfig:
    import shutil

    db, models, end = trained
    shutil.copy(db, tmp_path / "f.duckdb")
    log = tmp_path / "kern.log"
    log.write_text(_xid(end - timedelta(hours=30), "node001"))
    return RunConfig(
        db=tmp_path / "f.duckdb",
        ingest_paths=[str(log)],
        models_dir=models,
        textfile=tmp_path / "prom" / "faultlens.prom",
    )


def _once(cfg: RunConfig, as_of: datetime) -> tuple[dict, list[dict], str]:
    out: list[dict] = []
    run_once(cfg, now=NOW, as_of=as_of, emit=out.append)
    assert cfg.textfile is not None
    return out[-1], [d for d in out if d["type"] == "alert"], cfg.textfile.read_text()


def _scratch(cfg: RunConfig, as_of: datetime) -> tuple[list[tuple], list[dict]]:
    model = load_model(cfg.models_dir)  # type: ignore[arg-type]
    with Store(cfg.db, read_only=True) as store:
        pred = predict_failures(
            store,
            model.estimator,
            model.card,
            as_of=as_of,
            scheduler=cfg.scheduler,
            dashboard_url=cfg.dashboard_url,
        )
    return pred.rows.rows(), [{"type": "alert", "run_id": pred.run_id, **a} for a in pred.alerts]


def test_nothing_new_reuses_the_prediction_exactly(trained, tmp_path: Path) -> None:
    cfg = _copy(trained, tmp_path)
    as_of = trained[2] - timedelta(hours=2)
    first, alerts1, text1 = _once(cfg, as_of)
    second, alerts2, text2 = _once(cfg, as_of)
    assert (first["reused"], second["reused"]) == (False, True)
    assert first["ingest"]["ok"] == 1 and second["ingest"]["unchanged"] == 1
    rows, alerts = _scratch(cfg, as_of)
    assert alerts1 == alerts2 == alerts  # alerts, reasons, evidence, Slurm state, commands
    assert text1 == text2  # the textfile: every score, in the same order
    with Store(cfg.db, read_only=True) as store:
        saved = store.query(
            "SELECT node, gpu, score, action FROM predictions WHERE run_id = ? "
            "ORDER BY node, gpu NULLS FIRST",
            [first["run_id"]],
        ).rows()
    assert saved == rows and second["scored"] == len(rows)
    same = set(first) - {"reused", "ingest"}  # the first run ingested the log's line
    assert {k: first[k] for k in same} == {k: second[k] for k in same}


def test_new_lines_a_new_time_or_other_settings_score_again(trained, tmp_path: Path) -> None:
    cfg = _copy(trained, tmp_path)
    as_of = trained[2] - timedelta(hours=2)
    assert _once(cfg, as_of)[0]["reused"] is False
    # a grown log: a line before as_of, so the same as_of now sees one more Xid
    with Path(cfg.ingest_paths[0]).open("a") as f:
        f.write(_xid(as_of - timedelta(hours=3), "node002"))
    summary, alerts, _ = _once(cfg, as_of)
    assert summary["reused"] is False and summary["ingest"]["ok"] == 1
    assert alerts == _scratch(cfg, as_of)[1]
    assert _once(cfg, as_of)[0]["reused"] is True
    assert _once(cfg, as_of - timedelta(hours=1))[0]["reused"] is False  # another as_of
    other = RunConfig(**{**cfg.__dict__, "dashboard_url": "http://dash:8501"})
    summary, alerts, _ = _once(other, as_of - timedelta(hours=1))
    assert summary["reused"] is False
    assert all(a["dashboard_url"].startswith("http://dash:8501/") for a in alerts)


def test_deleted_prediction_rows_are_scored_again(trained, tmp_path: Path) -> None:
    cfg = _copy(trained, tmp_path)
    as_of = trained[2] - timedelta(hours=2)
    first = _once(cfg, as_of)[0]
    with Store(cfg.db) as store:
        store.execute("DELETE FROM predictions WHERE run_id = ? AND gpu = '0'", [first["run_id"]])
    second = _once(cfg, as_of)[0]
    assert second["reused"] is False and second["scored"] == first["scored"]


def test_data_mark_moves_with_every_write_of_an_input(trained, tmp_path: Path) -> None:
    cfg = _copy(trained, tmp_path)
    _once(cfg, trained[2])
    with Store(cfg.db) as store:
        before = data_mark(store)
        store.execute("DELETE FROM predictions")  # an output, not an input
        store.execute("DELETE FROM run_cache")
        assert data_mark(store) == before
        store.execute("DELETE FROM gpus WHERE rowid = (SELECT max(rowid) FROM gpus)")
        after_gpus = data_mark(store)
        assert after_gpus != before
        store.execute("UPDATE ingested_files SET parsed = parsed + 1")  # a reparse's registry
        assert data_mark(store) != after_gpus


def test_data_mark_of_a_lake_follows_its_files(trained, tmp_path: Path) -> None:
    from faultlens.ingest.lake import attach_lake, export_lake

    db = trained[0]
    with Store(db, read_only=True) as store:
        export_lake(store, tmp_path / "lake")
        n_events = store.count("events")
    fresh = tmp_path / "fresh.duckdb"
    assert attach_lake(fresh, tmp_path / "lake")["events"] == "view"
    with Store(fresh, read_only=True) as store:  # views over Parquet: no rowid
        first = data_mark(store)
        assert data_mark(store) == first and store.count("events") == n_events
    for part in sorted((tmp_path / "lake" / "events").rglob("*.parquet"))[:1]:
        part.unlink()  # a partition gone from the lake
    with Store(fresh, read_only=True) as store:
        assert store.count("events") < n_events
        assert data_mark(store) != first
