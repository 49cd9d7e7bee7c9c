"""``tz`` on Slurm's zone-less times (sacct, daemon logs, sinfo, squeue, scontrol).

Europe/Berlin is UTC+1 in winter and UTC+2 in summer; on 2026-03-29 its clocks jump from 02:00
to 03:00 (02:30 never happens there) and on 2026-10-25 they go back from 03:00 to 02:00 (02:30
happens twice). Those two are left null and flagged, the row kept; a time with an offset, and
Unix seconds, are read exactly whatever ``tz`` says; without ``tz`` every time is UTC.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.slurm.daemon import daemon_chunk, merge_reasons
from faultlens.ingest.slurm.daemon import parse_line as daemon_line
from faultlens.ingest.slurm.scontrol import node_block_event
from faultlens.ingest.slurm.timefmt import read_time, time_exprs

BERLIN = "Europe/Berlin"
NOW = datetime(2027, 1, 1)
YEAR = 2026
# wall-clock times of the cluster, and what they are in UTC in Berlin
WINTER = datetime(2026, 1, 15, 10, 0, 0)
SUMMER = datetime(2026, 7, 15, 10, 0, 0)
WINTER_UTC = datetime(2026, 1, 15, 9, 0, 0)  # UTC+1
SUMMER_UTC = datetime(2026, 7, 15, 8, 0, 0)  # UTC+2
AMBIGUOUS = datetime(2026, 10, 25, 2, 30, 0)  # 02:00-03:00 happens twice
SKIPPED = datetime(2026, 3, 29, 2, 30, 0)  # 02:00-03:00 never happens
EPOCH_0 = datetime(1970, 1, 1)


def _ctx(path: Path | str, tz: str | None, **kw) -> ParseContext:
    return ParseContext(file=str(path), options={"tz": tz} if tz else {}, **kw)


def _ingest(store, path: Path, ctx: ParseContext):
    report = ingest_paths(store, [str(path)], now=NOW, base_ctx=ctx)
    (f,) = report.files
    assert f.status in ("ok", "partial"), f.error
    return f


# -- SLURM_TIME_FORMAT values ----------------------------------------------------------------

# (text, UTC in Berlin, flag in Berlin, UTC without tz)
VALUES = [
    ("2026-01-15T10:00:00", WINTER_UTC, None, WINTER),
    ("2026-07-15T10:00:00", SUMMER_UTC, None, SUMMER),
    ("2026/07/15 10:00", SUMMER_UTC, None, SUMMER),
    ("15/01/2026 10:00:00", WINTER_UTC, None, WINTER),
    ("Wed Jul 15 10:00:00 2026", SUMMER_UTC, None, SUMMER),
    ("15 Jan 2026 10:00:00", WINTER_UTC, None, WINTER),
    ("2026-07-15T10:00:00+02:00", SUMMER_UTC, None, SUMMER_UTC),
    ("2026-07-15T10:00:00Z", SUMMER, None, SUMMER),
    ("2026-01-15T10:00:00-0500", datetime(2026, 1, 15, 15, 0), None, datetime(2026, 1, 15, 15, 0)),
    (str(int((SUMMER - EPOCH_0).total_seconds())), SUMMER, None, SUMMER),
    ("2026-10-25T02:30:00", None, "tz_ambiguous", AMBIGUOUS),
    ("Sun Oct 25 02:30:00 2026", None, "tz_ambiguous", AMBIGUOUS),
    ("25/10/2026 02:30", None, "tz_ambiguous", AMBIGUOUS),
    ("2026-10-25T02:30:00+01:00", datetime(2026, 10, 25, 1, 30), None, datetime(2026, 10, 25, 1, 30)),
    ("2026-03-29T02:30:00", None, "tz_gap", SKIPPED),
    ("29 Mar 2026 02:30", None, "tz_gap", SKIPPED),
    ("2026-10-25T01:59:59", datetime(2026, 10, 24, 23, 59, 59), None, datetime(2026, 10, 25, 1, 59, 59)),
    ("2026-10-25T03:00:00", datetime(2026, 10, 25, 2, 0), None, datetime(2026, 10, 25, 3, 0)),
    ("2026-03-29T03:00:00", datetime(2026, 3, 29, 1, 0), None, datetime(2026, 3, 29, 3, 0)),
    ("01/12/2026 06:11", None, "ambiguous_date", None),
    ("Tue 06:11", None, "relative_time", None),
    ("Unknown", None, None, None),
]  # fmt: skip


@pytest.mark.parametrize(("text", "utc", "flag", "naive"), VALUES, ids=[v[0] for v in VALUES])
def test_read_time_with_and_without_tz(text: str, utc, flag, naive) -> None:
    assert read_time(text, BERLIN) == (utc, flag)
    naive_flag = None if naive else read_time(text)[1]
    assert read_time(text) == (naive, naive_flag)
    assert naive_flag not in ("tz_ambiguous", "tz_gap")


@pytest.mark.parametrize("tz", [None, BERLIN, "UTC"])
def test_time_exprs_agree_with_read_time(tz: str | None) -> None:
    texts = [v[0] for v in VALUES] + [None, "", "2026-02-30 06:11"]
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    ts, flag = time_exprs(pl.col("t"), tz)
    assert frame.select(ts, flag).rows() == [read_time(t, tz) for t in texts]


# -- sacct ----------------------------------------------------------------------------------

SACCT_HEADER = "JobID|JobName|State|ExitCode|Start|End|NodeList|AllocTRES"


def test_sacct_jobs_in_the_site_zone(store, tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(
        f"{SACCT_HEADER}\n"
        "1|a|COMPLETED|0:0|2026-01-15T10:00:00|2026-07-15T10:00:00|n1|cpu=1\n"
        "2|b|COMPLETED|0:0|2026-10-25T02:30:00|2026-10-25T04:00:00|n1|cpu=1\n"
        "3|c|COMPLETED|0:0|2026-03-29T01:30:00|2026-03-29T02:30:00|n1|cpu=1\n"
        "4|d|COMPLETED|0:0|2026-10-25T02:30:00+02:00|2026-10-25T02:30:00+01:00|n1|cpu=1\n"
    )
    f = _ingest(store, path, _ctx(path, BERLIN))
    assert (f.parsed, f.quarantined) == (4, 0)
    rows = store.query('SELECT job_id, start, "end", time_flag FROM jobs ORDER BY job_id').rows()
    assert rows == [
        ("1", WINTER_UTC, SUMMER_UTC, None),
        ("2", None, datetime(2026, 10, 25, 3, 0), "tz_ambiguous"),
        ("3", datetime(2026, 3, 29, 0, 30), None, "tz_gap"),
        ("4", datetime(2026, 10, 25, 0, 30), datetime(2026, 10, 25, 1, 30), None),
    ]


def test_sacct_without_tz_reads_utc(store, tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(
        f"{SACCT_HEADER}\n1|b|COMPLETED|0:0|2026-10-25T02:30:00|2026-03-29T02:30:00|n1|cpu=1\n"
    )
    _ingest(store, path, _ctx(path, None))
    rows = store.query('SELECT start, "end", time_flag FROM jobs').rows()
    assert rows == [(AMBIGUOUS, SKIPPED, None)]


# -- daemon logs ----------------------------------------------------------------------------

DOWN = "error: Nodes {} not responding, setting DOWN"
DAEMON_LINES = [
    ("[2026-01-15T10:00:00.123] " + DOWN.format("n01"), WINTER_UTC, None),
    ("[2026-07-15T10:00:00] " + DOWN.format("n02"), SUMMER_UTC, None),
    ("[2026-07-15T10:00:00.000+02:00] " + DOWN.format("n03"), SUMMER_UTC, None),
    ("[Jul 15 10:00:00] " + DOWN.format("n04"), SUMMER_UTC, None),
    ("[Jan 15 10:00:00.5 4242 rpcmgr 0x7f5c] " + DOWN.format("n05"), WINTER_UTC, None),
    ("Jul 15 10:00:00 n06 slurmctld[1]: " + DOWN.format("n06"), SUMMER_UTC, None),
    ("2026-01-15T10:00:00 n07 slurmctld[1]: " + DOWN.format("n07"), WINTER_UTC, None),
    ("2026-01-15T10:00:00+0100 n08 slurmctld[1]: " + DOWN.format("n08"), WINTER_UTC, None),
    ("[2026-10-25T02:30:00.000] " + DOWN.format("n09"), None, "tz_ambiguous"),
    ("[Mar 29 02:30:00] " + DOWN.format("n10"), None, "tz_gap"),
    ("Oct 25 02:30:00 n11 slurmctld[1]: " + DOWN.format("n11"), None, "tz_ambiguous"),
    ("2026-03-29T02:30:00 n12 slurmctld[1]: " + DOWN.format("n12"), None, "tz_gap"),
    ("[2026-10-25T02:30:00.000+01:00] " + DOWN.format("n13"), datetime(2026, 10, 25, 1, 30), None),
    ("[1234567] " + DOWN.format("n14"), None, "cpu_clock"),
]


def test_daemon_log_in_the_site_zone(store, tmp_path: Path) -> None:
    path = tmp_path / "slurmctld.log"
    path.write_text("".join(line + "\n" for line, _, _ in DAEMON_LINES))
    f = _ingest(store, path, _ctx(path, BERLIN, year=YEAR))
    assert (f.parsed, f.quarantined) == (len(DAEMON_LINES), 0)
    got = store.query("SELECT node, ts, ts_flag FROM events ORDER BY node").rows()
    assert got == [(f"n{i:02d}", ts, flag) for i, (_, ts, flag) in enumerate(DAEMON_LINES, 1)]


def test_daemon_log_without_tz_is_utc(store, tmp_path: Path) -> None:
    path = tmp_path / "slurmctld.log"
    lines = [DAEMON_LINES[i][0] for i in (1, 8, 9, 10, 11)]
    path.write_text("".join(line + "\n" for line in lines))
    _ingest(store, path, _ctx(path, None, year=YEAR))
    got = store.query("SELECT node, ts, ts_flag FROM events ORDER BY node").rows()
    assert got == [
        ("n02", SUMMER, None),
        ("n09", AMBIGUOUS, None),
        ("n10", SKIPPED, None),
        ("n11", AMBIGUOUS, None),
        ("n12", SKIPPED, None),
    ]


_COLUMNS = ("line", "kind", "node", "ts", "ts_flag", "message")


@pytest.mark.parametrize(
    "ctx",
    [
        _ctx("x", BERLIN, year=YEAR),
        _ctx("x", BERLIN, mtime=datetime(2026, 12, 31)),
        _ctx("x", BERLIN),
        _ctx("x", None, year=YEAR),
    ],
    ids=["year", "mtime", "no_year", "no_tz"],
)
def test_daemon_chunk_agrees_with_parse_line(ctx: ParseContext) -> None:
    lines = [line for line, _, _ in DAEMON_LINES]
    res = daemon_chunk(pl.Series(lines, dtype=pl.String), 1, ctx)
    rows = []
    for no, raw in enumerate(lines, 1):
        got = daemon_line(raw, ctx)
        assert not isinstance(got, Quarantined)
        if isinstance(got, Parsed):
            rows += [{**r, "line": no} for r in got.rows["events"]]
    expected = [tuple(r.get(c) for c in _COLUMNS) for r in merge_reasons(rows)]
    assert list(res.tables["events"].select(_COLUMNS).iter_rows()) == expected
    assert res.quarantine is None


# -- node listings --------------------------------------------------------------------------


def test_sinfo_reason_times_in_the_site_zone(store, tmp_path: Path) -> None:
    path = tmp_path / "sinfo.txt"
    path.write_text(
        "REASON               USER      TIMESTAMP           NODELIST\n"
        "Xid79                root      2026-07-15T10:00:00 gpu-c01\n"
        "Xid48                root      2026-10-25T02:30:00 gpu-c02\n"
        "Xid48                root      2026-03-29T02:30:00 gpu-c03\n"
        "Xid48                root      Unknown             gpu-c04\n"
    )
    f = _ingest(store, path, _ctx(path, BERLIN))
    assert (f.format, f.parsed, f.quarantined) == ("sinfo", 4, 0)
    rows = store.query("SELECT node, ts, ts_flag FROM events ORDER BY node").rows()
    assert rows == [
        ("gpu-c01", SUMMER_UTC, None),
        ("gpu-c02", None, "tz_ambiguous"),
        ("gpu-c03", None, "tz_gap"),
        ("gpu-c04", None, "no_ts"),
    ]


SINFO_LONG = (
    "{snap}\n"
    "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON\n"
    "node7          1      batch*     drained 16     16:1:1   4000        0      1   (null) ecc\n"
)
MTIME = datetime(2026, 12, 1, 12, 0)


@pytest.mark.parametrize(
    ("snap", "tz", "ts", "flag", "seen"),
    [
        ("Wed Jul 15 10:00:00 2026", BERLIN, SUMMER_UTC, None, SUMMER_UTC),
        ("Thu Jan 15 10:00:00 2026", BERLIN, WINTER_UTC, None, WINTER_UTC),
        ("Sun Oct 25 02:30:00 2026", BERLIN, None, "tz_ambiguous", MTIME),
        ("Sun Mar 29 02:30:00 2026", BERLIN, None, "tz_gap", MTIME),
        ("Sun Oct 25 02:30:00 2026", None, AMBIGUOUS, None, AMBIGUOUS),
    ],
)
def test_sinfo_snapshot_line_in_the_site_zone(store, tmp_path: Path, snap, tz, ts, flag, seen):
    """An untimed snapshot dates the fleet by the file's time, as a listing without one."""
    path = tmp_path / "sinfo-Nl.txt"
    path.write_text(SINFO_LONG.format(snap=snap))
    stamp = (MTIME - EPOCH_0).total_seconds()
    os.utime(path, (stamp, stamp))
    _ingest(store, path, _ctx(path, tz))
    assert store.query("SELECT node, ts, ts_flag FROM events").rows() == [("node7", ts, flag)]
    assert store.query("SELECT node, first_seen FROM nodes").rows() == [("node7", seen)]


