"""NCCL logs (``NCCL_DEBUG=INFO|WARN|TRACE``), nccl-tests output, and the PyTorch lines around them.

The NCCL line, 2.4 to 2.2x::

    [PREFIX][TS ]host:pid:tid [cudaDev] NCCL INFO message
    [PREFIX][TS ]host:pid:tid [cudaDev] file.cc:123 NCCL WARN message
    [PREFIX][TS ]host:pid:tid [cudaDev] 12.345678 func:123 NCCL TRACE message

PREFIX is a launcher's (Ray ``(Actor pid=N, ip=X) ``, torchrun ``[rank3]:``, pdsh ``host: ``); TS
is ``NCCL_DEBUG_TIMESTAMP_FORMAT``'s ``[YYYY-MM-DD HH:MM:SS] `` (2.26+, WARN only by default) or a
launcher's stamp. Without one, ``ts`` is null and ``ts_flag`` is ``no_ts``: time is never invented.

What becomes rows:

- ``NCCL version 2.x.y+cudaX`` (bare, or as INFO), ``NET/IB : Using [0]mlx5_0:1/IB ...``,
  ``NET/Socket : Using ...``, ``Using network IB``, ``CUDA Dev 0, IB Ports : mlx4_0/2(PHB)`` and
  the communicator init line ``comm 0x.. rank R nranks N cudaDev D [nvmlDev D] busId B [commId C]
  - Init START|COMPLETE`` -> one ``nccl_ranks`` row per (node, pid, comm, rank), emitted at end of
  file with the process's NCCL version, NIC list and transport; nccl-tests' ``#  Rank  0 Group 0
  Pid 123 on host device 0 [0000:18:00] NVIDIA H100`` banner rows too.
- ``NCCL WARN`` -> ``events`` ``nccl_error`` (subkind ``ib_completion``, ``ib_async``, ``ibv``,
  ``cuda``, ``socket``, or an ``ncclResult_t`` name from ``retcode N`` / the text), else
  ``nccl_warn``. ``gpu`` is the line's cudaDev index (as the process sees it); join
  ``nccl_ranks`` on (node, pid, cuda_dev) for the PCI bus id.
- nccl-tests result rows ``size count type redop [root] time algbw busbw #wrong [same, in-place]``
  -> ``link_health`` (two rows, ``in_place`` false/true); the test name comes from a
  ``Collective test starting:`` line, a ``*_perf`` command line, or the file name.
- PyTorch lines -> ``pytorch``.

Every other line (most NCCL INFO lines) is noise, decided by one literal-alternation pass (and
an anchored shape test for result rows) without any capturing regex. A ``NCCL WARN`` line whose
header was cut, shortened or masked is still an event (its node only from a real host name); one
with neither a ``[dev]``, a ``file:line`` nor only launcher tags or a stamp before it is
quarantined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    line_series,
    normalize_node,
    normalize_pci,
    quarantine_frame,
)
from faultlens.ingest.nccl import pytorch
from faultlens.ingest.nccl.pytorch import Sink, TorchState, make_event
from faultlens.ingest.schema import TABLES, Kind, Severity, Source
from faultlens.ingest.zones import zone_of

# Shared by Python ``re`` (reference path) and polars ``extract_groups`` (vectorized path).
NCCL_LINE = (
    r"^(?P<prefix>.*?)(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<pid>[0-9]+):(?P<tid>[0-9]+) "
    r"\[(?P<dev>-?[0-9]+)\] (?:(?P<elapsed>[0-9]+\.[0-9]+) )?(?:(?P<src>[^ :]+):"
    r"(?P<srcline>[0-9]+) )?NCCL (?P<level>INFO|WARN|TRACE|ABORT) ?(?P<msg>.*)$"
)
_NUM = r"[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?"
_WRONG = r"(?:-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?|N/A)"
TEST_ROW = (
    r"^(?P<rowpfx>(?:\[[0-9,]+\]<std(?:out|err)>:|[A-Za-z0-9][A-Za-z0-9._-]*:) ?)? *"
    r"(?P<size>[0-9]+) +(?P<count>[0-9]+) +(?P<dtype>[a-z][a-z0-9_]*) +(?P<redop>[a-z]+) +"
    r"(?:(?P<root>-?[0-9]+) +)?(?P<time_oop>" + _NUM + r") +(?P<algbw_oop>" + _NUM + r") +"
    r"(?P<busbw_oop>"
    + _NUM
    + r") +(?P<wrong_oop>"
    + _WRONG
    + r")(?: +(?P<time_ip>"
    + _NUM
    + r") +(?P<algbw_ip>"
    + _NUM
    + r") +(?P<busbw_ip>"
    + _NUM
    + r") +(?P<wrong_ip>"
    + _WRONG
    + r"))? *$"
)
_NCCL_RX = re.compile(NCCL_LINE)
# A WARN / ABORT line whose header was cut or masked (quarantined before): the header removed
# (``misc/ibvwrap.cc:182 NCCL WARN ...``), without ``:pid:tid`` (``host [5] ...``, a collector's
# shortened form) or with the host masked (``<cluster_name>:922:1158 [3] ...``). The node is the
# header's host when that is a host name, else a launcher's (pdsh ``host: ``), else none.
LOOSE_WARN = (
    r"^(?P<prefix>.*?)(?:(?P<host>[^ \t]+?)(?::(?P<pid>[0-9]+):(?P<tid>[0-9]+))? "
    r"\[(?P<dev>-?[0-9]+)\] )?(?:(?P<src>[^ :]+):(?P<srcline>[0-9]+) )?"
    r"NCCL (?P<level>WARN|ABORT) ?(?P<msg>.*)$"
)
_LOOSE_RX = re.compile(LOOSE_WARN)
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ROW_RX = re.compile(TEST_ROW)

_DTYPES = (
    "int8",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "half",
    "float",
    "double",
    "bfloat16",
    "fp8_e4m3",
    "fp8_e5m2",
)
NCCL_LITERALS = (
    "NCCL WARN",
    "NCCL ABORT",
    "NCCL version",
    "nranks",
    "IB Ports",
    "Pid",
    "_perf",
    "Using",  # Bootstrap : Using, NET/IB : Using, NET/Socket : Using, Using network
    *(f" {d} " for d in _DTYPES),
)
LITERALS = list(dict.fromkeys(NCCL_LITERALS + pytorch.LITERALS))
# One alternation of escaped literals: measured 1.5x faster than ``str.contains_any`` with this many
# patterns (which leaves its SIMD path above 3 patterns).
FILTER = "|".join(re.escape(lit) for lit in LITERALS)
# Shape test for nccl-tests result rows (optionally behind a ``host:`` / ``0:`` prefix), on
# candidates only: every row holds its dtype between spaces, one of the literals above.
ROW_HINT = r"^(?:[^ ]+: ?)? *[0-9]+ +[0-9]+ +[a-z]"
_ROW_HINT_RX = re.compile(ROW_HINT)
LAST_ERROR = "Last error:"

_VERSION = re.compile(r"NCCL version (?P<v>[0-9]+\.[0-9]+\.[0-9]+[^\s]*)")
_INIT = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>[0-9]+) nranks (?P<nranks>[0-9]+)(?P<rest>.*)$"
)
_CUDA_DEV = re.compile(r"cudaDev (-?[0-9]+)")
_BUS_ID = re.compile(r"busId ([0-9a-fA-F]+)")
_COMM_ID = re.compile(r"commId (0x[0-9a-fA-F]+)")
_NIC_LIST = re.compile(r"NET/(?:IB|Socket) ?: Using (?P<list>.*?)\s*(?:;|$)")
_NIC_TOKEN = re.compile(r"\[[0-9]+\]([^\s\[;]+)")
_IB_PORTS = re.compile(r"CUDA Dev (?P<dev>[0-9]+), IB Ports : (?P<ports>.*)$")
_NETWORK = re.compile(r"Using network (?P<net>.+?)\s*$")
_RANK_HDR = re.compile(
    r"^#\s+Rank\s+(?P<rank>[0-9]+)(?:\s+Group\s+[0-9]+)?\s+Pid\s+(?P<pid>[0-9]+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<dev>[0-9]+)\s+\[(?P<bus>[^\]]+)\]\s*(?P<model>.*)$"
)
_TEST_NAME = re.compile(r"(?:Collective test starting: *|\b)(?P<t>[a-z0-9]+(?:_[a-z0-9]+)*_perf)")
_FILE_TESTS = (
    ("reduce_scatter", "reduce_scatter_perf"),
    ("reducescatter", "reduce_scatter_perf"),
    ("all_reduce", "all_reduce_perf"),
    ("allreduce", "all_reduce_perf"),
    ("all_gather", "all_gather_perf"),
    ("allgather", "all_gather_perf"),
    ("alltoall", "alltoall_perf"),
    ("sendrecv", "sendrecv_perf"),
    ("broadcast", "broadcast_perf"),
    ("hypercube", "hypercube_perf"),
)
_JOB_DIR = re.compile(r"(?:^|/)jobs/([^/]+)/")

# NET/IB completion error: "status=12" (2.1x+) or "error 4," (2.18-era wording).
IB_COMPLETION = (
    r"Got completion from peer (?P<peer>\S+?)<(?P<peer_port>[0-9]+)> with "
    r"(?:status=(?:(?P<status_str>[^()]*?)\()?(?P<status>[0-9]+)\)?|error (?P<error>[0-9]+)),? "
    r"opcode[= ](?:[^()\s]*\()?(?P<opcode>[0-9]+)\)?(?:,? len[= ](?P<len>[0-9]+))?,? "
    r"vendor[ _]err[ =](?P<vendor_err>[0-9]+)(?: \((?P<direction>[A-Za-z ]+)\))?"
    r"(?:\s*localGid (?P<local_gid>\S+))?(?:\s*remoteGids?(?P<remote_gid>\S+))?"
    r"(?:.*?hca (?P<hca>\S+))?"
)
_IB_COMPLETION = re.compile(IB_COMPLETION)
IB_STATUS = {
    4: "IBV_WC_LOC_PROT_ERR",
    5: "IBV_WC_WR_FLUSH_ERR",
    10: "IBV_WC_REM_ACCESS_ERR",
    11: "IBV_WC_REM_OP_ERR",
    12: "IBV_WC_RETRY_EXC_ERR",
    13: "IBV_WC_RNR_RETRY_EXC_ERR",
}
IBV = (
    r"\b(?P<call>ibv_[a-z_]+)\b(?:.*?failed(?: with (?:error )?(?P<errno>[0-9]+))?"
    r"[ :]*(?P<error>.*))?"
)
CUDA = r"(?i)cuda failure (?:(?P<code>[0-9]+) )?'(?P<error>[^']*)'"
SOCKET = (
    r"(?i)(?:\bsocket|Net : |Connection (?:closed|reset|refused|timed out)|Broken pipe|"
    r"Call to (?:recv|send|connect|accept)|Connect to )"
)
_IBV, _CUDA, _SOCKET = re.compile(IBV), re.compile(CUDA), re.compile(SOCKET)
PEER = r"(?:from|to|peer) (?P<peer>[^\s<]+)<(?P<port>[0-9]+)>"
SOCKET_ERR = r"failed ?: ?(?P<error>.+)$|(?P<closed>Connection closed by remote peer)"
RETCODE = r"(?:retcode|res=|error) ?(?P<rc>[0-9]+)\b"
_PEER, _SOCKET_ERR, _RETCODE = re.compile(PEER), re.compile(SOCKET_ERR), re.compile(RETCODE)
_PEER_RANK = re.compile(r"from rank (?P<r>[0-9]+)")
RESULT_NAME = "|".join(pytorch.NCCL_RESULT_NAMES)
_RESULT_NAME = re.compile(RESULT_NAME)


@dataclass
class NcclState:
    job_id: str | None
    test: str | None
    torch: TorchState = field(default_factory=TorchState)
    prev_last_error: bool = False  # the previous line held "Last error:"
    ranks: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    header_ranks: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    versions: dict[tuple[str | None, int], str] = field(default_factory=dict)
    file_version: str | None = None
    nics: dict[tuple[Any, ...], str] = field(default_factory=dict)
    transports: dict[tuple[str | None, int], str] = field(default_factory=dict)
    test_hosts: set[str] = field(default_factory=set)
    procs: dict[tuple[str | None, int], dict[str, Any]] = field(default_factory=dict)
    batch: list[pl.DataFrame] = field(default_factory=list)  # candidates not parsed yet
    batch_rows: int = 0
    batch_chunks: int = 0


def job_id_of(ctx: ParseContext) -> str | None:
    """``ctx.job_id``, ``--job`` (``options['job_id']``), or the ``jobs/<id>/`` folder."""
    if ctx.job_id:
        return ctx.job_id
    if ctx.options.get("job_id"):
        return str(ctx.options["job_id"])
    m = _JOB_DIR.search(ctx.file.replace("\\", "/"))
    return m[1] if m else None


def test_from_name(path: str) -> str | None:
    name = Path(path).name.lower()
    m = _TEST_NAME.search(name)
    if m:
        return m["t"]
    for needle, test in _FILE_TESTS:
        if needle in name:
            return test
    return None


def nccl_bus_id(text: str | None) -> str | None:
    """NCCL's int64 busId in hex (``1d000``, ``30``) -> ``0000:1d:00.0``."""
    if not text:
        return None
    digits = text.lower().zfill(9)
    return normalize_pci(f"{digits[:-5]}:{digits[-5:-3]}:{digits[-3:-1]}.{digits[-1]}")


