"""torchelastic's error file (``TORCHELASTIC_ERROR_FILE``): the failure a worker recorded.

``torch.distributed.elastic.multiprocessing.errors.record`` writes, when the wrapped function
raises (``ErrorHandler.record_exception``), one JSON document::

    {"message": {"message": "RuntimeError: NCCL communicator was aborted on rank 3. ...",
                 "extraInfo": {"py_callstack": "Traceback (most recent call last): ...",
                               "timestamp": "1764569462"}}}

Older versions (and a ``ProcessFailure`` with no reply file) wrote ``"message"`` as a plain string
with an optional top-level ``"timestamp"``; ``errorTraits`` may sit beside ``message``. PyTorch
reads both layouts the same way (``ProcessFailure._get_error_data``), and so does this parser.

The document becomes one ``process_failed`` event (subkind ``error_file``): its time is the
``timestamp`` (Unix seconds, UTC; missing, not a number or 0: ``ts`` NULL, flagged ``no_ts``),
its message the error's first line, the NCCL error type (``pytorch.reason_subkind``) and the
callstack's last line in ``attrs``. The file names no host: the node is ``--node`` /
``--node-from-path`` or none. The event stands at the line where the message's text starts; every
line of a document that parses is parsed, a document that does not is quarantined at its first
line (the other lines noise).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    LineResult,
    ParseContext,
    line_series,
    quarantine_frame,
    rows_to_frames,
)
from faultlens.ingest.nccl.pytorch import NCCL_ERROR_IN, make_event, reason_subkind
from faultlens.ingest.schema import Kind, Severity, Source

_SNIFF = re.compile(r'^\s*\{\s*"message"\s*:')
# the last ``Exception: text`` line of a Python traceback
_EXC_LINE = re.compile(r"^(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))(?::|$)")


def error_data(doc: Any) -> tuple[str, Any, dict[str, Any]] | None:
    """(message, timestamp, extraInfo) of a parsed error file, None if the document is not one;
    the two layouts as ``ProcessFailure._get_error_data`` reads them."""
    if not isinstance(doc, dict) or "message" not in doc:
        return None
    message = doc["message"]
    if isinstance(message, str):
        return message, doc.get("timestamp"), {}
    if isinstance(message, dict) and isinstance(message.get("message"), str):
        extra = message.get("extraInfo")
        extra = extra if isinstance(extra, dict) else {}
        return message["message"], extra.get("timestamp"), extra
    return None


def unix_ts(value: Any) -> datetime | None:
    """Unix seconds (a number or its decimal text) as a UTC time; None for 0 (PyTorch's "no
    time") or anything else."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if not 0 < seconds < 1e11:
        return None
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def event_of(doc: Any, line_no: int, ctx: ParseContext) -> dict[str, Any] | None:
    """The ``process_failed`` event of a parsed error file (``events`` row), or None."""
    data = error_data(doc)
    if data is None:
        return None
    message, stamp, extra = data
    first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    stack = extra.get("py_callstack") if isinstance(extra.get("py_callstack"), str) else None
    stack_lines = [ln for ln in (stack or "").splitlines() if ln.strip()]
    exc = _EXC_LINE.match(first)
    where = NCCL_ERROR_IN.search(message)
    attrs = {
        "exception": exc["exc"].rsplit(".", 1)[-1] if exc else None,
        "nccl_error": reason_subkind(where["reason"] if where else message),
        "traceback_last": stack_lines[-1].strip() if stack_lines else None,
        "error_file": ctx.file,
    }
    ts = unix_ts(stamp)
    return make_event(
        ctx,
        line_no,
        source=Source.PYTORCH,
        kind=Kind.PROCESS_FAILED,
        subkind="error_file",
        severity=Severity.ERROR,
        message=first or message,
        node=None,
        ts=ts,
        attrs=attrs,
        job_id=ctx.job_id,
    )


def _message_line(lines: list[str | None]) -> int:
    """The 0-based index of the line where the message's text starts (the last ``"message"``
    key before any other text: the inner one of the nested layout), else 0."""
    at = 0
    for i, line in enumerate(lines):
        if line is None:
            continue
        n = line.count('"message"')
        if n:
            at = i
            rest = line.split('"message"')[-1]
            if re.match(r'\s*:\s*"', rest):
                return i
    return at


class ElasticErrorFileParser:
    """One torchelastic error file: one ``process_failed`` event."""

    name = "torchelastic_error"
    source = Source.PYTORCH
    whole_file = True

    def sniff(self, head_lines: list[str], path: str) -> float:
        head = "\n".join(head_lines[:200])
        if not _SNIFF.match(head):
            return 0.0
        try:
            doc = json.loads(head)
        except ValueError:  # a head cut short: the keys must be there
            keyed = '"extraInfo"' in head or '"py_callstack"' in head
            return 0.9 if keyed else 0.0
        return 0.95 if error_data(doc) is not None else 0.0

    def new_state(self, ctx: ParseContext) -> None:
        return None

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        """The chunk path on one line (``json.dump`` writes the file as one line)."""
        return self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, None).to_line_result()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: None
    ) -> ChunkResult:
        texts = lines.to_list()
        present = [first_line + i for i, t in enumerate(texts) if t is not None and t.strip()]
        if not present:
            return ChunkResult(parsed_lines=line_series([]))
        try:
            doc = json.loads("\n".join(t or "" for t in texts))
        except ValueError:
            doc = None
        at = first_line + _message_line(texts)
        event = event_of(doc, at, ctx)
        if event is None:
            raw = "\n".join(t or "" for t in texts)
            q = quarantine_frame([present[0]], [raw], ["torchelastic error file: not one"])
            return ChunkResult(quarantine=q, parsed_lines=line_series([]))
        return ChunkResult(
            tables=rows_to_frames({"events": [event]}),
            parsed=len(present),
            parsed_lines=line_series(present),
        )

    def finish(self, ctx: ParseContext, state: None) -> ChunkResult:
        return ChunkResult(parsed_lines=line_series([]))


PARSERS = [ElasticErrorFileParser()]
