"""The NCCL / PyTorch parsers registered in ``ingest.registry``: the chunk path
(``vec``) and the per-line reference path (``line``) behind one parser object."""

from __future__ import annotations

import polars as pl

from faultlens.ingest.base import ChunkResult, LineResult, ParseContext
from faultlens.ingest.nccl import pytorch, vec
from faultlens.ingest.nccl.line import (
    _NCCL_RX,
    _RANK_HDR,
    _ROW_HINT_RX,
    _ROW_RX,
    LAST_ERROR,
    LITERALS,
    NcclState,
    _frame,
    handle,
    job_id_of,
    rank_rows,
    result_of,
    test_from_name,
)
from faultlens.ingest.nccl.pytorch import Sink
from faultlens.ingest.schema import Source

# -- the parser -----------------------------------------------------------------------------------

_SNIFF_TORCH = (
    "Watchdog caught collective operation timeout",
    "ProcessGroupNCCL",
    "DistBackendError",
    "ChildFailedError",
    "NCCL error in:",
    *pytorch.NCCL_RESULT_NAMES,
)


def _sniff_counts(head_lines: list[str]) -> tuple[int, int, int]:
    total = nccl = torch = 0
    for line in head_lines:
        if not line.strip():
            continue
        total += 1
        if line.startswith('{"'):  # a JSON record (docker json-file) holding an NCCL line
            continue
        text = pytorch.strip_launcher(line).rest
        if (
            _NCCL_RX.match(line)
            or text.startswith(("NCCL version", "# nThread"))
            or _RANK_HDR.match(text)
            or _ROW_RX.match(line)
        ):
            nccl += 1
        elif any(s in line for s in _SNIFF_TORCH):
            torch += 1
    return total, nccl, torch


class NcclParser:
    """NCCL + nccl-tests + PyTorch-distributed lines. ``pytorch`` is the same parser, sniffed for
    files with PyTorch shapes but no NCCL line; a mixed log is fully parsed by either."""

    source = Source.NCCL
    whole_file = False
    # The driver finds candidate lines in the raw bytes (``ingest.scan``); the line after a
    # ``Last error:`` line (its detail) is a candidate too.
    prefilter: tuple[str, ...] = tuple(LITERALS)
    prefilter_follow: str | None = LAST_ERROR
    raw_scan = True

    def __init__(self, name: str = "nccl", *, prefilter: bool = True) -> None:
        self.name = name
        self.source = Source.NCCL if name == "nccl" else Source.PYTORCH
        if not prefilter:  # every line through ``parse_chunk`` (the line-splitting path)
            self.prefilter = ()

    def sniff(self, head_lines: list[str], path: str) -> float:
        total, nccl, torch = _sniff_counts(head_lines)
        if not total:
            return 0.0
        density = (nccl + torch) / total
        if self.name == "nccl":
            return 0.7 + 0.3 * density if nccl else 0.0
        return 0.7 + 0.3 * density if torch and not nccl else 0.0

    def new_state(self, ctx: ParseContext) -> NcclState:
        return NcclState(job_id=job_id_of(ctx), test=test_from_name(ctx.file))

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        """The pure reference path for one line (no context from earlier lines)."""
        st = self.new_state(ctx)
        return reference_parse([line], ctx, self, st).to_line_result()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: NcclState
    ) -> ChunkResult:
        """Vectorized: one literal-alternation pass selects the candidate lines, which are parsed
        in batches over several chunks (``vec``)."""
        return vec.parse_chunk(lines, first_line, ctx, state)

    def parse_candidates(
        self, cand: pl.DataFrame, last_line: int, ctx: ParseContext, state: NcclState
    ) -> ChunkResult:
        """Vectorized, on the candidate lines only (``line``, ``raw``, ``follows``)."""
        return vec.parse_candidates(cand, ctx, state)

    def finish(self, ctx: ParseContext, state: NcclState) -> ChunkResult:
        batch = vec.flush(ctx, state)  # the last candidates, before what they left pending
        sink = Sink()
        pytorch.finish(state.torch, ctx, sink, state.job_id)
        result = result_of(sink, [])
        ranks = rank_rows(state)
        if ranks:
            result.tables["nccl_ranks"] = _frame("nccl_ranks", ranks)
        return batch.merge(result)


def reference_parse(
    lines: list[str | None],
    ctx: ParseContext,
    parser: NcclParser | None = None,
    state: NcclState | None = None,
    first_line: int = 1,
) -> ChunkResult:
    """The per-line reference path over a whole file: plain ``in`` tests and Python ``re``.

    Produces the same rows as ``parse_chunk`` + ``finish`` (a test checks it on every real file).
    """
    parser = parser or NcclParser()
    st = state or parser.new_state(ctx)
    sink = Sink()
    parsed: list[int] = []
    for i, line in enumerate(lines):
        prev_last_error, st.prev_last_error = st.prev_last_error, False
        if line is None:
            continue
        st.prev_last_error = LAST_ERROR in line
        if not (prev_last_error or any(lit in line for lit in LITERALS)):
            continue
        row_hint = _ROW_HINT_RX.match(line) is not None
        ng = _NCCL_RX.match(line)
        rg = _ROW_RX.match(line) if row_hint else None
        if handle(
            first_line + i,
            line,
            ng.groupdict() if ng else None,
            rg.groupdict() if rg else None,
            st,
            ctx,
            sink,
        ):
            parsed.append(first_line + i)
    result = result_of(sink, parsed)
    return result.merge(parser.finish(ctx, st))


PARSERS = [NcclParser("nccl"), NcclParser("pytorch")]