# -- classification of one candidate line ---------------------------------------------------------


def handle(
    line_no: int,
    raw: str,
    ng: dict[str, Any] | None,
    rg: dict[str, Any] | None,
    st: NcclState,
    ctx: ParseContext,
    sink: Sink,
) -> bool:
    """One candidate line, given its NCCL-line and test-row regex groups. True if parsed."""
    if ng is not None:
        return _nccl_line(line_no, ng, st, ctx, sink)
    if rg is not None:
        return _test_row(line_no, rg, st, ctx, sink)
    pre = pytorch.strip_launcher(raw)
    text = pre.rest
    if text.startswith("#"):
        return _test_header(line_no, text, st, ctx)
    if text.startswith("NCCL version"):
        m = _VERSION.match(text)
        if m:
            st.file_version = m["v"]
            return True
    if "_perf" in text:
        m = _TEST_NAME.search(text)
        if m:
            st.test = m["t"]
    if "NCCL WARN" in raw or "NCCL ABORT" in raw:
        m = _LOOSE_RX.match(raw)
        g = m.groupdict() if m else {}
        lead = pytorch.strip_launcher(g.get("prefix") or "")
        # with neither a [dev] nor a file:line before it, only launcher tags or a stamp may precede
        if not g or not (
            g["dev"] or g["src"] or not lead.rest.strip() or pytorch.iso_ts(lead.rest)
        ):
            sink.quarantine.append(
                (line_no, raw, "NCCL WARN line without host:pid:tid [dev] header")
            )
            return False
        host = g["host"] if g["host"] and _HOST_NAME.fullmatch(g["host"]) else None
        node = normalize_node(host) if host else lead.host
        _warn(line_no, g, node, _int(g["pid"]), _int(g["dev"]), st, ctx, sink)
        return True
    return pytorch.handle_line(line_no, raw, st.torch, ctx, sink, st.job_id, pre)


