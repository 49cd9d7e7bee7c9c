"""The single-line kernel messages outside NVRM and ``[Hardware Error]``, as declarative families.

Each ``Family`` is a literal gate, one regex and how its groups become an event (kind, sub-kind,
severity, action, attrs). Both parser paths read the same table, in the same order (the first
family whose gate and regex match a message wins): ``misc.classify_other`` one message at
a time, ``family_events`` with one regex per family over all candidate lines of a chunk. EDAC and
AER need more than a table (``custom``): ``misc`` builds them one at a time,
``edac_events`` / ``aer_events`` over a frame.

Families: InfiniBand (mlx5 port state, ``ibN: lost carrier``, mlx5 health ``Fatal error``, mlx5
port-module events), hung tasks, ``NV_ERR_RESET_REQUIRED``, CPU thermal throttling
(``therm_throt.c``), host storage (NVMe timeouts and status errors, block-layer I/O errors,
``Buffer I/O error``, ext2/3/4 errors and read-only remounts), kernel panics (a machine-check panic
is an ``mce`` event), soft and hard lockups and RCU stalls (``hung_task`` sub-kinds), oopses
(``kernel_panic`` / ``oops``: the oops header and the BUG / general-protection line before it)
and CMCI storms. The closing ``---[ end Kernel panic ...`` line is noise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from faultlens.ingest.base import ParseContext, normalize_pci
from faultlens.ingest.kernel import patterns as kp
from faultlens.ingest.kernel.line import Prefix, _int, event
from faultlens.ingest.kernel.vec import attrs_expr, event_columns, pci_of
from faultlens.ingest.reader import literal_regex
from faultlens.ingest.schema import Kind


@dataclass(frozen=True)
class Derived:
    """A value looked up from one group: ``table[value]``, else the value itself (``identity``),
    else ``default``; ``default`` when there is no group or the group did not match."""

    default: str | None = None
    group: str | None = None
    table: Mapping[str, str] = field(default_factory=dict)
    identity: bool = False

    def of(self, groups: dict[str, str | None]) -> str | None:
        value = groups.get(self.group) if self.group else None
        if value is None:
            return self.default
        if value in self.table:
            return self.table[value]
        return value if self.identity else self.default

    def expr(self) -> pl.Expr:
        if self.group is None:
            return pl.lit(self.default, pl.String)
        col = pl.col(self.group)
        other = col if self.identity else pl.lit(self.default, pl.String)
        mapped = (
            col.replace_strict(dict(self.table), default=other, return_dtype=pl.String)
            if self.table
            else other
        )
        return pl.when(col.is_null()).then(pl.lit(self.default, pl.String)).otherwise(mapped)


@dataclass(frozen=True)
class Family:
    name: str
    gate: tuple[str, ...]  # the message must contain one of these
    pattern: str  # searched in the message
    kind: Kind | None = None  # None: ``custom`` (built in kernel_misc)
    subkind: Derived = Derived()
    severity: Derived = Derived("warning")
    action: Derived = Derived("none")
    attrs: tuple[tuple[str, str], ...] = ()  # (attr key, group)
    ints: frozenset[str] = frozenset()  # attr keys holding integers
    pcis: frozenset[str] = frozenset()  # attr keys holding PCI addresses
    pid: str | None = None
    process: str | None = None
    noise: bool = False  # a match is counted as noise
    custom: str | None = None


def _d(default: str | None, group: str | None = None, **table: str) -> Derived:
    return Derived(default, group, {k.replace("_", " "): v for k, v in table.items()})


_NIC = (("nic_pci", "pci"), ("device", "dev"))
_ERROR_PANIC = _d("critical")

FAMILIES: tuple[Family, ...] = (
    Family("edac", ("EDAC",), kp.EDAC_RE, custom="edac"),
    Family("aer", ("PCIe Bus Error", "AER:", "error received"), kp.AER_RE, custom="aer"),
    Family(
        "ib_port",
        ("mlx5",),
        kp.IB_PORT_RE,
        Kind.IB_PORT,
        subkind=Derived(None, "state", identity=True),
        severity=Derived("info", "state", {"DOWN": "warning", "DOWN_SPEED": "warning"}),
        attrs=(*_NIC, ("port", "port")),
        ints=frozenset({"port"}),
        pcis=frozenset({"nic_pci"}),
    ),
    Family(
        "carrier",
        ("carrier",),
        kp.CARRIER_RE,
        Kind.IB_PORT,
        subkind=_d(None, "state", lost_carrier="lost_carrier", Gained_carrier="gained_carrier"),
        severity=_d("info", "state", lost_carrier="warning"),
        attrs=(("interface", "ifname"),),
    ),
    Family(
        "hung_task",
        ("blocked for more than",),
        kp.HUNG_RE,
        Kind.HUNG_TASK,
        action=Derived(None),
        attrs=(("blocked_s", "secs"),),
        ints=frozenset({"blocked_s"}),
        pid="pid",
        process="proc",
    ),
    Family(
        "reset_required",
        ("NV_ERR_RESET_REQUIRED",),
        "NV_ERR_RESET_REQUIRED",
        Kind.RESET_REQUIRED,
        severity=_d("error"),
        action=_d("reset_gpu"),
    ),
    Family(
        "mlx5_health",
        ("mlx5",),
        kp.MLX5_HEALTH_RE,
        Kind.IB_PORT,
        subkind=_d("fatal"),
        severity=_d("critical"),
        action=_d("drain_node"),
        attrs=(*_NIC, ("fatal_error", "fatal_error")),
        ints=frozenset({"fatal_error"}),
        pcis=frozenset({"nic_pci"}),
    ),
    Family(
        "mlx5_module",
        ("mlx5",),
        kp.MLX5_MODULE_RE,
        Kind.IB_PORT,
        subkind=_d(
            "module_event",
            "status",
            Cable_error="module_error",
            Cable_plugged="module_plugged",
            Cable_unplugged="module_unplugged",
            Cable_disabled="module_disabled",
        ),
        severity=_d("warning", "status", Cable_error="error", Cable_plugged="info"),
        attrs=(*_NIC, ("module", "module"), ("error", "error")),
        ints=frozenset({"module"}),
        pcis=frozenset({"nic_pci"}),
    ),
    Family(
        "thermal",
        ("above threshold", "temperature/speed normal"),
        kp.THERMAL_RE,
        Kind.THERMAL,
        subkind=Derived("cpu_throttled", "state", {"temperature/speed normal": "cpu_normal"}),
        severity=Derived("warning", "state", {"temperature/speed normal": "info"}),
        attrs=(("cpu", "cpu"), ("level", "level"), ("total_events", "events")),
        ints=frozenset({"cpu", "total_events"}),
    ),
    Family(
        "nvme_timeout",
        ("QID",),
        kp.NVME_TIMEOUT_RE,
        Kind.STORAGE,
        subkind=_d("nvme_timeout"),
        severity=_d("warning", "recovery", reset_controller="error", disable_controller="error"),
        action=_d("none", "recovery", disable_controller="drain_node"),
        attrs=(("device", "ctrl"), ("qid", "qid"), ("tag", "tag"), ("recovery", "recovery")),
        ints=frozenset({"qid", "tag"}),
    ),
    Family(
        "nvme_status",
        ("@ LBA",),
        kp.NVME_STATUS_RE,
        Kind.STORAGE,
        subkind=_d("nvme_error"),
        severity=_d("error"),
        attrs=(
            ("device", "disk"),
            ("op", "op"),
            ("lba", "lba"),
            ("blocks", "blocks"),
            ("status", "status"),
            ("sct", "sct"),
            ("sc", "sc"),
        ),
        ints=frozenset({"lba", "blocks"}),
    ),
    Family(
        "blk_error",
        ("error, dev ",),
        kp.BLK_ERROR_RE,
        Kind.STORAGE,
        subkind=_d("io_error"),
        severity=_d("error"),
        attrs=(("device", "dev"), ("error", "error"), ("sector", "sector"), ("op", "op")),
        ints=frozenset({"sector"}),
    ),
    Family(
        "buffer_io",
        ("Buffer I/O error",),
        kp.BUFFER_IO_RE,
        Kind.STORAGE,
        subkind=_d("buffer_io_error"),
        severity=_d("error"),
        attrs=(("device", "dev"), ("block", "block")),
        ints=frozenset({"block"}),
    ),
    Family(
        "fs_error",
        ("-fs error",),
        kp.FS_ERROR_RE,
        Kind.STORAGE,
        subkind=_d("fs_error"),
        severity=_d("error"),
        attrs=(
            ("fs", "fs"),
            ("device", "dev"),
            ("function", "function"),
            ("inode", "inode"),
            ("block", "block"),
            ("comm", "comm"),
        ),
        ints=frozenset({"inode", "block"}),
    ),
    Family(
        "fs_readonly",
        ("Remounting filesystem read-only",),
        kp.FS_READONLY_RE,
        Kind.STORAGE,
        subkind=_d("fs_readonly"),
        severity=_d("error"),
        action=_d("drain_node"),
        attrs=(("fs", "fs"), ("device", "dev")),
    ),
    Family("panic_end", ("Kernel panic",), kp.PANIC_END_RE, noise=True),
    Family(
        "panic_mce",
        ("Kernel panic",),
        kp.PANIC_MCE_RE,
        Kind.MCE,
        subkind=_d("panic"),
        severity=_ERROR_PANIC,
        action=_d("reboot_node"),
        attrs=(("reason", "reason"),),
    ),
    Family(
        "panic",
        ("Kernel panic",),
        kp.PANIC_RE,
        Kind.KERNEL_PANIC,
        subkind=Derived(
            "other",
            "known",
            {
                "hung_task": "hung_task",
                "softlockup": "softlockup",
                "hard LOCKUP": "hardlockup",
                "Hard LOCKUP": "hardlockup",
                "Out of memory": "oom",
                "Fatal exception": "fatal_exception",
                "Attempted to kill init": "kill_init",
                "VFS: Unable to mount root fs": "no_root_fs",
            },
        ),
        severity=_ERROR_PANIC,
        action=_d("reboot_node"),
        attrs=(("reason", "reason"),),
    ),
    Family(
        "soft_lockup",
        ("soft lockup",),
        kp.SOFT_LOCKUP_RE,
        Kind.HUNG_TASK,
        subkind=_d("soft_lockup"),
        severity=_d("error"),
        attrs=(("cpu", "cpu"), ("stuck_s", "secs")),
        ints=frozenset({"cpu", "stuck_s"}),
        pid="pid",
        process="proc",
    ),
    Family(
        "hard_lockup",
        ("hard LOCKUP",),
        kp.HARD_LOCKUP_RE,
        Kind.HUNG_TASK,
        subkind=_d("hard_lockup"),
        severity=_d("critical"),
        action=_d("reboot_node"),
        attrs=(("cpu", "cpu"),),
        ints=frozenset({"cpu"}),
    ),
    Family(
        "rcu_stall",
        ("detected stall",),
        kp.RCU_STALL_RE,
        Kind.HUNG_TASK,
        subkind=_d("rcu_stall"),
        severity=_d("error"),
        attrs=(("rcu", "flavor"),),
    ),
    Family(
        "oops",
        ("BUG: ", "kernel BUG at", "general protection fault", "Oops: "),
        kp.OOPS_RE,
        Kind.KERNEL_PANIC,
        subkind=_d("oops"),
        severity=_d("critical"),
        action=_d("reboot_node"),
        attrs=(("what", "what"), ("at", "at"), ("oops_count", "count")),
        ints=frozenset({"oops_count"}),
    ),
    Family(
        "cmci_storm",
        ("CMCI storm",),
        kp.CMCI_STORM_RE,
        Kind.MCE,
        subkind=_d("cmci_storm", "state", subsided="cmci_storm_subsided"),
        severity=_d("warning", "state", subsided="info"),
    ),
)
UNKNOWN_SHAPE = "kernel GPU/RAS line with unknown shape"
QUARANTINE_LITERALS = kp.STRONG_LITERALS + kp.HOST_STRONG_LITERALS
_RES = {f.name: re.compile(f.pattern) for f in FAMILIES}


# -- one message -----------------------------------------------------------------------------------


def match_family(body: str) -> tuple[Family, re.Match[str]] | None:
    """The first family whose gate and pattern match ``body``."""
    for fam in FAMILIES:
        if any(lit in body for lit in fam.gate):
            m = _RES[fam.name].search(body)
            if m:
                return fam, m
    return None


def family_event(
    fam: Family, m: re.Match[str], pre: Prefix, ctx: ParseContext
) -> dict[str, Any] | None:
    if fam.noise:
        return None
    assert fam.kind is not None
    g = m.groupdict()
    attrs: dict[str, Any] = {}
    for key, grp in fam.attrs:
        value = g[grp]
        if key in fam.ints:
            attrs[key] = _int(value)
        elif key in fam.pcis:
            attrs[key] = normalize_pci(value) if value is not None else None
        else:
            attrs[key] = value
    return event(
        pre,
        ctx,
        fam.kind,
        subkind=fam.subkind.of(g),
        severity=fam.severity.of(g),
        action=fam.action.of(g),
        pid=_int(g[fam.pid]) if fam.pid else None,
        process=g[fam.process] if fam.process else None,
        attrs=attrs,
    )


# -- all candidate messages of a chunk -------------------------------------------------------------


def _hits(rest: pl.DataFrame, fam: Family) -> pl.Series | None:
    """Which rows of ``rest`` the family matches (None: none): the gate on all rows, the
    pattern only on the rows through the gate."""
    body = pl.col("body")
    gate = (
        body.str.contains(fam.gate[0], literal=True)
        if len(fam.gate) == 1
        else body.str.contains(literal_regex(fam.gate))
    )
    gated = rest.select(gate.fill_null(False)).to_series()
    if not gated.any():
        return None
    idx = gated.arg_true()
    matched = rest[idx].select(body.str.contains(fam.pattern).fill_null(False)).to_series()
    if not matched.any():
        return None
    return gated.scatter(idx, matched)


@dataclass
class FamilySplit:
    events: list[pl.DataFrame]  # per family (events schema columns, not conformed)
    quarantine: pl.DataFrame  # line, raw, reason
    parsed: int
    lines: list[pl.Series]  # the parsed lines, per family


def family_events(f: pl.DataFrame, file: str) -> FamilySplit:
    """Messages routed ``other`` -> events per family and the unknown-shape ones."""
    body = pl.col("body")
    frames: list[pl.DataFrame] = []
    parsed = 0
    lines: list[pl.Series] = []
    rest = f
    for fam in FAMILIES:
        if rest.height == 0:
            break
        mask = _hits(rest, fam)
        if mask is None:
            continue
        part, rest = rest.filter(mask), rest.filter(~mask)
        if fam.custom:
            frames.append(CUSTOM_VEC[fam.custom](part, file))
            parsed += part.height
            lines.append(part["line"])
            continue
        if fam.noise:
            continue
        assert fam.kind is not None
        if _RES[fam.name].groupindex:
            part = part.with_columns(body.str.extract_groups(fam.pattern).alias("_m"))
            part = part.unnest("_m")
        attrs: dict[str, pl.Expr] = {}
        for key, grp in fam.attrs:
            if key in fam.ints:
                attrs[key] = pl.col(grp).str.extract(r"^([0-9]{1,18})$", 1).cast(pl.Int64)
            elif key in fam.pcis:
                attrs[key] = pci_of(part, grp)
            else:
                attrs[key] = pl.col(grp)
        none = pl.lit(None, pl.String)
        frames.append(
            part.select(
                *event_columns(),
                kind=pl.lit(fam.kind.value),
                subkind=fam.subkind.expr(),
                severity=fam.severity.expr(),
                action=fam.action.expr(),
                pid=(
                    pl.col(fam.pid).str.extract(r"^([0-9]{1,18})$", 1).cast(pl.Int64)
                    if fam.pid
                    else pl.lit(None, pl.Int64)
                ),
                process=pl.col(fam.process) if fam.process else none,
                attrs=attrs_expr(attrs) if attrs else none,
                file=pl.lit(file),
            )
        )
        parsed += part.height
        lines.append(part["line"])
    strong = body.str.contains(literal_regex(QUARANTINE_LITERALS)).fill_null(False)
    q = rest.filter(strong).select(
        "line", pl.col("raw").str.slice(0, 4000), reason=pl.lit(UNKNOWN_SHAPE)
    )
    return FamilySplit(frames, q, parsed, lines)


# -- EDAC and AER over a frame (``misc._edac_event`` / ``_aer_event`` one at a time) -------


def _json_str(e: pl.Expr) -> pl.Expr:
    """A string column as a JSON string literal (escaped as ``json.dumps`` does)."""
    enc = pl.struct(e.alias("v")).struct.json_encode()
    return pl.when(e.is_not_null()).then(enc.str.slice(5, enc.str.len_chars() - 6))


def edac_events(f: pl.DataFrame, file: str) -> pl.DataFrame:
    c = pl.col
    f = f.with_columns(c("body").str.extract_groups(kp.EDAC_RE).alias("_m")).unnest("_m")
    f = f.with_row_index("_r")
    fixed = [
        f.select("_r", key=pl.lit(k), val=v, prio=pl.lit(0))
        for k, v in (
            ("mc", _json_str(c("mc"))),
            ("count", c("count").str.extract(r"^([0-9]{1,18})$", 1)),
            ("location", _json_str(c("loc"))),
            ("error", _json_str(c("what"))),
        )
    ]
    kv = (
        f.select("_r", kv=c("detail").str.extract_all(r"[a-z_]+:[0-9a-fA-Fx]+"))
        .explode("kv")
        .drop_nulls("kv")
        .with_columns(prio=pl.int_range(1, pl.len() + 1).over("_r"))
    )
    dyn = kv.select(
        "_r",
        key=c("kv").str.extract(r"^([a-z_]+):", 1),
        val=pl.concat_str([pl.lit('"'), c("kv").str.extract(r":(.*)$", 1), pl.lit('"')]),
        prio=c("prio").cast(pl.Int32),
    )
    pairs = pl.concat([*(x.with_columns(prio=c("prio").cast(pl.Int32)) for x in fixed), dyn])
    attrs = (
        pairs.drop_nulls("val")
        .sort("_r", "key", "prio")
        .unique(["_r", "key"], keep="first", maintain_order=True)
        .group_by("_r", maintain_order=True)
        .agg(attrs=pl.concat_str([pl.lit('"'), c("key"), pl.lit('":'), c("val")]).str.join(","))
    )
    f = f.join(attrs, on="_r", how="left", maintain_order="left")
    ue = c("type") == "UE"
    return f.select(
        *event_columns(),
        kind=pl.lit(Kind.MEMORY.value),
        subkind=c("type"),
        severity=pl.when(ue).then(pl.lit("critical")).otherwise(pl.lit("warning")),
        action=pl.when(ue).then(pl.lit("drain_node")).otherwise(pl.lit("none")),
        attrs=pl.concat_str([pl.lit("{"), c("attrs"), pl.lit("}")]),
        file=pl.lit(file),
    )


def aer_events(f: pl.DataFrame, file: str) -> pl.DataFrame:
    c = pl.col
    f = f.with_columns(c("body").str.extract_groups(kp.AER_RE).alias("_m")).unnest("_m")
    sev_text = pl.coalesce(c("sev"), c("sev2"), pl.lit("")).str.strip_chars(" \t")
    low = sev_text.str.to_lowercase()
    fatal = low.str.contains("fatal", literal=True) & ~low.str.contains("non-fatal", literal=True)
    nonfatal = low.str.contains("uncorrect", literal=True) | low.str.contains(
        "non-fatal", literal=True
    )
    reporter = pci_of(f, "pci")
    return f.select(
        *event_columns(),
        gpu=pl.coalesce(pci_of(f, "src"), reporter),
        kind=pl.lit(Kind.PCIE.value),
        subkind=sev_text,
        severity=pl.when(fatal)
        .then(pl.lit("critical"))
        .when(nonfatal)
        .then(pl.lit("error"))
        .otherwise(pl.lit("info")),
        action=pl.when(fatal)
        .then(pl.lit("reboot_node"))
        .when(nonfatal)
        .then(pl.lit("reset_gpu"))
        .otherwise(pl.lit("none")),
        attrs=attrs_expr({"reporter": reporter, "type": c("type"), "agent": c("agent")}),
        file=pl.lit(file),
    )


CUSTOM_VEC = {"edac": edac_events, "aer": aer_events}
