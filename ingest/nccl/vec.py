"""The vectorized path of the NCCL / PyTorch parser: candidate selection and the bulk shapes.

Per chunk, one literal-alternation pass (``nccl.FILTER``) picks the candidate lines (about 2% of
a busy training log; NCCL INFO chatter and application output cost nothing more). Candidates are
gathered over several chunks (``BATCH_ROWS`` / ``BATCH_CHUNKS``) and parsed together, so that the
fixed cost of the expressions below is paid once per batch, not once per chunk.

In a batch, polars expressions build the ``events`` rows of the two high-volume shapes:

- plain NCCL WARN lines (no launcher prefix) classified as IB completion, ibv, CUDA, socket
  errors or generic warnings, and
- the primary watchdog-timeout line (``[rankN]:[E.. ProcessGroupNCCL.cpp:N] [Rank N] Watchdog
  caught ...``, old and new formats, optional ``[N] `` counter).

Every other candidate (DistBackendError blocks, init lines, nccl-tests rows, prefixed lines, ...)
goes in line order through the per-line handler ``nccl.handle``, whose output the vectorized rows
must equal exactly (the tests compare both paths on every real file).
"""

from __future__ import annotations

import calendar
from datetime import timedelta
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    fmt,
    line_series,
    node_expr,
    per_distinct,
)
from faultlens.ingest.nccl import line as nccl
from faultlens.ingest.nccl import pytorch
from faultlens.ingest.nccl.attrs import with_json
from faultlens.ingest.prefixes import nodes_of
from faultlens.ingest.schema import TABLES, Kind, Severity, Source
from faultlens.ingest.zones import localize, zone_flag, zone_of

_EVENT_SCHEMA = TABLES["events"].polars_schema

BATCH_ROWS = 40_000  # candidates gathered over chunks before they are parsed together
BATCH_CHUNKS = 8  # ... or this many chunks (a batch keeps its chunks' string buffers alive)

WATCHDOG_FAST = (
    r"^(?:\[[0-9]+\] )?(?:\[(?:rank|default)[0-9]+\]: ?)?\[E(?:(?P<md>[0-9]{3,4}) "
    r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.(?P<frac>[0-9]+))?)? ProcessGroupNCCL\.cpp:[0-9]+\] "
    r"\[(?:PG [^\]]*?)?Rank (?P<rank>[0-9]+)\] (?P<body>Watchdog caught collective operation "
    r"timeout: WorkNCCL\((?:SeqNum=(?P<seq_num>[0-9]+), )?OpType=(?P<op_type>[A-Za-z0-9_]+)"
    r"(?:, NumelIn=(?P<numel_in>-?[0-9]+), NumelOut=(?P<numel_out>-?[0-9]+))?"
    r"(?:, TensorShape=\[[^\]]*\])?, Timeout\(ms\)=(?P<timeout_ms>[0-9]+)\) ran for "
    r"(?P<ran_for_ms>[0-9]+) milliseconds.*)$"
)
# ``WATCHDOG_FAST`` without the rest of the line after "milliseconds" (capturing it character by
# character is costly): the message is what it matched from ``body`` on, and the rest of the line.
_WATCHDOG_HEAD = "^(?P<_head>" + WATCHDOG_FAST.removeprefix("^").removesuffix(".*)$") + "))"


