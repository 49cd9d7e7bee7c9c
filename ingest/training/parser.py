"""Training-progress logs: per-step lines of Megatron-LM, Hugging Face Trainer, PyTorch Lightning
and torchtitan, into ``train_steps``; a step number going backwards is a ``restart`` event.

Formats, as the projects print them (an optional launcher prefix ``[default7]:`` / ``[rank0]:``
(torchrun ``--tee``) or ``0: `` (``srun --label``) names the rank):

- Megatron-LM (``training_log``, printed by the last rank)::

    [2024-10-16 04:23:00] iteration      2/ 500000 | consumed samples:     256 | elapsed time
    per iteration (ms): 1811.8 | learning rate: 4.000000E-07 | global batch size:   128 |
    lm loss: 1.177651E+01 | loss scale: 1.0 | grad norm: 0.493 | ...

- torchtitan (metrics logger, each rank when not filtered)::

    [rank0]:[titan] 2025-01-01 12:00:00,123 - root - INFO - step:  10  loss:  9.1234
    memory: 30.12GiB(37.99%)  tps: 6,543  tflops: 300.12  mfu: 30.34%

  torchtitan prints no step time: it is the time between two step lines over the steps between.
- Hugging Face Trainer (rank 0): a tqdm bar ``45%|####5     | 450/1000 [01:23<01:42,  5.39it/s]``
  redrawn with ``\\r`` on one physical line, and ``{'loss': 1.23, 'grad_norm': ..., 'learning_rate':
  ..., 'epoch': ...}`` dicts written between redraws (step = the bar's position then).
- PyTorch Lightning (rank 0): ``Epoch 0:  45%|####5     | 450/1000 [01:23<01:42, 5.39it/s, v_num=0,
  train_loss=2.31]``; the global step is ``epoch * batches_per_epoch + batch``.

tqdm bars carry only the time since the bar started, so their rows are placed in time by the last
time-stamped line before the bar started (``***** Running training *****`` from the transformers
logger, a Hydra ``[2025-01-01 12:00:00,123][...][INFO]`` line); without one their ``ts`` is null.

Every stamp here is the node's wall clock without a zone: UTC unless ``tz``. With ``tz``, a time
the zone has twice or never is not guessed: the step's ``ts`` is null (a restart event at it is
flagged ``tz_ambiguous`` / ``tz_gap``), and a tqdm bar started after such an anchor is not placed
by an earlier one. An anchor that writes its offset (``2025-01-01T12:00:00+01:00``, ``... +0100``,
``...Z``, ``... UTC``) is read exactly, with or without ``tz``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    LineResult,
    ParseContext,
    Parsed,
    Quarantined,
    fmt,
    numbered,
    quarantine_frame,
    to_json,
)
from faultlens.ingest.prefixes import zone_minutes
from faultlens.ingest.schema import Kind, Severity, Source, conform, empty_frame
from faultlens.ingest.zones import localize, zone_flag, zone_of

ANSI = r"\x1b\[[0-9;]*[A-Za-z]"
# Launcher prefixes naming the rank: torchrun ``[default7]:`` / ``[rank0]:``, srun ``0: ``.
PREFIX = r"^\s*(?:\[(?:default|rank)(\d+)\]:|(\d+): )?"
MEGATRON = (
    PREFIX + r"\s*(?:\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\])?\s*iteration\s+(\d+)/\s*(\d+)"
    r"\s*\|.*?elapsed time per iteration \(ms\):\s*([0-9.]+)"
)
MEGATRON_LR = r"\| learning rate: ([-+0-9.Ee]+)"
MEGATRON_GBS = r"\| global batch size:\s*(\d+)"
MEGATRON_LOSS = r"\| (?:lm )?loss: ([-+0-9.EeNaIinf]+) \|"
TITAN = (
    PREFIX + r"\[titan\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) - \S+ - INFO - "
    r"step:\s*(\d+)\s+loss:\s*([-+0-9.eE]+|nan|inf)"
)
TITAN_TPS = r"\b[tw]ps: ([\d,]+)"
# A tqdm bar: ``45%|####5     | 450/1000 [01:23<01:42,  5.39it/s...]`` (rate ``?it/s`` at first).
BAR = (
    r"(\d+)%\|[^|]*\|\s*(\d+)/(\d+|\?)\s*\[(?:(\d+):)?(\d+):(\d+)<[^,\]]*"
    r"(?:,\s*(?:([0-9.]+)(it/s|s/it)|\?it/s))?([^\]]*)\]"
)
HF_BAR = r"^\s*" + BAR
LIGHTNING_BAR = r"^\s*Epoch (\d+):\s+" + BAR
LIGHTNING_LOSS = r"\b(?:train_loss|loss)(?:_step)?=([-+0-9.eE]+)"
HF_DICT = r"^\s*\{'(loss|train_runtime)': "
HF_EVAL = r"^\s*\{'eval_"
# Time stamps of other lines (anchors for tqdm bars): ISO-like, or the transformers examples'
# ``%m/%d/%Y %H:%M:%S``.
ISO_STAMP = r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?"
# the zone an ISO stamp may carry after it (read by ``prefixes.zone_minutes``)
ISO_ZONE = r"(?:\s?(Z|UTC|[+-]\d\d:?\d\d)\b)?"
US_STAMP = r"^\s*(\d\d)/(\d\d)/(\d{4}) (\d\d:\d\d:\d\d)"
# Lines that look like training progress: if nothing above parses them, they are quarantined.
LOOKS_LIKE = (
    r"elapsed time per iteration|INFO - step:|^\s*\{'loss'|^\s*\{'train_runtime'|"
    r"^\s*(?:Epoch \d+:\s+)?\d+%\|"
)
_TS_FORMAT = "%Y-%m-%d %H:%M:%S%.f"


def _hf_value(key: str) -> str:
    return rf"'{key}': '?([-+0-9.eE]+|nan|inf)'?"


@dataclass
class _State:
    """Carried from chunk to chunk: the last row of each stream, and the last time anchor."""

    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    anchor_ts: Any = None
    bar_total: int | None = None  # the training bar's total (other totals are eval bars)


def _job_and_node(ctx: ParseContext) -> tuple[str | None, str | None]:
    """Job id from the context or a ``jobs/<job_id>/`` folder; the node unless it is that folder."""
    parts = ctx.file.replace("\\", "/").split("/")
    folder_job = parts[-2] if len(parts) >= 3 and parts[-3] == "jobs" else None
    job_id = ctx.job_id or folder_job
    node = ctx.node if ctx.node != folder_job else None
    return job_id, node


class TrainingParser:
    name = "training"
    source = Source.TRAINING
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines)
        if re.search(r"elapsed time per iteration \(ms\)|\[titan\] .* - INFO - ", text):
            return 0.95
        if re.search(r"\d+%\|[^|]*\|\s*\d+/(?:\d+|\?) \[|^\{'loss': ", text, re.M):
            return 0.8
        return 0.0

    def new_state(self, ctx: ParseContext) -> _State:
        return _State()

    # -- the pure one-line path ------------------------------------------------------------------
    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        """One line, without the context of the lines before it: step times of torchtitan and
        time stamps of tqdm bars (both need earlier lines) are left null."""
        result = self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, _State())
        if result.quarantine is not None and result.quarantine.height:
            return Quarantined(result.quarantine["reason"][0])
        rows = {
            name: frame.drop("line", strict=False).to_dicts()
            for name, frame in result.tables.items()
            if frame.height
        }
        return Parsed(rows) if result.parsed else None

    # -- the vectorized path ---------------------------------------------------------------------
    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: _State
    ) -> ChunkResult:
        frame = numbered(lines, first_line).filter(pl.col("raw").is_not_null())
        segs = _segments(frame)
        tz = zone_of(ctx)
        rows = pl.concat(
            [
                _megatron(segs, tz),
                _titan(segs, tz),
                _hf_bar(segs),
                _lightning_bar(segs),
                _hf_dict(segs),
            ],
            how="diagonal_relaxed",
        )
        rows = _place_in_time(rows, segs, state, tz)
        parsed_lines = set(rows["line"].to_list())
        quarantine = _quarantine(frame, parsed_lines | _known_noise(segs, state))
        job_id, node = _job_and_node(ctx)
        steps, events = _finish_rows(rows, job_id, node, ctx.file, state)
        tables = {"train_steps": steps}
        if events.height:
            tables["events"] = events
        return ChunkResult(tables=tables, parsed=len(parsed_lines), quarantine=quarantine)

    def finish(self, ctx: ParseContext, state: _State) -> ChunkResult:
        return ChunkResult()


def _segments(frame: pl.DataFrame) -> pl.DataFrame:
    """Split each line on ``\\r`` (tqdm redraws), strip ANSI colours; one row per segment."""
    return (
        frame.with_columns(seg=pl.col("raw").str.replace_all(ANSI, "").str.split("\r"))
        .explode("seg")
        .with_row_index("order")
        .filter(pl.col("seg").str.strip_chars() != "")
    )


def _rank(groups: pl.Expr) -> pl.Expr:
    ranks = pl.coalesce(groups.struct.field("1"), groups.struct.field("2"))
    return ranks.cast(pl.Int32, strict=False)


def _stamp(local: pl.Expr, tz: str | None) -> dict[str, pl.Expr]:
    """``ts`` of a zone-less wall-clock stamp (and, with ``tz``, ``tz_flag``: why it is null)."""
    if not tz:
        return {"ts": local}
    return {"ts": localize(local, tz), "tz_flag": zone_flag(local, tz)}


def _megatron(segs: pl.DataFrame, tz: str | None = None) -> pl.DataFrame:
    g = pl.col("seg").str.extract_groups(MEGATRON)
    out = segs.with_columns(g=g).filter(pl.col("g").struct.field("4").is_not_null())
    step_time_s = pl.col("g").struct.field("6").cast(pl.Float64, strict=False) / 1000.0
    gbs = pl.col("seg").str.extract(MEGATRON_GBS).cast(pl.Float64, strict=False)
    return out.select(
        "order",
        "line",
        framework=pl.lit("megatron"),
        rank=_rank(pl.col("g")),
        **_stamp(pl.col("g").struct.field("3").str.to_datetime(_TS_FORMAT, strict=False), tz),
        step=pl.col("g").struct.field("4").cast(pl.Int64, strict=False),
        total_steps=pl.col("g").struct.field("5").cast(pl.Int64, strict=False),
        step_time_s=step_time_s,
        samples_per_s=gbs / step_time_s,
        loss=pl.col("seg").str.extract(MEGATRON_LOSS).cast(pl.Float64, strict=False),
        lr=pl.col("seg").str.extract(MEGATRON_LR).cast(pl.Float64, strict=False),
    )


def _titan(segs: pl.DataFrame, tz: str | None = None) -> pl.DataFrame:
    g = pl.col("seg").str.extract_groups(TITAN)
    out = segs.with_columns(g=g).filter(pl.col("g").struct.field("5").is_not_null())
    stamp = fmt("{}.{}", pl.col("g").struct.field("3"), pl.col("g").struct.field("4"))
    return out.select(
        "order",
        "line",
        framework=pl.lit("torchtitan"),
        rank=_rank(pl.col("g")),
        **_stamp(stamp.str.to_datetime(_TS_FORMAT, strict=False), tz),
        step=pl.col("g").struct.field("5").cast(pl.Int64, strict=False),
        tokens_per_s=pl.col("seg")
        .str.extract(TITAN_TPS)
        .str.replace_all(",", "")
        .cast(pl.Float64, strict=False),
        loss=pl.col("g").struct.field("6").cast(pl.Float64, strict=False),
    )


def _bar_columns(g: pl.Expr, offset: int) -> dict[str, pl.Expr]:
    """Columns of a tqdm bar whose first group is number ``offset + 1``."""

    def f(i: int) -> pl.Expr:
        return g.struct.field(str(offset + i))

    elapsed_s = (
        f(4).cast(pl.Float64).fill_null(0.0) * 3600
        + f(5).cast(pl.Float64) * 60
        + f(6).cast(pl.Float64)
    )
    rate = f(7).cast(pl.Float64, strict=False)
    step_time_s = pl.when(f(8) == "s/it").then(rate).when(rate > 0).then(1.0 / rate)
    return {
        "n": f(2).cast(pl.Int64, strict=False),
        "bar_total": f(3).cast(pl.Int64, strict=False),
        "elapsed_s": elapsed_s,
        "step_time_s": step_time_s,
        "postfix": f(9),
    }


def _hf_bar(segs: pl.DataFrame) -> pl.DataFrame:
    out = segs.with_columns(g=pl.col("seg").str.extract_groups(HF_BAR)).filter(
        pl.col("g").struct.field("2").is_not_null()
    )
    cols = _bar_columns(pl.col("g"), 0)
    return out.select(
        "order",
        "line",
        framework=pl.lit("hf_trainer"),
        step=cols["n"],
        total_steps=cols["bar_total"],
        bar_total=cols["bar_total"],
        elapsed_s=cols["elapsed_s"],
        step_time_s=cols["step_time_s"],
        is_bar=pl.lit(True),
    )


def _lightning_bar(segs: pl.DataFrame) -> pl.DataFrame:
    out = segs.with_columns(g=pl.col("seg").str.extract_groups(LIGHTNING_BAR)).filter(
        pl.col("g").struct.field("3").is_not_null()
    )
    cols = _bar_columns(pl.col("g"), 1)
    epoch = pl.col("g").struct.field("1").cast(pl.Int64, strict=False)
    per_epoch = cols["bar_total"]
    return out.select(
        "order",
        "line",
        framework=pl.lit("lightning"),
        step=pl.when(per_epoch.is_not_null())
        .then(epoch * per_epoch + cols["n"])
        .otherwise(cols["n"]),
        bar_total=pl.lit(None, pl.Int64),
        elapsed_s=cols["elapsed_s"],
        step_time_s=cols["step_time_s"],
        is_bar=pl.lit(True),
        loss=cols["postfix"].str.extract(LIGHTNING_LOSS).cast(pl.Float64, strict=False),
    )


def _hf_dict(segs: pl.DataFrame) -> pl.DataFrame:
    out = segs.filter(pl.col("seg").str.contains(HF_DICT))

    def v(key: str) -> pl.Expr:
        return pl.col("seg").str.extract(_hf_value(key)).cast(pl.Float64, strict=False)

    return out.select(
        "order",
        "line",
        framework=pl.lit("hf_trainer"),
        loss=pl.coalesce(v("loss"), v("train_loss")),
        lr=v("learning_rate"),
        samples_per_s=v("train_samples_per_second"),
        is_dict=pl.lit(True),
    )


def _known_noise(segs: pl.DataFrame, state: _State) -> set[int]:
    """Lines of evaluation progress (HF eval dicts and eval bars): noise, not suspects."""
    totals = segs["seg"].str.extract(HF_BAR, 3).cast(pl.Int64, strict=False)
    is_eval_bar = totals.is_not_null() & (totals != (state.bar_total or -1))
    is_eval = segs["seg"].str.contains(HF_EVAL) | is_eval_bar
    return set(segs.filter(is_eval)["line"].to_list())


def _anchors(segs: pl.DataFrame, tz: str | None = None) -> pl.DataFrame:
    """Time stamps of any line (order, anchor_ts), for placing tqdm bars in time; with ``tz``,
    an anchor the zone cannot place is kept with ``anchor_ts`` null."""
    iso = pl.col("seg").str.slice(0, 80).str.extract_groups(ISO_STAMP)
    us = pl.col("seg").str.extract_groups(US_STAMP)
    iso_text = fmt(
        "{} {}.{}",
        iso.struct.field("1"),
        iso.struct.field("2"),
        iso.struct.field("3").fill_null("0"),
    )
    us_text = fmt(
        "{}-{}-{} {}.0",
        us.struct.field("3"),
        us.struct.field("1"),
        us.struct.field("2"),
        us.struct.field("4"),
    )
    ts = pl.coalesce(iso_text, us_text).str.to_datetime(_TS_FORMAT, strict=False)
    # an offset written after that ISO stamp (the first of the line) makes it exact, with or
    # without tz: ``+01:00``, ``+0100``, ``Z``, ``UTC``, a space before it or none
    off = pl.col("seg").str.slice(0, 90).str.extract(r"^.*?" + ISO_STAMP + ISO_ZONE, 4)
    exact = ts - pl.duration(minutes=zone_minutes(off))
    placed = (
        pl.when(iso_text.is_not_null() & off.is_not_null()).then(exact).otherwise(localize(ts, tz))
    )
    if not tz:
        return segs.select("order", anchor_ts=placed).filter(pl.col("anchor_ts").is_not_null())
    return (
        segs.select("order", local=ts, anchor_ts=placed)
        .filter(pl.col("local").is_not_null())
        .drop("local")
    )


def _place_in_time(
    rows: pl.DataFrame, segs: pl.DataFrame, state: _State, tz: str | None = None
) -> pl.DataFrame:
    """Give tqdm bar rows a time stamp (bar-start anchor + elapsed); drop eval bars."""
    for name, dtype in (
        ("is_bar", pl.Boolean),
        ("is_dict", pl.Boolean),
        ("bar_total", pl.Int64),
        ("elapsed_s", pl.Float64),
        ("ts", pl.Datetime("us")),
    ):
        if name not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype).alias(name))
    rows = rows.with_columns(pl.col("is_bar").fill_null(False), pl.col("is_dict").fill_null(False))
    hf_totals = rows.filter(pl.col("is_bar") & pl.col("bar_total").is_not_null())["bar_total"]
    if state.bar_total is None and hf_totals.len():
        state.bar_total = int(hf_totals[0])
    # An HF bar with another total than the training bar's is an evaluation bar: not a step.
    rows = rows.filter(
        ~(
            pl.col("is_bar")
            & pl.col("bar_total").is_not_null()
            & (pl.col("bar_total") != (state.bar_total or -1))
        )
    )
    anchors = _anchors(segs, tz)
    merged = pl.concat([rows, anchors], how="diagonal_relaxed").sort("order")
    if tz:  # an anchor the zone cannot place (null) still ends the one before it
        anchor = pl.when(pl.col("framework").is_null()).then(pl.struct("anchor_ts"))
        before = pl.struct(anchor_ts=pl.lit(state.anchor_ts, pl.Datetime("us")))
        anchor = anchor.fill_null(strategy="forward").fill_null(before)
        merged = merged.with_columns(anchor_ts=anchor.struct.field("anchor_ts"))
    else:
        merged = merged.with_columns(pl.col("anchor_ts").fill_null(strategy="forward"))
        if state.anchor_ts is not None:
            merged = merged.with_columns(pl.col("anchor_ts").fill_null(state.anchor_ts))
    if anchors.height:
        state.anchor_ts = anchors["anchor_ts"][-1]
    return merged.filter(pl.col("framework").is_not_null())


def _finish_rows(
    rows: pl.DataFrame, job_id: str | None, node: str | None, file: str, state: _State
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per stream (framework, rank): bar time stamps, torchtitan step times, dedupe of redraws,
    HF dict steps, and restart events. Earlier chunks' last rows seed each stream."""
    if rows.height == 0:
        return empty_frame("train_steps"), empty_frame("events")
    rows = rows.with_columns(
        stream=fmt("{}/{}", "framework", pl.col("rank").fill_null(-1)),
        seed=pl.lit(False),
        base=pl.lit(None, pl.Datetime("us")),
    )
    seeds = [dict(v, stream=k, seed=True) for k, v in state.last.items()]
    if seeds:
        rows = pl.concat(
            [pl.DataFrame(seeds, infer_schema_length=None), rows], how="diagonal_relaxed"
        )
    rows = rows.with_row_index("pos")
    progress = _bar_times(rows.filter(~pl.col("is_dict")))
    prev_step = pl.col("step").shift(1).over("stream", order_by="pos")
    prev_ts = pl.col("ts").shift(1).over("stream", order_by="pos")
    progress = progress.with_columns(prev_step=prev_step, prev_ts=prev_ts).with_columns(
        restart=(
            (pl.col("step") < pl.col("prev_step"))
            | (~pl.col("is_bar") & (pl.col("step") == pl.col("prev_step")))
        ).fill_null(False),
        redraw=(pl.col("is_bar") & (pl.col("step") == pl.col("prev_step"))).fill_null(False),
    )
    titan_dt = (
        (pl.col("ts") - pl.col("prev_ts")).dt.total_microseconds()
        / 1e6
        / (pl.col("step") - pl.col("prev_step"))
    )
    progress = progress.with_columns(
        step_time_s=pl.when((pl.col("framework") == "torchtitan") & ~pl.col("restart"))
        .then(titan_dt)
        .otherwise(pl.col("step_time_s")),
    )
    _remember(progress, state)
    progress = progress.filter(~pl.col("seed"))
    events = _restart_events(progress.filter(pl.col("restart")), job_id, node, file)
    steps = progress.filter(~pl.col("redraw"))
    dicts = rows.filter(pl.col("is_dict"))
    if dicts.height:
        dicts = _dict_steps(dicts, progress)
    out = (
        pl.concat([steps, dicts], how="diagonal_relaxed")
        .sort("pos")
        .with_columns(
            job_id=pl.lit(job_id, pl.String),
            node=pl.lit(node, pl.String),
            file=pl.lit(file),
        )
    )
    columns = empty_frame("train_steps").columns
    return conform("train_steps", out.select([c for c in out.columns if c in columns])), events


