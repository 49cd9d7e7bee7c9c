"""Slurm JSON documents: ``sacct --json`` / slurmdbd REST jobs, and slurmrestd / ``sinfo --json`` /
``scontrol show node --json`` node lists.

These parsers read the whole file (``whole_file = True``). When the document parses, every line of
it is counted as parsed; a half-written document quarantines every line with ``invalid JSON: ...``.
A ``sacct --json`` document of ``STREAM_MIN_BYTES`` or more is streamed instead (``parse_stream``):
ijson reads it a job at a time, a pass over its lines points each row at its line, and only the
rows are kept (a batch of records at a time, as columns), never the document.
Numbers may come wrapped as ``{"set": true, "infinite": false, "number": N}`` (0.0.39+), states as a
string (22.05) or a list (23.02+); both forms are read.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    RAW_KEEP_CHARS,
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    normalize_node,
    numbered,
)
from faultlens.ingest.schema import Kind, Source
from faultlens.ingest.slurm.common import (
    SEVERITY,
    SOURCE,
    epoch_to_dt,
    expand_nodes,
    result,
    split_reason,
    unwrap,
    xid_in,
)
from faultlens.ingest.slurm.fold import fold


def _first(value: Any) -> str | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return str(value) if value not in (None, "") else None


def _int(value: Any) -> int | None:
    value = unwrap(value)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _gpus(tres: Any) -> int | None:
    """GPU count of a TRES list ``[{type: gres, name: gpu, count: 2}, ...]``; 0 if it has none."""
    if not isinstance(tres, list) or not tres:
        return None
    plain = [
        t
        for t in tres
        if isinstance(t, dict) and t.get("type") == "gres" and t.get("name") == "gpu"
    ]
    typed = [
        t
        for t in tres
        if isinstance(t, dict)
        and t.get("type") == "gres"
        and str(t.get("name", "")).startswith("gpu:")
    ]
    for group in (plain, typed):
        if group:
            return _int(group[0].get("count"))
    return 0


def _exit(exit_code: Any) -> tuple[int | None, int | None]:
    if isinstance(exit_code, int | float):
        return int(exit_code), None
    if not isinstance(exit_code, dict):
        return None, None
    code = _int(exit_code.get("return_code"))
    sig = exit_code.get("signal") or {}
    signal = _int(sig.get("id", sig.get("signal_id"))) if isinstance(sig, dict) else None
    return code, signal


def _tres_gpus(tres: Any) -> int | None:
    if not isinstance(tres, dict):
        return None
    alloc, req = _gpus(tres.get("allocated")), _gpus(tres.get("requested"))
    return alloc if alloc else (req if req is not None else alloc)


def job_record(job: dict[str, Any], ctx: ParseContext, line: int) -> dict[str, Any]:
    array = job.get("array") or {}
    array_id = _int(array.get("job_id")) if isinstance(array, dict) else None
    task = _int(array.get("task_id")) if isinstance(array, dict) else None
    job_id = str(job.get("job_id"))
    if array_id and task is not None:
        job_id = f"{array_id}_{task}"
    state = job.get("state") or {}
    base = _first(state.get("current") if isinstance(state, dict) else state)
    killer = job.get("kill_request_user")
    detail = f"by {killer}" if base == "CANCELLED" and killer else None
    t = job.get("time") or {}
    code, signal = _exit(job.get("exit_code"))
    nodes_text = job.get("nodes")
    nodes = expand_nodes(nodes_text) if isinstance(nodes_text, str) else None
    assoc = job.get("association") or {}
    return {
        "job_id": job_id,
        "array_job_id": str(array_id) if array_id else None,
        "step": None,
        "name": job.get("name"),
        "user": job.get("user") or assoc.get("user"),
        "account": job.get("account") or assoc.get("account"),
        "partition": job.get("partition"),
        "nodes": nodes,
        "n_nodes": _int(job.get("allocation_nodes")) or (len(nodes) if nodes else None),
        "n_gpus": _tres_gpus(job.get("tres")),
        "submit": epoch_to_dt(t.get("submission")),
        "start": epoch_to_dt(t.get("start")),
        "end": epoch_to_dt(t.get("end")),
        "elapsed_s": _int(t.get("elapsed")),
        "state": base,
        "state_detail": detail,
        "exit_code": code,
        "exit_signal": signal,
        "restarts": _int(job.get("restart_cnt")),
        "failed_node": normalize_node(job.get("failed_node") or None),
        "source": SOURCE,
        "file": ctx.file,
        "line": line,
    }


def step_record(job_id: str, step: dict[str, Any], ctx: ParseContext, line: int) -> dict[str, Any]:
    ident = step.get("step") or {}
    sid = ident.get("id") if isinstance(ident, dict) else None
    if isinstance(sid, dict):
        sid = sid.get("step_id")
    elif isinstance(sid, str) and "." in sid:
        sid = sid.split(".", 1)[1]
    nodes = step.get("nodes") or {}
    node_text = nodes.get("range") if isinstance(nodes, dict) else nodes
    t = step.get("time") or {}
    code, signal = _exit(step.get("exit_code"))
    state = _first(step.get("state"))
    return {
        "job_id": job_id,
        "step": str(sid) if sid is not None else None,
        "name": ident.get("name") if isinstance(ident, dict) else None,
        "nodes": expand_nodes(node_text) if isinstance(node_text, str) else None,
        "n_gpus": _tres_gpus(step.get("tres")),
        "start": epoch_to_dt(t.get("start")),
        "end": epoch_to_dt(t.get("end")),
        "elapsed_s": _int(t.get("elapsed")),
        "state": state,
        "exit_code": code,
        "exit_signal": signal,
        "file": ctx.file,
        "line": line,
    }


def node_event(node: dict[str, Any], ctx: ParseContext, line: int, as_of: Any) -> dict | None:
    states = node.get("state")
    states = [str(s).upper() for s in (states if isinstance(states, list) else [states]) if s]
    flags = set("+".join(states).replace("*", "+NOT_RESPONDING").split("+"))
    if "DOWN" in flags:
        kind = Kind.NODE_DOWN
    elif flags & {"DRAIN", "DRAINING", "DRAINED"}:
        kind = Kind.NODE_DRAIN
    elif "NOT_RESPONDING" in flags:
        kind = Kind.NODE_NOT_RESPONDING
    else:
        return None
    reason, by, _ = split_reason(node.get("reason") or None)
    ts = epoch_to_dt(node.get("reason_changed_at")) or epoch_to_dt(as_of)
    attrs = {
        "state": "+".join(states),
        "reason_set_by": node.get("reason_set_by_user") or by,
        "gres": node.get("gres") or None,
        "partitions": node.get("partitions") or None,
    }
    return {
        "ts": ts,
        "ts_flag": None if ts else "no_ts",
        "node": normalize_node(node.get("name") or node.get("hostname")),
        "source": SOURCE,
        "kind": kind.value,
        "subkind": reason,
        "code": xid_in(reason),
        "severity": SEVERITY[kind].value,
        "message": reason or "+".join(states),
        "attrs": json.dumps({k: v for k, v in attrs.items() if v}, sort_keys=True),
        "file": ctx.file,
        "line": line,
    }


class _LineIndex:
    """Where each ``"key": value`` appears, to point rows back at their line in the document."""

    def __init__(self, df: pl.DataFrame | None, key: str, quoted: bool) -> None:
        value = r'"([^"]*)"' if quoted else r"(-?\d+)"
        self.pattern = rf'"{key}":\s*{value}'
        self.at: dict[str, list[int]] = {}
        if df is not None:
            self.add(df)

    def add(self, df: pl.DataFrame) -> None:
        """Index the lines of ``df`` (line, raw), which follow those already indexed."""
        found = df.select("line", pl.col("raw").str.extract(self.pattern).alias("v")).drop_nulls(
            "v"
        )
        for line, v in found.iter_rows():
            self.at.setdefault(v, []).append(line)

    def find(self, value: Any, start: int) -> int:
        """First line at or after ``start`` holding ``value`` (else ``start``)."""
        lines = self.at.get(str(value), [])
        i = bisect_left(lines, start)
        return lines[i] if i < len(lines) else start


def document_tables(
    doc: Any, df: pl.DataFrame, ctx: ParseContext, first_line: int
) -> dict[str, pl.DataFrame] | str:
    """A parsed JSON document -> tables, or the reason it is not a Slurm document."""
    if not isinstance(doc, dict) or not (
        isinstance(doc.get("jobs"), list) or isinstance(doc.get("nodes"), list)
    ):
        return "JSON document has no 'jobs' or 'nodes' list (not Slurm JSON)"
    tables: dict[str, pl.DataFrame] = {}
    index = (_LineIndex(df, "job_id", False), _LineIndex(df, "id", True))
    records: list[dict[str, Any]] = []
    pos = first_line
    for job in doc.get("jobs") or []:
        pos = _job_records(job, ctx, pos, index, records)
    if records:
        tables.update(fold(_records_frame(records)))
    events = []
    pos = first_line
    name_at = _LineIndex(df, "name", True)
    for node in doc.get("nodes") or []:
        if isinstance(node, dict):
            name = str(node.get("name") or "")
            pos = name_at.find(name, pos)
            ev = node_event(node, ctx, pos, doc.get("last_update"))
            if ev:
                events.append(ev)
    if events:
        frame = pl.DataFrame(events, infer_schema_length=None)
        tables["events"] = (
            pl.concat([tables["events"], frame], how="diagonal_relaxed")
            if "events" in tables
            else frame
        )
    return tables


def _job_records(
    job: Any,
    ctx: ParseContext,
    pos: int,
    index: tuple[_LineIndex, _LineIndex],
    out: list[dict[str, Any]],
) -> int:
    """Append the records of one ``jobs`` entry (the job, its steps) to ``out``; returns the
    line the job was found at, where the next job's search starts."""
    if not isinstance(job, dict) or job.get("job_id") is None:
        return pos
    job_at, step_at = index
    pos = job_at.find(job["job_id"], pos)
    rec = job_record(job, ctx, pos)
    out.append(rec)
    for step in job.get("steps") or []:
        if isinstance(step, dict):
            sid = (step.get("step") or {}).get("id") if isinstance(step.get("step"), dict) else None
            at = step_at.find(sid, pos) if isinstance(sid, str) else pos
            out.append(step_record(rec["job_id"], step, ctx, at))
    return pos