def _rewritten(pattern: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        if old not in pattern:
            raise ValueError(f"{old!r} is not in the pattern")
        pattern = pattern.replace(old, new)
    return pattern


# ``_WATCHDOG_HEAD`` for lines without "[PG ", which its ``(?:PG [^\]]*?)?`` cannot match: the same
# language and groups, written so that each character leads one way (the optional ``[N] `` and
# ``[rankN]:`` tags share the "[" of "[E"; NumelIn and TensorShape the ", " and the "T" of
# Timeout). The regex engine reads the groups of such a one-pass pattern about twice as fast.
_WATCHDOG_HEAD_1P = _rewritten(
    _WATCHDOG_HEAD,
    (
        r"(?:\[[0-9]+\] )?(?:\[(?:rank|default)[0-9]+\]: ?)?\[E",
        r"\[(?:[0-9]+\] \[)?(?:(?:rank|default)[0-9]+\]: ?\[)?E",
    ),
    (r"\[(?:PG [^\]]*?)?Rank ", r"\[Rank "),
    (
        r"(?:, NumelIn=(?P<numel_in>-?[0-9]+), NumelOut=(?P<numel_out>-?[0-9]+))?"
        r"(?:, TensorShape=\[[^\]]*\])?, Timeout",
        r", (?:NumelIn=(?P<numel_in>-?[0-9]+), NumelOut=(?P<numel_out>-?[0-9]+), )?"
        r"T(?:ensorShape=\[[^\]]*\], T)?imeout",
    ),
)
# Lines the per-line handler treats specially even though they hold a watchdog timeout.
_WATCHDOG_SLOW = (
    r"NCCL WARN|NCCL ABORT|_perf|ChildFailedError|Root Cause|what\(\)|terminated with exception"
)
WS = pytorch.WS
_CAND_SCHEMA = {"line": pl.Int64, "raw": pl.String, "after_last_error": pl.Boolean}
_CAND_COLS = ("line", "raw", "is_row", "after_last_error")
_WARN_COLS = ("line", "host", "pid", "tid", "dev", "src", "srcline", "msg")


# -- candidates and batches -----------------------------------------------------------------------


def candidates(lines: pl.Series, first_line: int, state: nccl.NcclState) -> pl.DataFrame:
    """The candidate lines of a chunk (``line``, ``raw``, ``after_last_error``): lines holding a
    literal of ``nccl.LITERALS``, and the detail line after each ``Last error:`` line."""
    n = lines.len()
    hit = lines.str.contains(nccl.FILTER).fill_null(False)
    idx = hit.arg_true()
    raw = lines.filter(hit)  # filter, not gather: the kept strings stay views (no copy)
    last_err = raw.str.contains(nccl.LAST_ERROR, literal=True)
    after = idx.filter(last_err) + 1
    if state.prev_last_error:
        after = pl.concat([pl.Series([0], dtype=after.dtype), after])
    state.prev_last_error = bool(idx.len()) and idx[-1] == n - 1 and bool(last_err[-1])
    after = after.filter(after < n)
    if after.len() == 0:  # the common case
        return pl.DataFrame(
            {
                "line": idx.cast(pl.Int64) + first_line,
                "raw": raw,
                "after_last_error": pl.repeat(False, idx.len(), eager=True),
            },
            schema=_CAND_SCHEMA,
        )
    idx = pl.concat([idx, after]).unique().sort()
    raw = lines.gather(idx)
    keep = raw.is_not_null()
    idx, raw = idx.filter(keep), raw.filter(keep)
    return pl.DataFrame(
        {
            "line": idx.cast(pl.Int64) + first_line,
            "raw": raw,
            "after_last_error": idx.is_in(after.implode()),
        },
        schema=_CAND_SCHEMA,
    )


def parse_chunk(
    lines: pl.Series, first_line: int, ctx: ParseContext, state: nccl.NcclState
) -> ChunkResult:
    """Select a chunk's candidates; parse the batch when it is full."""
    if lines.len() == 0:
        return ChunkResult()
    cand = candidates(lines, first_line, state)
    if cand.height:
        state.batch.append(cand)
        state.batch_rows += cand.height
    state.batch_chunks += 1
    if state.batch_rows >= BATCH_ROWS or state.batch_chunks >= BATCH_CHUNKS:
        return flush(ctx, state)
    return ChunkResult()


def parse_candidates(cand: pl.DataFrame, ctx: ParseContext, state: nccl.NcclState) -> ChunkResult:
    """Candidates found by ``ingest.scan`` (``line``, ``raw``, ``follows``): gather; parse the
    batch when it is full."""
    if cand.height:
        state.batch.append(cand.rename({"follows": "after_last_error"}))
        state.batch_rows += cand.height
    if state.batch_rows >= BATCH_ROWS:
        return flush(ctx, state)
    return ChunkResult()


def flush(ctx: ParseContext, state: nccl.NcclState) -> ChunkResult:
    """Parse the candidates gathered so far (at a full batch and at end of file)."""
    batch = state.batch
    state.batch, state.batch_rows, state.batch_chunks = [], 0, 0
    if not batch:
        return ChunkResult()
    return parse_batch(pl.concat(batch) if len(batch) > 1 else batch[0], ctx, state)


def parse_batch(cand: pl.DataFrame, ctx: ParseContext, state: nccl.NcclState) -> ChunkResult:
    """Candidate lines (``line``, ``raw``, ``after_last_error``), in line order, into rows."""
    frame = nccl_groups(cand.with_columns(is_row=pl.col("raw").str.contains(nccl.ROW_HINT)))
    warn_ev, warn_taken = warn_events(frame, ctx, state.job_id)
    wd_ev, wd_taken = watchdog_events(frame, ctx, state.job_id)
    row_lh, row_taken = test_rows(frame, ctx, state)
    taken = warn_taken | wd_taken | row_taken
    slow = frame.filter(~taken)
    err_ev, err_taken = error_blocks(slow, ctx, state, cand["line"].max())
    result = slow_rows(slow.filter(~err_taken), ctx, state)
    fast_lines = [frame.filter(taken)["line"], slow.filter(err_taken)["line"]]
    result.parsed_lines = pl.concat([line_series(x) for x in (result.parsed_lines, *fast_lines)])
    result.parsed = result.parsed_lines.len()
    for table, fast in (("events", (warn_ev, wd_ev, err_ev)), ("link_health", (row_lh,))):
        parts = [f for f in (result.tables.get(table), *fast) if f is not None and f.height]
        if parts:
            result.tables[table] = pl.concat(parts) if len(parts) > 1 else parts[0]
    return result


def slow_rows(slow: pl.DataFrame, ctx: ParseContext, st: nccl.NcclState) -> ChunkResult:
    """The remaining candidates through the per-line handler, in line order (they carry state)."""
    sink = pytorch.Sink()
    if slow.height == 0:
        return nccl.result_of(sink, [])
    # regex groups as dicts only for the lines they matched
    ngs = _groups_by_line(
        slow.filter(pl.col("host").is_not_null()), [c for c in slow.columns if c not in _CAND_COLS]
    )
    rows = slow.filter("is_row")
    rgs = _groups_by_line(
        rows.select("line", rg=pl.col("raw").str.extract_groups(nccl.TEST_ROW))
        .unnest("rg")
        .filter(pl.col("size").is_not_null()),
        None,
    )
    parsed: list[int] = []
    for line_no, raw in zip(slow["line"].to_list(), slow["raw"].to_list(), strict=True):
        if nccl.handle(line_no, raw, ngs.get(line_no), rgs.get(line_no), st, ctx, sink):
            parsed.append(line_no)
    return nccl.result_of(sink, parsed)


def _groups_by_line(frame: pl.DataFrame, cols: list[str] | None) -> dict[int, dict[str, Any]]:
    if frame.height == 0:
        return {}
    groups = frame.select(cols or [c for c in frame.columns if c != "line"]).to_dicts()
    return dict(zip(frame["line"].to_list(), groups, strict=True))


# ``nccl.NCCL_LINE`` up to its message, which is the rest of the line (``.*$`` on a line without a
# newline): capturing it character by character took most of the regex's time.
NCCL_HEAD = "^(?P<_head>" + nccl.NCCL_LINE.removeprefix("^").removesuffix("(?P<msg>.*)$") + ")"


# A line's match of ``NCCL_HEAD`` ends at the first "NCCL <level>" after its prefix: the fields
# before it (``host:pid:tid``, ``[dev]``, elapsed, ``src:line``, one space apart) hold no "NCCL ".
# So the match on the line's part up to its first "NCCL ", a level, its optional space and one
# character more is the match on the line when it ends before that part's end. The part takes few
# values (a thread's lines share it) and is read once per value; other lines are read whole.
_HEAD_PART = len("NCCL ABORT ") + 1


def nccl_groups(cand: pl.DataFrame) -> pl.DataFrame:
    """``cand`` with the groups of ``nccl.NCCL_LINE`` as columns (null where it does not match);
    lines without "NCCL " cannot match and are not tried."""
    raw, part = pl.col("raw"), pl.col("_part")
    # ``str.find`` counts bytes, ``str.slice`` characters: the part is at least that long
    f = cand.with_columns(_part=raw.str.slice(0, raw.str.find("NCCL ", literal=True) + _HEAD_PART))
    f = per_distinct(f, part, lambda g: g.with_columns(ng=part.str.extract_groups(NCCL_HEAD)))
    head = pl.col("ng").struct.field("_head")
    cut = part.str.len_bytes() < raw.str.len_bytes()
    whole = _mask(f, cut & (head.is_null() | (head.str.len_bytes() >= part.str.len_bytes())))
    if whole.any():
        ng = pl.when(whole).then(raw).str.extract_groups(NCCL_HEAD)
        f = f.with_columns(ng=pl.when(whole).then(ng).otherwise(pl.col("ng")))
    f = f.drop("_part").unnest("ng")
    return f.with_columns(msg=raw.str.strip_prefix(pl.col("_head"))).drop("_head")


# -- expressions shared by the fast shapes --------------------------------------------------------


def _int(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Int64, strict=False)


def _events(frame: pl.DataFrame, ctx: ParseContext, exprs: dict[str, pl.Expr]) -> pl.DataFrame:
    cols = {"file": pl.lit(ctx.file), "line": pl.col("line"), **exprs}
    return frame.select(
        [
            (cols[c] if c in cols else pl.lit(None)).cast(t).alias(c)
            for c, t in _EVENT_SCHEMA.items()
        ]
    )


def _mask(frame: pl.DataFrame, expr: pl.Expr) -> pl.Series:
    return frame.select(expr.fill_null(False)).to_series()


def _empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=_EVENT_SCHEMA)


