"""Line-oriented logs of any kind: every family's lines found, wherever they stand.

A node's journal, a log shipper's file or a job's output holds kernel, NCCL / PyTorch and Slurm
daemon lines, and the CUDA errors the job printed, together. The ``lines`` parser is what the
driver uses for every line-oriented log (the sniffed ``kernel``, ``nccl``, ``pytorch`` and
``slurmctld`` formats, and any file of no known format): one raw-byte scan (``ingest.scan``,
Hyperscan) finds the candidate lines of all families at once, each candidate goes to the one
family whose anchor it carries, and each family parses its lines with its own vectorized path
and keeps its own state across chunks.

Routing, per candidate line, first that applies:

0. a kernel watchdog line (soft / hard lockup) -> ``kernel``; an NCCL RAS line (``NCCL INFO RAS``
   / ``NCCL WARN RAS``) -> ``ras`` (``nccl.ras``);
1. the detail line after an NCCL ``Last error:`` line, or a line with an NCCL / PyTorch anchor
   (``NCCL INFO|WARN|ABORT|TRACE``, ``ProcessGroupNCCL``, ``torch.distributed``, ``c10d``, a
   watchdog) -> ``nccl`` (the NCCL / PyTorch parser);
2. a line a Slurm daemon wrote (``slurmctld:`` / ``slurmd[123]:`` / ``_slurm_rpc_``) -> ``slurm``;
   a Kubernetes node condition (``kubectl get events`` / ``describe node``) -> ``k8s``; a line
   fabric manager (``nv-fabricmanager[pid]:``) or systemd about its service wrote -> ``fabric``
   (``telemetry.dcgm_logs.journal_rows``);
3. a line with a kernel literal (``NVRM``, ``Xid``, ``PCIe Bus Error``, ``[Hardware Error]``,
   EDAC, panics, ...) -> ``kernel``; a CUDA error an application printed (``CUDA error:``,
   ``CUDA_ERROR_*``, ``cudaError*``, ``CUDA out of memory``) -> ``cuda`` (``training.cuda``);
4. any other NCCL / PyTorch literal -> ``nccl``.

``parse_line`` is this module's chunk path run on one line (``ChunkResult.to_line_result``); the
per-family references are the families' own ``parse_line``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from faultlens.ingest.base import ChunkResult, LineResult, ParseContext, line_series, numbered
from faultlens.ingest.kernel import k8s
from faultlens.ingest.kernel import parser as kernel
from faultlens.ingest.kernel import patterns as kp
from faultlens.ingest.nccl import line as nccl_line
from faultlens.ingest.nccl import parser as nccl
from faultlens.ingest.nccl import ras
from faultlens.ingest.prefixes import PREFIX_SCHEMA, fill_events, month_of, prefix_frame
from faultlens.ingest.reader import MAX_LINE_BYTES, literal_regex
from faultlens.ingest.schema import Source
from faultlens.ingest.slurm import daemon as slurm_daemon
from faultlens.ingest.slurm import stamps as slurm_stamps
from faultlens.ingest.telemetry import dcgm_logs as fabric
from faultlens.ingest.training import cuda
from faultlens.ingest.zones import host_zone, localize, rezone, to_local, zone_of

# Slurm daemon lines: the phrases of the messages the Slurm family reads (``slurm.daemon``'s
# rules and candidate words), not the daemon's name: a node's journal holds a slurmd line for
# every job step launched, and those are noise.
SLURM_LITERALS = (
    "error:",
    "fatal:",
    "responding",
    "returned to service",
    "reason set to",
    "state set to",
    "state to",
    "rebooted",
    "Killing JobId",
    "equeu",
    "NODE_FAIL",
    "Failed",
    "failed",
    ".service: ",
    "drain",
    "Drain",
    "DRAIN",
    "xid",
    "exited",
)
# The CRI log format's partial-line tags: such a line and the line after it are candidates, and
# the pieces of one line are joined before they are read (``join_partials``).
CRI_PARTIAL = (" stdout P ", " stderr P ")
CRI_PARTIAL_HEAD = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(?:Z|[+-][0-9:]+) (?:stdout|stderr) P "
CRI_HEAD = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(?:Z|[+-][0-9:]+) (?:stdout|stderr) [FP] "
LITERALS: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            *kp.LITERALS,
            *nccl_line.LITERALS,
            *ras.LITERALS,
            *SLURM_LITERALS,
            *k8s.LITERALS,
            *cuda.LITERALS,
            *fabric.FM_JOURNAL_LITERALS,
            *CRI_PARTIAL,
        )
    )
)
# An anchor that makes a line NCCL / PyTorch even when it also holds a kernel literal
# (``NET/IB : Using [0]mlx5_0``, ``PCIe Bus Error`` quoted in a RuntimeError).
NCCL_ANCHOR = (
    r"NCCL (?:INFO|WARN|ABORT|TRACE)|ProcessGroupNCCL|torch\.distributed|c10d|[Ww]atchdog"
    r"|ChildFailedError|DistBackendError|nccl[A-Z][a-zA-Z]*Error"
    r"|torch/distributed|\(exitcode: -?[0-9]+\) local_rank:|SignalException: Process"
    r"|Heartbeat monitor|[Ff]light ?[Rr]ecorder"
)
# The kernel's own watchdogs (``watchdog: BUG: soft lockup``, ``NMI watchdog: ... hard LOCKUP``,
# RM's ``krcWatchdog_IMPL: RC watchdog``), not PyTorch's.
KERNEL_WATCHDOG = (
    r"BUG: soft lockup - CPU#|Watchdog detected hard LOCKUP on cpu|NVRM: [^ ]*: RC watchdog"
)
SLURM_ANCHOR = (
    r"\bslurm(?:ctld|d|stepd|dbd|restd)?(?:\[[0-9]+\])?: |_slurm_rpc_|\bslurm\w*\.service\b"
    r"|\bsystemd(?:\[[0-9]+\])?: .*\b[Ss]lurm"
)
# slurmctld's own log file: ``[2024-01-02T03:04:05.123] message``, the stamp in any LogTimeFormat
# (``slurm.stamps``; after the kernel's anchors, so that a collector's ISO stamp before an NVRM
# line stays kernel).
SLURM_FILE_STAMP = slurm_stamps.STAMP_LINE
_KERNEL_STRONG = literal_regex(tuple(lit for lit in kp.LITERALS if lit != "Xid"))
_KERNEL = literal_regex(kp.LITERALS)
_NCCL = nccl_line.FILTER
_K8S_WORDS = r"Ready|Rebooted|Pressure|Insufficient|Node became not ready|Name:"
FAMILIES = ("ras", "nccl", "slurm", "k8s", "fabric", "kernel", "cuda")
# Candidates gathered over chunks before the families parse them (a 64 MiB block of a node log
# holds ~30k): every family call has a fixed cost of dozens of expressions, paid once per batch.
BATCH_ROWS = 100_000


PIECES_SCHEMA = {"line": pl.Int64, "other": pl.Int64}


def _marked(cand: pl.DataFrame) -> pl.DataFrame:
    """``cand`` with the marks ``join_partials`` groups pieces by: ``_p`` (a ``P`` line),
    ``_cont`` (a piece continuing the line before: a CRI line right after a ``P`` line)."""
    raw = pl.col("raw")
    if "follows" not in cand.columns:
        cand = cand.with_columns(follows=pl.lit(False))
    next_line = (pl.col("line").shift(1) == pl.col("line") - 1).fill_null(False)
    f = cand.with_columns(
        pl.col("follows").fill_null(False),
        _p=raw.str.contains(CRI_PARTIAL_HEAD).fill_null(False),
        _cri=raw.str.contains(CRI_HEAD).fill_null(False),
        _prev_err=next_line & raw.shift(1).str.contains(nccl_line.LAST_ERROR, literal=True),
        _adjacent=next_line,
    )
    cont = pl.col("_p").shift(1, fill_value=False) & pl.col("_adjacent") & pl.col("_cri")
    return f.with_columns(_cont=cont)


def _run_follows() -> pl.Expr:
    """``follows`` of a run's first piece: the scan also sets it after a ``P`` tag, so it is
    kept only after a ``Last error:`` line (or at the candidates' start, where the line before
    is not known)."""
    return pl.col("follows") & (pl.col("_prev_err").fill_null(False) | ~pl.col("_adjacent"))


@dataclass
class PartialCarry:
    """The pieces of a CRI partial line still open at the end of a chunk of candidates (its
    last piece a ``P`` line on the chunk's last line), held back and put in front of the next
    chunk's candidates, where the rest of it is: a line cut by a scan block or reader chunk
    boundary is joined as if there were none. A run of more than ``max_bytes`` is not held
    (it is joined as far as it goes, as at the file's end)."""

    max_bytes: int = MAX_LINE_BYTES
    held: pl.DataFrame | None = None

    def take(self, cand: pl.DataFrame, last_line: int) -> pl.DataFrame:
        """``cand`` (``line``, ``raw``[, ``follows``]) of a chunk ending at ``last_line``, with
        the pieces held from the chunk before in front and an open run at its end held."""
        if self.held is not None:
            cand = pl.concat([self.held, cand], how="diagonal_relaxed")
            self.held = None
        if not cand.height or cand.get_column("line")[-1] != last_line:
            return cand
        last = cand.tail(1).select(pl.col("raw").str.contains(CRI_PARTIAL_HEAD)).item()
        if not last:
            return cand
        f = _marked(cand)
        start = f.select(pl.arg_where(~pl.col("_cont")).last()).item()
        run = f.slice(start)
        if run.select(pl.col("raw").str.len_bytes().sum()).item() > self.max_bytes:
            return cand
        # the first piece's ``follows`` as this chunk tells it (the line before it stays here)
        first = pl.int_range(pl.len()) == 0
        follows = pl.when(first).then(_run_follows()).otherwise(pl.col("follows"))
        self.held = run.with_columns(follows=follows).select("line", "raw", "follows")
        return cand.head(start)

    def rest(self) -> pl.DataFrame | None:
        """The pieces still held at the end of the candidates (joined as far as they go)."""
        held, self.held = self.held, None
        return held


def join_partials(cand: pl.DataFrame) -> pl.DataFrame:
    """``cand`` (``line``, ``raw``[, ``follows``]) with the pieces of each CRI partial line
    (``<stamp> stderr P <piece>`` lines, then the ``F`` line that ends it) joined into one row at
    the first piece's line, read as an ``F`` line of the first piece's stamp; ``_more``: the
    other pieces' lines. A run still open at the candidates' end is joined as far as it goes
    (the driver and ``parse_candidates`` hold one open at a chunk's end for the next chunk:
    ``PartialCarry``, so that only the file's end cuts a run). Only candidates holding a ``P``
    tag pay for more than one search."""
    more = pl.lit(None, pl.List(pl.Int64)).alias("_more")
    raw = pl.col("raw")
    tagged = raw.str.contains(literal_regex(CRI_PARTIAL)).fill_null(False)
    if not cand.height or not cand.select(tagged.any()).item():
        return cand.with_columns(more)
    f = _marked(cand).with_columns(_grp=(~pl.col("_cont")).cum_sum())
    joined = f.group_by("_grp", maintain_order=True).agg(
        pl.col("line").first(),
        _run_follows().first().alias("follows"),
        raw.first().alias("_first"),
        raw.slice(1).str.replace(CRI_HEAD, "").str.join("").alias("_rest"),
        pl.col("line").slice(1).alias("_more"),
    )
    full = pl.concat_str(
        [pl.col("_first").str.replace(r"^(\S+ (?:stdout|stderr)) P ", "${1} F "), "_rest"]
    )
    return joined.select(
        "line",
        raw=pl.when(pl.col("_more").list.len() > 0).then(full).otherwise("_first"),
        follows="follows",
        _more="_more",
    )


def with_pieces(result: ChunkResult, pieces: pl.DataFrame) -> tuple[ChunkResult, pl.DataFrame]:
    """``result`` with the other pieces (``pieces``: ``line``, ``other``) of each parsed joined
    line counted parsed too, and the pieces not used yet."""
    parsed = result.parsed_lines
    if parsed is None or not parsed.len() or not pieces.height:
        return result, pieces
    used = pl.col("line").is_in(parsed.implode())
    others = pieces.filter(used).get_column("other").rename("line")
    if not others.len():
        return result, pieces
    result.parsed_lines = pl.concat([parsed, others])
    result.parsed += others.len()
    return result, pieces.filter(~used)


@dataclass
class LinesState:
    kernel: Any
    nccl: Any
    k8s: k8s.K8sState = field(default_factory=k8s.K8sState)
    slurm: slurm_daemon.DaemonState = field(default_factory=slurm_daemon.DaemonState)
    # the prefixes (line, p_ts, p_host, p_flag, p_up) of candidates that had one: NCCL / PyTorch
    # events and multi-line kernel records come out chunks after their lines
    prefixes: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PREFIX_SCHEMA))
    # prepared candidates of chunks not parsed yet (``BATCH_ROWS``)
    batch: list[pl.DataFrame] = field(default_factory=list)
    batch_rows: int = 0
    batch_last: int = 0  # the last line of the batch's last chunk
    # the other physical lines of each line joined from pieces (``join_partials``): line -> other
    pieces: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PIECES_SCHEMA))
    # a CRI partial line open at the end of the last chunk (``parse_candidates``' path)
    carry: PartialCarry = field(default_factory=PartialCarry)
    # whether the last chunk's last line holds a ``follow`` literal (``parse_chunk``'s path)
    follow_next: bool = False
    # --year: the month of the last RFC 3164 prefix and the years rolled over so far
    last_month: int | None = None
    year_offset: int = 0
    # --tz-host: the lines whose RFC 3164 head names a host with a zone of its own, and the zone
    host_zoned: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=HOST_ZONED))


