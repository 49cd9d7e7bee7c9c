"""``tz`` on training logs' zone-less stamps (Megatron, torchtitan, tqdm anchors).

Europe/Berlin is UTC+1 in winter, UTC+2 in summer; 2026-10-25 02:30 happens twice there and
2026-03-29 02:30 never: those steps keep ``ts`` null (a restart event there is flagged), and a
tqdm bar after such an anchor is not placed by an earlier anchor.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest

from faultlens.ingest.base import ChunkResult, ParseContext
from faultlens.ingest.training.parser import TrainingParser

BERLIN = "Europe/Berlin"
P = TrainingParser()


def _run(lines: list[str], tz: str | None) -> ChunkResult:
    ctx = ParseContext(file="train.log", options={"tz": tz} if tz else {})
    return P.parse_chunk(pl.Series(lines, dtype=pl.String), 1, ctx, P.new_state(ctx))


def _megatron(stamp: str, step: int) -> str:
    return (
        f"[{stamp}] iteration {step:>6}/ 500000 | consumed samples:     256 | elapsed time per "
        "iteration (ms): 1811.8 | learning rate: 4.000000E-07 | global batch size:   128 | "
        "lm loss: 1.177651E+01 | loss scale: 1.0 |"
    )


def _titan(stamp: str, step: int) -> str:
    return f"[rank0]:[titan] {stamp},123 - root - INFO - step: {step:>3}  loss:  9.1234  tps: 6,543"


# (wall clock, tz, UTC, flag)
CASES = [
    ("2026-01-15 10:00:00", BERLIN, datetime(2026, 1, 15, 9, 0), None),
    ("2026-07-15 10:00:00", BERLIN, datetime(2026, 7, 15, 8, 0), None),
    ("2026-10-25 02:30:00", BERLIN, None, "tz_ambiguous"),
    ("2026-03-29 02:30:00", BERLIN, None, "tz_gap"),
    ("2026-10-25 02:30:00", None, datetime(2026, 10, 25, 2, 30), None),
]
IDS = ["winter", "summer", "ambiguous", "gap", "no_tz"]


@pytest.mark.parametrize(("stamp", "tz", "utc", "flag"), CASES, ids=IDS)
def test_megatron_steps_and_restart(stamp: str, tz, utc, flag) -> None:
    lines = [_megatron("2026-01-01 00:00:00", 5), _megatron(stamp, 2)]  # 5 -> 2: a restart
    out = _run(lines, tz)
    steps = out.tables["train_steps"].select("ts", "step").rows()
    first = datetime(2026, 1, 1) - timedelta(hours=1) if tz else datetime(2026, 1, 1)
    assert steps == [(first, 5), (utc, 2)]
    ev = out.tables["events"].select("ts", "ts_flag", "kind", "line").rows()
    assert ev == [(utc, flag, "restart", 2)]


@pytest.mark.parametrize(("stamp", "tz", "utc", "flag"), CASES, ids=IDS)
def test_torchtitan_steps(stamp: str, tz, utc, flag) -> None:
    out = _run([_titan(stamp, 10)], tz)
    at = None if utc is None else utc + timedelta(milliseconds=123)
    assert out.tables["train_steps"].select("ts", "step").rows() == [(at, 10)]


@pytest.mark.parametrize(("stamp", "tz", "utc", "flag"), CASES, ids=IDS)
def test_tqdm_bar_placed_by_its_anchor(stamp: str, tz, utc, flag) -> None:
    lines = [
        "2026-01-01 00:00:00,000 - INFO - an earlier line",
        f"{stamp},000 - INFO - ***** Running training *****",
        " 45%|####5     | 450/1000 [01:00<01:42,  5.39it/s]",
    ]
    out = _run(lines, tz)
    at = None if utc is None else utc + timedelta(minutes=1)
    assert out.tables["train_steps"].select("ts", "step").rows() == [(at, 450)]


def test_anchor_with_an_offset_is_read_exactly() -> None:
    lines = [
        "2026-07-15T10:00:00+00:00 INFO ***** Running training *****",
        " 45%|####5     | 450/1000 [01:00<01:42,  5.39it/s]",
    ]
    out = _run(lines, BERLIN)
    assert out.tables["train_steps"].select("ts", "step").rows() == [
        (datetime(2026, 7, 15, 10, 1), 450)
    ]


# An anchor that writes its zone is one instant: 2026-01-01 09:00 UTC in each spelling; the bar
# started there, one minute (01:00 elapsed) before its step 450, so the step is at 09:01 UTC
# whatever --tz says.
STEP_UTC = datetime(2026, 1, 1, 9, 1)
ZONED_ANCHORS = [
    "2026-01-01T10:00:00+01:00 INFO ***** Running training *****",
    "2026-01-01 10:00:00+01:00 INFO ***** Running training *****",
    "2026-01-01 10:00:00 +01:00 INFO ***** Running training *****",
    "2026-01-01 10:00:00+0100 INFO ***** Running training *****",
    "2026-01-01T10:00:00.000+0100 - INFO - ***** Running training *****",
    "[2026-01-01 04:00:00,000-05:00][__main__][INFO] - ***** Running training *****",
    "2026-01-01T09:00:00Z INFO ***** Running training *****",
    "2026-01-01 09:00:00 UTC INFO ***** Running training *****",
]
ANCHOR_IDS = ["T", "space", "space_offset", "hhmm", "ms_hhmm", "hydra_minus5", "z", "utc"]


@pytest.mark.parametrize(
    "tz", [None, BERLIN, "America/Chicago"], ids=["no_tz", "berlin", "chicago"]
)
@pytest.mark.parametrize("anchor", ZONED_ANCHORS, ids=ANCHOR_IDS)
def test_anchor_with_its_zone_is_exact_with_or_without_tz(anchor: str, tz) -> None:
    lines = [anchor, " 45%|####5     | 450/1000 [01:00<01:42,  5.39it/s]"]
    out = _run(lines, tz)
    assert out.tables["train_steps"].select("ts", "step", "line").rows() == [(STEP_UTC, 450, 2)]


@pytest.mark.parametrize(
    ("tz", "utc"),
    [(None, datetime(2026, 1, 1, 10, 1)), (BERLIN, STEP_UTC)],
    ids=["no_tz", "berlin"],
)
def test_an_anchor_without_a_zone_is_still_the_site_zone(tz, utc) -> None:
    # "- INFO" after the stamp is no offset: 10:00 is the site's wall clock (UTC, or Berlin's +1)
    lines = [
        "2026-01-01 10:00:00 - INFO - ***** Running training *****",
        " 45%|####5     | 450/1000 [01:00<01:42,  5.39it/s]",
    ]
    assert _run(lines, tz).tables["train_steps"].select("ts", "step").rows() == [(utc, 450)]