def _records_frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(
        records,
        infer_schema_length=None,
        schema_overrides={
            "nodes": pl.List(pl.String),
            "failed_node": pl.String,
            "step": pl.String,
            "state_detail": pl.String,
            "array_job_id": pl.String,
        },
    )


STREAM_MIN_BYTES = 8 << 20  # smaller documents are read whole
# Job and step records folded and handed on at once when streaming: 20,000 held 158 MiB above
# the imports of a 50 MB document's peak (Python dicts, their frame and the fold's copies),
# 5,000 97 MiB, 2,000 84 MiB (``bench/bench_prom_stream.py``'s document).
RECORD_BATCH = 5_000
CURSOR_BYTES = 1 << 20  # lines read at once by the streamed read's line cursor


class JobsSpanBatches(Exception):
    """A job listed again in a later batch, apart from its other listings: the batches cannot be
    folded apart; the document is read again, folded as a whole."""


class _LineCursor:
    """``_LineIndex`` of a streamed document, forward only: lines are indexed as the jobs need
    them, and those before the last search's start are forgotten, so the index holds the
    lines between the job being read and the next one, not the document's."""

    def __init__(self, path: str, gzipped: bool, keys: dict[str, tuple[str, bool]]) -> None:
        from faultlens.ingest.reader import iter_chunks

        self._chunks = iter_chunks(path, gzipped=gzipped, start_line=1, chunk_bytes=CURSOR_BYTES)
        self._patterns = {n: _LineIndex(None, k, q).pattern for n, (k, q) in keys.items()}
        self._at: dict[str, dict[str, deque[int]]] = {n: {} for n in keys}
        self._order: dict[str, deque[tuple[int, str]]] = {n: deque() for n in keys}

    def close(self) -> None:
        self._chunks.close()

    def _more(self) -> bool:
        chunk = next(self._chunks, None)
        if chunk is None:
            return False
        df = numbered(chunk.lines, chunk.first_line).filter(pl.col("raw").is_not_null())
        for name, pattern in self._patterns.items():
            found = df.select("line", pl.col("raw").str.extract(pattern).alias("v"))
            at, order = self._at[name], self._order[name]
            for line, v in found.drop_nulls("v").iter_rows():
                at.setdefault(v, deque()).append(line)
                order.append((line, v))
        return True

    def find(self, name: str, value: Any, start: int) -> int:
        """``_LineIndex.find`` for searches whose ``start`` never decreases."""
        at, order, key = self._at[name], self._order[name], str(value)
        while True:
            while order and order[0][0] < start:  # lines before start: never a match again
                _, v = order.popleft()
                at[v].popleft()
                if not at[v]:
                    del at[v]
            if at.get(key):
                return at[key][0]
            if not self._more():
                return start


