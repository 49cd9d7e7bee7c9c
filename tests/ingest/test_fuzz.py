"""Bad input, fuzzed: every registered parser gets real lines, mutated.

For each parser, real lines come from the corpus files it claims (sniffed, read in place) and the
repo's hand-written fixtures; hypothesis truncates them, flips bytes, injects invalid UTF-8 and
NULs, swaps line ends for CR only, blows numbers up and pushes dates out of range. Each case is
ingested with the format forced to that parser. No crash (a whole-document format may fail with a
clear error), every line is accounted for (lines = parsed + noise + quarantined, and lines is
what the file holds), and memory stays bounded (also for 10 MB lines, in a fresh process).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import resource
import subprocess
import sys
from datetime import datetime
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlens.ingest import registry
from faultlens.ingest.pipeline import FileReport, ingest_paths
from faultlens.ingest.reader import read_head_text
from faultlens.ingest.store import Store

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data"
NOW = datetime(2026, 2, 1)
EXAMPLES = int(os.environ.get("FAULTLENS_FUZZ_EXAMPLES", "10"))
WINDOW = 60  # lines taken from a seed file per case
RSS_BOUND_MIB = 600  # growth of the peak RSS allowed over one parser's cases

INVALID_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]
HUGE = [b"9" * 40, b"-" + b"9" * 25, b"1e999", b"18446744073709551616", b"0x" + b"f" * 33]
BAD_DATES = [b"9999", b"0000", b"1677", b"2262", b"+275760", b"-0001"]
BAD_TIMES = [b"99:99:99", b"24:00:60", b"00:00:00.9999999999"]
_DIGITS = re.compile(rb"\d+")
_YEAR = re.compile(rb"(19|20)\d\d")
_TIME = re.compile(rb"\d\d:\d\d:\d\d")


def _candidate_files(corpus: Path) -> list[Path]:
    roots = [p for p in FIXTURES.iterdir() if p.is_dir() and p.name not in ("replay", "topology")]
    files = [f for r in [*roots, corpus] for f in sorted(r.rglob("*")) if f.is_file()]
    return [f for f in files if f.name != "PROVENANCE.md" and f.stat().st_size < 4_000_000]


@pytest.fixture
def seeds(corpus: Path) -> dict[str, list[Path]]:
    return _seeds(corpus)


@lru_cache(maxsize=1)
def _seeds(corpus: Path) -> dict[str, list[Path]]:
    """Parser name -> the real files it claims (best sniff score), else any file it scores > 0."""
    claimed: dict[str, list[Path]] = {n: [] for n in registry.names()}
    scored: dict[str, list[Path]] = {n: [] for n in registry.names()}
    for f in _candidate_files(corpus):
        try:
            head = read_head_text(str(f), f.suffix == ".gz").splitlines()[:400]
        except Exception:
            continue
        best, score = registry.sniff(head, str(f))
        if best is not None and score > 0:
            claimed[best].append(f)
        for name, parser in registry.REGISTRY.items():
            if parser.sniff(head, str(f)) > 0:
                scored[name].append(f)
    return {n: claimed[n] or scored[n] for n in registry.names()}


# -- mutations -------------------------------------------------------------------------------------
@st.composite
def mutated(draw: st.DrawFn, lines: list[bytes], whole: bool) -> bytes:
    """A mutated document from ``lines`` (raw lines without their end)."""
    if whole and len(lines) <= 400 and draw(st.booleans()):
        out = list(lines)  # a whole document, so whole-file parsers see their real structure
    else:
        start = draw(st.integers(0, max(len(lines) - 1, 0)))
        out = list(lines[start : start + draw(st.integers(1, WINDOW))])
    for _ in range(draw(st.integers(1, 4))):
        if not out:
            break
        i = draw(st.integers(0, len(out) - 1))
        line = out[i]
        k = draw(st.integers(0, len(line)))
        op = draw(
            st.sampled_from(
                ["truncate", "flip", "utf8", "nul", "huge", "date", "time", "drop", "dup", "empty"]
            )
        )
        if op == "truncate":
            out[i] = line[:k]
            if draw(st.booleans()):
                del out[i + 1 :]  # a file cut off mid-write
        elif op == "flip" and line:
            j = min(k, len(line) - 1)
            out[i] = line[:j] + bytes([line[j] ^ draw(st.integers(1, 255))]) + line[j + 1 :]
        elif op == "utf8":
            out[i] = line[:k] + draw(st.sampled_from(INVALID_UTF8)) + line[k:]
        elif op == "nul":
            out[i] = line[:k] + b"\x00" * draw(st.integers(1, 3)) + line[k:]
        elif op == "huge":
            out[i] = _sub_one(draw, _DIGITS, line, draw(st.sampled_from(HUGE)))
        elif op == "date":
            out[i] = _sub_one(draw, _YEAR, line, draw(st.sampled_from(BAD_DATES)))
        elif op == "time":
            out[i] = _sub_one(draw, _TIME, line, draw(st.sampled_from(BAD_TIMES)))
        elif op == "drop":
            del out[i]
        elif op == "dup":
            out.insert(i, line)
        elif op == "empty":
            out.insert(i, b"")
    end = draw(st.sampled_from([b"\n", b"\n", b"\n", b"\r", b"\r\n"]))
    doc = end.join(out)
    return doc + end if draw(st.booleans()) else doc


def _sub_one(draw: st.DrawFn, pattern: re.Pattern[bytes], line: bytes, new: bytes) -> bytes:
    matches = list(pattern.finditer(line))
    if not matches:
        return line + b" " + new
    m = draw(st.sampled_from(matches))
    return line[: m.start()] + new + line[m.end() :]


def expected_lines(doc: bytes) -> int:
    """Lines of a document as the reader counts them: one per ``\\n``, plus an unterminated tail."""
    return doc.count(b"\n") + (1 if doc and not doc.endswith(b"\n") else 0)


def check_report(f: FileReport, name: str, doc: bytes) -> None:
    parser = registry.get(name)
    if f.status == "failed":
        assert parser.whole_file, f"{name} failed on a line format: {f.error}"
        assert f.error and "internal error" not in f.error, f"{name}: {f.error}"
        return
    assert f.status in ("ok", "partial", "unchanged"), (name, f.status, f.error)
    if f.status == "unchanged":
        return
    assert min(f.parsed, f.noise, f.quarantined) >= 0, (name, f)
    assert f.lines == f.parsed + f.noise + f.quarantined, (name, f)
    assert f.lines == expected_lines(doc), (name, f.lines, expected_lines(doc))


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("name", registry.names())
def test_parser_survives_mutated_real_lines(name: str, seeds, tmp_path: Path) -> None:
    files = seeds[name] or seeds["kernel"]
    docs = [f.read_bytes().splitlines() for f in files[:12]]
    whole = registry.get(name).whole_file
    counter = itertools.count()
    rss0 = _maxrss_mib()

    with Store(tmp_path / "fuzz.duckdb") as store:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=os.environ.get("FAULTLENS_FUZZ_RANDOM") is None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(st.data())
        def run(data: st.DataObject) -> None:
            i = data.draw(st.integers(0, len(docs) - 1), label="seed file")
            doc = data.draw(mutated(docs[i], whole), label="document")
            path = tmp_path / f"case-{next(counter)}{files[i].suffix}"
            path.write_bytes(doc)
            # Forget earlier cases: the registry would take a case that starts like an earlier
            # one for that file grown (read from where it stopped), and count only the new part.
            store.execute("DELETE FROM ingested_files")
            report = ingest_paths(store, [str(path)], now=NOW, fmt=name)
            assert len(report.files) == 1
            check_report(report.files[0], name, doc)

        run()
    assert _maxrss_mib() - rss0 < RSS_BOUND_MIB


def test_hand_written_hostile_inputs(tmp_path: Path) -> None:
    """The inputs in tests/data/fuzz (each a shape fuzzing found or the brief named) through
    every parser."""
    cases = sorted((FIXTURES / "fuzz").iterdir())
    assert cases
    with Store(tmp_path / "h.duckdb") as store:
        for case in cases:
            doc = case.read_bytes()
            for name in registry.names():
                path = tmp_path / f"{name}-{case.name}"
                path.write_bytes(doc)
                store.execute("DELETE FROM ingested_files")
                report = ingest_paths(store, [str(path)], now=NOW, fmt=name)
                check_report(report.files[0], name, doc)


BIG_LINE_CHILD = r"""
import json, resource, sys
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from faultlens.ingest import registry
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
tmp = Path(sys.argv[1])
seed = Path(sys.argv[2]).read_bytes().splitlines()[:20]
line = (seed[0] + b" ") * (10_000_000 // (len(seed[0]) + 1) + 1)
doc = b"\n".join([*seed[:5], line[:10_000_000], *seed[5:]]) + b"\n"
out = {}
rss_by = {}
with Store(tmp / "big.duckdb") as store:
    for name in registry.names():
        p = tmp / f"big-{name}.log"
        p.write_bytes(doc)
        store.execute("DELETE FROM ingested_files")
        f = ingest_paths(store, [str(p)], now=datetime(2026, 2, 1), fmt=name).files[0]
        out[name] = [f.status, f.lines, f.parsed, f.noise, f.quarantined, f.error]
        rss_by[name] = next(
            int(l.split()[1]) // 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")
        )
        p.unlink()
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec from the (big) pytest parent.
hwm_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
out["_maxrss_mib"] = hwm_kb / 1024
out["_rss_by_parser"] = rss_by
out["_lines"] = doc.count(b"\n")
print(json.dumps(out))
"""


def test_ten_megabyte_line_every_parser_bounded_memory(corpus: Path, tmp_path: Path) -> None:
    seed = corpus / "xid" / "xid-gpud-pr117-xid45-hung-task-dmesg-T.log"
    proc = subprocess.run(
        [sys.executable, "-c", BIG_LINE_CHILD, str(tmp_path), str(seed)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    n_lines = out.pop("_lines")
    rss = out.pop("_maxrss_mib")
    rss_by = out.pop("_rss_by_parser")
    for name, (status, lines, parsed, noise, quarantined, error) in out.items():
        if status == "failed":
            assert registry.get(name).whole_file and "internal error" not in error, (name, error)
            continue
        assert lines == n_lines == parsed + noise + quarantined, name
        assert quarantined >= 1, f"{name}: the 10 MB line was not quarantined"
    assert rss < 1024, f"peak RSS {rss:.0f} MiB for a 10 MB line (after each parser: {rss_by})"