# -- plain NCCL WARN lines ------------------------------------------------------------------------


# What a WARN row's subkind, ``take`` and attrs are computed from, in one string (the parts
# cannot run into each other: tid and dev are numbers, src holds no ``:`` nor space).
_WARN_KEY = pl.concat_str(
    [pl.col(c).fill_null("") for c in ("tid", "dev", "src", "srcline", "msg")], separator=" "
)
# the order of the WARN shapes' rows among the events (each in line order)
_WARN_ORDER = {"ib_completion": 0, "ibv": 1, "cuda": 2, "socket": 3}


def warn_events(
    cand: pl.DataFrame, ctx: ParseContext, job_id: str | None
) -> tuple[pl.DataFrame, pl.Series]:
    """Events of plain NCCL WARN candidates (``nccl.classify_warn`` as expressions); and the mask
    of candidates taken. Async-event and ``ncclResult_t``-named warnings are left to the handler.
    The shapes and attrs are computed once per distinct message (``per_distinct``)."""
    is_warn = _mask(cand, (pl.col("level") == "WARN") & (pl.col("prefix") == ""))
    if not is_warn.any():
        return _empty_events(), is_warn
    w = cand.filter(is_warn).select(
        *_WARN_COLS[:-1], msg=pl.col("msg").fill_null("").str.strip_chars(WS)
    )
    w = per_distinct(w, _WARN_KEY, _warn_attrs)
    taken = is_warn.clone().scatter(is_warn.arg_true(), w["take"])  # back to all rows
    order = pl.col("sub").replace_strict(_WARN_ORDER, default=None, return_dtype=pl.Int8)
    warns = w.filter("take").sort(order, nulls_last=True, maintain_order=True)
    if warns.height == 0:
        return _empty_events(), taken
    is_err = pl.col("sub").is_not_null()
    return _events(
        warns,
        ctx,
        {
            "ts_flag": pl.lit("no_ts"),
            "node": nodes_of(warns, "host"),
            "gpu": pl.col("dev").cast(pl.Int64).cast(pl.String),
            "gpu_index": _int(pl.col("dev")),
            "source": pl.lit(Source.NCCL.value),
            "kind": pl.when(is_err)
            .then(pl.lit(Kind.NCCL_ERROR.value))
            .otherwise(pl.lit(Kind.NCCL_WARN.value)),
            "subkind": pl.col("sub"),
            "severity": pl.when(is_err)
            .then(pl.lit(Severity.ERROR.value))
            .otherwise(pl.lit(Severity.WARNING.value)),
            "job_id": pl.lit(job_id, dtype=pl.String),
            "pid": _int(pl.col("pid")),
            "message": pl.col("msg").str.slice(0, pytorch.MESSAGE_CHARS),
            "attrs": pl.col("attrs"),
        },
    ), taken


