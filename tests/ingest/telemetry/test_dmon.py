"""nvidia-smi dmon / pmon and dcgmi dmon captures, hand-written from the tools' documented formats
(``nvidia-smi dmon -s ... -o DT [--format csv,nounit]``, ``dcgmi dmon -e ...``)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest import registry
from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from faultlens.ingest.telemetry.dmon import DCGMI_TAGS, DMON_METRICS

NOW = datetime(2026, 12, 2)
D = "DCGM_FI_DEV_"

DMON_DT = """\
#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
 20261201   06:11:02      0     69     34     42      0      0      0      0      0      0   2619   1980
 20261201   06:11:02      1    412     61      -     97     48      0      0      -      -   2619   1755
"""

# no -o: no time in the rows; -s pm then the header reprinted (the same columns)
DMON_PLAIN = """\
# gpu    pwr  gtemp  mtemp     fb   bar1
# Idx      W      C      C     MB     MB
    0     70     35     44  10240      5
    1     71     36     45      -      5
# gpu    pwr  gtemp  mtemp     fb   bar1
# Idx      W      C      C     MB     MB
    0     72     35     44  10242      5
"""

# -s ec -o DT: ECC / PCIe replays and clocks, with a second block of another column set (-s t)
DMON_SETS = """\
#Date       Time        gpu  sbecc  dbecc    pci   mclk   pclk
#YYYYMMDD   HH:MM:SS    Idx   errs   errs   errs    MHz    MHz
 20261201   07:00:00      0      0      2      1   2619   1980

#Date       Time        gpu  rxpci  txpci
#YYYYMMDD   HH:MM:SS    Idx   MB/s   MB/s
 20261201   07:00:05      0     12      3
"""

# --format csv,nounit -o DT
DMON_CSV = """\
#Date, Time, gpu, pwr, gtemp, sm
20261201, 08:00:00, 0, 65, 33, 5
20261201, 08:00:01, 0, 66, 33, -
"""

# -o T only: a time of day without a date is not a time either
DMON_TIME_ONLY = """\
#Time        gpu    pwr
#HH:MM:SS    Idx      W
 09:00:00      0     60
"""

# a row before any header, a short row, a value that is no number, a bad date
DMON_BAD = """\
    0     70     35
# gpu    pwr  gtemp
# Idx      W      C
    0     70
    0     7x     35
# just a comment
"""

DMON_BAD_DATE = """\
#Date       Time        gpu    pwr
#YYYYMMDD   HH:MM:SS    Idx      W
 20261399   06:11:02      0     69
"""

PMON = """\
# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
# Idx           #    C/G      %      %      %      %      %      %    name
    0      41234     C     97     48      -      -      -      -    python
    1          -     -      -      -      -      -      -      -    -
"""

# newer DCGM spacing, N/A, an Xid, and an entity that is not a GPU
DCGMI = """\
#Entity   GPUTL  MCUTL  POWER   TMPTR  XIDER
ID
GPU 0     0      0      61.482  33     0
GPU 1     N/A    12     250.1   71     79
GPU-I 3   5      1      N/A     N/A    0
#Entity   GPUTL  MCUTL  POWER   TMPTR  XIDER
ID
GPU 1     95     40     260.0   72     79
Error setting watches. Result: The third-party Profiling module returned an unrecoverable error
"""

# profiling fields, the units spelled as a '#' line
DCGMI_PROF = """\
# Entity  SMACT  TENSO  DRAMA  PCITX      NVLTX
      Id
    GPU 0  0.812  0.403  0.550  123456789  987654
