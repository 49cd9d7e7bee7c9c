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

from ingest import nccl, pytorch
from ingest.base import ChunkResult, ParseContext, fmt, node_expr
from ingest.schema import TABLES, Kind, Severity, Source

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
            {"line": idx.cast(pl.Int64) + first_line, "raw": raw,
             "after_last_error": pl.repeat(False, idx.len(), eager=True)},
            schema=_CAND_SCHEMA,
        )
    idx = pl.concat([idx, after]).unique().sort()
    raw = lines.gather(idx)
    keep = raw.is_not_null()
    idx, raw = idx.filter(keep), raw.filter(keep)
    return pl.DataFrame(
        {"line": idx.cast(pl.Int64) + first_line, "raw": raw,
         "after_last_error": idx.is_in(after.implode())},
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


def flush(ctx: ParseContext, state: nccl.NcclState) -> ChunkResult:
    """Parse the candidates gathered so far (at a full batch and at end of file)."""
    batch = state.batch
    state.batch, state.batch_rows, state.batch_chunks = [], 0, 0
    if not batch:
        return ChunkResult()
    return parse_batch(pl.concat(batch) if len(batch) > 1 else batch[0], ctx, state)


def parse_batch(
    cand: pl.DataFrame, ctx: ParseContext, state: nccl.NcclState
) -> ChunkResult:
    """Candidate lines (``line``, ``raw``, ``after_last_error``), in line order, into rows."""
    frame = nccl_groups(cand.with_columns(is_row=pl.col("raw").str.contains(nccl.ROW_HINT)))
    warn_ev, warn_taken = warn_events(frame, ctx, state.job_id)
    wd_ev, wd_taken = watchdog_events(frame, ctx, state.job_id)
    taken = warn_taken | wd_taken
    result = slow_rows(frame.filter(~taken), ctx, state)
    result.parsed += int(taken.sum())
    fast = [f for f in (warn_ev, wd_ev) if f.height]
    if fast:
        prior = result.tables.get("events")
        result.tables["events"] = pl.concat([f for f in (prior, *fast) if f is not None])
    return result


def slow_rows(slow: pl.DataFrame, ctx: ParseContext, st: nccl.NcclState) -> ChunkResult:
    """The remaining candidates through the per-line handler, in line order (they carry state)."""
    sink = pytorch.Sink()
    if slow.height == 0:
        return nccl.result_of(sink, 0)
    # regex groups as dicts only for the lines they matched
    ngs = _groups_by_line(slow.filter(pl.col("host").is_not_null()),
                          [c for c in slow.columns if c not in _CAND_COLS])
    rows = slow.filter("is_row")
    rgs = _groups_by_line(
        rows.select("line", rg=pl.col("raw").str.extract_groups(nccl.TEST_ROW)).unnest("rg")
        .filter(pl.col("size").is_not_null()), None)
    parsed = 0
    for line_no, raw in zip(slow["line"].to_list(), slow["raw"].to_list(), strict=True):
        parsed += nccl.handle(line_no, raw, ngs.get(line_no), rgs.get(line_no), st, ctx, sink)
    return nccl.result_of(sink, parsed)


def _groups_by_line(frame: pl.DataFrame, cols: list[str] | None) -> dict[int, dict[str, Any]]:
    if frame.height == 0:
        return {}
    groups = frame.select(cols or [c for c in frame.columns if c != "line"]).to_dicts()
    return dict(zip(frame["line"].to_list(), groups, strict=True))


def nccl_groups(cand: pl.DataFrame) -> pl.DataFrame:
    """``cand`` with the groups of ``nccl.NCCL_LINE`` as columns (null where it does not match);
    lines without "NCCL " cannot match and are not tried."""
    raw = pl.col("raw")
    return cand.with_columns(
        ng=pl.when(raw.str.contains("NCCL ", literal=True)).then(raw)
        .str.extract_groups(nccl.NCCL_LINE),
    ).unnest("ng")


# -- expressions shared by the fast shapes --------------------------------------------------------


def _json(fields: dict[str, pl.Expr]) -> pl.Expr:
    """``pytorch.attrs_json`` as an expression: compact JSON, sorted keys, nulls dropped."""
    encoded = pl.struct([fields[k].alias(k) for k in sorted(fields)]).struct.json_encode()
    return encoded.str.replace_all(r',"[a-z_]+":null', "").str.replace(
        r'^\{"[a-z_]+":null,?', "{"
    )


def _int(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Int64, strict=False)


def _events(frame: pl.DataFrame, ctx: ParseContext, exprs: dict[str, pl.Expr]) -> pl.DataFrame:
    cols = {"file": pl.lit(ctx.file), "line": pl.col("line"), **exprs}
    return frame.select(
        [(cols[c] if c in cols else pl.lit(None)).cast(t).alias(c) for c, t in
         _EVENT_SCHEMA.items()]
    )


def _mask(frame: pl.DataFrame, expr: pl.Expr) -> pl.Series:
    return frame.select(expr.fill_null(False)).to_series()


def _empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=_EVENT_SCHEMA)