def _warn_attrs(w: pl.DataFrame) -> pl.DataFrame:
    """WARN rows (``_WARN_COLS``) with ``sub``, ``take`` and the attrs of the rows taken."""
    w = _classified(w)
    subs, take = w.get_column("sub"), w.get_column("take")
    common = {
        "tid": _int(pl.col("tid")),
        "cuda_dev": _int(pl.col("dev")),
        "src": pl.when(pl.col("src").is_not_null()).then(
            fmt("{}:{}", pl.col("src"), pl.col("srcline"))
        ),
    }
    attrs = pl.Series("attrs", [None] * w.height, dtype=pl.String)
    for sub, shape in (
        ("ib_completion", _ib_attrs),
        ("ibv", _ibv_attrs),
        ("cuda", _cuda_attrs),
        ("socket", _socket_attrs),
        (None, None),
    ):
        mask = take & (subs.is_null() if sub is None else subs == sub).fill_null(False)
        if not mask.any():
            continue
        fields = {**common, **(shape() if shape else {})}
        attrs = attrs.scatter(mask.arg_true(), with_json(w.filter(mask), fields)["attrs"])
    return w.drop("ib", "ibv", "cuda", "is_async", "is_sock", "named").with_columns(attrs)


def _classified(w: pl.DataFrame) -> pl.DataFrame:
    """WARN rows with the regex groups of each WARN shape, their subkind (``sub``, in the order of
    ``classify_warn``) and ``take``. The IB and ibv patterns run only on lines holding their
    leading literal."""
    msg = pl.col("msg")
    w = w.with_columns(
        ib=pl.when(msg.str.contains("Got completion from peer ", literal=True))
        .then(msg)
        .str.extract_groups(nccl.IB_COMPLETION),
        ibv=pl.when(msg.str.contains("ibv_", literal=True)).then(msg).str.extract_groups(nccl.IBV),
        cuda=msg.str.extract_groups(nccl.CUDA),
        is_async=msg.str.contains("Got async event", literal=True),
        is_sock=msg.str.contains(nccl.SOCKET),
        named=msg.str.contains(nccl.RESULT_NAME)
        | _int(msg.str.extract(nccl.RETCODE, 1)).is_in(list(pytorch.NCCL_RESULTS)).fill_null(False),
    )
    is_ib = pl.col("ib").struct.field("peer").is_not_null()
    is_ibv = pl.col("ibv").struct.field("call").is_not_null()
    is_cuda = pl.col("cuda").struct.field("error").is_not_null()
    return w.with_columns(
        sub=pl.when(is_ib)
        .then(pl.lit("ib_completion"))
        .when(pl.col("is_async"))
        .then(None)
        .when(is_ibv)
        .then(pl.lit("ibv"))
        .when(is_cuda)
        .then(pl.lit("cuda"))
        .when(pl.col("is_sock"))
        .then(pl.lit("socket")),
        take=(
            is_ib | ~pl.col("is_async") & (is_ibv | is_cuda | pl.col("is_sock") | ~pl.col("named"))
        ).fill_null(False),
    )


def _ib_attrs() -> dict[str, pl.Expr]:
    ib = pl.col("ib").struct
    status = _int(pl.coalesce(ib.field("status"), ib.field("error")))
    return {
        "peer": ib.field("peer"),
        "peer_port": _int(ib.field("peer_port")),
        "status_str": ib.field("status_str"),
        "status": status,
        "status_name": status.replace_strict(nccl.IB_STATUS, default=None, return_dtype=pl.String),
        "opcode": _int(ib.field("opcode")),
        "len": _int(ib.field("len")),
        "vendor_err": _int(ib.field("vendor_err")),
        "direction": ib.field("direction"),
        "local_gid": ib.field("local_gid"),
        "remote_gid": ib.field("remote_gid"),
        "hca": ib.field("hca"),
    }


def _ibv_attrs() -> dict[str, pl.Expr]:
    ibv = pl.col("ibv").struct
    err = ibv.field("error").fill_null("").str.strip_chars(WS)
    return {
        "call": ibv.field("call"),
        "errno": _int(ibv.field("errno")),
        "error": pl.when(err != "").then(err),
    }


def _cuda_attrs() -> dict[str, pl.Expr]:
    cuda = pl.col("cuda").struct
    return {"cuda_code": _int(cuda.field("code")), "cuda_error": cuda.field("error")}


def _socket_attrs() -> dict[str, pl.Expr]:
    msg = pl.col("msg")
    peer = msg.str.extract_groups(nccl.PEER).struct
    err = msg.str.extract_groups(nccl.SOCKET_ERR).struct
    return {
        "peer": peer.field("peer"),
        "peer_port": _int(peer.field("port")),
        "error": pl.coalesce(err.field("error"), err.field("closed")).str.strip_chars(WS),
    }


# -- nccl-tests result rows -----------------------------------------------------------------------

_LH_SCHEMA = TABLES["link_health"].polars_schema


