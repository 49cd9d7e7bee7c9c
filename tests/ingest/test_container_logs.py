"""Container runtimes' log files and torchelastic's error file, written here from their documented
formats (moby's ``jsonlog``, the CRI logging format of containerd / CRI-O, PyTorch's
``ErrorHandler.record_exception``): every event with its time (UTC), node, kind and line, the files
sniffed as their own formats, and every line accounted for. Expected values come from the
constants the files are written from.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest import lines, pipeline, scan
from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths, parse_file, plan
from faultlens.ingest.store import Store
from tests.conftest import CORPUS

NOW = datetime(2027, 1, 1)
YEAR = 2026
T0 = datetime(2026, 12, 1, 6, 11, 2, 223456)  # the NCCL WARN record's time (UTC)
NCCL_WARN = (
    "gpu-b07:4021:4133 [3] NCCL WARN NET/IB : Got completion from peer 10.9.0.12<50213> "
    "with error 12, opcode 0, len 0, vendor err 129"
)
GLOG_AT = datetime(YEAR, 12, 1, 6, 11, 5, 123456)  # the glog stamp inside the watchdog line
WATCHDOG = (
    "[rank3]:[E1201 06:11:05.123456 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600061 milliseconds before timing out."
)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
PIECE = 16 * 1024  # docker's json-file piece size


def _rfc3339(ts: datetime, nanos: int = 0) -> str:
    """``time.RFC3339Nano`` of a UTC time (trailing zeros dropped, as Go writes them)."""
    frac = f"{ts.microsecond:06d}{nanos:03d}".rstrip("0")
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def _docker(log: str, ts: datetime, stream: str = "stderr", attrs: dict | None = None) -> str:
    record: dict = {"log": log, "stream": stream}
    if attrs:
        record["attrs"] = attrs
    record["time"] = _rfc3339(ts, 789)
    return json.dumps(record, separators=(",", ":"))


def _pieces(line: str, ts: datetime) -> list[str]:
    """One line as docker writes a long one: 16 KiB pieces, only the last ending with ``\\n``."""
    text = line + "\n"
    cuts = [text[i : i + PIECE] for i in range(0, len(text), PIECE)]
    return [_docker(c, ts + timedelta(microseconds=k)) for k, c in enumerate(cuts)]


def _ingest(tmp: Path, path: Path, node: str | None = None):
    """(file report, events, quarantine lines, parsed lines) of one file."""
    with Store(tmp / "c.duckdb") as store:
        ctx = ParseContext(file="", year=YEAR, node=node, node_origin="option" if node else None)
        task = plan(store, str(path), base_ctx=ctx)
        assert not isinstance(task, pipeline.FileReport), task
        pf = parse_file(task)
        report = pipeline.load(store, pf, now=NOW)
        events = store.query(
            "SELECT line, ts, ts_flag, node, kind, subkind, code, message, attrs FROM events"
            " ORDER BY line"
        ).rows()
        q = store.query("SELECT line, reason FROM quarantine ORDER BY line").rows()
    part = pf.partition
    assert part is not None
    assert report.parsed + report.noise + report.quarantined == report.lines
    return report, pf.fmt, events, q, part.parsed.tolist()


# -- docker json-file ------------------------------------------------------------------------------

LONG_WARN = NCCL_WARN + " " + "x" * (2 * PIECE)  # three pieces


def _docker_file(tmp: Path) -> Path:
    lines = [
        _docker("starting trainer\n", T0 - timedelta(seconds=1), "stdout"),  # 1 noise
        _docker(NCCL_WARN + "\n", T0),  # 2
        _docker(WATCHDOG + "\n", T0 + timedelta(seconds=4), attrs={"tag": "trainer"}),  # 3
        _docker(XID, T0 + timedelta(seconds=5)),  # 4: a piece, no newline ...
        _docker("\n", T0 + timedelta(seconds=5, microseconds=1)),  # 5: ... ended here
        *_pieces(LONG_WARN, T0 + timedelta(seconds=6)),  # 6, 7, 8
        'not a record: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, {"log"',  # 9 quarantined
        _docker("step 10 loss 1.25\n", T0 + timedelta(seconds=7), "stdout"),  # 10 noise
    ]
    path = tmp / "0123abcd-json.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_docker_json_file_events_with_the_record_time(tmp_path: Path) -> None:
    report, fmt, events, q, parsed = _ingest(tmp_path, _docker_file(tmp_path))
    assert fmt == "docker_json"
    assert report.warning is None
    got = [(e[0], e[1], e[2], e[3], e[4], e[6]) for e in events]
    assert got == [
        (2, T0, None, "gpu-b07", "nccl_error", None),
        # the glog stamp inside the message is the line's own time, as the line reader reads it
        (3, GLOG_AT, None, None, "nccl_timeout", None),
        (4, T0 + timedelta(seconds=5), None, None, "xid", 79),
        (6, T0 + timedelta(seconds=6), None, "gpu-b07", "nccl_error", None),
    ]
    assert events[3][7].startswith("NET/IB : Got completion") and events[3][7].endswith("x")
    assert q == [(9, "docker json-file: not a json-file record")]
    assert parsed == [2, 3, 4, 5, 6, 7, 8]  # the pieces of a record with its event


def test_docker_json_file_is_not_journal_json(tmp_path: Path) -> None:
    path = _docker_file(tmp_path)
    with Store(tmp_path / "s.duckdb") as store:
        task = plan(store, str(path))
        assert pipeline.sniff_format(task)[0] == "docker_json"


def test_docker_json_record_cut_at_the_end_is_read(tmp_path: Path) -> None:
    """A container stopped mid-line: its last pieces are read as they stand."""
    path = tmp_path / "cut-json.log"
    path.write_text(_docker(XID, T0) + "\n")
    _, fmt, events, q, parsed = _ingest(tmp_path, path, node="gpu-c01")
    assert fmt == "docker_json"
    assert [(e[0], e[1], e[3], e[4], e[6]) for e in events] == [(1, T0, "gpu-c01", "xid", 79)]
    assert q == [] and parsed == [1]


# -- CRI (containerd / CRI-O) ----------------------------------------------------------------------


def _cri(ts: datetime, tag: str, text: str, stream: str = "stderr") -> str:
    return f"{_rfc3339(ts, 1)} {stream} {tag} {text}"


def test_cri_partial_lines_are_joined_at_the_first_piece(tmp_path: Path) -> None:
    t = T0
    cut = NCCL_WARN.index("NCCL WARN") + len("NCCL W")
    lines = [
        _cri(t, "F", "hello from the trainer", "stdout"),  # 1 noise
        _cri(t + timedelta(seconds=1), "P", NCCL_WARN[:cut]),  # 2: P
        _cri(t + timedelta(seconds=1, microseconds=1), "P", NCCL_WARN[cut : cut + 20]),  # 3: P
        _cri(t + timedelta(seconds=1, microseconds=2), "F", NCCL_WARN[cut + 20 :]),  # 4: F
        _cri(t + timedelta(seconds=2), "F", XID, "stdout"),  # 5
        _cri(t + timedelta(seconds=3), "P", "a partial line of no family, "),  # 6 noise
        _cri(t + timedelta(seconds=3, microseconds=1), "F", "ended here"),  # 7 noise
    ]
    path = tmp_path / "trainer-0_default_trainer-abc.log"
    path.write_text("\n".join(lines) + "\n")
    report, fmt, events, q, parsed = _ingest(tmp_path, path)
    assert fmt == "lines"
    got = [(e[0], e[1], e[3], e[4], e[6]) for e in events]
    assert got == [
        (2, t + timedelta(seconds=1), "gpu-b07", "nccl_error", None),
        (5, t + timedelta(seconds=2), None, "xid", 79),  # not the stream taken for a host
    ]
    assert events[0][7] == NCCL_WARN.split("NCCL WARN ", 1)[1]
    assert events[1][7] == XID
    assert q == [] and parsed == [2, 3, 4, 5]
    assert report.noise == 3


# A CRI log whose partial lines a scan block (or a reader chunk) boundary may cut: the NCCL WARN
# in four pieces (lines 2-5: P, P, P, F) and an Xid in two (lines 9-10: P, F).
CUT = NCCL_WARN.index("NCCL WARN") + len("NCCL W")
CRI_LINES = [
    _cri(T0, "F", "hello from the trainer", "stdout"),  # 1 noise
    _cri(T0 + timedelta(seconds=1), "P", NCCL_WARN[:CUT]),  # 2: P
    _cri(T0 + timedelta(seconds=1, microseconds=1), "P", NCCL_WARN[CUT : CUT + 20]),  # 3: P
    _cri(T0 + timedelta(seconds=1, microseconds=2), "P", NCCL_WARN[CUT + 20 : CUT + 40]),  # 4: P
    _cri(T0 + timedelta(seconds=1, microseconds=3), "F", NCCL_WARN[CUT + 40 :]),  # 5: F
    _cri(T0 + timedelta(seconds=2), "F", XID, "stdout"),  # 6
    _cri(T0 + timedelta(seconds=3), "P", "a partial line of no family, "),  # 7 noise
    _cri(T0 + timedelta(seconds=3, microseconds=1), "F", "ended here"),  # 8 noise
    _cri(T0 + timedelta(seconds=4), "P", XID[:24], "stdout"),  # 9: P
    _cri(T0 + timedelta(seconds=4, microseconds=1), "F", XID[24:], "stdout"),  # 10: F
]
# (line, ts, node, kind, code, message) of the events, each at its first piece's line and time
CRI_EVENTS = [
    (2, T0 + timedelta(seconds=1), "gpu-b07", "nccl_error", None, NCCL_WARN.split("WARN ")[1]),
    (6, T0 + timedelta(seconds=2), None, "xid", 79, XID),
    (9, T0 + timedelta(seconds=4), None, "xid", 79, XID),
]
CRI_PARSED = [2, 3, 4, 5, 6, 9, 10]
CRI_NOISE = [1, 7, 8]


def _cri_file(tmp: Path) -> tuple[Path, list[int]]:
    """The file, and the byte offset just past each of its lines."""
    path = tmp / "trainer-0_default_trainer-cut.log"
    path.write_text("\n".join(CRI_LINES) + "\n")
    ends, at = [], 0
    for line in CRI_LINES:
        at += len(line.encode()) + 1
        ends.append(at)
    return path, ends


def _cri_read(tmp: Path, path: Path) -> tuple[list[tuple], list[int]]:
    report, fmt, events, q, parsed = _ingest(tmp, path)
    assert fmt == "lines"
    assert (report.lines, report.noise, q) == (len(CRI_LINES), len(CRI_NOISE), [])
    return [(e[0], e[1], e[3], e[4], e[6], e[7]) for e in events], parsed


def test_cri_partial_lines_cut_by_a_scan_block_are_joined(tmp_path: Path, monkeypatch) -> None:
    path, ends = _cri_file(tmp_path)
    whole, whole_parsed = _cri_read(tmp_path / "0", path)  # one 64 MiB block: no boundary
    assert whole == CRI_EVENTS and whole_parsed == CRI_PARSED
    # a block of exactly lines 1..k: a boundary after line k (and every k lines or so after)
    for k in range(1, len(CRI_LINES)):
        chunks = list(scan.iter_scan(path, lines.LITERALS, follow=lines.CRI_PARTIAL,
                                     block_bytes=ends[k - 1]))  # fmt: skip
        assert chunks[0].last_line == k  # the premise: the first block ends at line k
        for in_thread in (True, False):
            monkeypatch.setattr(pipeline, "SCAN_BLOCK_BYTES", ends[k - 1])
            monkeypatch.setattr(pipeline, "PREPARE_IN_THREAD", in_thread)
            got, parsed = _cri_read(tmp_path / f"{k}-{in_thread}", path)
            assert (got, parsed) == (CRI_EVENTS, CRI_PARSED), (k, in_thread)


def test_cri_partial_lines_cut_by_a_scan_block_polars_engine(tmp_path: Path, monkeypatch) -> None:
    path, ends = _cri_file(tmp_path)
    monkeypatch.setattr(scan, "available", lambda: False)  # the engine without Hyperscan
    for k in (2, 3, 4, 9):  # inside a run of pieces: P|P, P|P, P|F and P|F
        monkeypatch.setattr(pipeline, "SCAN_BLOCK_BYTES", ends[k - 1])
        got, parsed = _cri_read(tmp_path / str(k), path)
        assert (got, parsed) == (CRI_EVENTS, CRI_PARSED), k


def test_cri_partial_lines_cut_by_a_chunk_of_parse_chunk() -> None:
    """The chunk path (``parse_chunk``, one state) joins pieces a chunk boundary cuts; every
    boundary and every pair of boundaries gives the events of the one-chunk read."""
    parser = lines.LinesParser()

    def read(cuts: list[int]) -> tuple[list[tuple], list[int]]:
        ctx = ParseContext(file="cri.log", year=YEAR)
        state = parser.new_state(ctx)
        out = None
        for lo, hi in itertools.pairwise([0, *cuts, len(CRI_LINES)]):
            part = parser.parse_chunk(
                pl.Series(CRI_LINES[lo:hi], dtype=pl.String), lo + 1, ctx, state
            )
            out = part if out is None else out.merge(part)
        out = out.merge(parser.finish(ctx, state))
        ev = out.tables["events"].sort("line")
        rows = ev.select("line", "ts", "node", "kind", "code", "message").rows()
        return rows, sorted(out.parsed_lines.to_list())

    assert read([]) == (CRI_EVENTS, CRI_PARSED)
    for cuts in [[k] for k in range(1, 10)] + [[2, 3], [2, 4], [3, 4], [2, 3, 4], [9, 9]]:
        assert read(cuts) == (CRI_EVENTS, CRI_PARSED), cuts


def test_a_run_of_pieces_past_the_limit_is_not_held() -> None:
    cand = pl.DataFrame({"line": [2, 3], "raw": CRI_LINES[1:3]})
    kept = lines.PartialCarry(max_bytes=len(CRI_LINES[1]) + len(CRI_LINES[2]) - 1)
    assert kept.take(cand, 3).equals(cand) and kept.rest() is None
    held = lines.PartialCarry()
    assert held.take(cand, 3).height == 0
    assert held.rest()["line"].to_list() == [2, 3]
    assert held.rest() is None


# -- torchelastic error file -----------------------------------------------------------------------

STAMP = 1764569462  # 2025-12-01 06:11:02 UTC
ELASTIC_MSG = (
    "RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: "
    "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
)
STACK = (
    'Traceback (most recent call last):\n  File "train.py", line 12, in main\n'
    "    loss.backward()\n" + ELASTIC_MSG + "\n"
)


@pytest.mark.parametrize(
    ("layout", "doc"),
    [
        (
            "nested",
            {
                "message": {
                    "message": ELASTIC_MSG + "\nmore detail",
                    "extraInfo": {"py_callstack": STACK, "timestamp": str(STAMP)},
                }
            },
        ),
        ("plain", {"message": ELASTIC_MSG, "timestamp": STAMP}),
    ],
)
@pytest.mark.parametrize("indent", [None, 2])
def test_torchelastic_error_file(layout: str, doc: dict, indent, tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    path.write_text(json.dumps(doc, indent=indent))
    report, fmt, events, q, parsed = _ingest(tmp_path, path, node="gpu-b07")
    assert fmt == "torchelastic_error"
    want_ts = datetime.fromtimestamp(STAMP, UTC).replace(tzinfo=None)
    assert want_ts == datetime(2025, 12, 1, 6, 11, 2)
    ((line, ts, flag, node, kind, subkind, _code, message, attrs),) = events
    at = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if '"message": "' in ln)
    assert (line, ts, flag, node, kind, subkind) == (
        at,
        want_ts,
        None,
        "gpu-b07",
        "process_failed",
        "error_file",
    )
    assert message == ELASTIC_MSG
    a = json.loads(attrs)
    assert a["nccl_error"] == "ncclSystemError" and a["exception"] == "RuntimeError"
    assert q == [] and parsed == list(range(1, report.lines + 1))


def test_torchelastic_error_file_names_no_node(tmp_path: Path) -> None:
    folder = tmp_path / "gpu-b07"  # a folder is never taken for the node by default
    folder.mkdir()
    path = folder / "error.json"
    path.write_text(json.dumps({"message": "RuntimeError: boom", "timestamp": 0}))
    _, fmt, events, _, _ = _ingest(tmp_path, path)
    assert fmt == "torchelastic_error"
    ((_, ts, flag, node, kind, *_),) = events
    assert (ts, flag, node, kind) == (None, "no_ts", None, "process_failed")


def test_torchelastic_error_file_cut_short_is_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    text = json.dumps({"message": {"message": ELASTIC_MSG, "extraInfo": {"timestamp": "1"}}})
    path.write_text(text[:-10])
    report, fmt, events, q, parsed = _ingest(tmp_path, path)
    assert fmt == "torchelastic_error"
    assert events == [] and q == [(1, "torchelastic error file: not one")] and parsed == []


# -- the corpus, wrapped as docker json-file -------------------------------------------------------

FILES = [*sorted((CORPUS / "xid").glob("*.log")), *sorted((CORPUS / "nccl").glob("*.log"))]


def _events(store: Store, path: Path) -> list[tuple]:
    rows = store.query(
        "SELECT line, kind, code FROM events WHERE file = ? ORDER BY ALL", [str(path.resolve())]
    ).rows()
    return rows


def test_corpus_logs_wrapped_as_docker_json_give_the_same_events(tmp_path: Path) -> None:
    bad = {}
    with Store(tmp_path / "w.duckdb") as store:
        for path in FILES:
            lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
            if lines and lines[-1] == "":
                lines = lines[:-1]
            wrapped = tmp_path / f"{path.stem}-json.log"
            wrapped.write_text("".join(_docker(ln + "\n", T0) + "\n" for ln in lines))
            plain = tmp_path / path.name
            plain.write_text("\n".join(lines) + "\n")
            formats = {}
            for one in (plain, wrapped):  # a fresh context each: nothing learned carries over
                ctx = ParseContext(file="", year=2024)
                (report,) = ingest_paths(store, [str(one)], now=NOW, base_ctx=ctx).files
                formats[one.name] = report.format
            assert formats[wrapped.name] == "docker_json", (path.name, formats)
            if formats[plain.name] != "lines":
                continue  # a format of its own (device plugin, SXid tables): not a line log
            want, got = _events(store, plain), _events(store, wrapped)
            if want != got:
                bad[path.name] = (
                    sorted(set(want) - set(got))[:3],
                    sorted(set(got) - set(want))[:3],
                )
    assert not bad, bad
