"""Training-progress logs: Megatron-LM, HF Trainer, Lightning, torchtitan (tests/data/training)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.reader import iter_chunks
from faultlens.ingest.training.parser import PARSERS, TrainingParser

DATA = Path(__file__).resolve().parents[2] / "data" / "training"
PARSER: TrainingParser = PARSERS[0]


def lines_of(name: str) -> pl.Series:
    return next(iter(iter_chunks(str(DATA / name)))).lines


def parse(name: str, *, chunks: int = 1, file: str | None = None):
    lines = lines_of(name)
    ctx = ParseContext(file=file or str(DATA / name))
    state = PARSER.new_state(ctx)
    size = -(-lines.len() // chunks)
    results = [
        PARSER.parse_chunk(lines.slice(i, size), i + 1, ctx, state)
        for i in range(0, lines.len(), size)
    ]
    out = results[0]
    for r in results[1:]:
        out = out.merge(r)
    return out, lines


def steps_of(result) -> pl.DataFrame:
    return result.tables["train_steps"]


def restarts_of(result) -> pl.DataFrame:
    return result.tables.get("events", pl.DataFrame(schema={"line": pl.Int64}))


def test_megatron_iteration_lines() -> None:
    result, lines = parse("megatron.log")
    steps = steps_of(result)
    assert steps["step"].to_list() == [10, 20, 30, 40, 50, 60, 60, 70, 80]
    first = steps.row(0, named=True)
    assert first["framework"] == "megatron"
    assert first["ts"] == datetime(2025, 1, 1, 12, 0, 15)
    assert first["total_steps"] == 5000
    assert first["step_time_s"] == pytest.approx(1.5234)
    assert first["samples_per_s"] == pytest.approx(128 / 1.5234)
    assert first["loss"] == pytest.approx(10.45)
    assert first["lr"] == pytest.approx(1.5e-5)
    assert first["line"] == 7
    # Resumed from the iteration-50 checkpoint: iteration 60 is logged again.
    ev = restarts_of(result)
    assert ev["line"].to_list() == [19]
    assert ev["kind"].to_list() == ["restart"]
    assert ev["ts"].to_list() == [datetime(2025, 1, 1, 12, 7, 46)]
    # The line cut off by the crash is quarantined, not dropped.
    assert result.quarantine["line"].to_list() == [15]
    assert result.parsed + result.quarantined <= lines.len()


def test_torchtitan_step_lines_per_rank_with_colours() -> None:
    result, _ = parse("torchtitan.log")
    steps = steps_of(result)
    rank0 = steps.filter(pl.col("rank") == 0)
    assert rank0["step"].to_list() == [1, 10, 20, 30, 21, 30, 40]
    assert steps.filter(pl.col("rank") == 1).height == 7
    row = rank0.filter(pl.col("step") == 10).row(0, named=True)
    assert row["ts"] == datetime(2025, 1, 1, 12, 0, 36, 623000)
    assert row["tokens_per_s"] == 6543.0
    assert row["loss"] == pytest.approx(11.2)
    # torchtitan prints no step time: it is the time between step lines over the steps between.
    assert row["step_time_s"] == pytest.approx(2.5)
    assert rank0.filter(pl.col("step") == 21)["step_time_s"].to_list() == [None]
    ev = restarts_of(result)
    assert ev.height == 2 and set(ev["line"].to_list()) == {17, 18}
    assert result.quarantine is None


def test_hf_trainer_tqdm_and_metric_dicts() -> None:
    result, _ = parse("hf_trainer.log")
    steps = steps_of(result)
    bars = steps.filter(pl.col("total_steps") == 200)
    assert bars["step"].head(3).to_list() == [0, 1, 2]
    # Placed in time by the "***** Running training *****" line plus the bar's elapsed time.
    one = bars.filter(pl.col("step") == 1).row(0, named=True)
    assert one["ts"] == datetime(2025, 1, 1, 12, 0, 2, 121000)  # last stamp before the bar
    assert one["step_time_s"] == pytest.approx(2.0)  # "2.00s/it"
    dicts = steps.filter(pl.col("loss").is_not_null())
    assert dicts["step"].to_list() == [20, 40, 60, 50, 50]
    assert dicts["loss"].to_list()[:3] == pytest.approx([2.3, 2.1, 1.9])
    assert dicts["lr"].to_list()[0] == pytest.approx(4.5e-5)
    assert dicts["samples_per_s"].to_list()[-1] == pytest.approx(42.02)  # train summary
    # The evaluation bar (total 25) is not a training step.
    assert steps.filter(pl.col("step") == 25).filter(pl.col("total_steps") == 25).height == 0
    ev = restarts_of(result)
    assert ev["ts"].to_list() == [datetime(2025, 1, 1, 12, 10, 0, 1000)]
    assert ev["message"].to_list() == ["hf_trainer resumed at step 0 after reaching step 60"]
    after = bars.filter(pl.col("ts") > datetime(2025, 1, 1, 12, 9))
    assert after["step"].to_list()[:3] == [0, 40, 41]
    assert after.filter(pl.col("step") == 41)["step_time_s"].to_list() == [pytest.approx(2.5)]
    assert result.quarantine is None


def test_lightning_epoch_bars() -> None:
    result, _ = parse("lightning.log")
    steps = steps_of(result)
    assert steps["framework"].unique().to_list() == ["lightning"]
    # Global step = epoch * batches per epoch + batch.
    assert steps["step"].to_list()[:3] == [0, 10, 20]
    row = steps.filter(pl.col("step") == 110).row(0, named=True)
    assert row["loss"] == pytest.approx(2.0)
    assert row["step_time_s"] == pytest.approx(0.5)  # "2.00it/s"
    # Epoch 1's bar restarts at 00:00 without a new time stamp: it continues where epoch 0 ended.
    assert row["ts"] == datetime(2025, 1, 1, 12, 0, 57)
    ev = restarts_of(result)
    assert ev["message"].to_list() == ["lightning resumed at step 100 after reaching step 140"]
    assert ev["ts"].to_list() == [datetime(2025, 1, 1, 12, 10, 0)]
    assert result.quarantine is None


@pytest.mark.parametrize(
    "name", ["megatron.log", "torchtitan.log", "hf_trainer.log", "lightning.log"]
)
def test_chunked_parse_equals_whole_file(name: str) -> None:
    whole, _ = parse(name)
    split, _ = parse(name, chunks=3)
    cols = ["ts", "step", "step_time_s", "loss", "line"]
    assert steps_of(split).select(cols).equals(steps_of(whole).select(cols))
    assert restarts_of(split)["line"].to_list() == restarts_of(whole)["line"].to_list()
    assert split.parsed == whole.parsed


@pytest.mark.parametrize(
    "name", ["megatron.log", "torchtitan.log", "hf_trainer.log", "lightning.log"]
)
def test_line_path_agrees_with_vectorized_path(name: str) -> None:
    result, lines = parse(name)
    ctx = ParseContext(file=str(DATA / name))
    per_line: set[tuple[int, int]] = set()
    quarantined: list[int] = []
    for no, text in enumerate(lines.to_list(), start=1):
        if text is None:
            continue
        r = PARSER.parse_line(text, ctx)
        if isinstance(r, Parsed):
            per_line |= {(no, s["step"]) for s in r.rows["train_steps"]}
        elif isinstance(r, Quarantined):
            quarantined.append(no)
    vec = set(zip(steps_of(result)["line"], steps_of(result)["step"], strict=True))
    assert vec <= per_line  # the line path also keeps redraws the chunk path folds away
    assert {s for _, s in vec} == {s for _, s in per_line}
    q = result.quarantine["line"].to_list() if result.quarantine is not None else []
    assert quarantined == q


def test_job_id_from_jobs_folder(tmp_path: Path) -> None:
    folder = tmp_path / "jobs" / "4711"
    folder.mkdir(parents=True)
    target = folder / "train.log"
    target.write_bytes((DATA / "megatron.log").read_bytes())
    ctx = ParseContext(file=str(target), node="4711")  # the pipeline's folder-name guess
    result = PARSER.parse_chunk(lines_of("megatron.log"), 1, ctx, PARSER.new_state(ctx))
    steps = steps_of(result)
    assert steps["job_id"].unique().to_list() == ["4711"]
    assert steps["node"].unique().to_list() == [None]


def test_sniff() -> None:
    for name in ("megatron.log", "torchtitan.log", "hf_trainer.log", "lightning.log"):
        head = (DATA / name).read_text(encoding="utf-8").split("\n")[:50]
        assert PARSER.sniff(head, name) >= 0.8, name
    assert PARSER.sniff(["Jan  1 00:00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79"], "x") == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=120),
            st.sampled_from(
                [
                    " [2025-01-01 12:00:00] iteration  10/ 100 | elapsed time per iteration (ms): x |",
                    "\r 10%|█         | 10/100 [00:01<00:09,  9.99it/s]\r{'loss': 1.0, 'epoch': 0.1}",
                    "[rank0]:[titan] 2025-01-01 12:00:00,123 - root - INFO - step:  1  loss:  9.1",
                    "Epoch 0:  45%|████▌     | 450/1000 [01:23<01:42, 5.39it/s, v_num=0, train_loss=2.31]",
                ]
            ),
        ),
        max_size=20,
    )
)
def test_arbitrary_lines_never_crash_and_are_accounted(texts: list[str]) -> None:
    lines = pl.Series([t or None for t in texts], dtype=pl.String)
    ctx = ParseContext(file="fuzz.log")
    result = PARSER.parse_chunk(lines, 1, ctx, PARSER.new_state(ctx))
    non_null = lines.drop_nulls().len()
    assert result.parsed + result.quarantined <= non_null
    if result.quarantine is not None:
        assert set(result.quarantine["line"].to_list()).isdisjoint(
            set(steps_of(result)["line"].to_list())
        )