# -- plain NCCL WARN lines ------------------------------------------------------------------------


def warn_events(
    cand: pl.DataFrame, ctx: ParseContext, job_id: str | None
) -> tuple[pl.DataFrame, pl.Series]:
    """Events of plain NCCL WARN candidates (``nccl.classify_warn`` as expressions); and the mask
    of candidates taken. Async-event and ``ncclResult_t``-named warnings are left to the handler."""
    is_warn = _mask(cand, (pl.col("level") == "WARN") & (pl.col("prefix") == ""))
    if not is_warn.any():
        return _empty_events(), is_warn
    w = _classified(cand.filter(is_warn).with_columns(
        msg=pl.col("msg").fill_null("").str.strip_chars(WS)))
    taken = is_warn.clone().scatter(is_warn.arg_true(), w["take"])  # back to all rows
    rows = w.filter("take")
    subs = rows["sub"]
    common = {
        "tid": _int(pl.col("tid")), "cuda_dev": _int(pl.col("dev")),
        "src": pl.when(pl.col("src").is_not_null()).then(
            fmt("{}:{}", pl.col("src"), pl.col("srcline"))),
    }
    parts = []
    for sub, groups, attrs in (("ib_completion", "ib", _ib_attrs), ("ibv", "ibv", _ibv_attrs),
                               ("cuda", "cuda", _cuda_attrs), ("socket", None, _socket_attrs),
                               (None, None, None)):
        mask = (subs.is_null() if sub is None else subs == sub).fill_null(False)
        if not mask.any():
            continue
        part = rows.select(*_WARN_COLS, *([groups] if groups else [])).filter(mask)
        fields = {**common, **(attrs() if attrs else {})}
        parts.append(part.select("line", "host", "pid", "dev", "msg",
                                 sub=pl.lit(sub, dtype=pl.String), attrs=_json(fields)))
    if not parts:
        return _empty_events(), taken
    is_err = pl.col("sub").is_not_null()
    return _events(pl.concat(parts), ctx, {
        "ts_flag": pl.lit("no_ts"), "node": node_expr(pl.col("host")),
        "gpu": pl.col("dev").cast(pl.Int64).cast(pl.String), "gpu_index": _int(pl.col("dev")),
        "source": pl.lit(Source.NCCL.value),
        "kind": pl.when(is_err).then(pl.lit(Kind.NCCL_ERROR.value))
        .otherwise(pl.lit(Kind.NCCL_WARN.value)),
        "subkind": pl.col("sub"),
        "severity": pl.when(is_err).then(pl.lit(Severity.ERROR.value))
        .otherwise(pl.lit(Severity.WARNING.value)),
        "job_id": pl.lit(job_id, dtype=pl.String), "pid": _int(pl.col("pid")),
        "message": pl.col("msg").str.slice(0, pytorch.MESSAGE_CHARS), "attrs": pl.col("attrs"),
    }), taken


def _classified(w: pl.DataFrame) -> pl.DataFrame:
    """WARN rows with the regex groups of each WARN shape, their subkind (``sub``, in the order of
    ``classify_warn``) and ``take``. The IB and ibv patterns run only on lines holding their
    leading literal."""
    msg = pl.col("msg")
    w = w.with_columns(
        ib=pl.when(msg.str.contains("Got completion from peer ", literal=True)).then(msg)
        .str.extract_groups(nccl.IB_COMPLETION),
        ibv=pl.when(msg.str.contains("ibv_", literal=True)).then(msg)
        .str.extract_groups(nccl.IBV),
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
        sub=pl.when(is_ib).then(pl.lit("ib_completion"))
        .when(pl.col("is_async")).then(None)
        .when(is_ibv).then(pl.lit("ibv"))
        .when(is_cuda).then(pl.lit("cuda"))
        .when(pl.col("is_sock")).then(pl.lit("socket")),
        take=(is_ib | ~pl.col("is_async") & (is_ibv | is_cuda | pl.col("is_sock")
                                              | ~pl.col("named"))).fill_null(False),
    )


def _ib_attrs() -> dict[str, pl.Expr]:
    ib = pl.col("ib").struct
    status = _int(pl.coalesce(ib.field("status"), ib.field("error")))
    return {
        "peer": ib.field("peer"), "peer_port": _int(ib.field("peer_port")),
        "status_str": ib.field("status_str"), "status": status,
        "status_name": status.replace_strict(nccl.IB_STATUS, default=None, return_dtype=pl.String),
        "opcode": _int(ib.field("opcode")), "len": _int(ib.field("len")),
        "vendor_err": _int(ib.field("vendor_err")), "direction": ib.field("direction"),
        "local_gid": ib.field("local_gid"), "remote_gid": ib.field("remote_gid"),
        "hca": ib.field("hca"),
    }


