"""The vectorized path of the kernel-log parser: polars expressions over the candidate lines of a
chunk (the lines the Aho-Corasick pre-filter kept). Mirrors ``line`` exactly; the frequent
messages (Xid, SXid, device-plugin) are extracted here, the rare ones per record in
``misc``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import polars as pl

from faultlens.ingest.base import ParseContext, normalize_node, normalize_pci, per_distinct
from faultlens.ingest.catalog import recovery_action_expr, severity_action_expr
from faultlens.ingest.kernel import patterns as kp
from faultlens.ingest.kernel.line import SXID_DETAIL_SEVERITY, SXID_SEVERITY
from faultlens.ingest.zones import localize, zone_flag, zone_of

_MONTH_MM = {m: f"{i:02d}" for m, i in kp.MONTH_NO.items()}
_MONTH_INT = dict(kp.MONTH_NO)
PREFIXED = ("line", "raw", "body", "ts", "uptime_s", "ts_flag", "node")


def _year_expr(ctx: ParseContext, state: Any, shifted: bool = False) -> pl.Expr:
    """Year of RFC 3164 stamps (see ``line.bsd_year``); with ``--year``, Dec->Jan rollovers
    are counted across the file in ``state``, or, with ``shifted``, given per line in the
    ``year_shift`` column (``lines.rolled_over`` counts them over every family's lines)."""
    month = pl.col("bsd_mon").replace_strict(_MONTH_INT, default=None, return_dtype=pl.Int32)
    if ctx.year is not None and shifted:
        return pl.lit(ctx.year) + pl.col("year_shift")
    if ctx.year is not None:
        prev = month.forward_fill().shift(1).fill_null(state.last_month or 0)
        roll = ((prev - month) >= 6).fill_null(False).cast(pl.Int32)
        return pl.lit(ctx.year + state.year_offset) + roll.cum_sum()
    if ctx.mtime is not None:
        return pl.lit(ctx.mtime.year) - (month > ctx.mtime.month).cast(pl.Int32)
    return pl.lit(None, pl.Int32)


def _year_flag(ctx: ParseContext) -> pl.Expr:
    """``year_from_mtime`` for a dated line whose stamp has no year when the year was taken from
    the file's mtime (no ``--year``); else null."""
    if ctx.year is None and ctx.mtime is not None:
        return pl.when(pl.col("bsd_mon").is_not_null()).then(pl.lit("year_from_mtime"))
    return pl.lit(None, pl.String)


def _ts_flag(ctx: ParseContext) -> pl.Expr:
    """A line's time flag: the year's when it has a time; else ``boot_relative`` (placed once
    the boot time is known), the zone's (``tz_ambiguous`` / ``tz_gap`` in column ``_zf``), or
    ``no_ts``."""
    return (
        pl.when(pl.col("ts").is_not_null())
        .then(_year_flag(ctx))
        .when(pl.col("uptime_s").is_not_null())
        .then(pl.lit("boot_relative"))
        .otherwise(pl.coalesce(pl.col("_zf"), pl.lit("no_ts")))
    )


def _update_year_state(frame: pl.DataFrame, ctx: ParseContext, state: Any) -> None:
    if ctx.year is None:
        return
    months = frame.get_column("bsd_mon").drop_nulls()
    if months.len():
        state.last_month = _MONTH_INT[months[-1]]
        years = frame.get_column("_year").drop_nulls()
        state.year_offset = int(years[-1]) - ctx.year


def prefix_frame(cand: pl.DataFrame, ctx: ParseContext, state: Any) -> pl.DataFrame:
    """(line, raw) -> (line, raw, body, ts, uptime_s, ts_flag, node): stamps, host and message.

    A batch whose lines all have the plain RFC 3164 form (``Feb 14 05:03:41 host tag[pid]: [up]``,
    the usual kern.log / syslog) is read with that form's one small regex; any other batch with
    the general pattern of every form (``patterns.PREFIX_RE``)."""
    fast = _bsd_prefix_frame(cand, ctx, state)
    return fast if fast is not None else _generic_prefix_frame(cand, ctx, state)


def _bsd_prefix_frame(cand: pl.DataFrame, ctx: ParseContext, state: Any) -> pl.DataFrame | None:
    c = pl.col
    f = cand.with_columns(c("raw").str.extract_groups(kp.BSD_FAST_RE).alias("_g")).unnest("_g")
    if f.get_column("head").null_count():
        return None
    f = f.with_columns(_year=_year_expr(ctx, state, "year_shift" in f.columns))
    _update_year_state(f, ctx, state)
    month = c("bsd_mon").replace_strict(_MONTH_INT, default=None, return_dtype=pl.Int32)
    day = c("bsd_day").cast(pl.Int32)
    hms = c("bsd_hms")
    first = pl.date(c("_year"), month, 1).cast(pl.Datetime("us"))
    ts = first + pl.duration(
        days=day - 1,
        hours=hms.str.slice(0, 2).cast(pl.Int64),
        minutes=hms.str.slice(3, 2).cast(pl.Int64),
        seconds=hms.str.slice(6, 2).cast(pl.Int64),
    )
    valid = (day >= 1) & (ts.dt.month() == month) & (c("_year") >= 1)
    tz = zone_of(ctx)  # the stamp has no zone: the site's (--tz), UTC without one
    local = pl.when(valid).then(ts)
    f = f.with_columns(
        body=c("raw").str.strip_prefix(c("head")),
        ts=localize(local, tz),
        _zf=zone_flag(local, tz),
        uptime_s=c("up2").cast(pl.Float64),
        node=_mapped(f, "host", normalize_node),
    )
    f = f.with_columns(ts_flag=_ts_flag(ctx))
    if state.boot_time is None:
        both = f.filter(c("ts").is_not_null() & c("uptime_s").is_not_null())
        if both.height:
            row = both.row(0, named=True)
            state.boot_time = row["ts"] - timedelta(microseconds=round(row["uptime_s"] * 1e6))
    return f.select(PREFIXED)


def _generic_prefix_frame(cand: pl.DataFrame, ctx: ParseContext, state: Any) -> pl.DataFrame:
    c = pl.col
    f = cand.with_columns(
        c("raw").str.extract_groups(kp.PREFIX_HEAD_RE).alias("_g"),
        rest=c("raw").str.replace(kp.PREFIX_HEAD_RE, ""),
    ).unnest("_g")
    f = f.with_columns(_year=_year_expr(ctx, state, "year_shift" in f.columns))
    _update_year_state(f, ctx, state)
    dash = pl.lit("-")
    date = pl.coalesce(  # concat_str, not pl.format (which panics in polars 2.1 on such frames)
        pl.concat_str(
            [
                c("ct_year"),
                dash,
                c("ct_mon").replace_strict(_MONTH_MM, default=None),
                dash,
                c("ct_day").str.zfill(2),
            ]
        ),
        c("iso_date"),
        pl.concat_str(
            [
                c("_year").cast(pl.String).str.zfill(4),
                dash,
                c("bsd_mon").replace_strict(_MONTH_MM, default=None),
                dash,
                c("bsd_day").str.zfill(2),
            ]
        ),
        c("go_date").str.replace_all("/", "-", literal=True),
    )
    hms = pl.coalesce(c("ct_hms"), c("iso_hms"), c("bsd_hms"), c("go_hms"))
    frac = pl.coalesce(c("iso_frac"), c("bsd_frac"), c("go_frac"))
    micros = frac.str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64).fill_null(0)
    tz = c("iso_tz").str.replace(":", "", literal=True)
    tz_min = (
        pl.when(tz.is_null() | (tz == "Z"))
        .then(0)
        .otherwise(
            (tz.str.slice(1, 2).cast(pl.Int64) * 60 + tz.str.slice(3, 2).cast(pl.Int64))
            * pl.when(tz.str.starts_with("-")).then(-1).otherwise(1)
        )
    )
    local = pl.concat_str([date, pl.lit(" "), hms]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S", strict=False, time_unit="us"
    ) + pl.duration(microseconds=micros)
    ts = local - pl.duration(minutes=tz_min)
    zone = zone_of(ctx)  # a stamp with no zone of its own is the site's (--tz)
    zone_less = local.is_not_null() & c("iso_tz").is_null()
    zflag = pl.lit(None, pl.String)
    if zone is not None:
        ts = pl.when(zone_less).then(localize(local, zone)).otherwise(ts)
        zflag = pl.when(zone_less).then(zone_flag(local, zone))
    syslog = (
        c("bsd_mon").is_not_null()
        # a priority before a dmesg stamp is ``dmesg -r`` / pstore (``<4>[ 12.3] msg``)
        | (
            c("pri").is_not_null()
            & c("up").is_null()
            & c("ct_mon").is_null()
            & c("km_us").is_null()
        )
        | (c("iso_date").is_not_null() & (c("iso_sep").fill_null("") != ",") & c("fac").is_null())
    )
    f = f.with_columns(
        _ts=ts,
        _zf=zflag,
        _up=pl.coalesce(c("km_us").cast(pl.Int64) / 1e6, c("up").cast(pl.Float64)),
        _syslog=syslog,
    )
    # The host/tag regexes run only when some line needs them (most files are one form).
    none = pl.lit(None, pl.String)
    host, body1 = none, none
    if f.get_column("_syslog").any():
        # host via the head pattern; the body is what follows the head (the whole rest when the
        # head does not match, which is what coalesce(body, rest) gave with the full pattern)
        f = f.with_columns(
            _ht=c("rest").str.extract_groups(kp.HOST_TAG_HEAD_RE),
            _b1=c("rest").str.replace(kp.HOST_TAG_HEAD_RE, ""),
        )
        host, body1 = c("_ht").struct.field("host"), c("_b1")
        if f.get_column("v5424").is_not_null().any():
            f = f.with_columns(
                _h5=c("rest").str.extract_groups(kp.HOST_5424_HEAD_RE),
                _b5=c("rest").str.replace(kp.HOST_5424_HEAD_RE, ""),
            )
            is5424 = c("v5424").is_not_null()
            host = pl.when(is5424).then(c("_h5").struct.field("host")).otherwise(host)
            body1 = pl.when(is5424).then(c("_b5")).otherwise(body1)
        host = pl.when(c("_syslog")).then(host)
        body1 = pl.when(c("_syslog")).then(body1)
    f = f.with_columns(_host=host, _body=pl.coalesce(body1, c("rest")))
    body2, up2 = none, pl.lit(None, pl.Float64)
    if f.get_column("_syslog").any():
        f = f.with_columns(
            _up2=pl.when(c("_syslog")).then(
                c("_body").str.extract(kp.INNER_UPTIME_HEAD_RE, 1).cast(pl.Float64)
            )
        )
        up2 = c("_up2")
        body2 = pl.when(up2.is_not_null()).then(c("_body").str.replace(kp.INNER_UPTIME_HEAD_RE, ""))
    f = f.with_columns(
        body=pl.coalesce(body2, c("_body")),
        uptime_s=pl.coalesce(up2, c("_up")),
        _up2=up2,
        ts=c("_ts"),
        node=pl.when(c("_host").is_not_null())
        .then(_mapped(f, "_host", normalize_node))
        .otherwise(pl.lit(ctx.node, pl.String)),
    )
    f = f.with_columns(ts_flag=_ts_flag(ctx))
    if state.boot_time is None:
        both = f.filter(c("ts").is_not_null() & c("_up2").is_not_null())
        if both.height:
            ts0, up0 = both.row(0, named=True)["ts"], both.row(0, named=True)["_up2"]
            state.boot_time = ts0 - timedelta(microseconds=round(up0 * 1e6))
    return f.select(PREFIXED)