def _nccl_line(
    line_no: int, g: dict[str, Any], st: NcclState, ctx: ParseContext, sink: Sink
) -> bool:
    node = normalize_node(g["host"])
    pid, dev, msg = int(g["pid"]), int(g["dev"]), g["msg"] or ""
    if g["level"] in ("WARN", "ABORT"):
        _warn(line_no, g, node, pid, dev, st, ctx, sink)
        return True
    if g["level"] != "INFO":
        return False
    if msg.startswith("NCCL version"):
        m = _VERSION.match(msg)
        if m:
            st.versions[(node, pid)] = m["v"]
            st.file_version = st.file_version or m["v"]
            return True
        return False
    if msg.startswith(("Bootstrap : Using", "Bootstrap: Using")):
        st.procs.setdefault(
            (node, pid),
            {
                "job_id": st.job_id,
                "node": node or ctx.node,
                "pid": pid,
                "cuda_dev": dev,
                "file": ctx.file,
                "line": line_no,
            },
        )
        return True
    m = _INIT.search(msg)
    if m:
        return _init_line(line_no, m, node, pid, dev, st, ctx)
    m = _NIC_LIST.search(msg)
    if m:
        nics = [t.removesuffix("[RO]") for t in _NIC_TOKEN.findall(m["list"])]
        st.nics[(node, pid)] = " ".join(nics) if nics else m["list"].strip()
        return True
    m = _IB_PORTS.search(msg)
    if m:
        st.nics[(node, pid, int(m["dev"]))] = m["ports"].strip()
        return True
    m = _NETWORK.search(msg)
    if m:
        st.transports[(node, pid)] = m["net"]
        return True
    return False