def _ibv_attrs() -> dict[str, pl.Expr]:
    ibv = pl.col("ibv").struct
    err = ibv.field("error").fill_null("").str.strip_chars(WS)
    return {"call": ibv.field("call"), "errno": _int(ibv.field("errno")),
            "error": pl.when(err != "").then(err)}


def _cuda_attrs() -> dict[str, pl.Expr]:
    cuda = pl.col("cuda").struct
    return {"cuda_code": _int(cuda.field("code")), "cuda_error": cuda.field("error")}


def _socket_attrs() -> dict[str, pl.Expr]:
    msg = pl.col("msg")
    peer = msg.str.extract_groups(nccl.PEER).struct
    err = msg.str.extract_groups(nccl.SOCKET_ERR).struct
    return {"peer": peer.field("peer"), "peer_port": _int(peer.field("port")),
            "error": pl.coalesce(err.field("error"), err.field("closed")).str.strip_chars(WS)}


# -- watchdog timeouts ----------------------------------------------------------------------------


def watchdog_events(
    cand: pl.DataFrame, ctx: ParseContext, job_id: str | None
) -> tuple[pl.DataFrame, pl.Series]:
    """Events of primary watchdog-timeout lines; and the mask of candidates taken."""
    raw = pl.col("raw")
    maybe = (pl.col("host").is_null() & ~pl.col("after_last_error") & ~pl.col("is_row")
             & raw.str.contains("Watchdog caught", literal=True))
    wd = pl.when(maybe & ~raw.str.contains(_WATCHDOG_SLOW)).then(raw).str.extract_groups(
        WATCHDOG_FAST)
    cand = cand.with_columns(wd=wd)
    taken = _mask(cand, pl.col("wd").struct.field("body").is_not_null())
    if not taken.any():
        return _empty_events(), taken
    rows = cand.filter(taken).select("line", "wd").unnest("wd")
    attrs = {k: _int(pl.col(k)) for k in
             ("rank", "seq_num", "numel_in", "numel_out", "timeout_ms", "ran_for_ms")}
    attrs["op_type"] = pl.col("op_type")
    rows = rows.with_columns(ts=glog_ts(pl.col("md"), pl.col("hms"), pl.col("frac"), ctx))
    events = _events(rows, ctx, {
        "ts": pl.col("ts"), "ts_flag": pl.when(pl.col("ts").is_null()).then(pl.lit("no_ts")),
        "node": pl.lit(ctx.node, dtype=pl.String), "source": pl.lit(Source.PYTORCH.value),
        "kind": pl.lit(Kind.NCCL_TIMEOUT.value), "subkind": pl.lit("watchdog"),
        "severity": pl.lit(Severity.ERROR.value), "job_id": pl.lit(job_id, dtype=pl.String),
        "message": pl.col("body").str.strip_chars(WS).str.slice(0, pytorch.MESSAGE_CHARS),
        "attrs": _json(attrs),
    })
    return events, taken


def glog_ts(md: pl.Expr, hms: pl.Expr, frac: pl.Expr, ctx: ParseContext) -> pl.Expr:
    """``pytorch.glog_ts`` as an expression (``MMDD`` / ``HH:MM:SS`` / fraction digits)."""
    out = pl.lit(None, dtype=pl.Datetime("us"))
    year = ctx.year or (ctx.mtime.year if ctx.mtime else None)
    if year is None:
        return out
    month, day = _int(md.str.head(-2)), _int(md.str.tail(2))
    h, mi, s = (_int(hms.str.slice(i, 2)) for i in (0, 3, 6))
    us = _int(frac.str.slice(0, 6).str.pad_end(6, "0")).fill_null(0)
    ok = (month.is_between(1, 12) & (day >= 1) & (h <= 23) & (mi <= 59) & (s <= 59)
          & (day <= month.replace_strict(_month_days(year), default=0)))

    def at(y: int) -> pl.Expr:
        safe = [pl.when(ok).then(x).otherwise(1) for x in (month, day, h, mi, s)]
        return pl.datetime(y, *safe, us)

    ts = pl.when(ok).then(at(year))
    if ctx.year is None and ctx.mtime is not None:  # a December stamp in a file written in January
        late = ts > pl.lit(ctx.mtime + timedelta(days=1))
        feb29 = (month == 2) & (day == 29) & ~pl.lit(calendar.isleap(year - 1))
        ts = pl.when(late & feb29).then(out).when(late).then(at(year - 1)).otherwise(ts)
    return ts


def _month_days(year: int) -> dict[int, int]:
    return {m: calendar.monthrange(year, m)[1] for m in range(1, 13)}