# -- the frequent messages -------------------------------------------------------------------------


def route_expr() -> pl.Expr:
    body = pl.col("body")

    def has(text: str) -> pl.Expr:
        return body.str.contains(text, literal=True)

    return (
        pl.when(has("NVRM: Xid"))
        .then(pl.lit("xid"))
        .when(has("SXid ("))
        .then(pl.lit("sxid"))
        .when(has("XidCriticalError"))
        .then(pl.lit("dp_xid"))
        .when(has("device marked unhealthy"))
        .then(pl.lit("dp_unhealthy"))
        .when(has("[Hardware Error]"))
        .then(pl.lit("hw"))
        .when(has("NVRM:"))
        .then(
            pl.when(body.str.contains(kp.BENIGN_NVRM_RE))
            .then(pl.lit("benign"))
            .otherwise(pl.lit("nvrm"))
        )
        .otherwise(pl.lit("other"))
    )


def attrs_expr(fields: dict[str, pl.Expr]) -> pl.Expr:
    """JSON of the fields: sorted, nulls dropped, null when empty (``line.attrs_json``)."""
    enc = pl.struct([fields[k].alias(k) for k in sorted(fields)]).struct.json_encode()
    enc = enc.str.replace_all(r'"[a-z_0-9]+":null,?', "").str.replace(r",\}$", "}")
    return pl.when(enc == "{}").then(pl.lit(None, pl.String)).otherwise(enc)


def _mapped(frame: pl.DataFrame, col: str, fn: Callable[[str], str | None]) -> pl.Expr:
    """``fn`` of a string column, computed once per distinct value. Hosts and PCI addresses take
    few values in a file, so this is much cheaper than a chain of regexes on every row, and it is
    by construction what the per-line path gives."""
    values = frame.get_column(col).drop_nulls().unique().to_list()
    mapping = {v: fn(v) for v in values}
    if not mapping:
        return pl.lit(None, pl.String)
    return pl.col(col).replace_strict(mapping, default=None, return_dtype=pl.String)


def pci_of(frame: pl.DataFrame, col: str) -> pl.Expr:
    """``normalize_pci`` of a column (see ``_mapped``)."""
    return _mapped(frame, col, normalize_pci)


def safe_attrs_expr(fields: dict[str, pl.Expr]) -> pl.Expr:
    """``attrs_expr`` for fields whose values need no JSON escaping (integers, and strings or
    lists of strings captured by patterns without quotes, backslashes or control characters):
    the JSON is written with ``concat_str``, several times cheaper than ``struct.json_encode``."""
    parts = []
    for key in sorted(fields):
        e = fields[key]
        if key in _LIST_FIELDS:
            text = pl.concat_str([pl.lit('["'), e.list.join('","'), pl.lit('"]')])
        elif key in _INT_FIELDS:
            text = e.cast(pl.String)
        else:
            text = pl.concat_str([pl.lit('"'), e, pl.lit('"')])
        parts.append(pl.concat_str([pl.lit(f'"{key}":'), text]))
    body = pl.concat_str(parts, separator=",", ignore_nulls=True)
    return (
        pl.when(body == "")
        .then(pl.lit(None, pl.String))
        .otherwise(pl.concat_str([pl.lit("{"), body, pl.lit("}")]))
    )


_INT_FIELDS = frozenset({"gpc", "tpc", "sm", "after_s", "rm_gpu", "fn", "link", "switch"})
_LIST_FIELDS = frozenset({"words", "data"})


def _split_ok(frame: pl.DataFrame, key: str, reason: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    bad = frame.filter(pl.col(key).is_null())
    q = bad.select("line", pl.col("raw").str.slice(0, 4000), reason=pl.lit(reason))
    return frame.filter(pl.col(key).is_not_null()), q


def event_columns(source: str = "kernel") -> list[pl.Expr]:
    """The columns every event takes from its prefixed line."""
    return [pl.col(n) for n in ("ts", "uptime_s", "ts_flag", "node", "line")] + [
        pl.col("body").alias("message"),
        pl.lit(source).alias("source"),
    ]


_XID_COLS = ("gpu", "kind", "subkind", "code", "severity", "action", "pid", "process", "attrs")


def xid_events(f: pl.DataFrame, file: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Xid lines. Everything but the line's time and node comes from its message, computed once
    per distinct message (``per_distinct``: a GPU repeats its Xid line)."""
    f = per_distinct(f, pl.col("body"), _xid_fields)
    f, q = _split_ok(f, "code", "NVRM Xid line with unknown shape")
    return f.select(*event_columns(), *_XID_COLS, file=pl.lit(file)), q


def _xid_fields(f: pl.DataFrame) -> pl.DataFrame:
    """``f`` with ``_XID_COLS`` of its ``body`` (``code`` null where ``XID_RE`` does not match)."""
    cols = f.columns
    body = pl.col("body")
    # ``XID_RE``, the per-line pattern: its ``msg`` is what follows the head's leftmost match
    f = f.with_columns(body.str.extract_groups(kp.XID_RE).alias("_m")).unnest("_m")
    msg = pl.col("msg")

    def having(literal: str) -> pl.Expr:  # the message, where it holds a pattern's literal
        return pl.when(msg.str.contains(literal, literal=True)).then(msg)

    f = f.with_columns(
        code=pl.col("code").cast(pl.Int32),
        _ch=having("Ch ").str.extract_groups(kp.XID_CH_RE),
        _sm=having("(GPC ").str.extract_groups(kp.XID_SM_RE),
        _gsp=having("Timeout after ").str.extract_groups(kp.GSP_RE),
        _nv=having("Link").str.extract_groups(kp.NVLINK_RE),
        _rec=pl.when(pl.col("code") == str(kp.RECOVERY_CODE))
        .then(msg)
        .str.extract_groups(kp.RECOVERY_RE),
    )
    rec = pl.col("_rec").struct
    to_name = pl.coalesce(rec.field("to_name"), rec.field("to_bare"))
    rec_sev, rec_act = recovery_action_expr(to_name, rec.field("to_code"))

    def fld(s: str, name: str, as_int: bool = False) -> pl.Expr:
        e = pl.col(s).struct.field(name)
        return e.cast(pl.Int64) if as_int else e

    attrs = {
        "ch": fld("_ch", "ch"),
        "gpc": fld("_sm", "gpc", True),
        "tpc": fld("_sm", "tpc", True),
        "sm": fld("_sm", "sm", True),
        "after_s": fld("_gsp", "after_s", True),
        "rm_gpu": fld("_gsp", "rm_gpu", True),
        "fn": fld("_gsp", "fn", True),
        "fn_name": fld("_gsp", "fn_name"),
        "unit": fld("_nv", "unit"),
        "intr": fld("_nv", "intr"),
        "inst": fld("_nv", "inst"),
        "link": fld("_nv", "link", True),
        "words": fld("_nv", "words").str.replace_all(r"[ \t]+", " ").str.split(" "),
        "recovery": pl.coalesce(
            to_name.str.replace_all(r"\s+", " ").str.strip_chars(), rec.field("to_code")
        ),
    }
    code = pl.col("code")
    sev, act = severity_action_expr(code)
    sev, act = pl.coalesce(rec_sev, sev), pl.coalesce(rec_act, act)
    proc = pl.col("proc")
    return f.select(
        *cols,
        gpu=pci_of(f, "pci"),
        kind=pl.when(code.is_between(144, 150))
        .then(pl.lit("nvlink"))
        .when(code == kp.GSP_TIMEOUT_CODE)
        .then(pl.lit("gsp_timeout"))
        .otherwise(pl.lit("xid")),
        subkind=fld("_nv", "sev"),
        code=code,
        severity=sev,
        action=act,
        pid=pl.col("pid").str.extract(r"^([0-9]{1,18})$").cast(pl.Int64),
        process=pl.when(proc.is_in(["", "<unknown>"]))
        .then(pl.lit(None, pl.String))
        .otherwise(proc),
        attrs=safe_attrs_expr(attrs),
    )


def sxid_events(f: pl.DataFrame, file: str, state: Any = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """SXid lines. A line without a Fatal / Non-fatal tag (a detail line: ``Data {...}``,
    ``Severity N Engine instance ...``) takes the severity of the last tagged line of the same
    switch and code (in ``state.sxid_tags`` across chunks); with none, ``warning``."""
    f = per_distinct(f, pl.col("body"), _sxid_fields)
    f, q = _split_ok(f, "code", "NVSwitch SXid line with unknown shape")
    tags = state.sxid_tags if state is not None else {}
    key = pl.concat_str(
        [pl.col("_pci").fill_null(""), pl.col("code").cast(pl.String)], separator="|"
    )
    carried = {f"{pci or ''}|{code}": tag for (pci, code), tag in tags.items()}
    tag = (
        pl.col("_sub")
        .forward_fill()
        .over(key)
        .fill_null(key.replace_strict(carried, default=None, return_dtype=pl.String))
    )
    f = f.with_columns(_tag=tag)
    if state is not None:
        last = f.filter(pl.col("_sub").is_not_null()).unique(["_pci", "code"], keep="last")
        for pci, code, sub in last.select("_pci", "code", "_sub").iter_rows():
            tags[(pci, code)] = sub
    sev_map = {k: v[0] for k, v in SXID_SEVERITY.items()}
    act_map = {k: v[1] for k, v in SXID_SEVERITY.items()}
    out = f.select(
        *event_columns(),
        gpu=pl.col("_pci"),
        kind=pl.lit("sxid"),
        subkind=pl.col("_sub"),
        code=pl.col("code"),
        severity=pl.col("_tag").replace_strict(
            sev_map, default=SXID_DETAIL_SEVERITY, return_dtype=pl.String
        ),
        action=pl.col("_tag").replace_strict(act_map, default=None, return_dtype=pl.String),
        attrs=pl.col("_attrs"),
        file=pl.lit(file),
    )
    return out, q


def _sxid_fields(f: pl.DataFrame) -> pl.DataFrame:
    """``f`` with what an SXid line's ``body`` gives: ``code`` (null where ``SXID_RE`` does not
    match), ``_pci``, ``_sub`` (its Fatal / Non-fatal tag) and ``_attrs``."""
    cols = f.columns
    f = f.with_columns(pl.col("body").str.extract_groups(kp.SXID_RE).alias("_m")).unnest("_m")
    data = pl.col("msg").str.extract_groups(kp.SXID_DATA_RE).struct.field("data")
    return f.select(
        *cols,
        code=pl.col("code").cast(pl.Int32),
        _pci=pci_of(f, "pci"),
        _sub=pl.col("msg").str.extract_groups(kp.SXID_SEV_RE).struct.field("sev"),
        _attrs=safe_attrs_expr(
            {"switch": pl.col("switch").cast(pl.Int64), "data": data.str.split(", ")}
        ),
    )


def dp_events(f: pl.DataFrame, file: str, route: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    if route == "dp_xid":
        f = f.with_columns(pl.col("body").str.extract_groups(kp.DP_XID_RE).alias("_m"))
        f = f.unnest("_m")
        f, q = _split_ok(f, "code", "device-plugin Xid line with unknown shape")
        code = pl.col("code").cast(pl.Int32)
        sev, act = severity_action_expr(code)
        return f.select(
            *event_columns("k8s"),
            gpu=pl.col("dev"),
            kind=pl.lit("device_unhealthy"),
            subkind=pl.lit("xid_critical"),
            code=code,
            severity=sev,
            action=act,
            file=pl.lit(file),
        ), q
    f = f.with_columns(pl.col("body").str.extract_groups(kp.DP_UNHEALTHY_RE).alias("_m"))
    f, q = _split_ok(f.unnest("_m"), "dev", "device-plugin unhealthy line with unknown shape")
    return f.select(
        *event_columns("k8s"),
        gpu=pl.col("dev"),
        kind=pl.lit("device_unhealthy"),
        subkind=pl.lit("marked_unhealthy"),
        severity=pl.lit("error"),
        file=pl.lit(file),
    ), q
