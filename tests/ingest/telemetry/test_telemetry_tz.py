"""``tz`` on the node-local stamps of nvidia-smi (``-q``, ``-q -x``, ``--query-gpu`` CSV, the
default table), ``nvidia-smi dmon -o DT`` and the nv-hostengine / fabric manager logs.

Europe/Berlin is UTC+1 in winter, UTC+2 in summer; 2026-10-25 02:30 happens twice there and
2026-03-29 02:30 never. Those are left NULL (events flagged ``tz_ambiguous`` / ``tz_gap``;
telemetry rows, which have no flag column, keep ``ts`` NULL as untimed rows do), never replaced
by the file's time. Without ``tz`` every stamp is read as UTC, as before.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import polars as pl
import pytest

from faultlens.ingest.base import ChunkResult, ParseContext
from faultlens.ingest.telemetry.common import default_ts
from faultlens.ingest.telemetry.dcgm import DcgmExporterParser
from faultlens.ingest.telemetry.dcgm_logs import FabricManagerParser, NvHostengineParser
from faultlens.ingest.telemetry.dmon import NvidiaSmiDmonParser
from faultlens.ingest.telemetry.nvsmi import NvidiaSmiQParser, NvidiaSmiXmlParser
from faultlens.ingest.telemetry.nvsmi_text import NvidiaSmiCsvParser, NvidiaSmiTableParser

BERLIN = "Europe/Berlin"
MTIME = datetime(2026, 12, 31, 12, 0)  # the file's time: never the time of a stamped sample
WINTER_UTC = datetime(2026, 1, 15, 9, 0)  # 10:00 in Berlin, UTC+1
SUMMER_UTC = datetime(2026, 7, 15, 8, 0)  # 10:00 in Berlin, UTC+2
AMBIGUOUS = datetime(2026, 10, 25, 2, 30)
SKIPPED = datetime(2026, 3, 29, 2, 30)

# (wall clock, tz, UTC time, flag)
CASES = [
    (datetime(2026, 1, 15, 10, 0), BERLIN, WINTER_UTC, None),
    (datetime(2026, 7, 15, 10, 0), BERLIN, SUMMER_UTC, None),
    (AMBIGUOUS, BERLIN, None, "tz_ambiguous"),
    (SKIPPED, BERLIN, None, "tz_gap"),
    (AMBIGUOUS, None, AMBIGUOUS, None),
    (datetime(2026, 7, 15, 10, 0), "UTC", datetime(2026, 7, 15, 10, 0), None),
]
IDS = ["winter", "summer", "ambiguous", "gap", "no_tz", "utc"]


def _ctx(tz: str | None) -> ParseContext:
    return ParseContext(file="x", node="n1", mtime=MTIME, options={"tz": tz} if tz else {})


def _run(parser: Any, text: str, tz: str | None) -> ChunkResult:
    ctx = _ctx(tz)
    lines = pl.Series(text.splitlines(), dtype=pl.String)
    out = parser.parse_chunk(lines, 1, ctx, parser.new_state(ctx))
    return out.merge(parser.finish(ctx, parser.new_state(ctx)))


def _ctime(at: datetime) -> str:
    return f"{at:%a %b} {at.day:2d} {at:%H:%M:%S %Y}"


Q_TEXT = """\
==============NVSMI LOG==============

Timestamp                                 : {stamp}
Driver Version                            : 550.54.15

Attached GPUs                             : 1
GPU 00000000:3B:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    Minor Number                          : 0
    Temperature
        GPU Current Temp                  : 40 C
    GPU Reset Status
        Reset Required                    : Yes
