"""A site time zone for stamps that carry none (``--tz``, ``[ingest] tz``): the wall clock of the
zone, daylight saving time included, converted to UTC; stamps with an offset stay exact; the hour
turned back and the hour skipped are kept without a time, flagged, never guessed.

Expected times are worked out by hand: Europe/Berlin is UTC+1 in winter and UTC+2 from the last
Sunday of March (29 March 2026, 02:00 -> 03:00) to the last Sunday of October (25 October 2026,
03:00 -> 02:00)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.app.run import ingest_context, load_config
from faultlens.ingest.errors import ConfigError
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from faultlens.ingest.zones import check_zone, localize, to_utc, zone_flag

runner = CliRunner()
BERLIN = "Europe/Berlin"
WALL = [
    datetime(2026, 1, 15, 10, 0),  # winter: UTC+1
    datetime(2026, 7, 15, 10, 0),  # summer: UTC+2
    datetime(2026, 3, 29, 2, 30),  # skipped
    datetime(2026, 10, 25, 2, 30),  # twice
    datetime(2026, 10, 25, 3, 30),  # just after the turn back: UTC+1
]
UTC_OF_WALL = [
    (datetime(2026, 1, 15, 9, 0), None),
    (datetime(2026, 7, 15, 8, 0), None),
    (None, "tz_gap"),
    (None, "tz_ambiguous"),
    (datetime(2026, 10, 25, 2, 30), None),
]


def test_one_value_and_a_column_agree_with_the_hand_worked_times() -> None:
    assert [to_utc(t, BERLIN) for t in WALL] == UTC_OF_WALL
    frame = pl.DataFrame({"t": WALL}).select(
        ts=localize(pl.col("t"), BERLIN), flag=zone_flag(pl.col("t"), BERLIN)
    )
    assert list(frame.iter_rows()) == UTC_OF_WALL


def test_without_a_zone_nothing_changes() -> None:
    assert [to_utc(t, None) for t in WALL] == [(t, None) for t in WALL]
    frame = pl.DataFrame({"t": WALL}).select(
        ts=localize(pl.col("t"), None), flag=zone_flag(pl.col("t"), None)
    )
    assert frame["ts"].to_list() == WALL and frame["flag"].null_count() == len(WALL)


def test_an_unknown_zone_is_refused_with_what_to_give() -> None:
    assert check_zone(None) is None and check_zone(" ") is None
    assert check_zone(BERLIN) == BERLIN
    with pytest.raises(ValueError, match="IANA name"):
        check_zone("Mars/Olympus")


# Kernel, NCCL / PyTorch and dmesg lines of one node log, in time order (the year is given, and
# a year-less stamp earlier in the year than the line before it would be the next year's).
NODE_LOG = [
    "Jan 15 10:00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off "
    "the bus.",
    "Mar 29 02:30:00 gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off "
    "the bus.",
    "Jul 15 10:00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, An uncorrectable "
    "double bit error (DBE) has been detected on GPU in the framebuffer at partition 0.",
    "2026-07-15T10:00:00+00:00 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
    "2026-07-15T10:00:00 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
    "[rank1]:[E0715 10:00:00.000000 ProcessGroupNCCL.cpp:1] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
    "[Wed Jul 15 10:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 31, pid=1, Ch 00000001, "
    "intr 10000000. MMU Fault",
    "Oct 25 02:30:00 gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off "
    "the bus.",
    "Oct 25 03:30:00 gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off "
    "the bus.",
    # journalctl -o short-unix: Unix seconds need no zone (2026-07-15 10:00:00 UTC)
    "1784109600.000000 gpu04 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
]
SUMMER_10 = datetime(2026, 7, 15, 10, 0)
SUMMER_8 = datetime(2026, 7, 15, 8, 0)
WANT_BERLIN = [
    (1, datetime(2026, 1, 15, 9, 0), None),
    (2, None, "tz_gap"),
    (3, SUMMER_8, None),
    (4, SUMMER_10, None),  # the stamp says +00:00: exact whatever --tz says
    (5, SUMMER_8, None),
    (6, SUMMER_8, None),  # glog: the process's wall clock
    (7, SUMMER_8, None),  # dmesg -T: the node's wall clock
    (8, None, "tz_ambiguous"),
    (9, datetime(2026, 10, 25, 2, 30), None),
    (10, SUMMER_10, None),
]
WANT_UTC = [
    (1, datetime(2026, 1, 15, 10, 0), None),
    (2, datetime(2026, 3, 29, 2, 30), None),
    (3, SUMMER_10, None),
    (4, SUMMER_10, None),
    (5, SUMMER_10, None),
    (6, SUMMER_10, None),
    (7, SUMMER_10, None),
    (8, datetime(2026, 10, 25, 2, 30), None),
    (9, datetime(2026, 10, 25, 3, 30), None),
    (10, SUMMER_10, None),
]


def _ingest(tmp_path: Path, name: str, *extra: str) -> list[tuple[object, ...]]:
    log = tmp_path / "node.log"
    log.write_text("\n".join(NODE_LOG) + "\n")
    db = tmp_path / f"{name}.duckdb"
    result = runner.invoke(app, ["ingest", str(log), "--year", "2026", "--db", str(db), *extra])
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        return con.sql("SELECT line, ts, ts_flag FROM events ORDER BY line").fetchall()


def test_ingest_reads_zone_less_stamps_in_the_sites_zone(tmp_path: Path) -> None:
    assert _ingest(tmp_path, "berlin", "--tz", BERLIN) == WANT_BERLIN


def test_ingest_without_tz_reads_them_as_utc(tmp_path: Path) -> None:
    assert _ingest(tmp_path, "utc") == WANT_UTC
    assert _ingest(tmp_path, "utc-named", "--tz", "UTC") == WANT_UTC


def test_untimed_lines_are_counted_and_shown(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text("\n".join(NODE_LOG) + "\n")
    db = tmp_path / "shown.duckdb"
    result = runner.invoke(
        app, ["ingest", str(log), "--year", "2026", "--tz", BERLIN, "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    assert "2 events without a time" in " ".join(result.output.split())


def test_an_unknown_zone_is_a_usage_error_before_anything_is_written(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text(NODE_LOG[0] + "\n")
    db = tmp_path / "never.duckdb"
    result = runner.invoke(app, ["ingest", str(log), "--tz", "Mars/Olympus", "--db", str(db)])
    assert result.exit_code == 2
    assert "Mars/Olympus" in result.output and "IANA" in result.output
    assert not db.exists()


def test_the_scheduled_job_takes_its_zone_from_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "faultlens.toml"
    cfg.write_text(f'[ingest]\npaths = ["node.log"]\ntz = "{BERLIN}"\n')
    assert load_config(cfg).tz == BERLIN
    cfg.write_text('[ingest]\npaths = ["node.log"]\n')
    assert load_config(cfg).tz is None
    cfg.write_text('[ingest]\ntz = "Mars/Olympus"\n')
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        load_config(cfg)


REGIONS = ("eu-west", "us-central")


def _regions(tmp_path: Path, *options: str) -> dict[str, list[tuple[object, ...]]]:
    """The same node log in two regions' folders, ingested in one command: each file's times."""
    for region in REGIONS:
        (tmp_path / "logs" / region).mkdir(parents=True, exist_ok=True)
        (tmp_path / "logs" / region / "node.log").write_text("\n".join(NODE_LOG) + "\n")
    db = tmp_path / f"regions-{len(list(tmp_path.glob('*.duckdb')))}.duckdb"
    args = ["ingest", str(tmp_path / "logs"), "--year", "2026", "--db", str(db), *options]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.sql("SELECT file, line, ts, ts_flag FROM events ORDER BY file, line").fetchall()
    return {
        region: [r[1:] for r in rows if f"/{region}/" in r[0]]
        for region in ("eu-west", "us-central")
    }


def test_each_regions_files_read_in_their_own_zone(tmp_path: Path) -> None:
    times = _regions(tmp_path, "--tz-path", f"*/eu-*/*={BERLIN}")
    assert times["eu-west"] == WANT_BERLIN
    assert times["us-central"] == WANT_UTC  # no pattern of its own, no --tz: UTC


def test_the_ingest_report_names_each_files_zone(tmp_path: Path) -> None:
    _regions(tmp_path)  # the two folders' files
    logs, db = tmp_path / "logs", tmp_path / "report.duckdb"
    zone = ["--tz-path", f"*/eu-*/*={BERLIN}", "--year", "2026", "--db", str(db)]
    result = runner.invoke(app, ["ingest", str(logs), *zone, "--json"])
    assert result.exit_code == 0, result.output
    zones = {Path(f["path"]).parent.name: f["zone"] for f in json.loads(result.stdout)["files"]}
    assert zones == {"eu-west": BERLIN, "us-central": None}  # None: read as UTC
    result = runner.invoke(app, ["ingest", str(logs), *zone, "--reparse"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "node.log" in line]
    assert len(rows) == 2 and any(BERLIN in r for r in rows) and any("UTC" in r for r in rows)
    assert "zone" in result.stdout
    plain = runner.invoke(app, ["ingest", str(logs), "--reparse", "--db", str(db)])
    assert plain.exit_code == 0 and "zone" not in plain.stdout  # no zone given: no column


def test_the_first_matching_pattern_wins_and_the_rest_take_tz(tmp_path: Path) -> None:
    times = _regions(
        tmp_path,
        "--tz",
        BERLIN,
        "--tz-path",
        "*/us-central/*=UTC",
        "--tz-path",
        f"*/us-*/*={BERLIN}",
    )
    assert times["us-central"] == WANT_UTC
    assert times["eu-west"] == WANT_BERLIN  # no pattern matches: --tz


def test_a_relative_pattern_is_taken_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    times = _regions(tmp_path, "--tz-path", f"logs/eu-west/*={BERLIN}")
    assert times["eu-west"] == WANT_BERLIN and times["us-central"] == WANT_UTC
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # logs/eu-west/* is now elsewhere/logs/...: no file matches
    times = _regions(tmp_path, "--tz-path", f"logs/eu-west/*={BERLIN}")
    assert times["eu-west"] == WANT_UTC


@pytest.mark.parametrize(
    ("pattern", "said"),
    [("*/eu/*=Mars/Olympus", "Mars/Olympus"), ("*/eu/*", "GLOB=ZONE"), ("=UTC", "GLOB=ZONE")],
)
def test_a_bad_zone_pattern_is_a_usage_error_before_anything_is_written(
    tmp_path: Path, pattern: str, said: str
) -> None:
    log = tmp_path / "node.log"
    log.write_text(NODE_LOG[0] + "\n")
    db = tmp_path / "never.duckdb"
    result = runner.invoke(app, ["ingest", str(log), "--tz-path", pattern, "--db", str(db)])
    assert result.exit_code == 2
    assert "--tz-path" in result.output and said in result.output
    assert not db.exists()


def test_the_scheduled_job_takes_each_regions_zone_from_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "faultlens.toml"
    cfg.write_text(
        '[ingest]\npaths = ["logs"]\ntz = "UTC"\n'
        f'[ingest.tz_paths]\n"logs/eu-*/*" = "{BERLIN}"\n"*/us-*/*" = "America/Chicago"\n'
    )
    assert load_config(cfg).tz_paths == [
        (str(tmp_path / "logs" / "eu-*" / "*"), BERLIN),  # from the config's folder
        ("*/us-*/*", "America/Chicago"),
    ]
    # the run's ingest reads each region's files in its zone (the same context ``run_once`` uses)
    _regions(tmp_path)  # the two folders' files
    cfg.write_text(f'[ingest]\npaths = ["logs"]\n[ingest.tz_paths]\n"logs/eu-*/*" = "{BERLIN}"\n')
    config = load_config(cfg)
    for log in (tmp_path / "logs").glob("*/node.log"):  # year-less stamps: the file's year
        stamp = datetime(2026, 12, 31).timestamp()
        os.utime(log, (stamp, stamp))
    db = tmp_path / "run.duckdb"
    with Store(db) as store:
        ingest_paths(
            store,
            config.ingest_paths,
            now=datetime(2027, 1, 1),
            base_ctx=ingest_context(config),
        )
        rows = store.query("SELECT file, line, ts, ts_flag FROM events ORDER BY file, line").rows()
    times = {region: [r[1:3] for r in rows if f"/{region}/" in r[0]] for region in REGIONS}
    assert times["eu-west"] == [want[:2] for want in WANT_BERLIN]
    assert times["us-central"] == [want[:2] for want in WANT_UTC]
    cfg.write_text('[ingest.tz_paths]\n"logs/*" = "Mars/Olympus"\n')
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        load_config(cfg)
    cfg.write_text('[ingest]\ntz_paths = ["logs/*"]\n')
    with pytest.raises(ConfigError, match="GLOB"):
        load_config(cfg)


def _times(frame: pl.DataFrame) -> list[tuple[object, ...]]:
    return list(frame.sort("line").select("line", "ts", "ts_flag").iter_rows())


@pytest.mark.parametrize("zone", [None, BERLIN])
def test_kernel_lines_read_alike_one_by_one_and_vectorized(zone: str | None) -> None:
    """The per-line reference and the vectorized path (a batch of RFC 3164 lines only takes
    the fast path; a mixed batch the general one) give the same times and flags."""
    from faultlens.ingest.base import ParseContext
    from faultlens.ingest.kernel.parser import KernelParser

    ctx = ParseContext(file="k", year=2026, options={"tz": zone} if zone else {})
    kernel = [line for line in NODE_LOG if "NVRM: Xid" in line]
    syslog_only = [line for line in kernel if line[:3] in ("Jan", "Mar", "Jul", "Oct")]
    for batch in (kernel, syslog_only):
        parser = KernelParser()
        vec = parser.parse_chunk(pl.Series(batch), 1, ctx, parser.new_state(ctx))
        one_by_one = [parser.parse_line(line, ctx) for line in batch]
        want = [
            (i, res.rows["events"][0]["ts"], res.rows["events"][0]["ts_flag"])
            for i, res in enumerate(one_by_one, start=1)
        ]
        assert _times(vec.tables["events"]) == want
        assert any(flag == "tz_ambiguous" for *_, flag in want) is (zone is not None)


@pytest.mark.parametrize("zone", [None, BERLIN])
def test_glog_stamps_read_alike_one_by_one_and_vectorized(zone: str | None) -> None:
    from faultlens.ingest.base import ParseContext
    from faultlens.ingest.nccl.parser import NcclParser, reference_parse

    ctx = ParseContext(file="t", year=2026, options={"tz": zone} if zone else {})
    lines = [line for line in NODE_LOG if "Watchdog caught" in line]
    lines.append(lines[0].replace("E0715 10:00:00", "E1025 02:30:00"))  # the hour turned back
    parser = NcclParser()
    state = parser.new_state(ctx)
    vec = parser.parse_chunk(pl.Series(lines), 1, ctx, state).merge(parser.finish(ctx, state))
    ref = reference_parse(list(lines), ctx)
    assert _times(vec.tables["events"]) == _times(ref.tables["events"])
    second = (2, None, "tz_ambiguous") if zone else (2, datetime(2026, 10, 25, 2, 30), None)
    assert _times(ref.tables["events"]) == [(1, SUMMER_8 if zone else SUMMER_10, None), second]


@pytest.mark.parametrize(
    ("stamp", "zone", "want"),
    [
        # journalctl short-full writes the zone's abbreviation; with --tz it is read when it is
        # that zone's, and it tells the two readings of the hour turned back apart
        ("Sun 2026-10-25 02:30:00 CEST", BERLIN, (datetime(2026, 10, 25, 0, 30), None)),
        ("Sun 2026-10-25 02:30:00 CET", BERLIN, (datetime(2026, 10, 25, 1, 30), None)),
        ("Wed 2026-07-15 10:00:00 CEST", BERLIN, (SUMMER_8, None)),
        ("Wed 2026-07-15 10:00:00 CET", BERLIN, (None, "tz_unknown")),  # not Berlin's in July
        ("Wed 2026-07-15 10:00:00 EDT", BERLIN, (None, "tz_unknown")),
        ("Wed 2026-07-15 10:00:00 CEST", None, (None, "tz_unknown")),
        ("Wed 2026-07-15 10:00:00 UTC", BERLIN, (SUMMER_10, None)),
    ],
)
def test_a_zone_abbreviation_is_read_when_it_is_the_sites(
    stamp: str, zone: str | None, want: tuple[object, object]
) -> None:
    from faultlens.ingest.base import ParseContext
    from faultlens.ingest.prefixes import prefix_frame

    ctx = ParseContext(file="j", options={"tz": zone} if zone else {})
    line = f"{stamp} h1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    got = prefix_frame(pl.DataFrame({"line": [1], "raw": [line]}), ctx)
    assert (got["p_ts"][0], got["p_flag"][0]) == want


CHILD_FAILED = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-15_10:00:00
  host      : gpu07
  rank      : 3 (local_rank: 3)
  exitcode  : -6 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4242
============================================================
"""