def _bar_times(progress: pl.DataFrame) -> pl.DataFrame:
    """Time stamps of tqdm bar rows: ``base + elapsed``, where a bar (a new one starts when the
    elapsed time goes down) has as base the last time-stamped line before it, or, when no new
    one came since the previous bar (Lightning's per-epoch bar reset), that bar's end."""
    bars = progress.filter(pl.col("is_bar"))
    if bars.height == 0:
        return progress
    prev_elapsed = pl.col("elapsed_s").shift(1).over("stream", order_by="pos")
    bars = bars.with_columns(
        new=(prev_elapsed.is_null() | (pl.col("elapsed_s") < prev_elapsed)) & ~pl.col("seed")
    ).with_columns(inc=pl.col("new").cum_sum().over("stream", order_by="pos"))
    incs = (
        bars.group_by("stream", "inc", maintain_order=True)
        .agg(
            first_pos=pl.col("pos").min(),
            src=pl.col("anchor_ts").sort_by("pos").first(),
            seed_base=pl.col("base").sort_by("pos").first(),
            last_elapsed=pl.col("elapsed_s").sort_by("pos").last(),
        )
        .sort("stream", "first_pos")
    )
    bases: list[Any] = []
    prev: dict[str, tuple[Any, Any, float]] = {}  # stream -> (src, base, last elapsed)
    for rec in incs.iter_rows(named=True):  # one per bar: a handful per file
        p = prev.get(rec["stream"])
        if rec["seed_base"] is not None:
            base = rec["seed_base"]
        elif rec["src"] is not None and (p is None or p[0] is None or rec["src"] > p[0]):
            base = rec["src"]
        elif p is not None and p[1] is not None:
            base = p[1] + timedelta(seconds=p[2])
        else:
            base = None
        bases.append(base)
        prev[rec["stream"]] = (rec["src"], base, rec["last_elapsed"])
    incs = incs.with_columns(pl.Series("base_new", bases, dtype=pl.Datetime("us")))
    bars = bars.join(incs.select("stream", "inc", "base_new"), on=["stream", "inc"], how="left")
    bars = bars.with_columns(
        base=pl.col("base_new"),
        ts=pl.col("base_new")
        + pl.duration(milliseconds=(pl.col("elapsed_s") * 1000).cast(pl.Int64)),
    ).drop("new", "inc", "base_new")
    return pl.concat([progress.filter(~pl.col("is_bar")), bars], how="diagonal_relaxed").sort("pos")