def _init_line(
    line_no: int,
    m: re.Match[str],
    node: str | None,
    pid: int,
    dev: int,
    st: NcclState,
    ctx: ParseContext,
) -> bool:
    rest = m["rest"]
    if "Destroy" in rest or "Abort" in rest:
        return False
    cuda = _CUDA_DEV.search(rest)
    cuda_dev = int(cuda[1]) if cuda else dev
    bus = _BUS_ID.search(rest)
    bus_id = nccl_bus_id(bus[1]) if bus else None
    comm = _COMM_ID.search(rest)
    rank = int(m["rank"])
    key = (node, pid, m["comm"], rank)
    prior = st.ranks.get(key)
    if prior is None:
        st.ranks[key] = {
            "job_id": st.job_id,
            "node": node or ctx.node,
            "pid": pid,
            "comm_id": comm[1] if comm else m["comm"],
            "rank": rank,
            "nranks": int(m["nranks"]),
            "cuda_dev": cuda_dev,
            "bus_id": bus_id,
            "file": ctx.file,
            "line": line_no,
        }
    elif prior["bus_id"] is None and bus_id:
        prior["bus_id"] = bus_id
    return True


def classify_warn(msg: str) -> tuple[Kind, str | None, dict[str, Any]]:
    """A WARN message's event kind, subkind and attributes."""
    m = _IB_COMPLETION.search(msg)
    if m:
        attrs: dict[str, Any] = {k: v for k, v in m.groupdict().items() if k not in ("error",)}
        status = int(m["status"] or m["error"])
        attrs.update(
            status=status,
            status_name=IB_STATUS.get(status),
            vendor_err=int(m["vendor_err"]),
            opcode=int(m["opcode"]),
            len=_int(m["len"]),
            peer_port=int(m["peer_port"]),
        )
        return Kind.NCCL_ERROR, "ib_completion", attrs
    if "Got async event" in msg:
        event = msg.split("Got async event", 1)[1].strip(" :")
        return Kind.NCCL_ERROR, "ib_async", {"event": event}
    m = _IBV.search(msg)
    if m:
        return (
            Kind.NCCL_ERROR,
            "ibv",
            {
                "call": m["call"],
                "errno": _int(m["errno"]),
                "error": (m["error"] or "").strip(pytorch.WS) or None,
            },
        )
    m = _CUDA.search(msg)
    if m:
        return Kind.NCCL_ERROR, "cuda", {"cuda_code": _int(m["code"]), "cuda_error": m["error"]}
    if _SOCKET.search(msg):
        attrs = {}
        p = _PEER.search(msg)
        if p:
            attrs.update(peer=p["peer"], peer_port=int(p["port"]))
        e = _SOCKET_ERR.search(msg)
        if e:
            attrs["error"] = (e["error"] or e["closed"]).strip(pytorch.WS)
        return Kind.NCCL_ERROR, "socket", attrs
    m = _RESULT_NAME.search(msg)
    if m:
        return Kind.NCCL_ERROR, m[0], {}
    rc = _RETCODE.search(msg)
    if rc and int(rc["rc"]) in pytorch.NCCL_RESULTS:
        pr = _PEER_RANK.search(msg)
        return (
            Kind.NCCL_ERROR,
            pytorch.NCCL_RESULTS[int(rc["rc"])],
            {"retcode": int(rc["rc"]), "peer_rank": int(pr["r"]) if pr else None},
        )
    return Kind.NCCL_WARN, None, {}