class _CursorIndex:
    """One key of a ``_LineCursor``, with ``_LineIndex``'s ``find``."""

    def __init__(self, cursor: _LineCursor, name: str) -> None:
        self.cursor, self.name = cursor, name

    def find(self, value: Any, start: int) -> int:
        return self.cursor.find(self.name, value, start)


def _record_batches(path: str, gzipped: bool, ctx: ParseContext) -> Iterator[pl.DataFrame]:
    """The job and step records of a ``jobs`` document, ``RECORD_BATCH`` at a time (whole jobs),
    read a job at a time (ijson) and pointed at their lines by a ``_LineCursor`` over the same
    file. Raises ValueError with the reason the whole-document read would give."""
    import ijson

    from faultlens.ingest.reader import _open_stream

    cursor = _LineCursor(path, gzipped, {"job": ("job_id", False), "step": ("id", True)})
    index = (_CursorIndex(cursor, "job"), _CursorIndex(cursor, "step"))
    records: list[dict[str, Any]] = []
    pos = 1  # jobs are searched for from line 1, as the whole read searches its one chunk
    last_id = None
    try:
        with _open_stream(path, gzipped) as stream:
            for job in ijson.items(stream, "jobs.item", use_float=True):
                job_id = job.get("job_id") if isinstance(job, dict) else None
                # a batch ends between two jobs, never inside the listings of one (a requeue)
                if len(records) >= RECORD_BATCH and job_id != last_id:
                    yield _records_frame(records)
                    records = []
                pos = _job_records(job, ctx, pos, index, records)  # type: ignore[arg-type]
                last_id = job_id if job_id is not None else last_id
    except ijson.JSONError as e:
        raise ValueError(f"invalid JSON: {e}") from e
    except (AttributeError, TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"unexpected Slurm JSON structure: {e}") from e
    finally:
        cursor.close()
    if records:
        yield _records_frame(records)