def _dict_steps(dicts: pl.DataFrame, progress: pl.DataFrame) -> pl.DataFrame:
    """HF metric dicts take the step and time of the bar row before them."""
    bars = progress.filter(pl.col("framework") == "hf_trainer").select(
        "pos", bar_step=pl.col("step"), bar_ts=pl.col("ts"), bar_total=pl.col("total_steps")
    )
    if bars.height == 0:
        return dicts
    return (
        dicts.sort("pos")
        .join_asof(bars.sort("pos"), on="pos")
        .with_columns(step=pl.col("bar_step"), ts=pl.col("bar_ts"), total_steps=pl.col("bar_total"))
        .drop("bar_step", "bar_ts", "bar_total")
    )


def _remember(progress: pl.DataFrame, state: _State) -> None:
    keep = (
        "framework",
        "rank",
        "step",
        "ts",
        "elapsed_s",
        "is_bar",
        "is_dict",
        "base",
        "anchor_ts",
    )
    last = progress.group_by("stream").agg(pl.all().sort_by("pos").last())
    for rec in last.select("stream", *[c for c in keep if c in last.columns]).to_dicts():
        state.last[rec.pop("stream")] = rec


def _restart_events(
    restarts: pl.DataFrame, job_id: str | None, node: str | None, file: str
) -> pl.DataFrame:
    if restarts.height == 0:
        return empty_frame("events")
    flag = pl.lit(None, pl.String)
    if "tz_flag" in restarts.columns:
        flag = pl.when(pl.col("ts").is_null()).then(pl.col("tz_flag"))
    ev = restarts.select(
        "ts",
        "line",
        ts_flag=flag,
        node=pl.lit(node, pl.String),
        source=pl.lit(Source.TRAINING.value),
        kind=pl.lit(Kind.RESTART.value),
        severity=pl.lit(Severity.INFO.value),
        job_id=pl.lit(job_id, pl.String),
        message=pl.concat_str(
            [
                pl.col("framework").cast(pl.String),
                pl.lit(" resumed at step "),
                pl.col("step").cast(pl.String),
                pl.lit(" after reaching step "),
                pl.col("prev_step").cast(pl.String),
            ]
        ),
        attrs=pl.struct("framework", "rank", "step", "prev_step").map_elements(
            lambda s: to_json(s), return_dtype=pl.String
        ),
        file=pl.lit(file),
    )
    return conform("events", ev)


def _quarantine(frame: pl.DataFrame, parsed_lines: set[int]) -> pl.DataFrame | None:
    suspects = frame.filter(
        ~pl.col("line").is_in(list(parsed_lines))
        & pl.col("raw").str.replace_all(ANSI, "").str.contains(LOOKS_LIKE)
    )
    if suspects.height == 0:
        return None
    return quarantine_frame(
        suspects["line"].to_list(),
        suspects["raw"].to_list(),
        ["training-progress line that does not parse"] * suspects.height,
    )


PARSERS = [TrainingParser()]