def _int(text: str | None) -> int | None:
    return int(text) if text else None


def _warn(
    line_no: int,
    g: dict[str, Any],
    node: str | None,
    pid: int | None,
    dev: int | None,
    st: NcclState,
    ctx: ParseContext,
    sink: Sink,
) -> None:
    msg = (g["msg"] or "").strip(pytorch.WS)
    kind, subkind, attrs = classify_warn(msg)
    pre = pytorch.strip_launcher(g["prefix"] or "")
    attrs.update(
        tid=_int(g["tid"]),
        cuda_dev=dev,
        src=f"{g['src']}:{g['srcline']}" if g["src"] else None,
        rank=pre.rank,
        actor=pre.actor,
        launcher_pid=pre.ray_pid,
        ip=pre.ray_ip,
    )
    stamp = pytorch.iso_stamp(pre.rest, zone_of(ctx)) if pre.rest else (None, None)
    sink.events.append(
        make_event(
            ctx,
            line_no,
            source=Source.NCCL,
            kind=kind,
            subkind=subkind,
            severity=Severity.ERROR if kind is Kind.NCCL_ERROR else Severity.WARNING,
            message=msg,
            node=node,
            ts=stamp[0],
            ts_flag=stamp[1],
            pid=pid,
            gpu=None if dev is None else str(dev),
            gpu_index=dev,
            attrs=attrs,
            job_id=st.job_id,
        )
    )


