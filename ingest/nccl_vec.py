"""Vectorized rows for the two high-volume candidate shapes of an NCCL / PyTorch log.

A WARN storm or a watchdog storm can make thousands of candidate lines per chunk; building their
events one Python dict at a time costs more than everything else together. These functions build
the ``events`` rows of

- plain NCCL WARN lines (no launcher prefix) classified as IB completion, ibv, CUDA, socket
  errors or generic warnings, and
- the primary watchdog-timeout line (``[rankN]:[E.. ProcessGroupNCCL.cpp:N] [Rank N] Watchdog
  caught ...``, old and new formats, optional ``[N] `` counter)

with polars expressions over the candidate frame. They return the rows and which candidates they
took; every other candidate (and every other shape) goes through the per-line handler in
``ingest.nccl``, whose output these rows must equal exactly (the tests compare both paths).
"""

from __future__ import annotations

import polars as pl

from ingest import nccl, pytorch
from ingest.base import ParseContext, node_expr
from ingest.schema import TABLES, Kind, Severity, Source

_EVENT_SCHEMA = TABLES["events"].polars_schema

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


def _json(fields: dict[str, pl.Expr]) -> pl.Expr:
    """``pytorch.attrs_json`` as an expression: compact JSON, sorted keys, nulls dropped."""
    encoded = pl.struct([fields[k].alias(k) for k in sorted(fields)]).struct.json_encode()
    return encoded.str.replace_all(r',"[a-z_]+":null', "").str.replace(
        r'^\{"[a-z_]+":null,?', "{"
    )


def _int(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Int64, strict=False)


def _events(frame: pl.DataFrame, ctx: ParseContext, exprs: dict[str, pl.Expr]) -> pl.DataFrame:
    base = {"file": pl.lit(ctx.file), "line": pl.col("line")}
    cols = {**base, **exprs}
    return frame.select(
        [(cols[c] if c in cols else pl.lit(None)).cast(t).alias(c) for c, t in
         _EVENT_SCHEMA.items()]
    )


def warn_events(
    cand: pl.DataFrame, ctx: ParseContext, job_id: str | None
) -> tuple[pl.DataFrame, pl.Series]:
    """Events of plain NCCL WARN candidates; and the mask of candidates taken."""
    msg = pl.col("msg").fill_null("").str.strip_chars(WS)
    ib = msg.str.extract_groups(nccl.IB_COMPLETION)
    ibv = msg.str.extract_groups(nccl.IBV)
    cuda = msg.str.extract_groups(nccl.CUDA)
    is_ib = ib.struct.field("peer").is_not_null()
    is_async = msg.str.contains("Got async event", literal=True)
    is_ibv = ibv.struct.field("call").is_not_null()
    is_cuda = cuda.struct.field("error").is_not_null()
    is_sock = msg.str.contains(nccl.SOCKET)
    named = msg.str.contains(nccl.RESULT_NAME) | _int(
        msg.str.extract(nccl.RETCODE, 1)).is_in(list(pytorch.NCCL_RESULTS))
    sub = (
        pl.when(is_ib).then(pl.lit("ib_completion"))
        .when(is_async).then(None)
        .when(is_ibv).then(pl.lit("ibv"))
        .when(is_cuda).then(pl.lit("cuda"))
        .when(is_sock).then(pl.lit("socket"))
    )
    take = (pl.col("level") == "WARN") & (pl.col("prefix") == "") & (
        is_ib | (~is_async & (is_ibv | is_cuda | is_sock | ~named)))
    taken = cand.select(take.fill_null(False)).to_series()
    rows = cand.filter(taken).with_columns(sub=sub, msg_s=msg)
    attrs = _warn_attrs(msg, ib, ibv, cuda)
    sub_col = pl.col("sub")
    is_err = sub_col.is_not_null()
    events = _events(rows.with_columns(msg=pl.col("msg_s")), ctx, {
        "ts_flag": pl.lit("no_ts"), "node": node_expr(pl.col("host")),
        "gpu": pl.col("dev").cast(pl.Int64).cast(pl.String), "gpu_index": _int(pl.col("dev")),
        "source": pl.lit(Source.NCCL.value),
        "kind": pl.when(is_err).then(pl.lit(Kind.NCCL_ERROR.value)).otherwise(
            pl.lit(Kind.NCCL_WARN.value)),
        "subkind": sub_col,
        "severity": pl.when(is_err).then(pl.lit(Severity.ERROR.value)).otherwise(
            pl.lit(Severity.WARNING.value)),
        "job_id": pl.lit(job_id), "pid": _int(pl.col("pid")),
        "message": msg.str.slice(0, pytorch.MESSAGE_CHARS), "attrs": attrs,
    })
    return events, taken


