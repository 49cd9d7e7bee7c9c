"""Line accounting that can fail: parsed, quarantined and noise lines partition 1..n as sets.

The line-log families report which lines they parsed; the driver checks those sets (no line
twice, none both parsed and quarantined, none outside the file) and derives noise from them.
Here the sets are also checked against what reached the database: every event's line is in the
parsed set, the quarantine table holds exactly the quarantined set, and the sizes are the counts
the file report gives.
"""

from __future__ import annotations

import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlens.ingest import pipeline
from faultlens.ingest.base import ParseContext
from faultlens.ingest.errors import InputError
from faultlens.ingest.pipeline import AccountingError, parse_file, partition, plan
from faultlens.ingest.store import Store
from tests.conftest import CORPUS
from tests.ingest.telemetry.test_dmon import SAMPLES as DMON_SAMPLES

DATA = Path(__file__).resolve().parents[1] / "data"
NOW = datetime(2026, 2, 1)
LINE_DIRS = ("xid", "nccl", "slurm", "loghub")
# Parsers that report their parsed lines (the line-log families and the kernel parser's kin).
SET_FORMATS = {
    "lines",
    "k8s_device_plugin",
    "journal_json",
    "journal_export",
    "journal_verbose",
    "journal_json_pretty",
    "nvidia_smi_dmon",
    "nvidia_smi_pmon",
    "dcgmi_dmon",
    "docker_json",
    "torchelastic_error",
}


def _s(*lines: int) -> pl.Series:
    return pl.Series(lines, dtype=pl.Int64)


def test_partition_accepts_disjoint_sets_and_counts_the_rest() -> None:
    part = partition([_s(1, 4), _s(7)], [_s(2)], 1, 10)
    assert part.parsed.tolist() == [1, 4, 7]
    assert part.quarantined.tolist() == [2]
    assert part.noise == 6


@pytest.mark.parametrize(
    ("parsed", "quarantined", "first", "last", "why"),
    [
        ([_s(1, 2), _s(2)], [], 1, 5, "parsed twice"),
        ([_s(1, 2)], [_s(2)], 1, 5, "both parsed and quarantined"),
        ([_s(1, 6)], [], 1, 5, "outside"),
        ([_s(3)], [], 4, 9, "outside"),  # a grown file's part starts past line 1
        ([], [_s(5), _s(5)], 1, 5, "quarantined twice"),
    ],
)
def test_partition_rejects_what_does_not_add_up(parsed, quarantined, first, last, why) -> None:
    with pytest.raises(AccountingError, match=why):
        partition(parsed, quarantined, first, last)


def _line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _check_against_database(path: Path, tmp: Path) -> tuple[int, int, int]:
    """Parse ``path`` and load it; check its partition against the rows. Returns the counts."""
    with Store(tmp / "acc.duckdb") as store:
        task = plan(store, str(path), base_ctx=ParseContext(file="", year=2024))
        assert not isinstance(task, pipeline.FileReport), task
        pf = parse_file(task)
        part = pf.partition
        assert part is not None, f"{path.name}: {pf.fmt} reports no line sets"
        report = pipeline.load(store, pf, now=NOW)
        n = _line_count(path)
        assert report.lines == n
        assert (report.parsed, report.quarantined) == (len(part.parsed), len(part.quarantined))
        assert report.noise == n - len(part.parsed) - len(part.quarantined) == part.noise
        event_lines = store.query("SELECT DISTINCT line FROM events")["line"].to_numpy()
        assert np.isin(event_lines, part.parsed).all(), "an event from a line not parsed"
        q_lines = np.sort(store.query("SELECT line FROM quarantine")["line"].to_numpy())
        assert q_lines.tolist() == part.quarantined.tolist()
        everything = np.concatenate([part.parsed, part.quarantined])
        assert len(np.unique(everything)) == len(everything)
        assert everything.size == 0 or (everything.min() >= 1 and everything.max() <= n)
        return report.parsed, report.quarantined, report.noise


def _line_logs() -> list[Path]:
    files = [f for d in LINE_DIRS for f in sorted((CORPUS / d).glob("*")) if f.is_file()]
    return files + sorted((DATA / "lines").glob("*"))


@pytest.mark.parametrize("path", _line_logs(), ids=lambda p: p.name)
def test_every_line_log_partitions_its_lines(path: Path, tmp_path: Path) -> None:
    with Store(tmp_path / "sniff.duckdb") as store:
        task = plan(store, str(path))
        assert not isinstance(task, pipeline.FileReport)
        fmt, _ = pipeline.sniff_format(task)
    if fmt not in SET_FORMATS:
        pytest.skip(f"a document format ({fmt}): accounted by counts")
    _check_against_database(path, tmp_path)


@pytest.mark.parametrize("name", sorted(DMON_SAMPLES))
def test_monitor_tables_partition_their_lines(name: str, tmp_path: Path) -> None:
    """nvidia-smi dmon / pmon and dcgmi dmon report their line sets (header, units and rows)."""
    text, fmt = DMON_SAMPLES[name]
    path = tmp_path / name
    path.write_text(text)
    with Store(tmp_path / "sniff.duckdb") as store:
        task = plan(store, str(path))
        assert not isinstance(task, pipeline.FileReport)
        assert pipeline.sniff_format(task)[0] == fmt
    _check_against_database(path, tmp_path)


# -- hypothesis: arbitrary bytes, and real shapes cut and mixed ------------------------------------

SHAPES = [
    ln.encode()
    for ln in (DATA / "lines" / "mixed-node.log").read_text().splitlines()
    + (DATA / "lines" / "unknown-format.txt").read_text().splitlines()
]
_line = st.one_of(
    st.sampled_from(SHAPES),
    st.binary(max_size=120).filter(lambda b: b"\x00" not in b),
    st.builds(lambda s, k: s[:k], st.sampled_from(SHAPES), st.integers(0, 200)),
)
_file = st.lists(_line, max_size=30).map(lambda ls: b"\n".join(ls))
_ends = st.sampled_from([b"", b"\n", b"\r\n"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_file, end=_ends, crlf=st.booleans())
def test_arbitrary_bytes_never_crash_and_always_partition(body: bytes, end: bytes, crlf: bool):
    data = (body.replace(b"\n", b"\r\n") if crlf else body) + end
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "node.log"
        path.write_bytes(data)
        with Store(Path(tmp) / "p.duckdb") as store:
            task = plan(store, str(path), fmt="lines")
            assert not isinstance(task, pipeline.FileReport)
            try:
                pf = parse_file(task)  # raises AccountingError when the sets do not add up
            except InputError as e:  # unreadable input (gzip magic, binary) fails, and says why
                assert "gzip" in str(e) or "binary" in str(e), e
                return
            report = pipeline.load(store, pf, now=NOW)
            assert report.status in ("ok", "partial")
            part = pf.partition
            assert part is not None
            assert report.lines == _line_count(path)
            assert report.parsed + report.noise + report.quarantined == report.lines
            q_lines = sorted(store.query("SELECT line FROM quarantine")["line"].to_list())
            assert q_lines == part.quarantined.tolist()
            events = store.query("SELECT DISTINCT line FROM events")["line"].to_numpy()
            assert np.isin(events, part.parsed).all()
