"""Slurm's configurable time formats: the daemon logs' ``LogTimeFormat`` (slurm.conf) and the
``SLURM_TIME_FORMAT`` of sacct / sinfo. Hand-written lines in each documented form (slurm.conf(5),
sacct(1), ``src/common/log.c``): every event's exact UTC time, node, kind and line, and every line
accounted for as parsed, noise or quarantined."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.slurm.daemon import daemon_chunk, merge_reasons
from faultlens.ingest.slurm.daemon import parse_line as daemon_line
from faultlens.ingest.slurm.timefmt import read_time, time_exprs

NOW = datetime(2027, 1, 1)
YEAR = 2026
# The moment of every stamp below, in the cluster's local time (UTC unless a zone is written);
# daemon stamps are read to the second
LOCAL = datetime(2026, 12, 1, 6, 11, 2)
MS = timedelta(milliseconds=123)
PLUS1 = timedelta(hours=1)

MESSAGES = (
    "error: Nodes gpu-c[01-02] not responding, setting DOWN",
    "update_node: node gpu-c03 state set to DRAINING",
    "debug:  sched: Running job scheduler",
    "error: unrecognized drain thing",  # an error: line is a slurm_error event
)
# (LogTimeFormat, the stamp as written, its UTC time (None: no wall time), flag)
STAMPS = [
    ("iso8601_ms", "[2026-12-01T06:11:02.123]", LOCAL, None),
    ("iso8601", "[2026-12-01T06:11:02]", LOCAL, None),
    ("rfc5424_ms", "[2026-12-01T06:11:02.123+01:00]", LOCAL - PLUS1, None),
    ("rfc5424", "[2026-12-01T06:11:02-05:30]", LOCAL + timedelta(hours=5, minutes=30), None),
    ("rfc3339", "[2026-12-01T06:11:02+00:00]", LOCAL, None),
    ("short", "[Dec 01 06:11:02]", LOCAL, None),
    ("short_ms", "[Dec 01 06:11:02.123]", LOCAL, None),
    ("thread_id", "[Dec  1 06:11:02.5      4242 rpcmgr       0x7f5c2a1b0700]", LOCAL, None),
    ("thread_id_noname", "[Dec 01 06:11:02.123456  4242  0x7f5c2a1b0700]", LOCAL, None),
    ("clock", "[1234567]", None, "cpu_clock"),
]


def _ingest(store, path: Path, ctx: ParseContext | None = None):
    report = ingest_paths(store, [str(path)], now=NOW, base_ctx=ctx)
    (f,) = report.files
    assert f.status in ("ok", "partial"), f.error
    return f


def _accounted(store, f, n: int, noise: set[int]) -> None:
    """Parsed, noise and quarantined line numbers partition 1..n, and the counts agree."""
    parsed = set(store.query("SELECT DISTINCT line FROM events")["line"].to_list())
    quarantined = set(store.query("SELECT line FROM quarantine")["line"].to_list())
    assert not (parsed & quarantined) and not (parsed & noise) and not (quarantined & noise)
    assert parsed | quarantined | noise == set(range(1, n + 1))
    assert (f.parsed, f.noise, f.quarantined) == (len(parsed), len(noise), len(quarantined))


def _events(store) -> list[tuple]:
    return store.query(
        "SELECT ts, ts_flag, node, kind, line FROM events ORDER BY line, node"
    ).rows()


def _expected(stamp_ts: datetime | None, flag: str | None, fix: timedelta) -> list[tuple]:
    ts = stamp_ts + fix if stamp_ts is not None and fix else stamp_ts
    return [
        (ts, flag, "gpu-c01", "node_down", 1),
        (ts, flag, "gpu-c02", "node_down", 1),
        (ts, flag, "gpu-c03", "node_drain", 2),
        (ts, flag, None, "slurm_error", 4),
    ]


@pytest.mark.parametrize(("name", "stamp", "utc", "flag"), STAMPS, ids=[s[0] for s in STAMPS])
def test_log_time_format(store, tmp_path: Path, name: str, stamp: str, utc, flag) -> None:
    path = tmp_path / "slurmctld.log"
    path.write_text("".join(f"{stamp} {m}\n" for m in MESSAGES))
    f = _ingest(store, path, ParseContext(file=str(path), year=YEAR))
    assert f.warning is None  # sniffed as a known format
    assert _events(store) == _expected(utc, flag, timedelta(0))
    _accounted(store, f, len(MESSAGES), noise={3})


def test_year_from_mtime_is_flagged(store, tmp_path: Path) -> None:
    """``short`` has no year: without --year it is the mtime's, flagged; a date more than a day
    after the mtime is of the year before."""
    path = tmp_path / "slurmctld.log"
    path.write_text("[Dec 01 06:11:02] error: Nodes gpu-c01 not responding, setting DOWN\n")
    mtime = datetime(2027, 1, 3).timestamp()
    os.utime(path, (mtime, mtime))
    _ingest(store, path)
    assert _events(store) == [(LOCAL, "year_from_mtime", "gpu-c01", "node_down", 1)]


def test_no_year_at_all_is_kept_and_flagged() -> None:
    ctx = ParseContext(file="x")
    out = daemon_line("[Dec 01 06:11:02] error: Nodes gpu-c01 not responding, setting DOWN", ctx)
    assert isinstance(out, Parsed)
    (row,) = out.rows["events"]
    assert (row["ts"], row["ts_flag"], row["node"]) == (None, "no_year", "gpu-c01")


def test_tz_applies_to_local_stamps_not_to_offsets(store, tmp_path: Path) -> None:
    path = tmp_path / "slurmctld.log"
    path.write_text(
        "[2026-12-01T06:11:02.123] error: Nodes gpu-c01 not responding, setting DOWN\n"
        "[2026-12-01T06:11:02.123+01:00] error: Nodes gpu-c02 not responding, setting DOWN\n"
        "[Dec 01 06:11:02] error: Nodes gpu-c03 not responding, setting DOWN\n"
    )
    ctx = ParseContext(file=str(path), year=YEAR, options={"tz": "Europe/Berlin"})
    _ingest(store, path, ctx)
    assert [r[0] for r in _events(store)] == [LOCAL - PLUS1] * 3


def test_thread_id_on_stderr_and_in_a_journal(store, tmp_path: Path) -> None:
    """A foreground daemon with thread_id writes the stamp before each stderr line; through
    journald / syslog the outer stamp is the time."""
    path = tmp_path / "slurmctld-stdout.log"
    path.write_text(
        "Dec 01 06:11:02.123456  4242 rpcmgr       0x7f5c2a1b0700: error: Nodes gpu-c01 not "
        "responding, setting DOWN\n"
        "Dec  1 07:00:00 ctl1 slurmctld[4242]: Dec 01 06:11:02.000001  4242 rpcmgr       "
        "0x7f5c2a1b0700: update_node: node gpu-c02 state set to DRAINING\n"
        "slurmctld: Dec 01 06:11:02.5  4242 x 0x7f: nothing to see\n"
    )
    f = _ingest(store, path, ParseContext(file=str(path), year=YEAR))
    assert _events(store) == [
        (LOCAL, None, "gpu-c01", "node_down", 1),
        (datetime(2026, 12, 1, 7), None, "gpu-c02", "node_drain", 2),
    ]
    _accounted(store, f, 3, noise={3})


def test_syslog_and_journal_forms(store, tmp_path: Path) -> None:
    """Sent to syslog / journald, the daemon's own stamp is not written: the prefix library's."""
    path = tmp_path / "messages"
    path.write_text(
        "Dec  1 06:11:02 ctl1 slurmctld[812]: error: Nodes gpu-c01 not responding, setting DOWN\n"
        "2026-12-01T06:11:02.123+01:00 ctl1 slurmctld[812]: error: Nodes gpu-c02 not responding\n"
    )
    f = _ingest(store, path, ParseContext(file=str(path), year=YEAR))
    rows = _events(store)
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        (LOCAL, "gpu-c01", "node_down", 1),
        (LOCAL - PLUS1, "gpu-c02", "node_not_responding", 2),
    ]
    _accounted(store, f, 2, noise=set())


def test_stamped_garbage_is_quarantined_not_noise(store, tmp_path: Path) -> None:
    path = tmp_path / "slurmctld.log"
    path.write_text(
        "[2026-13-45T06:11:02.123+01:00] error: Nodes gpu-c01 not responding, setting DOWN\n"
        "[Dec 01 06:11:02] error: Nodes gpu-c02 not responding, setting DOWN\n"
    )
    f = _ingest(store, path, ParseContext(file=str(path), year=YEAR))
    assert store.query("SELECT line FROM quarantine").rows() == [(1,)]
    _accounted(store, f, 2, noise=set())


_COLUMNS = ("line", "kind", "node", "ts", "ts_flag", "subkind", "severity", "job_id", "message")
_CONTEXTS = [
    ParseContext(file="x", year=YEAR),
    ParseContext(file="x", mtime=datetime(2027, 1, 3)),
    ParseContext(file="x"),
    ParseContext(file="x", year=YEAR, options={"tz": "America/New_York"}),
]


@pytest.mark.parametrize("ctx", _CONTEXTS, ids=["year", "mtime", "none", "tz"])
def test_vectorized_path_agrees_with_parse_line(ctx: ParseContext) -> None:
    """The chunk path against the per-line reference on every stamp form (and a few broken)."""
    lines = [f"{stamp} {m}" for _, stamp, _, _ in STAMPS for m in MESSAGES] + [
        "[2026-02-30T06:11:02+01:00] error: Nodes gpu-c09 not responding, setting DOWN",
        "[Feb 30 06:11:02] error: Nodes gpu-c09 not responding, setting DOWN",
        "Dec 01 06:11:02.1 4242 rpcmgr 0x7f: error: Nodes gpu-c09 not responding",
        "[99999999999999999999999] error: Nodes gpu-c09 not responding",
    ]
    res = daemon_chunk(pl.Series(lines, dtype=pl.String), 1, ctx)
    rows, quarantined = [], {}
    for no, raw in enumerate(lines, 1):
        got = daemon_line(raw, ctx)
        if isinstance(got, Quarantined):
            quarantined[no] = got.reason
        elif isinstance(got, Parsed):
            rows += [{**r, "line": no} for r in got.rows["events"]]
    expected = [tuple(r.get(c) for c in _COLUMNS) for r in merge_reasons(rows)]
    assert list(res.tables["events"].select(_COLUMNS).iter_rows()) == expected
    q = {} if res.quarantine is None else dict(res.quarantine.select("line", "reason").rows())
    assert q == quarantined


# -- SLURM_TIME_FORMAT (sacct, sinfo) ---------------------------------------------------------

START = datetime(2026, 12, 1, 6, 11, 2)
END = datetime(2026, 12, 13, 7, 12, 0)  # day 13: a numeric date of it is never ambiguous
HEADER = "JobID|JobName|State|ExitCode|Start|End|NodeList|AllocTRES"
# (name, Start as printed, End as printed, start, end (UTC), the job's time_flag)
TIME_FORMATS = [
    ("standard", "2026-12-01T06:11:02", "2026-12-13T07:12:00", START, END, None),
    ("epoch", str(int((START - datetime(1970, 1, 1)).total_seconds())),
     str(int((END - datetime(1970, 1, 1)).total_seconds())), START, END, None),
    ("iso_space_minutes", "2026-12-01 06:11", "2026-12-13 07:12", START.replace(second=0), END,
     None),
    ("iso_offset", "2026-12-01T07:11:02+0100", "2026-12-13T02:12:00-05:00", START, END, None),
    ("slashes_ymd", "2026/12/01 06:11:02", "2026/12/13 07:12", START, END, None),
    ("day_first", "13/12/2026 07:12", "13/12/2026 07:12:00", END, END, None),
    ("month_first", "12/13/2026 07:12:00", "12/13/2026 07:12", END, END, None),
    ("day_first_dots", "01.12.2026 06:11:02", "13.12.2026 07:12", None, END, "ambiguous_date"),
    ("same_day_month", "12/12/2026 06:11:02", "13-12-2026 07:12", datetime(2026, 12, 12, 6, 11, 2),
     END, None),
    ("ambiguous", "01/12/2026 06:11:02", "03/12/2026 07:12:00", None, None, "ambiguous_date"),
    ("month_names", "01 Dec 2026 06:11:02", "Dec 13, 2026 07:12", START, END, None),
    ("ctime", "Tue Dec  1 06:11:02 2026", "Sun Dec 13 07:12:00 2026", START, END, None),
    ("relative", "Tue 06:11", "07:12:00", None, None, "relative_time"),
    ("relative_words", "Ystday 06:11", "Tomorr 07:12", None, None, "relative_time"),
    ("no_year", "1 Dec", "Dec 13 07:12", None, None, "relative_time"),
    ("date_only", "6 Jun 2012", "2026-12-13", None, None, "date_only"),
    ("garbage", "soon", "2026-12-40T07:12:00", None, None, "unreadable_time"),
    ("unknown", "Unknown", "Unknown", None, None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "start_text", "end_text", "start", "end", "flag"),
    TIME_FORMATS,
    ids=[t[0] for t in TIME_FORMATS],
)
def test_sacct_time_format(store, tmp_path: Path, name, start_text, end_text, start, end, flag):
    path = tmp_path / "sacct.txt"
    path.write_text(
        f"{HEADER}\n"
        f"17|train|NODE_FAIL|0:0|{start_text}|{end_text}|gpu-c[01-02]|cpu=8,gres/gpu=2\n"
        f"17.batch|batch|CANCELLED|0:15|{start_text}|{end_text}|gpu-c01|cpu=8,gres/gpu=2\n"
    )
    f = _ingest(store, path)
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (3, 2, 1, 0)
    job = store.query('SELECT start, "end", time_flag, line FROM jobs').rows()
    assert job == [(start, end, flag, 2)]
    step = store.query('SELECT start, "end", line FROM job_steps').rows()
    assert step == [(start, end, 3)]
    ts = end or start
    ts_flag = None if ts else (flag or "no_ts")
    assert _events(store) == [(ts, ts_flag, "gpu-c01", "job_node_fail", 2)]


def test_tz_applies_to_local_times_not_to_epoch_or_offsets(store, tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text(
        f"{HEADER}\n"
        f"1|a|COMPLETED|0:0|2026-12-01 07:11:02|{int((END - datetime(1970, 1, 1)).total_seconds())}"
        "|n1|cpu=1\n"
        "2|b|COMPLETED|0:0|2026-12-01T07:11:02+01:00|13/12/2026 08:12|n1|cpu=1\n"
    )
    ctx = ParseContext(file=str(path), options={"tz": "Europe/Berlin"})
    _ingest(store, path, ctx)
    rows = store.query('SELECT start, "end" FROM jobs ORDER BY job_id').rows()
    assert rows == [(START, END), (START, END)]


_VALUES = [v for t in TIME_FORMATS for v in t[1:3]] + [
    "", "  ", "None", "2026-02-30 06:11", "31/02/2026 06:11", "2026-12-01T06:11:02.5",
    "2026-12-01T06:11:02Z", "13/13/2026 07:12", "1/2/2026", "12:00", "Feb 29 2028 00:00",
    "00/12/2026 06:11", "2026-12-01T24:00:00", "12-31-2026 23:59:59", "12.31/2026 23:59",
]  # fmt: skip


@pytest.mark.parametrize("tz", [None, "Europe/Berlin"])
def test_time_exprs_agree_with_read_time(tz: str | None) -> None:
    frame = pl.DataFrame({"t": _VALUES}, schema={"t": pl.String})
    ts, flag = time_exprs(pl.col("t"), tz)
    got = frame.select(ts.alias("ts"), flag.alias("flag")).rows()
    assert got == [read_time(v, tz) for v in _VALUES]


def test_sinfo_reason_timestamp_in_another_format(store, tmp_path: Path) -> None:
    """sinfo -R's TIMESTAMP follows SLURM_TIME_FORMAT too."""
    path = tmp_path / "sinfo.txt"
    epoch = int((START - datetime(1970, 1, 1)).total_seconds())
    path.write_text(
        "REASON               USER      TIMESTAMP           NODELIST\n"
        f"Xid 79               root      {epoch:<19} gpu-c01\n"
        "Xid 48               root      2026-12-01T06:11    gpu-c02\n"
    )
    f = _ingest(store, path)
    assert f.format == "sinfo"
    rows = store.query("SELECT ts, node, line FROM events ORDER BY line").rows()
    assert rows == [(START, "gpu-c01", 2), (START.replace(second=0), "gpu-c02", 3)]
