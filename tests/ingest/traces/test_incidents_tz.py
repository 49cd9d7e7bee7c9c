"""``tz`` on the site's own incident records: zone-less times are the site's wall clock.

Europe/Berlin is UTC+1 in winter, UTC+2 in summer; 2026-10-25 02:30 happens twice there and
2026-03-29 02:30 never. A start the zone cannot place is quarantined with the reason, as a start
that does not read; such an end leaves ``end`` null and says why in ``attrs``.
"""

from __future__ import annotations

import json
from datetime import datetime

import polars as pl
import pytest

from faultlens.ingest.base import ChunkResult, ParseContext
from faultlens.ingest.traces.incidents import IncidentParser

BERLIN = "Europe/Berlin"
P = IncidentParser()
RECORDS = """\
node,start,end,description
gpu01,2026-01-15 10:00:00,2026-01-15 12:30:00,winter
gpu02,2026-07-15T10:00:00,2026-07-15T11:00:00,summer
gpu03,2026-07-15T10:00:00+02:00,2026-07-15T09:00:00Z,offsets
gpu04,1784102400,1784106000,unix seconds
gpu05,2026-10-25 02:30:00,2026-10-25 04:00:00,ambiguous start
gpu06,2026-03-29 02:30:00,2026-03-29 05:00:00,skipped start
gpu07,2026-10-25 01:00:00,2026-10-25 02:30:00,ambiguous end
"""


def _run(text: str, tz: str | None) -> ChunkResult:
    ctx = ParseContext(file="incidents.csv", options={"tz": tz} if tz else {})
    lines = pl.Series(text.splitlines(), dtype=pl.String)
    return P.parse_chunk(lines, 1, ctx, P.new_state(ctx))


def _incidents(out: ChunkResult) -> list[tuple]:
    return out.tables["incidents"].select("node", "start", "end").sort("node").rows()


def test_incident_times_in_the_site_zone() -> None:
    out = _run(RECORDS, BERLIN)
    assert _incidents(out) == [
        ("gpu01", datetime(2026, 1, 15, 9, 0), datetime(2026, 1, 15, 11, 30)),
        ("gpu02", datetime(2026, 7, 15, 8, 0), datetime(2026, 7, 15, 9, 0)),
        ("gpu03", datetime(2026, 7, 15, 8, 0), datetime(2026, 7, 15, 9, 0)),
        # 1784102400 s = 2026-07-15 08:00 UTC: Unix time is read exactly
        ("gpu04", datetime(2026, 7, 15, 8, 0), datetime(2026, 7, 15, 9, 0)),
        ("gpu07", datetime(2026, 10, 24, 23, 0), None),
    ]
    attrs = dict(out.tables["incidents"].select("node", "attrs").rows())
    assert json.loads(attrs["gpu07"]) == {"end_flag": "tz_ambiguous"}
    assert attrs["gpu01"] is None
    q = out.quarantine.select("line", "reason").rows()
    assert q == [
        (6, "incident time not in Europe/Berlin (tz_ambiguous): the hour its clocks change"),
        (7, "incident time not in Europe/Berlin (tz_gap): the hour its clocks change"),
    ]
    assert out.parsed == 5
    events = out.tables["events"].select("node", "ts").sort("node").rows()
    assert events[0] == ("gpu01", datetime(2026, 1, 15, 9, 0))


def test_without_tz_every_zone_less_time_is_utc() -> None:
    out = _run(RECORDS, None)
    got = _incidents(out)
    assert got[0] == ("gpu01", datetime(2026, 1, 15, 10, 0), datetime(2026, 1, 15, 12, 30))
    assert got[4:] == [
        ("gpu05", datetime(2026, 10, 25, 2, 30), datetime(2026, 10, 25, 4, 0)),
        ("gpu06", datetime(2026, 3, 29, 2, 30), datetime(2026, 3, 29, 5, 0)),
        ("gpu07", datetime(2026, 10, 25, 1, 0), datetime(2026, 10, 25, 2, 30)),
    ]
    assert out.quarantine is None
    assert "attrs" not in out.tables["incidents"].columns  # as before tz existed