"""

Q_XML = """\
<?xml version="1.0" ?>
<nvidia_smi_log>
\t<timestamp>{stamp}</timestamp>
\t<driver_version>550.54.15</driver_version>
\t<gpu id="00000000:3B:00.0">
\t\t<product_name>NVIDIA A100-SXM4-80GB</product_name>
\t\t<minor_number>0</minor_number>
\t\t<temperature>
\t\t\t<gpu_temp>40 C</gpu_temp>
\t\t</temperature>
\t\t<gpu_reset_status>
\t\t\t<reset_required>Yes</reset_required>
\t\t</gpu_reset_status>
\t</gpu>
</nvidia_smi_log>
"""


@pytest.mark.parametrize("doc", [Q_TEXT, Q_XML], ids=["q", "xml"])
@pytest.mark.parametrize(("local", "tz", "utc", "flag"), CASES, ids=IDS)
def test_nvsmi_q_timestamp(doc: str, local: datetime, tz, utc, flag) -> None:
    parser = NvidiaSmiQParser() if doc is Q_TEXT else NvidiaSmiXmlParser()
    out = _run(parser, doc.format(stamp=_ctime(local)), tz)
    assert out.tables["telemetry"]["ts"].to_list() == [utc, utc]
    assert out.tables["gpus"].select("first_seen", "last_seen").row(0) == (utc, utc)
    ev = out.tables["events"]
    assert ev.select("ts", "ts_flag", "kind").rows() == [(utc, flag, "reset_required")]


def test_nvsmi_q_without_a_timestamp_is_still_the_files_time() -> None:
    doc = "\n".join(ln for ln in Q_TEXT.splitlines() if not ln.startswith("Timestamp"))
    out = _run(NvidiaSmiQParser(), doc, BERLIN)
    ev = out.tables["events"]
    assert ev.select("ts", "ts_flag").rows() == [(MTIME, "file_mtime")]


CSV = """\
timestamp, index, temperature.gpu, power.draw [W]
{s1}, 0, 40, 100.5
{s2}, 0, 41, 101.5
"""


@pytest.mark.parametrize(("local", "tz", "utc", "flag"), CASES, ids=IDS)
def test_nvsmi_csv_timestamp(local: datetime, tz, utc, flag) -> None:
    stamp = f"{local:%Y/%m/%d %H:%M:%S}.123"
    text = CSV.format(s1=stamp, s2="N/A")  # a row without a stamp: the file's time, as before
    out = _run(NvidiaSmiCsvParser(), text, tz)
    tel = out.tables["telemetry"].sort("ts", nulls_last=True)
    at = None if utc is None else utc.replace(microsecond=123000)
    got = tel.select("ts", "metric", "value").rows()
    expected = [
        (at, "DCGM_FI_DEV_GPU_TEMP", 40.0),
        (at, "DCGM_FI_DEV_POWER_USAGE", 100.5),
        (MTIME, "DCGM_FI_DEV_GPU_TEMP", 41.0),
        (MTIME, "DCGM_FI_DEV_POWER_USAGE", 101.5),
    ]
    assert sorted(got, key=repr) == sorted(expected, key=repr)


TABLE = """\
{stamp}
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:3B:00.0 Off |                    0 |
| N/A   40C    P0             100W /  400W |     10MiB /  81920MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""


@pytest.mark.parametrize(("local", "tz", "utc", "flag"), CASES, ids=IDS)
def test_nvsmi_table_timestamp(local: datetime, tz, utc, flag) -> None:
    out = _run(NvidiaSmiTableParser(), TABLE.format(stamp=_ctime(local)), tz)
    ts = out.tables["telemetry"]["ts"].unique().to_list()
    assert ts == [utc]


DMON = """\
#Date       Time        gpu    pwr  gtemp
#YYYYMMDD   HH:MM:SS    Idx      W      C
 {d1}   {t1}      0     69     34
 20260715   10:00:00      0     70     35
"""


@pytest.mark.parametrize(("local", "tz", "utc", "flag"), CASES, ids=IDS)
def test_dmon_date_time(local: datetime, tz, utc, flag) -> None:
    text = DMON.format(d1=f"{local:%Y%m%d}", t1=f"{local:%H:%M:%S}")
    out = _run(NvidiaSmiDmonParser(), text, tz)
    assert out.quarantine is None  # an unplaceable time is no unparsable one
    second = SUMMER_UTC if tz == BERLIN else datetime(2026, 7, 15, 10, 0)
    got = out.tables["telemetry"].select("ts", "value").sort("value").rows()
    assert got == [(utc, 34.0), (second, 35.0), (utc, 69.0), (second, 70.0)]


HOSTENGINE = (
    "{stamp}.205 ERROR [9596:9598] [[SysMon]] Could not read CPU utilization"
    " [sysmon.cpp:120] [SysMon::Read]\n"
    "2026-07-15 10:00:00.000 INFO [9596:9598] started [main.cpp:1] [main]\n"
)
FABRIC = (
    "[{stamp}] [ERROR] [tid 1374] detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch"
    " pci bus id 00000000:86:00.0 physical id 2 port 34\n"
)