def test_rows(
    cand: pl.DataFrame, ctx: ParseContext, st: nccl.NcclState
) -> tuple[pl.DataFrame | None, pl.Series]:
    """``link_health`` rows of nccl-tests result lines (``nccl._test_row`` as expressions); and the
    mask of candidates taken. Only when no candidate of the batch can change the test name or the
    test hosts (``_perf`` / ``#`` lines, read in order by the handler): else none are taken."""
    is_row = _mask(cand, pl.col("is_row") & pl.col("host").is_null())
    if not is_row.any() or _mask(cand, pl.col("raw").str.contains(r"_perf|#")).any():
        return None, pl.repeat(False, cand.height, eager=True)
    g = (
        cand.filter(is_row)
        .select("line", rg=pl.col("raw").str.extract_groups(nccl.TEST_ROW))
        .unnest("rg")
    )
    ok = g["size"].is_not_null()
    taken = is_row.clone().scatter(is_row.arg_true(), ok)
    g = g.filter(ok)
    pfx = pl.col("rowpfx").fill_null("").str.strip_chars().str.strip_suffix(":")
    named = (pfx != "") & ~pfx.str.contains(r"^[0-9]+$") & ~pfx.str.starts_with("[")
    only_host = next(iter(st.test_hosts)) or None if len(st.test_hosts) == 1 else None
    node = pl.when(named).then(node_expr(pfx)).otherwise(pl.lit(only_host, dtype=pl.String))
    base = {
        "ts": pl.lit(None),
        "node": pl.coalesce(node, pl.lit(ctx.node, dtype=pl.String)),
        "test": pl.lit(st.test, dtype=pl.String),
        "size_bytes": _int(pl.col("size")),
        "count": _int(pl.col("count")),
        "dtype": pl.col("dtype"),
        "redop": pl.col("redop"),
        "file": pl.lit(ctx.file),
        "line": pl.col("line"),
    }
    parts = []
    for suffix, in_place in (("oop", False), ("ip", True)):
        wrong = pl.col(f"wrong_{suffix}")
        wrong_n = wrong.cast(pl.Float64, strict=False).cast(pl.Int64)
        cols = {
            **base,
            "in_place": pl.lit(in_place),
            "time_us": pl.col(f"time_{suffix}").cast(pl.Float64),
            "algbw_gbs": pl.col(f"algbw_{suffix}").cast(pl.Float64),
            "busbw_gbs": pl.col(f"busbw_{suffix}").cast(pl.Float64),
            "wrong": pl.when(wrong != "N/A").then(wrong_n),
        }
        part = g.filter(pl.col(f"time_{suffix}").is_not_null()).select(
            [cols[c].cast(t).alias(c) for c, t in _LH_SCHEMA.items()]
        )
        parts.append(part)
    return pl.concat(parts), taken


# -- DistBackendError blocks ---------------------------------------------------------------------

_RANK_PFX = r"^\[(?:rank|default)([0-9]+)\]: ?"
_PDSH = r"^([A-Za-z0-9][A-Za-z0-9._-]*): "
# characters Python's str.strip() removes but WS does not (the block's texts must not end in them)
_ODD_WS = (
    "[\\x1c-\\x1f\\x85\\xa0\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}]"
)
_START_EXCLUDE = (
    r"Watchdog caught|ChildFailedError|Root Cause \(first observed failure\)|_perf|"
    r"NCCL WARN|NCCL ABORT"
)


def error_blocks(
    slow: pl.DataFrame, ctx: ParseContext, st: nccl.NcclState, last_line: Any
) -> tuple[pl.DataFrame | None, pl.Series]:
    """Events of ``DistBackendError: NCCL error in: ...`` blocks (the error line, then optionally
    ``ncclXxxError: ...``, ``Last error:`` and its detail line) in their plain shape: a
    ``[rankN]:`` prefix at most, no time stamp, no other candidate line right before or after.
    ``pytorch.handle_line`` folding those lines, as expressions; other blocks are left to it, and
    so are blocks that may go on in the next batch or continue the handler's pending event."""
    none = pl.repeat(False, slow.height, eager=True)
    raw = pl.col("raw")
    if slow.height == 0 or not _mask(slow, raw.str.contains("NCCL error", literal=True)).any():
        return None, none
    torch = st.torch
    after_pending = torch.pending_last + 1 if torch.pending is not None else None
    f = _block_roles(slow, after_pending, last_line)
    if not f["ok_block"].any():
        return None, none
    taken = f["ok_block"]
    rows = f.filter(taken)
    blocks = rows.group_by("block", maintain_order=True).agg(
        line=pl.col("line").first(),
        t=pl.col("t").first(),
        rank_pfx=pl.col("rank_pfx").first(),
        result=pl.col("stripped").filter(pl.col("role") == "R").first(),
        detail=pl.col("stripped").filter(pl.col("role") == "D").first(),
        detail_raw=pl.col("t").filter(pl.col("role") == "D").first(),
        message=pl.col("stripped").str.join("\n").str.slice(0, pytorch.MESSAGE_CHARS),
    )
    m = pl.col("t").str.extract_groups(pytorch.NCCL_ERROR_IN.pattern).struct
    res = pl.col("result").str.extract_groups(pytorch.RESULT_LINE.pattern).struct
    peer = pl.col("detail_raw").str.extract_groups(nccl.PEER).struct
    exc = m.field("exc").fill_null("").str.split(".").list.last()
    reason = m.field("reason")
    pg = _int(pl.col("t").str.extract(pytorch.PG_RANK.pattern, 1))
    attrs = {
        "rank": pl.coalesce(pg, _int(pl.col("rank_pfx"))),
        "exception": pl.when(exc != "").then(exc),
        "where": m.field("where"),
        "reason": reason,
        "nccl_version": m.field("version"),
        "result_text": res.field("text"),
        "last_error": pl.col("detail"),
        "peer": peer.field("peer"),
        "peer_port": _int(peer.field("port")),
    }
    events = _events(
        with_json(blocks, attrs),
        ctx,
        {
            "ts_flag": pl.lit("no_ts"),
            "node": pl.lit(ctx.node, dtype=pl.String),
            "source": pl.lit(Source.PYTORCH.value),
            "kind": pl.lit(Kind.NCCL_ERROR.value),
            "subkind": pl.coalesce(
                res.field("name"), _reason_subkind(reason), pl.lit("dist_backend")
            ),
            "severity": pl.lit(Severity.ERROR.value),
            "job_id": pl.lit(st.job_id, dtype=pl.String),
            "message": pl.col("message"),
            "attrs": pl.col("attrs"),
        },
    )
    return events, taken


