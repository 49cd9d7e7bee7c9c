"""The prefix library's fast path: lines with the common RFC 3164 head (``FAST_SYSLOG``) are read by
slicing; the reference is the general syslog shape's regex groups on the same lines."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from faultlens.ingest import prefixes
from faultlens.ingest.base import ParseContext

CTXS = (
    ParseContext(file="f", mtime=datetime(2025, 3, 2)),
    ParseContext(file="f", year=2024),
    ParseContext(file="f"),
)
# pieces of syslog heads: (valid, odd). A line has valid pieces but for at most one odd piece;
# the fast path must take exactly the lines it reads as the general shape does.
PIECES = {
    "mon": (["Jan", "Feb", "Nov", "Dec"], ["Mär", "nov", "Sept", "Okt", "May."]),
    "day": ([" 1", "01", "29", "30", "31"], [" 0", "1", "7,", "  3", "123"]),
    "time": (["00:00:00", "23:59:59", "23:59:60", "24:00:00", "12:60:00"], ["1:02:03", "12:00"]),
    "frac": ([""], [".5", ",123456789", "."]),
    "host": (["gpu-07", "Node.Example.COM", "10.0.0.1", "h_1", "h" * 63], ["-x", "", "h" * 64]),
    "sep": ([" "], ["  ", "", "\t"]),
    "tag": (["kernel", "python[4004]", "täg[2]", "t" * 64], ["t[x]", "t[12345678901]", "t" * 65]),
    "end": ([": ", ": [rank1]: "], [":", " : ", ":x"]),
}
MESSAGES = st.sampled_from(["NVRM: Xid 79", "Nov  2 01:02:03 inner t: x", "", "[2024-05-01] x"])


@st.composite
def syslog_lines(draw: st.DrawFn) -> str:
    odd = draw(st.one_of(st.none(), st.sampled_from(list(PIECES))))
    part = {k: draw(st.sampled_from(v[k == odd])) for k, v in PIECES.items()}
    if odd is None and draw(st.integers(0, 3)) == 0:  # any host / tag text
        part["host"] = draw(st.text("ab1.-_", min_size=1, max_size=70))
        part["tag"] = draw(st.text("ab:[]1ü ", min_size=1, max_size=70))
    head = f"{part['mon']} {part['day']} {part['time']}{part['frac']} "
    return head + part["host"] + part["sep"] + part["tag"] + part["end"] + draw(MESSAGES)


def _layers(lines: list[str], ctx: ParseContext) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The fast path's columns and the syslog shape's, on the lines ``FAST_SYSLOG`` matches."""
    frame = pl.DataFrame({"raw": lines}, schema={"raw": pl.String})
    fast = frame.with_columns(_head=pl.col("raw").str.extract(prefixes.FAST_SYSLOG, 0)).filter(
        pl.col("_head").is_not_null()
    )
    for rx in list(prefixes.SHAPES.values())[:-1]:  # no earlier shape takes these lines
        assert not fast.select(pl.col("raw").str.contains(rx)).to_series().any()
    assert fast.select(pl.col("raw").str.contains(prefixes.SHAPES["syslog"])).to_series().all()
    got = prefixes._fast_syslog(fast, "raw", ctx).drop("_head")
    want = prefixes._shape_groups(fast.drop("_head"), "syslog", "raw", ctx)
    return got, want


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(syslog_lines(), min_size=1, max_size=30))
def test_the_fast_syslog_head_reads_as_the_general_shape(lines: list[str]) -> None:
    for ctx in CTXS:
        got, want = _layers(lines, ctx)
        assert_frame_equal(got, want)


def test_the_fast_path_takes_the_common_heads() -> None:
    lines = [
        "Nov  1 00:00:28 gpu-028 python[4004]: NCCL WARN x",
        "Nov 11 23:59:60 gpu-028 kernel: NVRM: Xid 79",
        "Feb 29 00:00:00 Node.Example.COM slurmd[12]: error: x",
    ]
    got, want = _layers(lines, CTXS[0])
    assert got.height == 3
    assert_frame_equal(got, want)
    assert got["_ts"].to_list() == [
        datetime(2024, 11, 1, 0, 0, 28),
        datetime(2024, 11, 12, 0, 0, 0),  # a leap second is the next minute
        None,  # 2025 has no Feb 29
    ]
    out = prefixes.prefix_frame(pl.DataFrame({"raw": lines}), CTXS[0])
    assert out["p_host"].to_list() == ["gpu-028", "gpu-028", "node"]
    assert out["body"].to_list() == ["NCCL WARN x", "NVRM: Xid 79", "error: x"]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(1, 60), max_size=30, unique=True),
    st.lists(st.integers(0, 70), min_size=1, max_size=30),
    st.randoms(use_true_random=False),
)
def test_events_take_their_prefix_by_line(pre_lines: list[int], ev_lines: list[int], rng) -> None:
    """The prefixes in line order are found by binary search; the reference is the join that
    any other order takes."""
    from faultlens.ingest.schema import TABLES

    n = len(pre_lines)
    pre = pl.DataFrame(
        {
            "line": sorted(pre_lines),
            "p_ts": [datetime(2024, 1, 1, k % 24) if k % 3 else None for k in range(n)],
            "p_host": ["a" if k % 2 else None for k in range(n)],
            "p_flag": [
                "year_from_mtime" if k % 3 else "boot_relative" if k % 2 else None for k in range(n)
            ],
            "p_up": [k / 2 if k % 3 == 0 and k % 2 else None for k in range(n)],
        },
        schema=prefixes.PREFIX_SCHEMA,
    )
    schema = TABLES["events"].polars_schema
    events = pl.DataFrame({c: [None] * len(ev_lines) for c in schema}, schema=schema)
    events = events.with_columns(
        line=pl.Series(ev_lines, dtype=schema["line"]),
        ts=pl.Series([datetime(2023, 5, 5) if k % 4 == 0 else None for k in ev_lines]),
        node=pl.Series(["n" if k % 5 == 0 else None for k in ev_lines], dtype=pl.String),
        ts_flag=pl.Series(["no_ts" if k % 2 else None for k in ev_lines], dtype=pl.String),
    )
    order = list(range(n))
    rng.shuffle(order)
    shuffled = pre[order]
    if n > 1 and order != sorted(order):  # the reference path
        assert not (shuffled["line"].diff().drop_nulls() > 0).all()
    assert_frame_equal(prefixes.fill_events(events, pre), prefixes.fill_events(events, shuffled))