def test_paired_events_with_an_unplaceable_time_are_quarantined() -> None:
    text = (
        "node,time,event\n"
        "gpu01,2026-10-25 01:00:00,down\n"
        "gpu01,2026-10-25 02:30:00,up\n"
        "gpu02,2026-07-15 10:00:00,down\n"
        "gpu02,2026-07-15 11:00:00,up\n"
    )
    out = _run(text, BERLIN)
    assert _incidents(out) == [
        ("gpu01", datetime(2026, 10, 24, 23, 0), None),
        ("gpu02", datetime(2026, 7, 15, 8, 0), datetime(2026, 7, 15, 9, 0)),
    ]
    assert out.quarantine.select("line").to_series().to_list() == [3]


# The same instant, 2026-01-01 09:00 UTC, in each spelling of a time with its own zone; a site
# zone (--tz) must not move any of them. The last rows are other offsets, worked out by hand.
NINE_UTC = datetime(2026, 1, 1, 9, 0)
SPELLINGS = [
    ("2026-01-01 10:00:00+01:00", NINE_UTC),
    ("2026-01-01 10:00:00 +01:00", NINE_UTC),
    ("2026-01-01 10:00:00+0100", NINE_UTC),
    ("2026-01-01 10:00:00 +0100", NINE_UTC),
    ("2026-01-01T10:00:00+01:00", NINE_UTC),
    ("2026-01-01T10:00+01:00", NINE_UTC),
    ("2026-01-01T10:00:00.250+01:00", datetime(2026, 1, 1, 9, 0, 0, 250000)),
    ("2026-01-01 09:00:00Z", NINE_UTC),
    ("2026-01-01T09:00:00Z", NINE_UTC),
    ("2026-01-01 09:00:00 UTC", NINE_UTC),
    ("2026-01-01 04:00:00-05:00", NINE_UTC),
    ("2026-01-01 14:30:00 +0530", NINE_UTC),
    ("1/1/2026 10:00 +01:00", NINE_UTC),
]


@pytest.mark.parametrize("tz", [None, BERLIN, "America/Chicago", "Asia/Kolkata"])
def test_a_time_with_its_own_zone_is_that_instant_whatever_the_site_zone(tz) -> None:
    header = "node,start,end,description\n"
    rows = "".join(
        f"gpu{i:02d},{stamp},,spelling {i}\n" for i, (stamp, _) in enumerate(SPELLINGS, 1)
    )
    out = _run(header + rows, tz)
    assert out.quarantine is None
    starts = out.tables["incidents"].sort("line").select("line", "start").rows()
    assert starts == [(i + 1, want) for i, (_, want) in enumerate(SPELLINGS, 1)]
    events = out.tables["events"].sort("line")["ts"].to_list()
    assert events == [want for _, want in SPELLINGS]
    assert out.parsed == len(SPELLINGS)


def test_an_offset_end_is_exact_and_a_zone_less_end_is_the_site_zone() -> None:
    # start 10:00+01:00 = 09:00 UTC; end 13:30 Berlin wall clock in winter (UTC+1) = 12:30 UTC
    text = "node,start,end\ngpu01,2026-01-01 10:00:00 +01:00,2026-01-01 13:30:00\n"
    out = _run(text, BERLIN)
    assert _incidents(out) == [("gpu01", NINE_UTC, datetime(2026, 1, 1, 12, 30))]
    assert out.tables["incidents"]["repair_h"].to_list() == [3.5]


def test_a_date_alone_is_not_read_as_a_time_with_an_offset() -> None:
    # "2026-01-01" ends in "-01", which is no offset: no clock before it; the date is
    # midnight of the site zone (Berlin, UTC+1 in winter: 23:00 UTC the day before)
    out = _run("node,start\ngpu01,2026-01-01\n", BERLIN)
    assert out.tables["incidents"]["start"].to_list() == [datetime(2025, 12, 31, 23, 0)]