def _reopened(f: pl.DataFrame, host: pl.Expr) -> pl.DataFrame:
    """Per block start (``line``): ``g1``-``g4``, whether a block of that many lines could still
    be continued by the handler (``pytorch.BLOCK_GAP``): a candidate within the gap after its end
    that may be of the same process (the start's ``[rankN]:`` tag or an unread one; no host, pdsh
    or Ray prefix), before that process's next start (another process's sets the block aside)."""
    c = pl.col
    real_host = host.is_not_null() & ~(
        host.str.contains("[a-z][A-Z]")
        | host.str.to_lowercase().is_in(list(pytorch._NOT_HOSTS))
        | host.str.starts_with("torch.")
    )
    rows = f.select(
        "line",
        start="is_start",
        q="rank_pfx",
        other=c("host").is_not_null()
        | real_host.fill_null(False)
        | c("t").str.contains(pytorch.RAY_PREFIX.pattern),
        tagged=c("t").str.starts_with("["),  # a tag _RANK_PFX did not read: unknown process
        # a start that is also a result or "Last error:" line: the handler reads it as the
        # pending block's next line first (``ncclRemoteError: NCCL error in: ...``)
        cont=c("is_r") | c("is_l"),
    )
    starts = f.filter("is_start").select(s="line", p="rank_pfx")
    out = starts.select(line="s")
    gap = pytorch.BLOCK_GAP
    for k in (1, 2, 3, 4):
        win = starts.with_columns(at=pl.int_ranges(c("s") + k, c("s") + k + gap)).explode("at")
        hit = win.join(rows, left_on="at", right_on="line", how="inner")
        hit = hit.filter(~c("other") & (c("q").eq_missing(c("p")) | c("q").is_null() & c("tagged")))
        first = (
            hit.filter(c("start") & c("q").eq_missing(c("p"))).group_by("s").agg(fs=c("at").min())
        )
        hit = hit.join(first, on="s", how="left")
        before = c("fs").is_null() | (c("at") < c("fs"))
        upto = c("fs").is_null() | (c("at") <= c("fs"))
        open_ = hit.filter(~c("start") & before | c("cont") & upto).select(line="s").unique()
        open_ = open_.with_columns(pl.lit(True))
        out = out.join(open_.rename({"literal": f"g{k}"}), on="line", how="left")
    return out