@pytest.mark.parametrize(
    ("zone", "want"), [(None, datetime(2026, 1, 15, 10, 0)), (BERLIN, datetime(2026, 1, 15, 9, 0))]
)
def test_torchelastic_failure_time_is_the_launchers_wall_clock(
    tmp_path: Path, zone: str | None, want: datetime
) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text(CHILD_FAILED)
    db = tmp_path / "t.duckdb"
    result = runner.invoke(
        app, ["ingest", str(log), "--db", str(db), *(["--tz", zone] if zone else [])]
    )
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.sql("SELECT kind, ts, node FROM events").fetchall()
    assert rows == [("process_failed", want, "gpu07")]


# One central syslog file (rsyslog's traditional format: RFC 3164, no zone) that nodes of three
# regions write to, each in its own wall clock. Hand-worked, 2026: Berlin UTC+2 in summer, its
# 02:00-03:00 of 25 October twice; Chicago UTC-5 in summer, its 02:00-03:00 of 8 March (the
# second Sunday) skipped; Tokyo UTC+9 all year (the file's own zone, --tz).
CENTRAL = [
    "Jul  1 12:00:00 gpu-eu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, gone",
    "Jul  1 12:00:00 gpu-us-01 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",
    "Jul  1 12:00:00 gpu-ap-01 kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid=1, name=x, remap",
    "Jul  1 12:00:01 gpu-eu-01 python[9]: RuntimeError: CUDA error: misaligned address",
    "Jul  1 12:00:02 GPU-US-01.dc.example slurmd[7]: error: Node configuration differs from x",
    "Oct 25 02:30:00 gpu-eu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, gone",
    "Mar  8 02:30:00 gpu-us-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, gone",
]
WANT_CENTRAL = [  # (line, UTC, flag, node); the year is the file's mtime's, flagged so
    (1, datetime(2026, 7, 1, 10, 0), "year_from_mtime", "gpu-eu-01"),
    (2, datetime(2026, 7, 1, 17, 0), "year_from_mtime", "gpu-us-01"),
    (3, datetime(2026, 7, 1, 3, 0), "year_from_mtime", "gpu-ap-01"),  # no pattern: the file's
    (4, datetime(2026, 7, 1, 10, 0, 1), "year_from_mtime", "gpu-eu-01"),  # timed by its prefix
    (5, datetime(2026, 7, 1, 17, 0, 2), "year_from_mtime", "gpu-us-01"),  # the Slurm family's
    (6, None, "tz_ambiguous", "gpu-eu-01"),
    (7, None, "tz_gap", "gpu-us-01"),
]