# -- nccl-tests -----------------------------------------------------------------------------------


def _test_header(line_no: int, text: str, st: NcclState, ctx: ParseContext) -> bool:
    m = _RANK_HDR.match(text)
    if m:
        node = normalize_node(m["host"])
        bus = m["bus"].strip()
        if bus.lower().startswith("0x"):
            bus = f"{bus[2:]}:00"
        st.test_hosts.add(node or "")
        key = (node, int(m["pid"]), int(m["rank"]))
        st.header_ranks[key] = {
            "job_id": st.job_id,
            "node": node,
            "pid": int(m["pid"]),
            "rank": int(m["rank"]),
            "cuda_dev": int(m["dev"]),
            "bus_id": normalize_pci(bus),
            "file": ctx.file,
            "line": line_no,
        }
        return True
    t = _TEST_NAME.search(text)
    if t and "Collective test starting" in text:
        st.test = t["t"]
    return False


def _test_row(
    line_no: int, g: dict[str, Any], st: NcclState, ctx: ParseContext, sink: Sink
) -> bool:
    pfx = (g["rowpfx"] or "").strip().rstrip(":")
    node = None
    if pfx and not pfx.isdigit() and not pfx.startswith("["):
        node = normalize_node(pfx)
    if node is None and len(st.test_hosts) == 1:
        node = next(iter(st.test_hosts)) or None
    base = {
        "ts": None,
        "node": node or ctx.node,
        "test": st.test,
        "size_bytes": int(g["size"]),
        "count": int(g["count"]),
        "dtype": g["dtype"],
        "redop": g["redop"],
        "file": ctx.file,
        "line": line_no,
    }
    for suffix, in_place in (("oop", False), ("ip", True)):
        if g[f"time_{suffix}"] is None:
            continue
        wrong = g[f"wrong_{suffix}"]
        sink.link_health.append(
            {
                **base,
                "in_place": in_place,
                "time_us": float(g[f"time_{suffix}"]),
                "algbw_gbs": float(g[f"algbw_{suffix}"]),
                "busbw_gbs": float(g[f"busbw_{suffix}"]),
                "wrong": None if wrong == "N/A" else int(float(wrong)),
            }
        )
    return True


# -- end of file: the rank map --------------------------------------------------------------------


def rank_rows(st: NcclState) -> list[dict[str, Any]]:
    """The rank -> host / GPU map: init lines, nccl-tests banner rows, then processes that
    bootstrapped NCCL but logged no init line (rank unknown)."""
    rows = []
    seen: set[tuple[Any, ...]] = set()

    def process_facts(node: str | None, pid: int, dev: int | None) -> dict[str, Any]:
        return {
            "nccl_version": st.versions.get((node, pid)) or st.file_version,
            "nic": st.nics.get((node, pid, dev)) or st.nics.get((node, pid)),
            "transport": st.transports.get((node, pid)),
        }

    for row in st.ranks.values():
        rows.append({**row, **process_facts(row["node"], row["pid"], row["cuda_dev"])})
        seen.update({(row["node"], row["pid"], row["rank"]), (row["node"], row["pid"])})
    nranks = max((k[2] for k in st.header_ranks), default=-1) + 1
    for key, row in st.header_ranks.items():
        if key not in seen:
            rows.append(
                {**row, "nranks": nranks, **process_facts(row["node"], row["pid"], row["cuda_dev"])}
            )
            seen.add(key[:2])
    for key, row in st.procs.items():
        if key not in seen:
            rows.append({**row, **process_facts(row["node"], row["pid"], row["cuda_dev"])})
    return rows


def _frame(table: str, rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Row dicts -> a frame of the declared schema, column by column (no per-row inference)."""
    schema = TABLES[table].polars_schema
    return pl.DataFrame({c: [r.get(c) for r in rows] for c in schema}, schema=schema)


def result_of(sink: Sink, parsed: list[int]) -> ChunkResult:
    """The sink's rows and quarantine, with the lines that became rows (``parsed``)."""
    tables = {
        name: _frame(name, rows)
        for name, rows in (("events", sink.events), ("link_health", sink.link_health))
        if rows
    }
    quarantine = None
    if sink.quarantine:
        nos, raws, reasons = zip(*sink.quarantine, strict=True)
        quarantine = quarantine_frame(list(nos), list(raws), list(reasons))
    return ChunkResult(
        tables=tables,
        parsed=len(parsed),
        quarantine=quarantine,
        parsed_lines=line_series(parsed),
    )