def _block_roles(slow: pl.DataFrame, after_pending: int | None, last_line: Any) -> pl.DataFrame:
    """Each slow candidate's role in a plain block (S, R, L, D), its block id (the start's line)
    and whether that whole block is plain (``ok_block``)."""
    raw = pl.col("raw")
    rank_pfx = raw.str.extract(_RANK_PFX, 1)
    t = pl.when(rank_pfx.is_not_null()).then(raw.str.replace(_RANK_PFX, "")).otherwise(raw)
    f = slow.select("line", "raw", "host", "is_row", rank_pfx=rank_pfx, t=t)
    t, host = pl.col("t"), pl.col("t").str.extract(_PDSH, 1)
    stripped = t.str.strip_chars(WS)
    simple = (
        pl.col("host").is_null()
        & ~pl.col("is_row")
        & ~t.str.contains(r"^[\[(#]")
        & ~t.str.starts_with("NCCL version")
        & ~raw.str.contains(r"_perf|NCCL WARN|NCCL ABORT")
        & (
            host.is_null()
            | host.str.contains("[a-z][A-Z]")
            | host.str.to_lowercase().is_in(list(pytorch._NOT_HOSTS))
            | host.str.starts_with("torch.")
        )
        & ~stripped.str.contains(f"^{_ODD_WS}|{_ODD_WS}$")
    )
    is_start = (
        simple
        & t.str.contains("NCCL error", literal=True)
        & t.str.contains(pytorch.NCCL_ERROR_IN.pattern)
        & ~t.str.contains(_START_EXCLUDE)
        & ~t.str.contains(r"^[\s\x1c-\x1f\x85]")
        & ~t.str.contains(pytorch.DETECTED.pattern)
        & ~t.str.contains(pytorch.GLOG.pattern)
        & ~t.str.slice(0, 40).str.contains(pytorch.ISO_TS.pattern)
    )
    f = f.with_columns(
        stripped=stripped,
        simple=simple,
        is_start=is_start,
        is_r=stripped.str.contains(pytorch.RESULT_LINE.pattern),
        is_l=stripped == "Last error:",
    )
    line = pl.col("line")

    def nxt(col: str, k: int) -> pl.Expr:  # the slow candidate k rows on, if it is line + k
        return pl.when(line.shift(-k) == line + k).then(pl.col(col).shift(-k))

    prev_slow = (line.shift(1) == line - 1).fill_null(False)
    f = f.with_columns(
        s_ok=pl.col("is_start") & ~prev_slow & (line != (after_pending or 0)),
        n1=(line.shift(-1) == line + 1).fill_null(False),
        n1_simple=nxt("simple", 1),
        n1_r=nxt("is_r", 1),
        n1_l=nxt("is_l", 1),
    )
    r1 = pl.col("n1") & pl.col("n1_simple") & pl.col("n1_r")
    l1 = pl.col("n1") & pl.col("n1_simple") & ~pl.col("n1_r") & pl.col("n1_l")
    # the roles the handler gives lines 1..3 after a start; None: the block ends before
    f = f.with_columns(
        r1=r1.fill_null(False),
        l1=l1.fill_null(False),
        n2=(line.shift(-2) == line + 2).fill_null(False),
        n2_simple=nxt("simple", 2),
        n2_r=nxt("is_r", 2),
        n2_l=nxt("is_l", 2),
        n3=(line.shift(-3) == line + 3).fill_null(False),
        n3_simple=nxt("simple", 3),
        n3_r=nxt("is_r", 3),
        n3_l=nxt("is_l", 3),
        n4=(line.shift(-4) == line + 4).fill_null(False),
        # whether the line k on has the start's ``[rankN]:`` tag (a detail is its process's line)
        n2_same=pl.when(line.shift(-2) == line + 2).then(
            pl.col("rank_pfx").shift(-2).eq_missing(pl.col("rank_pfx"))
        ),
        n3_same=pl.when(line.shift(-3) == line + 3).then(
            pl.col("rank_pfx").shift(-3).eq_missing(pl.col("rank_pfx"))
        ),
    )
    c = pl.col
    f = f.join(_reopened(f, host), on="line", how="left").with_columns(
        [c(f"g{k}").fill_null(False) for k in (1, 2, 3, 4)]
    )
    # S R L D | S R L | S R | S L D | S L | S, each with no candidate line right after, nor one
    # that may continue it behind other processes' lines (``g1``-``g4``, by the block's size)
    after_r_l = c("n2") & c("n2_simple") & c("n2_l")
    after_l_d = lambda k, seen_r: (  # noqa: E731
        c(f"n{k}") & c(f"n{k}_simple") & ~c(f"n{k}_l") & (seen_r | ~c(f"n{k}_r")) & c(f"n{k}_same")
    )
    srld = c("r1") & after_r_l & after_l_d(3, pl.lit(True)) & ~c("n4") & ~c("g4")
    srl = c("r1") & after_r_l & ~c("n3") & ~c("g3")
    sr = c("r1") & ~c("n2") & ~c("g2")
    sld = c("l1") & after_l_d(2, pl.lit(False)) & ~c("n3") & ~c("g3")
    sl = c("l1") & ~c("n2") & ~c("g2")
    s = ~c("n1") & ~c("g1")
    size = (
        pl.when(srld)
        .then(4)
        .when(srl | sld)
        .then(3)
        .when(sr | sl)
        .then(2)
        .when(s)
        .then(1)
        .otherwise(0)
    )
    roles = (
        pl.when(srld)
        .then(pl.lit("SRLD"))
        .when(srl)
        .then(pl.lit("SRL"))
        .when(sr)
        .then(pl.lit("SR"))
        .when(sld)
        .then(pl.lit("SLD"))
        .when(sl)
        .then(pl.lit("SL"))
        .when(s)
        .then(pl.lit("S"))
    )
    f = f.with_columns(
        size=pl.when(c("s_ok")).then(size.fill_null(0)).otherwise(0),
        shape=pl.when(c("s_ok")).then(roles),
    )
    # spread each start's block id and shape over its following lines
    starts = f.filter(c("size") > 0).select(start="line", size="size", shape="shape")
    members = (
        starts.with_columns(k=pl.int_ranges(0, c("size")))
        .explode("k")
        .select(line=c("start") + c("k"), block=c("start"), role=c("shape").str.slice(c("k"), 1))
    )
    # a block ending at the batch's last candidate may go on in the next batch
    open_end = members.group_by("block").agg(end=c("line").max()).filter(c("end") >= last_line)
    members = members.filter(~c("block").is_in(open_end["block"].implode()))
    return f.join(members, on="line", how="left", maintain_order="left").with_columns(
        ok_block=c("block").is_not_null()
    )


def _reason_subkind(reason: pl.Expr) -> pl.Expr:
    """``pytorch.reason_subkind`` as an expression."""
    low = reason.str.to_lowercase()
    out = pl.lit(None, dtype=pl.String)
    for needle, name in reversed(pytorch._REASONS):
        out = pl.when(low.str.contains(needle, literal=True)).then(pl.lit(name)).otherwise(out)
    names = pl.lit(None, dtype=pl.String)
    for name in reversed(pytorch.NCCL_RESULT_NAMES):
        names = pl.when(reason.str.contains(name, literal=True)).then(pl.lit(name)).otherwise(names)
    return pl.coalesce(out, names)


# -- watchdog timeouts ----------------------------------------------------------------------------