def test_numbered_months_of_chinese_japanese_and_korean_locales(tmp_path, store) -> None:
    # journalctl under zh_CN / ja_JP / ko_KR writes the month's number and its sign (ko_KR with
    # a blank before 1-9); the time and host come from that head for every family (kernel Xid,
    # slurmd errors: the Slurm family reads its own head, so it is given the English month)
    from faultlens.ingest.pipeline import ingest_paths

    lines = [
        " 3월  2 01:02:03 gpu-b2 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",
        "11月 15 14:15:47 gpu-a1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, gone",
        "déc. 30 08:00:00 gpu-e5 slurmd[77]: error: Node configuration differs from hardware",
        "12月 31 23:59:59 gpu-c3 slurmd[77]: error: Node configuration differs from hardware",
        "13月 01 00:00:00 gpu-d4 kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid=1, name=x, remap",
    ]
    log = tmp_path / "journal.txt"
    log.write_text("\n".join(lines) + "\n")
    written = datetime(2027, 1, 1).timestamp()  # the file was last written after its lines
    os.utime(log, (written, written))
    ctx = ParseContext(file="", year=2026)
    (f,) = ingest_paths(store, [str(log)], now=datetime(2027, 1, 1), base_ctx=ctx).files
    assert (f.lines, f.parsed, f.quarantined) == (5, 5, 0)
    rows = store.query("SELECT line, ts, node FROM events ORDER BY line").rows()
    assert rows == [
        (1, datetime(2026, 3, 2, 1, 2, 3), "gpu-b2"),
        (2, datetime(2026, 11, 15, 14, 15, 47), "gpu-a1"),
        (3, datetime(2026, 12, 30, 8, 0), "gpu-e5"),
        (4, datetime(2026, 12, 31, 23, 59, 59), "gpu-c3"),
        (5, None, "gpu-d4"),  # no 13th month: the time unknown, kept, not guessed
    ]
    assert prefixes.month_of("11月") == 11 and prefixes.month_of("11월") == 11
    assert prefixes.month_of("0月") is None


YEAR_END = [
    "Dec 31 22:00:00 gpu-a1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, gone",  # 1
    "Dec 31 23:00:00 gpu-a1 slurmd[7]: error: Node configuration differs from hardware",  # 2
    "Jan  1 00:30:00 gpu-a1 python[9]: RuntimeError: CUDA error: misaligned address",  # 3
    "Jan  1 01:00:00 gpu-a1 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",  # 4
    "Jan  1 02:00:00 gpu-a1 slurmd[7]: error: Node configuration differs from hardware",  # 5
]


@pytest.mark.parametrize(("tz", "shift"), [(None, 0), ("Europe/Berlin", 1)], ids=["utc", "berlin"])
def test_with_year_every_family_rolls_over_at_new_year(tmp_path, store, tz, shift) -> None:
    # --year is the first line's year, one more from the first January line on: the kernel,
    # Slurm and prefix-timed (here a CUDA error's) lines of one journal agree. Before, the Slurm
    # and the prefix-timed January lines stayed in the first line's year. In Berlin (UTC+1 in
    # winter) every stamp is an hour later than UTC: 00:30 on 1 January is 23:30 UTC the day before.
    from faultlens.ingest.pipeline import ingest_paths

    log = tmp_path / "journal.txt"
    log.write_text("\n".join(YEAR_END) + "\n")
    written = datetime(2026, 1, 2).timestamp()
    os.utime(log, (written, written))
    ctx = ParseContext(file="", year=2025, options={"tz": tz} if tz else {})
    (f,) = ingest_paths(store, [str(log)], now=datetime(2026, 1, 2), base_ctx=ctx).files
    assert (f.status, f.parsed, f.quarantined) == ("ok", 5, 0), f
    got = store.query("SELECT line, ts, source FROM events ORDER BY line").rows()
    h = timedelta(hours=shift)
    assert got == [
        (1, datetime(2025, 12, 31, 22) - h, "kernel"),
        (2, datetime(2025, 12, 31, 23) - h, "slurm"),
        (3, datetime(2026, 1, 1, 0, 30) - h, "training"),
        (4, datetime(2026, 1, 1, 1) - h, "kernel"),
        (5, datetime(2026, 1, 1, 2) - h, "slurm"),
    ]