"""

# name -> (text, format) for the accounting test
SAMPLES = {
    "dmon-dt.txt": (DMON_DT, "nvidia_smi_dmon"),
    "dmon-plain.txt": (DMON_PLAIN, "nvidia_smi_dmon"),
    "dmon-sets.txt": (DMON_SETS, "nvidia_smi_dmon"),
    "dmon-csv.txt": (DMON_CSV, "nvidia_smi_dmon"),
    "dmon-time-only.txt": (DMON_TIME_ONLY, "nvidia_smi_dmon"),
    "dmon-bad.txt": (DMON_BAD, "nvidia_smi_dmon"),
    "dmon-bad-date.txt": (DMON_BAD_DATE, "nvidia_smi_dmon"),
    "pmon.txt": (PMON, "nvidia_smi_pmon"),
    "dcgmi-dmon.txt": (DCGMI, "dcgmi_dmon"),
    "dcgmi-dmon-prof.txt": (DCGMI_PROF, "dcgmi_dmon"),
}


def _ingest(store: Store, tmp_path: Path, name: str, text: str, **ctx):
    path = tmp_path / name
    path.write_text(text)
    base = ParseContext(file="", **ctx) if ctx else None
    (f,) = ingest_paths(store, [str(path)], now=NOW, base_ctx=base).files
    assert f.error is None, f.error
    assert f.lines == f.parsed + f.noise + f.quarantined == text.count("\n")
    return f


def _telemetry(store: Store) -> list[tuple]:
    return store.query(
        "SELECT ts, node, gpu, metric, value FROM telemetry ORDER BY ts NULLS FIRST, gpu, metric"
    ).rows()


def _quarantine(store: Store) -> list[tuple[int, str]]:
    return store.query("SELECT line, reason FROM quarantine ORDER BY line").rows()


@pytest.mark.parametrize(("name", "sample"), SAMPLES.items(), ids=list(SAMPLES))
def test_sniffed_as_its_format(name: str, sample: tuple[str, str]) -> None:
    text, fmt = sample
    assert registry.sniff(text.splitlines(), name)[0] == fmt


def test_dmon_with_date_and_time(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dmon.txt", DMON_DT, node="gpu-07")
    assert (f.format, f.parsed, f.noise, f.quarantined) == ("nvidia_smi_dmon", 4, 0, 0)
    ts = datetime(2026, 12, 1, 6, 11, 2)
    gpu0 = [69, 34, 42, 0, 0, 0, 0, 0, 0, 2619, 1980]
    gpu1 = [412, 61, None, 97, 48, 0, 0, None, None, 2619, 1755]
    cols = ["pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "jpg", "ofa", "mclk", "pclk"]
    expected = sorted(
        (ts, "gpu-07", gpu, DMON_METRICS[c], float(v))
        for gpu, values in ((0, gpu0), (1, gpu1))
        for c, v in zip(cols, values, strict=True)
        if v is not None  # '-': not reported, no sample
    )
    assert sorted(_telemetry(store)) == expected
    assert ("DCGM_FI_DEV_POWER_USAGE", 412.0) in [(r[3], r[4]) for r in expected]
    assert store.query("SELECT node, gpu_index, first_seen FROM gpus ORDER BY 2").rows() == [
        ("gpu-07", 0, ts),
        ("gpu-07", 1, ts),
    ]


def test_dmon_without_a_time_keeps_ts_null(store: Store, tmp_path: Path) -> None:
    """Rows without -o DT are a series with no time: never all stamped with the mtime."""
    f = _ingest(store, tmp_path, "dmon.txt", DMON_PLAIN, node="gpu-07")
    assert (f.parsed, f.noise, f.quarantined) == (7, 0, 0)  # both headers, both units lines
    rows = _telemetry(store)
    assert {r[0] for r in rows} == {None}
    fb = [(r[2], r[4]) for r in rows if r[3] == D + "FB_USED"]
    assert sorted(fb) == [(0, 10240.0), (0, 10242.0)]  # GPU 1's '-' is no sample
    assert sorted((r[2], r[4]) for r in rows if r[3] == D + "BAR1_USED") == [
        (0, 5.0),
        (0, 5.0),
        (1, 5.0),
    ]
    assert len(rows) == 3 * 5 - 1
    untimed = store.scalar(
        "SELECT sum(no_ts) FROM event_summary WHERE tbl = 'telemetry' AND node = 'gpu-07'"
    )
    assert untimed == len(rows)


def test_dmon_column_sets_change_between_blocks(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dmon.txt", DMON_SETS, node="n1")
    assert (f.parsed, f.noise, f.quarantined) == (6, 1, 0)  # the blank line is noise
    t0, t1 = datetime(2026, 12, 1, 7, 0, 0), datetime(2026, 12, 1, 7, 0, 5)
    assert _telemetry(store) == [
        (t0, "n1", 0, D + "ECC_DBE_VOL_TOTAL", 2.0),
        (t0, "n1", 0, D + "ECC_SBE_VOL_TOTAL", 0.0),
        (t0, "n1", 0, D + "MEM_CLOCK", 2619.0),
        (t0, "n1", 0, D + "PCIE_REPLAY_COUNTER", 1.0),
        (t0, "n1", 0, "NVSMI_CLOCKS_GRAPHICS_MHZ", 1980.0),
        # MB/s as DCGM's KB/s
        (t1, "n1", 0, D + "PCIE_RX_THROUGHPUT", 12000.0),
        (t1, "n1", 0, D + "PCIE_TX_THROUGHPUT", 3000.0),
    ]


def test_dmon_csv_nounit(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dmon.csv", DMON_CSV, node="n1")
    assert (f.format, f.parsed, f.quarantined) == ("nvidia_smi_dmon", 3, 0)
    t0, t1 = datetime(2026, 12, 1, 8, 0, 0), datetime(2026, 12, 1, 8, 0, 1)
    assert _telemetry(store) == [
        (t0, "n1", 0, D + "GPU_TEMP", 33.0),
        (t0, "n1", 0, D + "GPU_UTIL", 5.0),
        (t0, "n1", 0, D + "POWER_USAGE", 65.0),
        (t1, "n1", 0, D + "GPU_TEMP", 33.0),
        (t1, "n1", 0, D + "POWER_USAGE", 66.0),
    ]


def test_dmon_csv_noheader_with_columns(store: Store, tmp_path: Path) -> None:
    """``noheader`` output names no columns: --columns does, and the format is given."""
    path = tmp_path / "noheader.csv"
    path.write_text("".join(DMON_CSV.splitlines(keepends=True)[1:]))
    cols = ["Date", "Time", "gpu", "pwr", "gtemp", "sm"]
    base = ParseContext(file="", node="n1", columns=cols)
    (f,) = ingest_paths(store, [str(path)], now=NOW, fmt="nvidia_smi_dmon", base_ctx=base).files
    assert (f.parsed, f.quarantined) == (2, 0)
    assert len(_telemetry(store)) == 5


def test_dmon_time_of_day_alone_is_no_time(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dmon.txt", DMON_TIME_ONLY, node="n1")
    assert (f.parsed, f.quarantined) == (3, 0)
    assert _telemetry(store) == [(None, "n1", 0, D + "POWER_USAGE", 60.0)]


def test_dmon_bad_rows_are_quarantined_with_a_reason(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dmon.txt", DMON_BAD, node="n1")
    assert (f.parsed, f.noise, f.quarantined) == (2, 1, 3)
    assert _quarantine(store) == [
        (1, "nvidia-smi dmon row before any header line (noheader: give --columns)"),
        (4, "expected 3 dmon fields, found 2"),
        (5, "non-numeric value '7x' in column pwr"),
    ]
    assert _telemetry(store) == []


def test_dmon_unparsable_date_is_quarantined(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dmon.txt", DMON_BAD_DATE, node="n1")
    assert (f.parsed, f.quarantined) == (2, 1)
    assert _quarantine(store) == [(3, "unparsable dmon Date/Time")]


def test_pmon_is_recognized_and_counted_as_noise(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "pmon.txt", PMON, node="n1")
    assert (f.format, f.parsed, f.noise, f.quarantined) == ("nvidia_smi_pmon", 0, 4, 0)
    assert f.warning is None
    assert _telemetry(store) == []


def test_dcgmi_dmon(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dcgmi.txt", DCGMI, node="gpu-07")
    assert (f.format, f.parsed, f.noise, f.quarantined) == ("dcgmi_dmon", 7, 0, 2)
    assert _telemetry(store) == [
        (None, "gpu-07", 0, D + "GPU_TEMP", 33.0),
        (None, "gpu-07", 0, D + "GPU_UTIL", 0.0),
        (None, "gpu-07", 0, D + "MEM_COPY_UTIL", 0.0),
        (None, "gpu-07", 0, D + "POWER_USAGE", 61.482),
        (None, "gpu-07", 0, D + "XID_ERRORS", 0.0),
        (None, "gpu-07", 1, D + "GPU_TEMP", 71.0),
        (None, "gpu-07", 1, D + "GPU_TEMP", 72.0),
        (None, "gpu-07", 1, D + "GPU_UTIL", 95.0),  # N/A on the first row: no sample
        (None, "gpu-07", 1, D + "MEM_COPY_UTIL", 12.0),
        (None, "gpu-07", 1, D + "MEM_COPY_UTIL", 40.0),
        (None, "gpu-07", 1, D + "POWER_USAGE", 250.1),
        (None, "gpu-07", 1, D + "POWER_USAGE", 260.0),
        (None, "gpu-07", 1, D + "XID_ERRORS", 79.0),
        (None, "gpu-07", 1, D + "XID_ERRORS", 79.0),
    ]
    assert _quarantine(store) == [
        (5, "dcgmi dmon row for entity GPU-I: telemetry holds GPUs only"),
        (9, "unrecognized dcgmi dmon line"),
    ]
    # the Xid the gauge shows (79, repeated) is one event, with no time and saying so
    assert store.query("SELECT ts, ts_flag, gpu_index, code, line, kind FROM events").rows() == [
        (None, "no_ts", 1, 79, 4, "xid")
    ]


def test_dcgmi_dmon_profiling_fields(store: Store, tmp_path: Path) -> None:
    f = _ingest(store, tmp_path, "dcgmi.txt", DCGMI_PROF, node="n1")
    assert (f.parsed, f.quarantined) == (3, 0)
    got = {r[3]: r[4] for r in _telemetry(store)}
    assert got == {
        "DCGM_FI_PROF_SM_ACTIVE": 0.812,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.403,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.55,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 123456789.0,
        "DCGM_FI_PROF_NVLINK_TX_BYTES": 987654.0,
    }


def test_dcgmi_tags_cover_the_common_fields() -> None:
    for tag, field in {
        "TMPTR": "DCGM_FI_DEV_GPU_TEMP",
        "POWER": "DCGM_FI_DEV_POWER_USAGE",
        "GPUTL": "DCGM_FI_DEV_GPU_UTIL",
        "MCUTL": "DCGM_FI_DEV_MEM_COPY_UTIL",
        "ESVTL": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "EDVTL": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "XIDER": "DCGM_FI_DEV_XID_ERRORS",
        "SMCLK": "DCGM_FI_DEV_SM_CLOCK",
        "NFELT": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "RPCTR": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "URMPS": "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "CRMPS": "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    }.items():
        assert DCGMI_TAGS[tag] == field


def test_no_node_unless_given(store: Store, tmp_path: Path) -> None:
    """The outputs name no host, and the folder is not taken for one."""
    folder = tmp_path / "gpu-99"
    folder.mkdir()
    _ingest(store, folder, "dmon.txt", DMON_DT)
    assert {r[1] for r in _telemetry(store)} == {None}


def test_node_from_path(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "gpu-42"
    folder.mkdir()
    _ingest(store, folder, "dmon.txt", DMON_DT, node_pattern=r"/(?P<node>gpu-[0-9]+)/")
    assert {r[1] for r in _telemetry(store)} == {"gpu-42"}


def test_header_in_one_chunk_rows_in_the_next() -> None:
    parser = registry.get("nvidia_smi_dmon")
    ctx = ParseContext(file="x", node="n1")
    state = parser.new_state(ctx)
    lines = DMON_DT.splitlines()
    first = parser.parse_chunk(pl.Series(lines[:2], dtype=pl.String), 1, ctx, state)
    second = parser.parse_chunk(pl.Series(lines[2:], dtype=pl.String), 3, ctx, state)
    assert first.parsed_lines.to_list() == [1, 2]
    assert second.parsed_lines.to_list() == [3, 4]
    assert second.tables["telemetry"].height == 11 + 8


def test_parse_line_runs_the_chunk_path() -> None:
    ctx = ParseContext(file="x", node="n1")
    parser = registry.get("nvidia_smi_dmon")
    assert isinstance(parser.parse_line(DMON_DT.splitlines()[2], ctx), Quarantined)
    assert isinstance(parser.parse_line(DMON_DT.splitlines()[0], ctx), Parsed)
    assert registry.get("dcgmi_dmon").parse_line("GPU 0  1  2", ctx) == Quarantined(
        "dcgmi dmon row before any #Entity header line"
    )


def test_dmon_section_of_a_capture_bundle(store: Store, tmp_path: Path) -> None:
    banner = "#" * 80 + "\n"
    bundle = f"{banner}# $ nvidia-smi dmon -c 2\n{banner}" + DMON_PLAIN
    f = _ingest(store, tmp_path, "bundle.txt", bundle, node="n1")
    assert (f.format, f.quarantined) == ("nvidia_smi_bundle", 0)
    rows = _telemetry(store)
    assert len(rows) == 3 * 5 - 1 and {r[0] for r in rows} == {None}