HOST_ZONED = {"line": pl.Int64, "zone": pl.String}


def host_zones(routed: pl.DataFrame, ctx: ParseContext, state: LinesState) -> pl.DataFrame:
    """With ``--tz-host``, the prefix times of RFC 3164 heads (which carry no zone) read in the
    zone of the host the head names (the first matching glob), not the file's; those lines are
    kept in ``state`` for ``host_zoned_events``. Without it, unchanged."""
    zone = host_zone(pl.col("p_host"), ctx)
    if zone is None or routed.height == 0:
        return routed
    f = routed.with_columns(_hz=pl.when(pl.col("p_shape") == "syslog").then(zone))
    hit = f.filter(pl.col("_hz").is_not_null())
    if hit.height == 0:
        return routed
    state.host_zoned = pl.concat([state.host_zoned, hit.select("line", zone="_hz")])
    return _in_host_zone(f.rename({"_hz": "zone"}), "p_ts", "p_flag", ctx)


def _in_host_zone(frame: pl.DataFrame, ts: str, flag: str, ctx: ParseContext) -> pl.DataFrame:
    """``frame``'s ``ts`` read in its row's ``zone`` (``zones.rezone``), ``flag`` saying where
    that has no answer; ``zone`` dropped."""
    zones = [z for _, z in ctx.options["tz_hosts"]]
    moved, why = rezone(pl.col(ts), pl.col("zone"), pl.col(flag), zones, zone_of(ctx))
    return frame.with_columns(moved.alias(ts), why.alias(flag)).drop("zone")