def stream_jobs(path: str, gzipped: bool, ctx: ParseContext) -> Iterator[dict[str, pl.DataFrame]]:
    """The folded tables of a ``jobs`` document, a batch of jobs at a time: the rows go on to
    the database as they come, never held for the whole document. Raises ``JobsSpanBatches``
    when a job is listed again in a later batch (folding keeps a job's last listing)."""
    seen: set[Any] = set()
    for frame in _record_batches(path, gzipped, ctx):
        jobs = frame.filter(pl.col("step").is_null()) if "step" in frame.columns else frame
        ids = set(jobs["job_id"].to_list())
        if not seen.isdisjoint(ids):
            raise JobsSpanBatches
        seen |= ids
        yield fold(frame)


def stream_jobs_whole(path: str, gzipped: bool, ctx: ParseContext) -> pl.DataFrame:
    """The job and step records of a ``jobs`` document read a job at a time, folded once."""
    frames = list(_record_batches(path, gzipped, ctx))
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


class SlurmJsonParser:
    """One whole-file JSON parser; ``key`` is the list its sniff looks for (jobs or nodes)."""

    source = Source.SLURM
    whole_file = True
    max_line_bytes = 1 << 30  # a one-line `curl` / REST export is one document

    stream_min_bytes = STREAM_MIN_BYTES

    def __init__(self, name: str, key: str) -> None:
        self.name = name
        self.key = key

    def streams(self, size: int, head: bytes) -> bool:
        """``sacct --json`` documents this big are streamed (node lists are small: read whole)."""
        return self.key == "jobs" and size >= self.stream_min_bytes and head.lstrip()[:1] == b"{"

    stream_restart = JobsSpanBatches  # raised by the batched stream: start again, exact=True

    def parse_stream(
        self, path: str, gzipped: bool, first_line: int, ctx: ParseContext, exact: bool = False
    ) -> Iterator[ChunkResult]:
        """The rows of a big ``jobs`` document, folded as the whole read folds them: a batch of
        jobs at a time (``stream_jobs``), or with ``exact`` all the records folded at once
        (``stream_jobs_whole``: a job listed in two batches). The caller accounts for the lines;
        ValueError rejects the document."""
        if not exact:
            for tables in stream_jobs(path, gzipped, ctx):
                if tables:
                    yield result(tables, parsed=0)
            return
        frame = stream_jobs_whole(path, gzipped, ctx)
        if frame.height:
            yield result(fold(frame), parsed=0)

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines[:400])
        if not text.lstrip().startswith("{"):
            return 0.0
        if self.key == "jobs":
            ok = '"jobs"' in text and '"job_id"' in text
        else:
            ok = (
                '"nodes"' in text
                and '"state"' in text
                and ('"hostname"' in text or '"reason"' in text)
                and '"jobs"' not in text
            )
        return 0.9 if ok else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        """A one-line JSON document (``sacct --json | jq -c``)."""
        if line is None or not line.strip():
            return None
        try:
            doc = json.loads(line)
        except ValueError as e:
            return Quarantined(f"invalid JSON: {e}")
        tables = document_tables(doc, pl.DataFrame({"line": [1], "raw": [line]}), ctx, 1)
        if isinstance(tables, str):
            return Quarantined(tables)
        return Parsed({k: v.to_dicts() for k, v in tables.items()})

    def new_state(self, ctx: ParseContext) -> None:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        df = numbered(lines, first_line).filter(pl.col("raw").is_not_null())
        text = "\n".join(lines.fill_null("").to_list())
        if not text.strip():
            return ChunkResult()
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:
            return self._quarantine(df, f"invalid JSON: {e}")
        try:
            tables = document_tables(doc, df, ctx, first_line)
        except (AttributeError, TypeError, ValueError, OverflowError) as e:
            return self._quarantine(df, f"unexpected Slurm JSON structure: {e}")
        if isinstance(tables, str):
            return self._quarantine(df, tables)
        return result(tables, parsed=df.height)

    @staticmethod
    def _quarantine(df: pl.DataFrame, reason: str) -> ChunkResult:
        return ChunkResult(
            quarantine=df.select(
                "line", pl.col("raw").str.slice(0, RAW_KEEP_CHARS), pl.lit(reason).alias("reason")
            )
        )

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()