@pytest.mark.parametrize(("local", "tz", "utc", "flag"), CASES, ids=IDS)
def test_hostengine_and_fabric_manager_stamps(local: datetime, tz, utc, flag) -> None:
    out = _run(NvHostengineParser(), HOSTENGINE.format(stamp=f"{local:%Y-%m-%d %H:%M:%S}"), tz)
    at = None if utc is None else utc.replace(microsecond=205000)
    assert out.tables["events"].select("ts", "ts_flag", "line").rows() == [(at, flag, 1)]
    stamp = f"{local:%b} {local.day:2d} {local:%Y %H:%M:%S}"
    out = _run(FabricManagerParser(), FABRIC.format(stamp=stamp), tz)
    assert out.quarantine is None
    assert out.tables["events"].select("ts", "ts_flag", "code").rows() == [(utc, flag, 12028)]


# ``scrape_ts``: the time of samples that carry none. 10:00 at +01:00 is 09:00 UTC; 10:00 in
# Berlin in January (UTC+1) is 09:00 UTC too, in Chicago (UTC-6) 16:00 UTC.
PLUS_ONE = timezone(timedelta(hours=1))
# (scrape_ts option, tz, expected UTC time, expected flag)
SCRAPES = [
    (datetime(2026, 1, 1, 10, 0, tzinfo=PLUS_ONE), None, datetime(2026, 1, 1, 9, 0), "scrape_ts"),
    (datetime(2026, 1, 1, 10, 0, tzinfo=PLUS_ONE), "America/Chicago", datetime(2026, 1, 1, 9, 0), "scrape_ts"),
    ("2026-01-01T10:00:00+01:00", None, datetime(2026, 1, 1, 9, 0), "scrape_ts"),
    ("2026-01-01T10:00:00+01:00", "America/Chicago", datetime(2026, 1, 1, 9, 0), "scrape_ts"),
    ("2026-01-01T09:00:00Z", BERLIN, datetime(2026, 1, 1, 9, 0), "scrape_ts"),
    (datetime(2025, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))), BERLIN, datetime(2026, 1, 1, 4, 0), "scrape_ts"),
    (datetime(2026, 1, 1, 10, 0), None, datetime(2026, 1, 1, 10, 0), "scrape_ts"),
    (datetime(2026, 1, 1, 10, 0), BERLIN, datetime(2026, 1, 1, 9, 0), "scrape_ts"),
    ("2026-01-01T10:00:00", "America/Chicago", datetime(2026, 1, 1, 16, 0), "scrape_ts"),
    ("2026-07-15T10:00:00", BERLIN, SUMMER_UTC, "scrape_ts"),
    (AMBIGUOUS, BERLIN, None, "tz_ambiguous"),
    (SKIPPED.isoformat(), BERLIN, None, "tz_gap"),
]  # fmt: skip
SCRAPE_IDS = [
    "aware", "aware_tz", "offset_text", "offset_text_tz", "z_text_tz", "minus5_tz",
    "naive", "naive_tz", "naive_text_tz", "summer_tz", "ambiguous", "gap",
]  # fmt: skip

SCRAPE = """\
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0000aaaa",Hostname="gpu01"} 45
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-0000aaaa",Hostname="gpu01"} 79
"""


@pytest.mark.parametrize(("scrape", "tz", "utc", "flag"), SCRAPES, ids=SCRAPE_IDS)
def test_scrape_ts(scrape, tz, utc, flag) -> None:
    options: dict[str, Any] = {"scrape_ts": scrape}
    if tz:
        options["tz"] = tz
    ctx = ParseContext(file="x", node="n1", mtime=MTIME, options=options)
    assert default_ts(ctx) == (utc, flag)
    parser = DcgmExporterParser()
    lines = pl.Series(SCRAPE.splitlines(), dtype=pl.String)
    out = parser.parse_chunk(lines, 1, ctx, parser.new_state(ctx))
    assert out.tables["telemetry"]["ts"].to_list() == [utc, utc]
    assert out.tables["events"].select("ts", "ts_flag", "code").rows() == [(utc, flag, 79)]


def test_without_scrape_ts_samples_without_a_stamp_are_the_files_time() -> None:
    ctx = ParseContext(file="x", node="n1", mtime=MTIME, options={"tz": BERLIN})
    assert default_ts(ctx) == (MTIME, "file_mtime")