def host_zoned_events(result: ChunkResult, ctx: ParseContext, state: LinesState) -> ChunkResult:
    """The events of ``host_zones``' lines that a family timed itself (from the head, or from
    a zone-less stamp of the message that host wrote) read in the host's zone too."""
    events = result.tables.get("events")
    if events is None or events.height == 0 or state.host_zoned.height == 0:
        return result
    ev = events.join(state.host_zoned, on="line", how="left")
    result.tables["events"] = _in_host_zone(ev, "ts", "ts_flag", ctx)
    return result


def rolled_over(routed: pl.DataFrame, ctx: ParseContext, state: LinesState) -> pl.DataFrame:
    """With ``--year``, the years of RFC 3164 heads (which have none) over every family's lines:
    ``--year`` for the file's first, one more at each Dec -> Jan (a month six or more before the
    previous head's, in the head's own wall clock), across batches through ``state``. The prefix
    times move by them, and ``year_shift`` gives them to the kernel and Slurm families, which
    read their own heads: one file's lines agree on the year whichever family reads them.
    Without ``--year`` (the mtime's rule) unchanged."""
    if ctx.year is None or routed.height == 0:
        return routed
    tz = zone_of(ctx)
    p_ts = pl.col("p_ts")
    local = p_ts if tz is None else to_local(p_ts, tz)
    yearless = (pl.col("p_shape") == "syslog").fill_null(False) & p_ts.is_not_null()
    month = pl.when(yearless).then(local.dt.month().cast(pl.Int32))
    prev = month.forward_fill().shift(1).fill_null(state.last_month or 0)
    rolls = ((prev - month) >= 6).fill_null(False).cast(pl.Int32).cum_sum()
    f = routed.with_columns(_m=month, _y=pl.lit(state.year_offset, pl.Int32) + rolls)
    heads = f.filter(pl.col("_m").is_not_null())
    if heads.height:
        state.last_month = int(heads["_m"][-1])
        state.year_offset = int(heads["_y"][-1])
    later = local.dt.offset_by(pl.format("{}y", pl.col("_y")))
    moved = later if tz is None else localize(later, tz)
    return (
        f.with_columns(p_ts=pl.when(yearless & (pl.col("_y") > 0)).then(moved).otherwise(p_ts))
        .drop("_m")
        .rename({"_y": "year_shift"})
    )


