"""Per-node kernel logs in the real formats: RFC 3164 syslog, ``dmesg -T`` and journalctl short-iso.

Meaningful lines (Xid, NVLink, ECC / row remap, AER, EDAC, MCE, mlx5 link, NVMe, hung task) follow
the shapes of real driver and kernel messages; they sit among ordinary noise (systemd, sshd, cron,
kernel chatter) that makes up most of every file. Lines are built in bulk and written with one join.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from faultlens.synth.cluster import Failure, Node
from faultlens.synth.config import SynthConfig
from faultlens.synth.failures import DAY, KEvent

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
KERNEL_RELEASE = "5.15.0-97-generic"
DRIVER = "535.161.08"

Render = Callable[[Node, int | None, dict, np.random.Generator], list[str]]


def _x(node: Node, gpu: int | None) -> str:
    return node.gpus[gpu or 0].xid_pci


def _proc(extra: dict, rng: np.random.Generator) -> str:
    pid = extra.get("pid") or int(rng.integers(2000, 4_000_000))
    return f"pid={pid}, name={extra.get('name', 'python')}"


_UNKNOWN = "pid='<unknown>', name=<unknown>"


def _xid79(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    pci = node.gpus[gpu or 0].pci_bus_id
    lines = []
    if extra.get("multiline"):
        lines += [
            f"NVRM: The NVIDIA GPU {pci}",
            "NVRM: (PCI ID: 10de:2330) installed in this system has",
            "NVRM: fallen off the bus and is not responding to commands.",
        ]
    lines.append(f"NVRM: Xid ({_x(node, gpu)}): 79, {_UNKNOWN}, GPU has fallen off the bus.")
    return lines


def _nvlink(fatal: bool) -> Render:
    def render(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
        link = int(rng.integers(18))
        if node.nvlink5:
            if fatal:
                return [
                    f"NVRM: Xid ({_x(node, gpu)}): 149, NETIR_LINK_EVT Fatal XC0 i0 Link "
                    f"{link:02d} (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 "
                    "0x00000000)"
                ]
            code, blk = (144, "SAW_MVB") if rng.random() < 0.5 else (145, "RLW_RXPIPE")
            return [
                f"NVRM: Xid ({_x(node, gpu)}): {code}, {blk} Nonfatal XC0 i0 Link {link} "
                "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
            ]
        kind = "fatal" if fatal else "nonfatal"
        word = "0x10000" if fatal else "0x4000000"
        return [
            f"NVRM: Xid ({_x(node, gpu)}): 74, {_proc(extra, rng)}, NVLink: {kind} error "
            f"detected on link {link}(0x0, 0x0, {word}, 0x0, 0x0, 0x0, 0x0)"
        ]

    return render


def _simple(code: int, text: str, unknown: bool = True) -> Render:
    def render(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
        who = _UNKNOWN if unknown else _proc(extra, rng)
        body = text.format(
            row=int(rng.integers(0x10000, 0xFFFFFF)),
            part=int(rng.integers(8)),
            sub=int(rng.integers(2)),
            ch=int(rng.integers(8, 64)),
        )
        return [f"NVRM: Xid ({_x(node, gpu)}): {code}, {who}, {body}"]

    return render


def _xid45(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    who = _proc(extra, rng)
    ch = int(rng.integers(8, 48))
    return [
        f"NVRM: Xid ({_x(node, gpu)}): 45, {who}, Ch {ch + k:08x}"
        for k in range(int(rng.integers(1, 4)))
    ]


def _xid13(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    gpc, tpc = int(rng.integers(8)), int(rng.integers(9))
    x = f"NVRM: Xid ({_x(node, gpu)}): 13, {_UNKNOWN}, "
    esr = int(rng.integers(0x500000, 0x5FFFFF)) & ~0xF
    return [
        x + f"Graphics SM Warp Exception on (GPC {gpc}, TPC {tpc}, SM 0): Out Of Range Address",
        x + f"Graphics SM Global Exception on (GPC {gpc}, TPC {tpc}, SM 0): Multiple Warp Errors",
        x + f"Graphics Exception: ESR 0x{esr:x}=0x124000e 0x{esr + 4:x}=0x24 "
        f"0x{esr - 8:x}=0xf81eb60 0x{esr - 4:x}=0x1174",
    ]


def _xid31(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    addr = int(rng.integers(0x100000, 0x7FFFFF))
    ch = int(rng.integers(8, 64))
    return [
        f"NVRM: Xid ({_x(node, gpu)}): 31, {_proc(extra, rng)}, Ch {ch:08x}"
        f", intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{int(rng.integers(8))} "
        f"faulted @ 0x7f{addr:x}_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
    ]


def _xid119(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    g = gpu or 0
    return [
        f"NVRM: Xid ({_x(node, gpu)}): 119, {_proc({'name': 'nvidia-smi'}, rng)}, Timeout "
        f"after 6s of waiting for RPC response from GPU{g} GSP! Expected function 76 "
        "(GSP_RM_CONTROL) (0x20802a02 0x8)."
    ]


def _reset_required(
    node: Node, gpu: int | None, extra: dict, rng: np.random.Generator
) -> list[str]:
    return [
        "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
        "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874"
    ]


def _aer(fatal: bool) -> Render:
    def render(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
        dev = node.gpus[gpu].pci_bus_id if gpu is not None else "0000:16:00.0"
        port = dev[:5] + f"{int(dev[5:7], 16) - 2:02x}:01.0"
        if fatal:
            return [
                f"pcieport {port}: AER: Uncorrected (Fatal) error received: {dev}",
                f"pcieport {port}: PCIe Bus Error: severity=Uncorrected (Fatal), "
                "type=Transaction Layer, (Receiver ID)",
            ]
        drv = "nvidia" if gpu is not None else "pcieport"
        return [
            f"pcieport {port}: AER: Corrected error received: {dev}",
            f"{drv} {dev}: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        ]

    return render


def _mlx5(state: str) -> Render:
    def render(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
        p = int(extra.get("port", 0))
        return [f"mlx5_core {node.nic_pci[p]} mlx5_{p}: Port: 1 Link {state}"]

    return render


def _ib_flap(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    return _mlx5("DOWN")(node, gpu, extra, rng) + _mlx5("ACTIVE")(node, gpu, extra, rng)


def _mlx5_fatal(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    p = int(extra.get("port", 0))
    return [f"mlx5_core {node.nic_pci[p]}: poll_health:839:(pid 0): Fatal error 1 detected"]


def _edac(kind: str) -> Render:
    def render(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
        mc, ch = int(rng.integers(4)), int(rng.integers(3))
        page = int(rng.integers(0x100000, 0xFFFFFFF))
        return [
            f"EDAC MC{mc}: 1 {kind} memory read error on CPU_SrcID#{mc // 2}_MC#{mc % 2}_Chan#"
            f"{ch}_DIMM#0 (channel:{ch} slot:0 page:0x{page:x} offset:0x140 grain:32 -  "
            f"err_code:0101:0092 socket:{mc // 2} imc:{mc % 2} rank:0 bg:3 ba:0 row:1a1e8 "
            "col:180)"
        ]

    return render


def _mce_fatal(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    cpu = int(rng.integers(96))
    return [
        f"mce: [Hardware Error]: CPU {cpu}: Machine Check Exception: 5 Bank 4: b200000000070005",
        "Kernel panic - not syncing: Fatal machine check",
    ]


def _nvme_timeout(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    return [
        f"nvme nvme1: I/O {int(rng.integers(1, 1024))} QID {int(rng.integers(1, 64))} "
        "timeout, aborting"
    ]


def _io_error(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    return [
        f"blk_update_request: I/O error, dev nvme1n1, sector {int(rng.integers(1, 2**31))} "
        "op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0"
    ]


def _hung(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    pid = int(rng.integers(2000, 4_000_000))
    return [
        f"INFO: task nvidia-smi:{pid} blocked for more than 120 seconds.",
        f"      Tainted: P           OE     {KERNEL_RELEASE} #107-Ubuntu",
        '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
    ]


def _throttle(node: Node, gpu: int | None, extra: dict, rng: np.random.Generator) -> list[str]:
    cpu = int(rng.integers(96))
    return [
        f"CPU{cpu}: Core temperature above threshold, cpu clock throttled "
        f"(total events = {int(rng.integers(1, 50))})",
        f"CPU{cpu}: Core temperature/speed normal",
    ]


def _const(*lines: str) -> Render:
    return lambda node, gpu, extra, rng: list(lines)


TEMPLATES: dict[str, Render] = {
    "xid79": _xid79,
    "nvlink_fatal": _nvlink(True),
    "nvlink_nonfatal": _nvlink(False),
    "xid45": _xid45,
    "xid95": _simple(95, "Uncontained: FBHUB. RST: Yes, D-RST: No", unknown=False),
    "xid95_sram": _simple(95, "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No", unknown=False),
    "xid94": _simple(94, "Contained: FBHUB (0x4). RST: No, D-RST: No", unknown=False),
    "xid94_sram": _simple(94, "Contained: SM (0x1). RST: No, D-RST: No", unknown=False),
    "xid48": _simple(
        48,
        "An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer at partition {part}, subpartition {sub}.",
        unknown=False,
    ),
    "xid63": _simple(
        63, "Row Remapper: New row (0x{row:016x}) marked for remapping, reset gpu to activate."
    ),
    "xid64": _simple(64, "Row Remapper: Failed to mark row (0x{row:016x}) for remapping."),
    "xid92": _simple(92, "High single-bit ECC error rate detected."),
    "xid119": _xid119,
    "reset_required": _reset_required,
    "xid13": _xid13,
    "xid31": _xid31,
    "xid43": _simple(43, "Ch {ch:08x}", unknown=False),
    "aer_corrected": _aer(False),
    "aer_fatal": _aer(True),
    "ib_down": _mlx5("DOWN"),
    "ib_down_all": _mlx5("DOWN"),
    "ib_up": _mlx5("ACTIVE"),
    "ib_flap": _ib_flap,
    "mlx5_fatal": _mlx5_fatal,
    "mlx5_module_temp": lambda node, gpu, extra, rng: [
        f"mlx5_core {node.nic_pci[0]}: Port module event[error]: module 0, Cable error, "
        "High Temperature"
    ],
    "edac_ce": _edac("CE"),
    "edac_ue": _edac("UE"),
    "mce_corrected": _const("mce: [Hardware Error]: Machine check events logged"),
    "mce_fatal": _mce_fatal,
    "nvme_timeout": _nvme_timeout,
    "io_error": _io_error,
    "ext4_error": _const(
        "EXT4-fs error (device nvme1n1p1): ext4_find_entry:1658: inode #2: "
        "comm python: reading directory lblock 0"
    ),
    "hung_task": _hung,
    "cpu_throttle": _throttle,
    "thermal_only": _const(),
}

# -- noise -----------------------------------------------------------------------------------------

_KERNEL_NOISE = (
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{h6}: link becomes ready",
    "docker0: port {p}(veth{h6}) entered blocking state",
    "docker0: port {p}(veth{h6}) entered forwarding state",
    "docker0: port {p}(veth{h6}) entered disabled state",
    "perf: interrupt took too long ({a} > {b}), lowering kernel.perf_event_max_sample_rate to {c}",
    'audit: type=1400 audit({e}.{ms}:{p}): apparmor="STATUS" operation="profile_replace" '
    'profile="unconfined" name="docker-default" pid={pid} comm="apparmor_parser"',
    "workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us {p} times, consider "
    "switching to WQ_UNBOUND",
    "TCP: request_sock_TCP: Possible SYN flooding on port 6818. Sending cookies.  Check SNMP "
    "counters.",
    "xfs filesystem being remounted at /tmp supports timestamps until 2038 (0x7fffffff)",
)
_USER_NOISE = (
    ("systemd[1]", "Started Session {s} of User root."),
    ("systemd-logind[{lp}]", "New session {s} of user root."),
    ("systemd-logind[{lp}]", "Session {s} logged out. Waiting for processes to exit."),
    ("systemd-logind[{lp}]", "Removed session {s}."),
    (
        "sshd[{pid}]",
        "Accepted publickey for root from 10.0.{a3}.{a4} port {port} ssh2: ED25519 "
        "SHA256:q8V1k0mZ3dY2nL0w7pY5oKf8rX9tB4cE1uH6jG2sA0",
    ),
    ("sshd[{pid}]", "pam_unix(sshd:session): session opened for user root(uid=0) by (uid=0)"),
    ("sshd[{pid}]", "Received disconnect from 10.0.{a3}.{a4} port {port}:11: disconnected by user"),
    ("sshd[{pid}]", "Disconnected from user root 10.0.{a3}.{a4} port {port}"),
    ("CRON[{pid}]", "(root) CMD (/usr/local/sbin/node-healthcheck >/dev/null 2>&1)"),
    ("CRON[{pid}]", "pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)"),
    ("CRON[{pid}]", "pam_unix(cron:session): session closed for user root"),
    ("systemd[1]", "Starting Daily apt download activities..."),
    ("systemd[1]", "apt-daily.service: Deactivated successfully."),
    ("systemd[1]", "Finished Rotate log files."),
    ("systemd[1]", "logrotate.service: Deactivated successfully."),
    ("chronyd[{lp}]", "Selected source 10.0.0.{a4} (ntp{p}.cluster.local)"),
    ("dbus-daemon[{lp}]", "[system] Successfully activated service 'org.freedesktop.hostname1'"),
    (
        "rsyslogd[{lp}]",
        "imjournal: journal files changed, reloading...  [v8.2112.0 try "
        "https://www.rsyslog.com/e/0 ]",
    ),
)
_BOOT = (
    f"Linux version {KERNEL_RELEASE} (buildd@lcy02-amd64-102) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) "
    "11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #107-Ubuntu SMP Wed Feb 7 13:26:48 UTC 2024",
    f"Command line: BOOT_IMAGE=/vmlinuz-{KERNEL_RELEASE} root=/dev/md127p3 ro quiet splash",
    "x86/fpu: Supporting XSAVE feature 0x001: 'x87 floating point registers'",
    "nvidia: loading out-of-tree module taints kernel.",
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 511",
)


_POOL = 512  # pre-rendered variants per noise template


def _fill(template: str, v: np.ndarray) -> str:
    if "{" not in template:
        return template
    return template.format(
        h6=f"{int(v[0]):05x}a",
        p=int(v[1]) % 9 + 1,
        a=2500 + int(v[2]) % 900,
        b=2500,
        c=79750 - int(v[3]) % 9000,
        e=1735689600 + int(v[4]),
        ms=int(v[5]) % 1000,
        pid=int(v[6]) + 2000,
        s=int(v[7]),
        lp=1000 + int(v[0]) % 900,
        a3=int(v[1]) % 250,
        a4=int(v[2]) % 250,
        port=30000 + int(v[3]) % 30000,
    )


def noise_pools(rng: np.random.Generator) -> tuple[list[list[str]], list[list[str]]]:
    """Pre-rendered variants of every noise template: kernel texts and ``prog\x01msg`` texts."""
    v = rng.integers(1, 60000, size=(_POOL, 8))
    kernel = [["\x00" + _fill(t, v[k]) for k in range(_POOL)] for t in _KERNEL_NOISE]
    user = [
        [_fill(p, v[k]) + "\x01" + _fill(m, v[(k * 7 + 3) % _POOL]) for k in range(_POOL)]
        for p, m in _USER_NOISE
    ]
    return kernel, user


def _noise(
    config: SynthConfig,
    node: Node,
    down: list[tuple[float, float]],
    rng: np.random.Generator,
    pools: tuple[list[list[str]], list[list[str]]],
) -> tuple[np.ndarray, list[str]]:
    n = int(rng.poisson(config.noise_lines_per_node_day * config.days))
    ts = np.sort(rng.uniform(0, config.days * DAY, size=n))
    keep = np.ones(n, dtype=bool)
    for a, b in down:
        keep &= ~((ts >= a) & (ts < b))
    ts = ts[keep]
    kernel_pool, user_pool = pools
    kernel_only = node.log_format == "dmesg"
    is_kernel = np.ones(len(ts), bool) if kernel_only else rng.random(len(ts)) < 0.3
    kt = rng.integers(len(kernel_pool), size=len(ts))
    ut = rng.integers(len(user_pool), size=len(ts))
    var = rng.integers(_POOL, size=len(ts))
    texts = [
        kernel_pool[a][c] if k else user_pool[b][c]
        for k, a, b, c in zip(
            is_kernel.tolist(), kt.tolist(), ut.tolist(), var.tolist(), strict=True
        )
    ]
    for boot in node.boot_s:
        if 0 <= boot < config.days * DAY:
            bt = boot + np.arange(len(_BOOT)) * 0.05
            ts = np.concatenate([ts, bt])
            texts.extend("\x00" + line for line in _BOOT)
    return ts, texts


# -- formatting ------------------------------------------------------------------------------------


def _stamps(config: SynthConfig, ts: np.ndarray) -> list[str]:
    base = np.datetime64(config.start.replace(tzinfo=None), "us")
    return list(np.datetime_as_string(base + (ts * 1e6).astype("timedelta64[us]"), unit="us"))


def _weekday(config: SynthConfig, ts: np.ndarray) -> np.ndarray:
    base = np.datetime64(config.start.replace(tzinfo=None), "s")
    days = (base + ts.astype("timedelta64[s]")).astype("datetime64[D]").astype(np.int64)
    return (days + 3) % 7  # 1970-01-01 was a Thursday (index 3)


def render_node(
    config: SynthConfig,
    node: Node,
    events: list[KEvent],
    down: list[tuple[float, float]],
    rng: np.random.Generator,
    pools: tuple[list[list[str]], list[list[str]]],
) -> str:
    """The whole kern.log of one node as one string."""
    ts, texts = _noise(config, node, down, rng, pools)
    ev_ts, ev_texts, ev_group = [], [], []
    for ev in sorted(events, key=lambda e: e.ts_s):
        lines = TEMPLATES[ev.key](node, ev.gpu, ev.extra, rng)
        for j, line in enumerate(lines):
            ev_ts.append(ev.ts_s + j * 1e-6 * (ev.key == "xid79"))
            ev_texts.append("\x00" + line)
            ev_group.append(j > 0 and ev.key == "xid79" and ev.extra.get("multiline", False))
    all_ts = np.concatenate([ts, np.array(ev_ts, dtype=float)])
    all_texts = texts + ev_texts
    cont = [False] * len(texts) + ev_group
    keep = (all_ts >= 0) & (all_ts < config.days * DAY)
    order = np.argsort(all_ts, kind="stable")
    order = order[keep[order]]
    all_ts = all_ts[order]
    stamps = _stamps(config, all_ts)
    boots = np.array(sorted(node.boot_s))
    up = all_ts - boots[np.searchsorted(boots, all_ts, side="right") - 1]
    wd = _weekday(config, all_ts)
    fmt = node.log_format
    out = []
    host = node.name
    for k, idx in enumerate(order.tolist()):
        text = all_texts[idx]
        s = stamps[k]
        kernel = text[0] == "\x00"
        if fmt == "dmesg":
            prefix = (
                f"[{WEEKDAYS[wd[k]]} {MONTHS[int(s[5:7]) - 1]} {int(s[8:10]):2d} "
                f"{s[11:19]} {s[0:4]}] "
            )
            if cont[idx]:
                prefix = " " * len(prefix)
            out.append(prefix + text[1:])
        elif fmt == "journal":
            body = "kernel: " + text[1:] if kernel else text.replace("\x01", ": ", 1)
            out.append(f"{s[:19]}+0000 {host} {body}")
        else:
            stamp = f"{MONTHS[int(s[5:7]) - 1]} {int(s[8:10]):2d} {s[11:19]}"
            if kernel:
                u = up[k]
                body = f"kernel: [{int(u):5d}.{int(round((u % 1) * 1e6)) % 1000000:06d}] {text[1:]}"
            else:
                body = text.replace("\x01", ": ", 1)
            out.append(f"{stamp} {host} {body}")
    return "\n".join(out) + "\n"


def write_kernel_logs(
    config: SynthConfig,
    nodes: list[Node],
    events: list[KEvent],
    failures: list[Failure],
    out_dir: Path,
    seed_seq: np.random.SeedSequence,
) -> list[Path]:
    by_node: dict[int, list[KEvent]] = {}
    for ev in events:
        by_node.setdefault(ev.node, []).append(ev)
    down: dict[int, list[tuple[float, float]]] = {}
    for f in failures:
        if f.cause.node_down and f.repair_s > 0:
            down.setdefault(f.node, []).append((f.ts_s + 1.0, f.end_s))
    paths = []
    children = seed_seq.spawn(len(nodes) + 1)
    pools = noise_pools(np.random.default_rng(children[-1]))
    for node, child in zip(nodes, children[:-1], strict=True):
        rng = np.random.default_rng(child)
        text = render_node(
            config, node, by_node.get(node.index, []), down.get(node.index, []), rng, pools
        )
        path = out_dir / "nodes" / node.name / "kern.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths
