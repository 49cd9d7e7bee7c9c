"""NCCL RAS (2.24+): the RAS thread's log lines and the ``ncclras`` status report.

Both follow NCCL's own format strings (``src/ras/rasnet.cc``, ``src/ras/client_support.cc``).

**Log lines** (``NCCL_DEBUG=INFO``, subsystem ``RAS``), anchored on ``NCCL INFO RAS`` /
``NCCL WARN RAS`` wherever it stands; the ``host:pid:tid [dev]`` header is optional. The peer
address is NCCL's ``ip<port>``::

    RAS keep-alive timeout warning (5.1s) on socket connection with 10.0.0.2<35521>
    RAS keep-alive timeout error (20s) on socket connection with 10.0.0.2<35521>
    RAS connect timeout warning (5s) on socket connection with ADDR
    RAS connect retry timeout (60s) on socket connection with ADDR   (the peer is declared dead)
    RAS send stuck timeout error (20s) on socket connection with ADDR
    RAS init timeout error (20s) on [incoming ]socket connection (with|from) ADDR[ (...)]
    RAS termination stuck timeout error (20s) on socket connection with ADDR
    RAS peer connect timeout warning (5s) on socket connection from ADDR
    RAS [incoming |old |new |current ]socket connection with ADDR closed by peer on receive|send

Each becomes an ``nccl_ras`` event about the *peer* (``node`` = its address; the reporting host
is ``attrs.reporter``). Any other ``NCCL WARN RAS`` line is an ``nccl_ras`` ``ras_warn``
warning; other ``NCCL INFO RAS`` lines are noise.

**The status report** (``ncclras`` / ``STATUS`` on port 28028, text format): sections ``Job
summary``, ``Communicators...``, ``Errors`` and ``Warnings``; findings are blocks::

    INCOMPLETE                                   DEAD
      Missing communicator data from N job processes   N job processes are considered dead ...
      Process PID on node IP managing GPU[s] LIST        Process PID on node IP managing GPU LIST
      [could not find information on N processes]

    #G-I (COMMHASH) INCOMPLETE|ERROR|MISMATCH       TIMEOUT
      Rank R -- GPU G[ (NVML n)] managed by process PID on node IP
      Rank R reported ERR -- GPU ...               Encountered N communication timeouts ...
      Rank R has status S -- GPU ... / Rank R has launched up to operation N -- GPU ...
      N ranks reported ERR / N ranks have status S / N ranks have launched up to operation N

One ``nccl_ras`` event per process or rank line (subkind ``missing_process`` / ``dead_process``
/ ``missing_rank`` / ``rank_error`` / ``rank_mismatch``, with node, pid, rank, GPU index and
``attrs.comm_hash``); a block that names nobody (NCCL lists at most 10 outliers) gives one event
from its count line (``attrs.count``), and so does TIMEOUT (``collection_timeout``). The report
has no time stamp: its events are ``no_ts``. The JSON form (``SET FORMAT json``) gives one event
per rank with an error and per missing rank (``dead_process`` when considered dead), on the line
of its ``"rank":`` key; its ``timestamp`` is the RAS host's local time and stays out of ``ts``;
a JSON report that does not parse is quarantined whole. The ``parse_line`` of the report parser
is its chunk path run on one line (a one-line report has no blocks: every line is noise).
"""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    LineResult,
    ParseContext,
    node_expr,
    numbered,
    quarantine_frame,
)
from faultlens.ingest.schema import EVENTS, Kind, Severity, Source

# -- log lines ------------------------------------------------------------------------------

LITERALS = ("NCCL INFO RAS ", "NCCL WARN RAS ")
ANCHOR = r"NCCL (?:INFO|WARN) RAS "
# the optional NCCL header before the anchor, and the message after it
LINE = (
    r"(?:(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<pid>[0-9]+):(?P<tid>[0-9]+) "
    r"\[(?P<dev>-?[0-9]+)\] )?(?:[0-9]+\.[0-9]+ )?(?:[^ :]+:[0-9]+ )?"
    r"NCCL (?P<level>INFO|WARN) RAS (?P<msg>.*)$"
)
_WHAT = (
    r"^(?P<what>keep-alive timeout warning|keep-alive timeout error|connect timeout warning"
    r"|connect retry timeout|send stuck timeout error|init timeout error"
    r"|termination stuck timeout error|peer connect timeout warning) \((?P<secs>[0-9.e+-]+)s\) "
    r"on (?:incoming )?socket connection (?:with|from) (?P<addr>[^\s<]+)"
)
_CLOSED = (
    r"^(?:(?:incoming|old|new|current) )?socket connection with (?P<addr>[^\s<]+)\S* "
    r"closed by peer on (?:receive|send)"
)
# what -> (subkind, severity)
LINE_FINDINGS: dict[str, tuple[str, Severity]] = {
    "keep-alive timeout warning": ("keepalive_timeout", Severity.WARNING),
    "keep-alive timeout error": ("keepalive_timeout", Severity.ERROR),
    "connect timeout warning": ("connect_timeout", Severity.WARNING),
    "peer connect timeout warning": ("connect_timeout", Severity.WARNING),
    "connect retry timeout": ("peer_dead", Severity.ERROR),
    "send stuck timeout error": ("send_stuck", Severity.WARNING),
    "init timeout error": ("init_timeout", Severity.WARNING),
    "termination stuck timeout error": ("termination_stuck", Severity.WARNING),
    "closed": ("peer_disconnected", Severity.INFO),
    "warn": ("ras_warn", Severity.WARNING),
}
_LINE_RX = re.compile(LINE)
_WHAT_RX = re.compile(_WHAT)
_CLOSED_RX = re.compile(_CLOSED)
_EMPTY_LINES = pl.Series("line", [], dtype=pl.Int64)


def _events(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(
        [
            (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
            for c, t in EVENTS.polars_schema.items()
        ]
    )


def _attrs(**fields: pl.Expr) -> pl.Expr:
    """A JSON object of the non-null fields."""
    encoded = pl.struct(**fields).struct.json_encode()
    return encoded.str.replace_all(r',?"[a-z_]+":null', "").str.replace(r"^\{,", "{")


def line_rows(cand: pl.DataFrame, ctx: ParseContext) -> ChunkResult:
    """RAS log lines (``line``, ``raw``: the text after any outer prefix) -> events."""
    if cand.height == 0:
        return ChunkResult(parsed_lines=_EMPTY_LINES)
    raw = pl.col("raw")
    f = cand.with_columns(_m=raw.str.extract_groups(LINE)).unnest("_m")
    msg = pl.col("msg")
    f = f.with_columns(
        _w=msg.str.extract_groups(_WHAT), _closed=msg.str.extract(_CLOSED, 1)
    ).unnest("_w")
    what = (
        pl.when(pl.col("what").is_not_null())
        .then(pl.col("what"))
        .when(pl.col("_closed").is_not_null())
        .then(pl.lit("closed"))
        .when(pl.col("level") == "WARN")
        .then(pl.lit("warn"))
    )
    f = f.with_columns(_what=what).filter(pl.col("_what").is_not_null())
    if f.height == 0:
        return ChunkResult(parsed_lines=_EMPTY_LINES)
    sub = {k: v[0] for k, v in LINE_FINDINGS.items()}
    sev = {k: v[1].value for k, v in LINE_FINDINGS.items()}
    peer = pl.coalesce(pl.col("addr"), pl.col("_closed"))
    reporter = node_expr(pl.col("host"))
    events = f.select(
        ts=pl.lit(None, pl.Datetime("us")),
        ts_flag=pl.lit("no_ts"),
        node=pl.coalesce(node_expr(peer), pl.when(peer.is_null()).then(reporter)),
        source=pl.lit(Source.NCCL.value),
        kind=pl.lit(Kind.NCCL_RAS.value),
        subkind=pl.col("_what").replace_strict(sub, return_dtype=pl.String),
        severity=pl.col("_what").replace_strict(sev, return_dtype=pl.String),
        job_id=pl.lit(ctx.job_id, pl.String),
        pid=pl.when(peer.is_null()).then(pl.col("pid").cast(pl.Int64)),
        message=msg.str.strip_chars().str.slice(0, 2000),
        attrs=_attrs(
            reporter=pl.when(peer.is_not_null()).then(reporter),
            reporter_pid=pl.when(peer.is_not_null()).then(pl.col("pid").cast(pl.Int64)),
            timeout_s=pl.col("secs").cast(pl.Float64, strict=False),
        ),
        file=pl.lit(ctx.file),
        line=pl.col("line"),
    )
    return ChunkResult(
        tables={"events": _events(events)},
        parsed=events.height,
        parsed_lines=events.get_column("line"),
    )


def parse_line_reference(line: str) -> dict[str, Any] | None:
    """The per-line reference for RAS log lines (Python ``re``): the finding, or None (noise)."""
    m = _LINE_RX.search(line)
    if m is None:
        return None
    msg = m["msg"]
    w = _WHAT_RX.match(msg)
    closed = _CLOSED_RX.match(msg)
    if w:
        what, peer = w["what"], w["addr"]
    elif closed:
        what, peer = "closed", closed["addr"]
    elif m["level"] == "WARN":
        what, peer = "warn", None
    else:
        return None
    subkind, severity = LINE_FINDINGS[what]
    host = m["host"].lower() if m["host"] else None
    return {
        "subkind": subkind,
        "severity": severity.value,
        "node": peer.lower() if peer else host,
        "reporter": host if peer else None,
        "timeout_s": float(w["secs"]) if w else None,
    }


# -- the ncclras status report -------------------------------------------------------------

_VERSION = r"^NCCL version (?P<v>\S+) compiled with CUDA"
_GLOBAL_HDR = r"^(?P<g>INCOMPLETE|DEAD|TIMEOUT)$"
_COMM_HDR = (
    r"^#(?P<group>[0-9]+)-(?P<idx>[0-9]+) \((?P<hash>[0-9a-f]+)\) (?P<c>INCOMPLETE|ERROR|MISMATCH)$"
)
_SECTION = r"^(?:Job summary|Communicators\.\.\.|Errors|Warnings)(?: |$)"
_PROC = (
    r"^  Process (?P<pid>[0-9]+) on node (?P<node>\S+) managing GPUs? (?P<gpus>[0-9,]+)"
    r"(?: \(NVML (?P<nvml>[0-9,]+)\))?$"
)
_RANK = (
    r"^  Rank (?P<rank>[0-9]+)(?: (?P<what>reported .+?|has status [A-Z]+"
    r"|has launched up to operation [0-9]+|has not launched any operations))? -- "
    r"(?:GPU (?P<gpu>[0-9]+)(?: \(NVML (?P<nvml>[0-9]+)\))? managed by process (?P<pid>[0-9]+) "
    r"on node (?P<node>\S+)|\[process information not found\])$"
)
_NOT_FOUND = r"^  \[could not find information on (?P<n>[0-9]+) process(?:es)?\]$"
_COUNT = (
    r"^  (?:Missing communicator data from [0-9]+ (?:job process(?:es)?|ranks?)"
    r"|[0-9]+ job process(?:es are| is) considered dead \(unreachable via the RAS network\)"
    r"|Encountered [0-9]+ communication timeouts? while gathering communicator data"
    r"|(?:Initialization|Asynchronous) errors? on [0-9]+ ranks?"
    r"|[0-9]+ ranks reported .+"
    r"|Communicator ranks have different (?:status|\w+ operation counts)"
    r"|[0-9]+ ranks have (?:status [A-Z]+|launched up to operation [0-9]+"
    r"|not launched any operations))$"
)
# block -> (subkind, severity)
REPORT_FINDINGS: dict[str, tuple[str, Severity]] = {
    "INCOMPLETE": ("missing_process", Severity.WARNING),
    "DEAD": ("dead_process", Severity.ERROR),
    "TIMEOUT": ("collection_timeout", Severity.WARNING),
    "comm INCOMPLETE": ("missing_rank", Severity.WARNING),
    "comm ERROR": ("rank_error", Severity.ERROR),
    "comm MISMATCH": ("rank_mismatch", Severity.WARNING),
}
# the error name (``N ranks reported ERR``) and the phase a rank line of an ERROR block is under
_REPORTED = r"^  (?:[0-9]+ ranks|Rank [0-9]+) reported (?P<err>.+?)(?: -- .*)?$"
_PHASE = r"^  (?P<phase>Initialization|Asynchronous) errors? on"
_OP = r"^  Communicator ranks have different (?P<op>status|\w+)(?: operation counts)?$"


def sniff_report(head_lines: list[str]) -> float:
    text = [line.rstrip() for line in head_lines[:40]]
    if "Job summary" not in text:
        return 0.0
    banner = any(re.match(_VERSION, t) for t in text) or any(
        t.startswith("Communicators...") for t in text
    )
    return 0.95 if banner else 0.0


def report_rows(lines: pl.Series, first_line: int, ctx: ParseContext) -> ChunkResult:
    """A whole ``ncclras`` text report -> events (see the module docstring)."""
    raw = pl.col("raw")
    f = numbered(lines, first_line).with_columns(raw=raw.str.strip_chars_end())
    comm = raw.str.extract_groups(_COMM_HDR)
    f = f.with_columns(
        _version=raw.str.extract(_VERSION, 1).forward_fill(),
        _hdr=pl.coalesce(
            raw.str.extract(_GLOBAL_HDR, 1),
            pl.concat_str(pl.lit("comm "), comm.struct.field("c")),
            pl.when(raw.str.contains(_SECTION)).then(pl.lit("")),
        ),
        _hash=comm.struct.field("hash"),
    )
    f = f.with_columns(_block=pl.col("_hdr").is_not_null().cum_sum())
    proc = raw.str.extract_groups(_PROC)
    rank = raw.str.extract_groups(_RANK)
    f = f.with_columns(
        _kind=pl.col("_hdr").forward_fill().over("_block"),
        _hash=pl.col("_hash").forward_fill().over("_block"),
        _proc=proc,
        _rank=rank,
        _nf=raw.str.extract(_NOT_FOUND, 1).cast(pl.Int64),
        _counted=raw.str.contains(_COUNT),
        _count=pl.when(raw.str.contains(_COUNT)).then(
            raw.str.extract(r"([0-9]+)", 1).cast(pl.Int64)
        ),
        _err=raw.str.extract(_REPORTED, 1).forward_fill().over("_block"),
        _phase=raw.str.extract(_PHASE, 1).forward_fill().over("_block"),
        _op=raw.str.extract(_OP, 1).forward_fill().over("_block"),
    )
    in_finding = pl.col("_kind").is_in(list(REPORT_FINDINGS))
    detail = in_finding & (
        pl.col("_proc").struct.field("pid").is_not_null()
        | pl.col("_rank").struct.field("rank").is_not_null()
        | pl.col("_nf").is_not_null()
    )
    f = f.with_columns(_detail=detail)
    f = f.with_columns(_named=pl.col("_detail").any().over("_block"))
    first_count = (
        pl.col("_count").is_not_null() & (pl.col("_count").is_not_null().cum_sum() == 1)
    ).over("_block")
    f = f.with_columns(_event=pl.col("_detail") | (in_finding & ~pl.col("_named") & first_count))
    f = f.with_columns(_has_event=pl.col("_event").any().over("_block"))
    recognized = (
        pl.col("_hdr").is_not_null() & (pl.col("_hdr") != "")
        | pl.col("_detail")
        | pl.col("_counted")
    )
    parsed = f.filter(in_finding & pl.col("_has_event") & recognized).get_column("line")
    ev = f.filter(pl.col("_event"))
    if ev.height == 0:
        return ChunkResult(parsed_lines=_EMPTY_LINES)
    sub = {k: v[0] for k, v in REPORT_FINDINGS.items()}
    sev = {k: v[1].value for k, v in REPORT_FINDINGS.items()}
    p, r = pl.col("_proc"), pl.col("_rank")
    gpus = p.struct.field("gpus")
    gpu_index = pl.coalesce(
        r.struct.field("gpu").cast(pl.Int32),
        pl.when(~gpus.str.contains(",")).then(gpus.cast(pl.Int32, strict=False)),
    )
    rank_what = r.struct.field("what")
    events = ev.select(
        ts=pl.lit(None, pl.Datetime("us")),
        ts_flag=pl.lit("no_ts"),
        node=node_expr(pl.coalesce(p.struct.field("node"), r.struct.field("node"))),
        gpu=gpu_index.cast(pl.String),
        gpu_index=gpu_index,
        source=pl.lit(Source.NCCL.value),
        kind=pl.lit(Kind.NCCL_RAS.value),
        subkind=pl.col("_kind").replace_strict(sub, return_dtype=pl.String),
        severity=pl.col("_kind").replace_strict(sev, return_dtype=pl.String),
        job_id=pl.lit(ctx.job_id, pl.String),
        pid=pl.coalesce(p.struct.field("pid"), r.struct.field("pid")).cast(pl.Int64),
        message=pl.concat_str(
            pl.col("_kind").str.replace("^comm ", ""),
            pl.when(pl.col("_hash").is_not_null()).then(
                pl.concat_str(pl.lit(" comm "), pl.col("_hash"))
            ),
            pl.lit(": "),
            raw.str.strip_chars(),
            ignore_nulls=True,
        ).str.slice(0, 2000),
        attrs=_attrs(
            comm_hash=pl.col("_hash"),
            rank=r.struct.field("rank").cast(pl.Int64),
            gpus=pl.when(gpus.str.contains(",")).then(gpus),
            nvml=pl.coalesce(p.struct.field("nvml"), r.struct.field("nvml")),
            count=pl.coalesce(pl.col("_nf"), pl.when(~pl.col("_detail")).then(pl.col("_count"))),
            error=pl.when(pl.col("_kind") == "comm ERROR").then(pl.col("_err")),
            phase=pl.when(pl.col("_kind") == "comm ERROR").then(pl.col("_phase")),
            mismatch=pl.when(pl.col("_kind") == "comm MISMATCH").then(pl.col("_op")),
            detail=pl.when(rank_what.is_not_null() & ~rank_what.str.starts_with("reported")).then(
                rank_what
            ),
            nccl_version=pl.col("_version"),
        ),
        file=pl.lit(ctx.file),
        line=pl.col("line"),
    )
    return ChunkResult(tables={"events": _events(events)}, parsed=parsed.len(), parsed_lines=parsed)


# -- the JSON report (``SET FORMAT json``, NCCL 2.28+) ---------------------------------------------

_JSON_RANK = r'^\s*"rank": *-?[0-9]+,?$'
# ncclResult_t values that are not errors: ncclSuccess, ncclInProgress
_NOT_ERRORS = (0, 7)


def _json_findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings of a JSON report, one per rank object in document order (``None`` for a
    rank without one), then the collection timeouts."""
    out: list[dict[str, Any]] = []
    version = doc.get("nccl_version")
    for comm in doc.get("communicators") or []:
        digits = str(comm.get("hash") or "").removeprefix("0x")
        common = {"comm_hash": digits.zfill(16) if digits else None, "nccl_version": version}
        for rank in comm.get("ranks") or []:
            st = rank.get("status") or {}
            init, async_ = st.get("init_state"), st.get("async_error")
            bad = [(ph, v) for ph, v in (("Initialization", init), ("Asynchronous", async_))]
            bad = [(ph, v) for ph, v in bad if _int(v) is not None and v not in _NOT_ERRORS]
            out.append(
                {"rank": rank, "subkind": "rank_error", "phase": bad[0][0], "code": bad[0][1]}
                | common
                if bad
                else None
            )
        for rank in comm.get("missing_ranks") or []:
            st = rank.get("status") or {}
            dead, unresponsive = bool(st.get("considered_dead")), bool(st.get("unresponsive"))
            sub = "dead_process" if dead else "missing_rank" if unresponsive else "rank_mismatch"
            out.append({"rank": rank, "subkind": sub, "dead": dead} | common)
    return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def json_report_rows(lines: pl.Series, first_line: int, ctx: ParseContext) -> ChunkResult:
    """A JSON ``ncclras`` report -> events: a rank with an initialization or asynchronous error
    (``rank_error``), a missing rank (``dead_process`` if considered dead, ``missing_rank`` if
    unresponsive, else ``rank_mismatch``: it answered without this communicator), and the
    collection's timeouts. Each rank's event is on the line of its ``"rank":`` key."""
    frame = numbered(lines, first_line)
    text = "\n".join(x for x in lines.to_list() if x is not None)
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("the top level is not an object")
        findings = _json_findings(doc)
        timeouts = _int((doc.get("ras") or {}).get("timeouts_count")) or 0
    except (
        ValueError,
        TypeError,
        AttributeError,
    ) as e:  # not the report's shape  # a half-written report: every line kept, with the reason
        bad = frame.filter(pl.col("raw").is_not_null() & (pl.col("raw").str.strip_chars() != ""))
        reason = f"invalid ncclras JSON report: {e}"[:300]
        q = quarantine_frame(bad["line"].to_list(), bad["raw"].to_list(), [reason] * bad.height)
        return ChunkResult(quarantine=q, parsed_lines=_EMPTY_LINES)
    at = frame.filter(pl.col("raw").str.contains(_JSON_RANK)).get_column("line").to_list()
    if len(at) != len(findings):  # not one rank object per line: the document's first line
        at = [first_line] * len(findings)
    rows = []
    for line, f in zip(at, findings, strict=True):
        if f is None:
            continue
        rank = f.pop("rank")
        sub = f.pop("subkind")
        host, pid, dev = rank.get("host"), _int(rank.get("pid")), _int(rank.get("cuda_dev"))
        rows.append(
            {
                "line": line,
                "node": host if isinstance(host, str) and host not in ("", "unknown") else None,
                "pid": pid if pid is not None and pid >= 0 else None,
                "gpu_index": dev if dev is not None and 0 <= dev < 1 << 16 else None,
                "subkind": sub,
                "severity": REPORT_SEVERITY[sub].value,
                "attrs": {"rank": rank.get("rank"), **{k: v for k, v in f.items() if v}},
            }
        )
    if timeouts:
        line = frame.filter(pl.col("raw").str.contains('"timeouts_count"'))["line"]
        rows.append(
            {
                "line": line[0] if line.len() else first_line,
                "subkind": "collection_timeout",
                "severity": Severity.WARNING.value,
                "attrs": {"count": timeouts, "nccl_version": doc.get("nccl_version")},
            }
        )
    if not rows:
        return ChunkResult(parsed_lines=_EMPTY_LINES)
    schema = {
        "line": pl.Int64,
        "node": pl.String,
        "pid": pl.Int64,
        "gpu_index": pl.Int32,
        "subkind": pl.String,
        "severity": pl.String,
        "attrs": pl.String,
    }
    ev = pl.DataFrame(
        [{**r, "attrs": json.dumps(r["attrs"], sort_keys=True, default=str)} for r in rows],
        schema=schema,
    )
    events = ev.with_columns(
        ts=pl.lit(None, pl.Datetime("us")),
        ts_flag=pl.lit("no_ts"),
        node=node_expr(pl.col("node")),
        gpu=pl.col("gpu_index").cast(pl.String),
        source=pl.lit(Source.NCCL.value),
        kind=pl.lit(Kind.NCCL_RAS.value),
        job_id=pl.lit(ctx.job_id, pl.String),
        message=pl.concat_str(pl.lit("ncclras: "), pl.col("subkind"), pl.lit(" "), "attrs"),
        file=pl.lit(ctx.file),
    )
    parsed = events.get_column("line").unique().sort()
    return ChunkResult(tables={"events": _events(events)}, parsed=parsed.len(), parsed_lines=parsed)


REPORT_SEVERITY = {sub: sev for sub, sev in REPORT_FINDINGS.values()}


def sniff_json_report(head_lines: list[str]) -> float:
    head = "\n".join(head_lines[:12])
    return 0.95 if head.lstrip().startswith("{") and '"communicators_count"' in head else 0.0


class RasReportParser:
    """A standalone ``ncclras`` status report (text format)."""

    name = "ncclras"
    source = Source.NCCL
    whole_file = True

    def sniff(self, head_lines: list[str], path: str) -> float:
        return max(sniff_report(head_lines), sniff_json_report(head_lines))

    def new_state(self, ctx: ParseContext) -> None:
        return None

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        """The chunk path on one line (a single line holds no finding block)."""
        one = pl.Series([line], dtype=pl.String)
        return self.parse_chunk(one, 1, ctx, None).to_line_result()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: None
    ) -> ChunkResult:
        texts = lines.drop_nulls().str.strip_chars()
        texts = texts.filter(texts != "")
        if texts.len() and str(texts[0]).startswith("{"):
            return json_report_rows(lines, first_line, ctx)
        return report_rows(lines, first_line, ctx)

    def finish(self, ctx: ParseContext, state: None) -> ChunkResult:
        return ChunkResult(parsed_lines=_EMPTY_LINES)


PARSERS = [RasReportParser()]