def watchdog_events(
    cand: pl.DataFrame, ctx: ParseContext, job_id: str | None
) -> tuple[pl.DataFrame, pl.Series]:
    """Events of primary watchdog-timeout lines; and the mask of candidates taken."""
    raw = pl.col("raw")
    maybe = (
        pl.col("host").is_null()
        & ~pl.col("after_last_error")
        & ~pl.col("is_row")
        & raw.str.contains("Watchdog caught", literal=True)
    )
    # the regex only on the lines that may hold the shape (not a when / then over all rows)
    tried = _mask(cand, maybe & ~raw.str.contains(_WATCHDOG_SLOW))
    if not tried.any():
        return _empty_events(), tried
    rows = watchdog_groups(cand.filter(tried).select("line", "raw"))
    ok = rows.get_column("wd").struct.field("body").is_not_null()
    taken = tried.clone().scatter(tried.arg_true(), ok)  # back to all rows
    if not ok.any():
        return _empty_events(), taken
    rows = rows.filter(ok).unnest("wd")
    body_at = pl.col("_head").str.len_chars() - pl.col("body").str.len_chars()
    rows = rows.with_columns(body=raw.str.slice(body_at)).drop("raw", "_head")
    attrs = {
        k: _int(pl.col(k))
        for k in ("rank", "seq_num", "numel_in", "numel_out", "timeout_ms", "ran_for_ms")
    }
    attrs["op_type"] = pl.col("op_type")
    rows = with_json(with_glog_ts(rows, ctx), attrs)
    events = _events(
        rows,
        ctx,
        {
            "ts": pl.col("ts"),
            "ts_flag": pl.when(pl.col("ts").is_null()).then(
                pl.coalesce(pl.col("_zf"), pl.lit("no_ts"))
            ),
            "node": pl.lit(ctx.node, dtype=pl.String),
            "source": pl.lit(Source.PYTORCH.value),
            "kind": pl.lit(Kind.NCCL_TIMEOUT.value),
            "subkind": pl.lit("watchdog"),
            "severity": pl.lit(Severity.ERROR.value),
            "job_id": pl.lit(job_id, dtype=pl.String),
            "message": pl.col("body").str.strip_chars(WS).str.slice(0, pytorch.MESSAGE_CHARS),
            "attrs": pl.col("attrs"),
        },
    )
    return events, taken


def watchdog_groups(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` with ``wd``: the groups of ``_WATCHDOG_HEAD`` in ``raw`` (``_WATCHDOG_HEAD_1P`` on
    the lines without "[PG ")."""
    raw = pl.col("raw")
    pg = _mask(rows, raw.str.contains("[PG ", literal=True))
    if not pg.any():
        return rows.with_columns(wd=raw.str.extract_groups(_WATCHDOG_HEAD_1P))
    one_pass = pl.when(~pg).then(raw).str.extract_groups(_WATCHDOG_HEAD_1P)
    full = pl.when(pg).then(raw).str.extract_groups(_WATCHDOG_HEAD)
    return rows.with_columns(wd=pl.when(pg).then(full).otherwise(one_pass))


_GLOG_PARTS = ("_mo", "_dd", "_h", "_mi", "_s", "_us", "_ok")


def with_glog_ts(frame: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """``frame`` with ``ts`` from its ``md``, ``hms`` and ``frac`` columns (``pytorch.glog_ts``
    over a frame).
    The parts are columns first: an eager expression repeating them would compute each again."""
    year = ctx.year or (ctx.mtime.year if ctx.mtime else None)
    if year is None:
        return frame.with_columns(
            ts=pl.lit(None, dtype=pl.Datetime("us")), _zf=pl.lit(None, pl.String)
        )
    md, hms = pl.col("md"), pl.col("hms")
    f = frame.with_columns(
        _mo=_int(md.str.head(-2)),
        _dd=_int(md.str.tail(2)),
        **{k: _int(hms.str.slice(i, 2)) for k, i in (("_h", 0), ("_mi", 3), ("_s", 6))},
        _us=_int(pl.col("frac").str.slice(0, 6).str.pad_end(6, "0")).fill_null(0),
    )
    mo, dd = pl.col("_mo"), pl.col("_dd")
    f = f.with_columns(
        _ok=(
            mo.is_between(1, 12)
            & (dd >= 1)
            & (pl.col("_h") <= 23)
            & (pl.col("_mi") <= 59)
            & (pl.col("_s") <= 59)
            & (dd <= mo.replace_strict(_month_days(year), default=0))
        ).fill_null(False)
    )

    def at(y: int) -> pl.Expr:
        safe = [pl.when("_ok").then(k).otherwise(1) for k in ("_mo", "_dd", "_h", "_mi", "_s")]
        return pl.datetime(y, *safe, pl.col("_us"))

    f = f.with_columns(ts=pl.when("_ok").then(at(year)))
    if ctx.year is None and ctx.mtime is not None:  # a December stamp in a file written in January
        late = pl.col("ts") > pl.lit(ctx.mtime + timedelta(days=1))
        feb29 = (mo == 2) & (dd == 29) & ~pl.lit(calendar.isleap(year - 1))
        f = f.with_columns(
            ts=pl.when(late & feb29)
            .then(pl.lit(None, dtype=pl.Datetime("us")))
            .when(late)
            .then(at(year - 1))
            .otherwise("ts")
        )
    # glog writes the process's wall clock: the site's zone (--tz); ``_zf``: why none if so
    zone = zone_of(ctx)
    f = f.with_columns(ts=localize(pl.col("ts"), zone), _zf=zone_flag(pl.col("ts"), zone))
    return f.drop(_GLOG_PARTS)


def _month_days(year: int) -> dict[int, int]:
    return {m: calendar.monthrange(year, m)[1] for m in range(1, 13)}