SQUEUE = (
    "{snap}\n"
    "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)\n"
    "               101       gpu pretrain    alice  RUNNING    1:02:03 2-00:00:00      1 gpu001\n"
)  # fmt: skip


@pytest.mark.parametrize(
    ("snap", "tz", "seen"),
    [
        ("Thu Jan 15 10:00:00 2026", BERLIN, WINTER_UTC),
        ("Wed Jul 15 10:00:00 2026", BERLIN, SUMMER_UTC),
        ("Sun Oct 25 02:30:00 2026", BERLIN, MTIME),
        ("Wed Jul 15 10:00:00 2026", None, SUMMER),
    ],
)
def test_squeue_snapshot_line_in_the_site_zone(store, tmp_path: Path, snap, tz, seen) -> None:
    path = tmp_path / "squeue.txt"
    path.write_text(SQUEUE.format(snap=snap))
    stamp = (MTIME - EPOCH_0).total_seconds()
    os.utime(path, (stamp, stamp))
    f = _ingest(store, path, _ctx(path, tz))
    assert f.format == "squeue"
    assert store.query("SELECT node, first_seen FROM nodes").rows() == [("gpu001", seen)]


@pytest.mark.parametrize(
    ("stamp", "tz", "ts", "flag"),
    [
        ("2026-01-15T10:00:00", BERLIN, WINTER_UTC, None),
        ("2026-07-15T10:00:00", BERLIN, SUMMER_UTC, None),
        ("2026-10-25T02:30:00", BERLIN, None, "tz_ambiguous"),
        ("2026-03-29T02:30:00", BERLIN, None, "tz_gap"),
        ("2026-10-25T02:30:00", None, AMBIGUOUS, None),
    ],
)
def test_scontrol_reason_time_in_the_site_zone(stamp, tz, ts, flag) -> None:
    fields = {"NodeName": "gpu-a01", "State": "DRAIN", "Reason": f"Xid 79 [root@{stamp}]"}
    ev = node_block_event(fields, _ctx("x", tz))
    assert ev is not None
    assert (ev["ts"], ev["ts_flag"], ev["subkind"]) == (ts, flag, "Xid 79")