def route_rules() -> list[tuple[pl.Expr, str]]:
    """The routing rules (``raw``, ``follows``), first that applies: (condition, family)."""
    raw = pl.col("raw")
    return [
        (~pl.col("follows") & raw.str.contains(KERNEL_WATCHDOG), "kernel"),
        (~pl.col("follows") & raw.str.contains(ras.ANCHOR), "ras"),
        (pl.col("follows") | raw.str.contains(NCCL_ANCHOR), "nccl"),
        (raw.str.contains(SLURM_ANCHOR), "slurm"),
        # the k8s anchor has no literal a search could start from: only lines holding one of
        # its words are matched against it
        (raw.str.contains(_K8S_WORDS) & raw.str.contains(k8s.ANCHOR), "k8s"),
        (raw.str.contains(fabric.FM_JOURNAL_ANCHOR), "fabric"),
        (raw.str.contains(_KERNEL_STRONG), "kernel"),
        (raw.str.contains(cuda.ANCHOR), "cuda"),
        (raw.str.contains(SLURM_FILE_STAMP) | raw.str.contains("NODE_FAIL", literal=True), "slurm"),
        (raw.str.contains(_KERNEL), "kernel"),
        (raw.str.contains(_NCCL), "nccl"),
    ]


# Wrappings the kernel parser's own prefix forms do not cover: a collector's bracketed stamp, a
# container platform's ``host: kern: level: [stamp]:``, launcher tags (rank, Ray, pdsh / IP
# before a stamp or a kernel tag), and syslog with a month name that is not English.
_FOREIGN = (
    r"^(?:\[[0-9]{4}-[0-9]{2}-[0-9]{2}[T ]|[A-Za-z0-9][A-Za-z0-9._:-]*: [a-z]{3,8}: +[a-z]{3,8}: \["
    r"|\[(?:rank|default)[0-9]+\]: ?|\([^()]*\bpid=[0-9]+[^()]*\) ?"
    r"|(?:[A-Za-z0-9][A-Za-z0-9._-]*|[0-9.]+): +(?:\[ *[0-9]+\.[0-9]+\]|\[[A-Z][a-z]{2} "
    r"|[A-Z][a-z]{2} [ 0-9][0-9] |[0-9]{4}-|kernel: |NVRM: |<[0-9]))"
)
_ENGLISH_SYSLOG = r"^(?:<[0-9]{1,3}>)?(?:" + "|".join(kp.MONTHS) + r") "
_SYSLOG_ANY = (
    r"^(?:<[0-9]{1,3}>)?(?:[^\W\d_]{2,12}\.?| ?[0-9]{1,2}[月월]) {1,2}[0-9]{1,2},? "
    r"[0-9]{2}:[0-9]{2}:[0-9]{2}"
)
# the same head in parts: what comes before the month, the month, the rest of the line
_LOCAL_HEAD = (
    r"^(?P<pri>(?:<[0-9]{1,3}>)?)(?P<mon>[^\W\d_]{2,12}\.?| ?[0-9]{1,2}[月월])"
    r"(?P<rest> {1,2}[0-9]{1,2},? [0-9]{2}:[0-9]{2}:[0-9]{2}.*)$"
)
_LAUNCHER = r"^(?:\[(?:rank|default)[0-9]+\]: ?|\([^()]*\bpid=[0-9]+[^()]*\) ?)"
# a pdsh / IP tag, removed only before a stamp or a kernel tag (never ``NVRM: `` itself)
_TAG_BEFORE = (
    r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*|[0-9.]+): ( *(?:\[ *[0-9]+\.|\[[A-Z][a-z]{2} "
    r"|[A-Z][a-z]{2} [ 0-9][0-9] |[0-9]{4}-|kernel: |NVRM: |<[0-9]))"
)


# journalctl stamps the kernel family's own prefix parser does not read (short-full, with-unit,
# short-unix, short-monotonic / short-delta with a host), and the CRI log format: it reads the
# message after them, and the time, host or boot-relative seconds come from the prefix library.
JOURNAL_SHAPES = ("full", "unix", "mono", "cri")


def english_months(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (``raw``) with the month of an RFC 3164 head written in another locale
    (``déc.``, ``Dez``, ``11月``, ``3월``) replaced by its English name, for a family that reads
    the head itself (the Slurm daemon lines); a token that names no month stays as it was."""
    raw = pl.col("raw")
    local = raw.str.contains(_SYSLOG_ANY) & ~raw.str.contains(_ENGLISH_SYSLOG)
    heads = frame.with_columns(_g=pl.when(local).then(raw.str.extract_groups(_LOCAL_HEAD)))
    heads = heads.unnest("_g")
    tokens = heads.get_column("mon").drop_nulls().unique().to_list()
    months = {t: kp.MONTHS[m - 1] for t in tokens if (m := month_of(t))}
    if not months:
        return frame
    english = pl.col("mon").replace_strict(months, default=None, return_dtype=pl.String)
    rebuilt = pl.concat_str([pl.col("pri"), english, pl.col("rest")])
    return heads.with_columns(raw=pl.coalesce(rebuilt, raw)).select(frame.columns)


def kernel_text() -> pl.Expr:
    """What the kernel family reads of a line: the line itself in the forms its own prefix
    parser knows; the message after the outer prefix (``body``) and any launcher tag behind
    a foreign or a nested wrapping (whose time and host the prefix library supplies)."""
    raw = pl.col("raw")
    locale = raw.str.contains(_SYSLOG_ANY) & ~raw.str.contains(_ENGLISH_SYSLOG)
    journal = pl.col("p_shape").is_in(JOURNAL_SHAPES).fill_null(False)
    foreign = raw.str.contains(_FOREIGN) | locale | pl.col("p_nested") | journal
    inner = pl.col("body").str.replace(_LAUNCHER, "").str.replace(_TAG_BEFORE, "${1}")
    return pl.when(foreign).then(inner).otherwise(raw)


def _filled(result: ChunkResult, pre: pl.DataFrame) -> ChunkResult:
    """Events without a time or node take those of their line's prefix (``ingest.prefixes``)."""
    events = result.tables.get("events")
    if events is not None and events.height and pre.height:
        # ``pre`` holds every candidate's prefix so far, in line order: only the rows between
        # the events' first and last line are joined (not the whole file's, chunk after chunk)
        lines = pre.get_column("line")
        lo = int(lines.search_sorted(events.get_column("line").min(), side="left"))
        hi = int(lines.search_sorted(events.get_column("line").max(), side="right"))
        result.tables["events"] = fill_events(events, pre.slice(lo, hi - lo))
    return result


def route(cand: pl.DataFrame) -> pl.DataFrame:
    """``cand`` (``line``, ``raw``[, ``follows``]) with a ``family`` column. Each rule is tried
    only on the lines no earlier rule took (most are NCCL or kernel lines, taken early)."""
    if "follows" not in cand.columns:
        cand = cand.with_columns(follows=pl.lit(False))
    cand = cand.with_columns(pl.col("follows").fill_null(False))
    family = pl.Series("family", [None] * cand.height, dtype=pl.String)
    rest = cand.select("raw", "follows").with_row_index("_i")
    for cond, name in route_rules():
        if not rest.height:
            break
        hit = rest.select(cond.fill_null(False)).to_series()
        if hit.any():
            family = family.scatter(rest.get_column("_i").filter(hit), name)
            rest = rest.filter(~hit)
    return cand.with_columns(family)


class LinesParser:
    """Every line family of a log (kernel, NCCL / PyTorch, Slurm daemons) in one pass."""

    name = "lines"
    source = Source.KERNEL  # the events carry each family's own source
    whole_file = False
    prefilter = LITERALS
    prefilter_follow: tuple[str, ...] = (nccl_line.LAST_ERROR, *CRI_PARTIAL)
    raw_scan = True

    def __init__(self) -> None:
        self._kernel = kernel.KernelParser()
        self._nccl = nccl.NcclParser("nccl")

    def sniff(self, head_lines: list[str], path: str) -> float:
        return 0.0  # chosen by the driver for line-oriented logs, never by its own sniff

    def new_state(self, ctx: ParseContext) -> LinesState:
        return LinesState(self._kernel.new_state(ctx), self._nccl.new_state(ctx))

    def new_carry(self) -> PartialCarry:
        """What the driver's ``prepare_candidates`` thread keeps from chunk to chunk (the state
        of ``parse_candidates``' own path holds another)."""
        return PartialCarry()

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        """This parser's chunk path on one line (the families' own ``parse_line`` are the
        references for their messages)."""
        state = self.new_state(ctx)
        one = self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, state)
        return one.merge(self.finish(ctx, state)).to_line_result()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: LinesState
    ) -> ChunkResult:
        """Every line of a chunk (the driver's path without a raw scan): the candidates, then
        ``parse_candidates``."""
        raw = pl.col("raw")
        follow = literal_regex((nccl_line.LAST_ERROR, *CRI_PARTIAL))
        # the first line follows the last chunk's last line (as the scan's ``follows`` does)
        first = pl.int_range(pl.len()) == 0
        follows = pl.when(first).then(pl.lit(state.follow_next))
        follows = follows.otherwise(raw.shift(1).str.contains(follow).fill_null(False))
        hit = raw.str.contains(literal_regex(LITERALS)).fill_null(False) | follows
        frame = numbered(lines, first_line).with_columns(follows=follows)
        if lines.len():
            state.follow_next = bool(frame.select(raw.last().str.contains(follow)).item())
        cand = frame.filter(hit & raw.is_not_null())
        return self.parse_candidates(cand, first_line + lines.len() - 1, ctx, state)

    def parse_candidates(
        self, cand: pl.DataFrame, last_line: int, ctx: ParseContext, state: LinesState
    ) -> ChunkResult:
        """The candidate lines (``line``, ``raw``[, ``follows``]) of a chunk ending at
        ``last_line``, each parsed by its family (a CRI partial line open at the chunk's end
        is read with the next chunk: ``PartialCarry``)."""
        cand = state.carry.take(cand, last_line)
        return self.parse_prepared(self.prepare_candidates(cand, ctx), last_line, ctx, state)

    def prepare_candidates(self, cand: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
        """The stateless first step of ``parse_candidates``: each candidate's family and prefix
        (``route``, ``prefixes.prefix_frame``), lines of no family dropped. It depends on the
        chunk alone, so the driver runs it in a thread of its own, a chunk ahead of the
        families' stateful parsing (``pipeline._feed_candidates``): both cores work on one file,
        with exactly the results of one pass."""
        cand = join_partials(cand)
        return prefix_frame(route(cand).filter(pl.col("family").is_not_null()), ctx)

    def parse_prepared(
        self, routed: pl.DataFrame, last_line: int, ctx: ParseContext, state: LinesState
    ) -> ChunkResult:
        """``parse_candidates`` after ``prepare_candidates``: the candidates are gathered over
        chunks until there are ``BATCH_ROWS`` (each family's fixed cost per call is then paid
        once per batch), then each family parses its lines as if the batch were one chunk."""
        if routed.height:
            state.batch.append(routed)
            state.batch_rows += routed.height
        state.batch_last = last_line
        if state.batch_rows < BATCH_ROWS:
            return ChunkResult(parsed_lines=line_series([]))
        return self._parse_batch(last_line, ctx, state)

    def _parse_batch(self, last_line: int, ctx: ParseContext, state: LinesState) -> ChunkResult:
        if not state.batch:
            return ChunkResult(parsed_lines=line_series([]))
        batch = state.batch
        state.batch, state.batch_rows = [], 0
        routed = rolled_over(pl.concat(batch) if len(batch) > 1 else batch[0], ctx, state)
        routed = host_zones(routed, ctx, state)
        joined = routed.filter(pl.col("_more").list.len() > 0)
        if joined.height:
            pieces = joined.select("line", other="_more").explode("other")
            state.pieces = pl.concat([state.pieces, pieces])
        result = ChunkResult()
        shift = ["year_shift"] if "year_shift" in routed.columns else []
        k = routed.filter(pl.col("family") == "kernel").select("line", *shift, raw=kernel_text())
        result = result.merge(self._kernel.parse_candidates(k, last_line, ctx, state.kernel))
        # NCCL / PyTorch see the message after the outer prefix (their launcher tags stay)
        n = routed.filter(pl.col("family") == "nccl").select("line", raw="body", follows="follows")
        result = result.merge(self._nccl.parse_candidates(n, last_line, ctx, state.nccl))
        r = routed.filter(pl.col("family") == "ras").select("line", raw="body")
        if r.height:
            result = result.merge(ras.line_rows(r, ctx))
        kube = routed.filter(pl.col("family") == "k8s").select("line", raw="body")
        if kube.height:
            result = result.merge(k8s.node_condition_rows(kube, ctx, state.k8s))
        fm = routed.filter(pl.col("family") == "fabric").select("line", "raw", "body")
        if fm.height:
            result = result.merge(fabric.journal_rows(fm, ctx))
        c = routed.filter(pl.col("family") == "cuda").select("line", raw="body")
        if c.height:
            result = result.merge(cuda.rows(c, ctx))
        s = routed.filter(pl.col("family") == "slurm")
        if s.height:
            result = result.merge(
                slurm_daemon.daemon_rows(
                    english_months(s.select("line", "raw", *shift)), ctx, state.slurm
                )
            )
        known = routed.filter(
            pl.col("p_ts").is_not_null()
            | pl.col("p_host").is_not_null()
            | pl.col("p_flag").is_not_null()
        )
        if known.height:
            state.prefixes = pl.concat([state.prefixes, known.select(list(PREFIX_SCHEMA))])
        result = host_zoned_events(result, ctx, state)
        result, state.pieces = with_pieces(_filled(result, state.prefixes), state.pieces)
        return result

    def finish(self, ctx: ParseContext, state: LinesState) -> ChunkResult:
        held = state.carry.rest()
        if held is not None:  # a partial line open at the file's end: read as far as it goes
            done = self.parse_prepared(
                self.prepare_candidates(held, ctx), state.batch_last, ctx, state
            )
            rest = done.merge(self._parse_batch(state.batch_last, ctx, state))
        else:
            rest = self._parse_batch(state.batch_last, ctx, state)
        result = self._kernel.finish(ctx, state.kernel).merge(self._nccl.finish(ctx, state.nccl))
        result = result.merge(slurm_daemon.daemon_finish(state.slurm))
        result = host_zoned_events(result, ctx, state)
        result, state.pieces = with_pieces(_filled(result, state.prefixes), state.pieces)
        return rest.merge(result)


PARSERS = [LinesParser()]