def _warn_attrs(msg: pl.Expr, ib: pl.Expr, ibv: pl.Expr, cuda: pl.Expr) -> pl.Expr:
    """The attrs JSON of a WARN event, by subkind (``nccl.classify_warn``'s fields)."""
    peer = msg.str.extract_groups(nccl.PEER)
    sock_err = msg.str.extract_groups(nccl.SOCKET_ERR)
    sub_col = pl.col("sub")
    status = _int(pl.coalesce(ib.struct.field("status"), ib.struct.field("error")))
    common = {
        "tid": _int(pl.col("tid")), "cuda_dev": _int(pl.col("dev")),
        "src": pl.when(pl.col("src").is_not_null()).then(
            pl.format("{}:{}", pl.col("src"), pl.col("srcline"))),
    }
    ib_attrs = {
        **common, "peer": ib.struct.field("peer"), "peer_port": _int(ib.struct.field("peer_port")),
        "status_str": ib.struct.field("status_str"), "status": status,
        "status_name": status.replace_strict(nccl.IB_STATUS, default=None, return_dtype=pl.String),
        "opcode": _int(ib.struct.field("opcode")), "len": _int(ib.struct.field("len")),
        "vendor_err": _int(ib.struct.field("vendor_err")),
        "direction": ib.struct.field("direction"), "local_gid": ib.struct.field("local_gid"),
        "remote_gid": ib.struct.field("remote_gid"), "hca": ib.struct.field("hca"),
    }
    ibv_err = ibv.struct.field("error").fill_null("").str.strip_chars(WS)
    ibv_attrs = {**common, "call": ibv.struct.field("call"),
                 "errno": _int(ibv.struct.field("errno")),
                 "error": pl.when(ibv_err != "").then(ibv_err)}
    cuda_attrs = {**common, "cuda_code": _int(cuda.struct.field("code")),
                  "cuda_error": cuda.struct.field("error")}
    sock_attrs = {**common, "peer": peer.struct.field("peer"),
                  "peer_port": _int(peer.struct.field("port")),
                  "error": pl.coalesce(sock_err.struct.field("error"),
                                       sock_err.struct.field("closed")).str.strip_chars(WS)}
    return (
        pl.when(sub_col == "ib_completion").then(_json(ib_attrs))
        .when(sub_col == "ibv").then(_json(ibv_attrs))
        .when(sub_col == "cuda").then(_json(cuda_attrs))
        .when(sub_col == "socket").then(_json(sock_attrs))
        .otherwise(_json(common))
    )


def watchdog_events(
    cand: pl.DataFrame, ctx: ParseContext, job_id: str | None
) -> tuple[pl.DataFrame, pl.Series]:
    """Events of primary watchdog-timeout lines; and the mask of candidates taken."""
    wd = pl.col("raw").str.extract_groups(WATCHDOG_FAST)
    raw = pl.col("raw")
    take = (pl.col("host").is_null() & ~pl.col("after_last_error") & ~pl.col("is_row")
            & raw.str.contains("Watchdog caught", literal=True)
            & ~raw.str.contains(_WATCHDOG_SLOW) & wd.struct.field("body").is_not_null())
    taken = cand.select(take.fill_null(False)).to_series()
    rows = cand.filter(taken).select("line", wd.alias("wd")).unnest("wd")
    ts = [pytorch.glog_ts(md, hms, frac, ctx) for md, hms, frac in
          zip(rows["md"].to_list(), rows["hms"].to_list(), rows["frac"].to_list(), strict=True)]
    rows = rows.with_columns(ts=pl.Series(ts, dtype=pl.Datetime("us")))
    attrs = {k: _int(pl.col(k)) for k in
             ("rank", "seq_num", "numel_in", "numel_out", "timeout_ms", "ran_for_ms")}
    attrs["op_type"] = pl.col("op_type")
    events = _events(rows, ctx, {
        "ts": pl.col("ts"), "ts_flag": pl.when(pl.col("ts").is_null()).then(pl.lit("no_ts")),
        "node": pl.lit(ctx.node), "source": pl.lit(Source.PYTORCH.value),
        "kind": pl.lit(Kind.NCCL_TIMEOUT.value), "subkind": pl.lit("watchdog"),
        "severity": pl.lit(Severity.ERROR.value), "job_id": pl.lit(job_id),
        "message": pl.col("body").str.strip_chars(WS).str.slice(0, pytorch.MESSAGE_CHARS),
        "attrs": _json(attrs),
    })
    return events, taken