def test_one_central_file_reads_each_hosts_stamps_in_its_zone(tmp_path: Path) -> None:
    log = tmp_path / "central.log"
    log.write_text("\n".join(CENTRAL) + "\n")
    stamp = datetime(2026, 12, 1).timestamp()  # year-less stamps: the file's year
    os.utime(log, (stamp, stamp))
    db = tmp_path / "central.duckdb"
    args = ["ingest", str(log), "--db", str(db), "--tz", "Asia/Tokyo"]
    hosts = ["--tz-host", f"gpu-eu-*={BERLIN}", "--tz-host", "gpu-us-??=America/Chicago"]
    result = runner.invoke(app, [*args, *hosts])
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.sql("SELECT line, ts, ts_flag, node FROM events ORDER BY line").fetchall()
    assert rows == WANT_CENTRAL


def test_host_zones_come_from_the_config_and_bad_ones_are_usage_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "faultlens.toml"
    cfg.write_text(
        f'[ingest]\npaths = ["central.log"]\n[ingest.tz_hosts]\n"GPU-EU-*" = "{BERLIN}"\n'
    )
    assert load_config(cfg).tz_hosts == [("gpu-eu-*", BERLIN)]
    assert ingest_context(load_config(cfg)).options["tz_hosts"] == [("gpu-eu-*", BERLIN)]
    cfg.write_text('[ingest.tz_hosts]\n"gpu-*" = "Mars/Olympus"\n')
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        load_config(cfg)
    log = tmp_path / "node.log"
    log.write_text(CENTRAL[0] + "\n")
    db = tmp_path / "never.duckdb"
    for bad, said in (("gpu-*", "GLOB=ZONE"), ("gpu-*=Mars/Olympus", "IANA")):
        result = runner.invoke(app, ["ingest", str(log), "--tz-host", bad, "--db", str(db)])
        assert result.exit_code == 2 and "--tz-host" in result.output and said in result.output
    assert not db.exists()
