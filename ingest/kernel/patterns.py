"""The regular expressions and literals of the kernel-log parser, shared by both of its paths.

Every pattern stays in the subset that Python ``re`` and Rust ``regex`` (polars) read the same way:
no look-around, no back-references, ``[0-9]`` instead of ``\\d``, explicit ``[ \\t]`` instead of
``\\s`` (the two engines disagree on what Unicode whitespace is).
"""

from __future__ import annotations

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTH_NO = {m: i + 1 for i, m in enumerate(MONTHS)}
_MON = "|".join(MONTHS)
_WDAY = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_HMS = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"

# The stamp in front of a kernel line, in every form we read. At most one alternative matches:
#   [  123.456789]                         dmesg, boot-relative seconds
#   [Sat Oct 12 18:35:32 2024]             dmesg -T / --ctime
#   kern  :err   : 2025-01-25T10:34:54,859532+00:00     dmesg --decode --time-format iso
#   2025-02-14T05:03:41.123+00:00 host tag:            RFC 5424 / rsyslog ISO, journalctl short-iso
#   <13>1 2025-02-14T05:03:41Z host app pid msgid - msg RFC 5424 with priority and version
#   Feb 14 05:03:41 host tag[pid]:                      RFC 3164 syslog, journalctl short
#   2020/08/10 19:09:42                                 Go log (k8s-device-plugin)
#   6,3964,206764307,-;                                 /dev/kmsg record: prio,seq,usec since boot
PREFIX_HEAD_RE = (
    r"^[ \t]*(?:<(?P<pri>[0-9]{1,3})>(?P<v5424>1 )?)?"
    r"(?:(?P<fac>[a-z]{2,8}) *:(?P<lvl>[a-z]{3,6}) *: )?"
    r"(?:"
    r"\[ *(?P<up>[0-9]{1,10}\.[0-9]{1,9})\]"
    rf"|\[(?:{_WDAY}) (?P<ct_mon>{_MON}) +(?P<ct_day>[0-9]{{1,2}}) (?P<ct_hms>{_HMS})"
    r" (?P<ct_year>[0-9]{4})\]"
    rf"|(?P<iso_date>[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}})[T ](?P<iso_hms>{_HMS})"
    r"(?:(?P<iso_sep>[.,])(?P<iso_frac>[0-9]{1,9}))?(?P<iso_tz>Z|[+-][0-9]{2}:?[0-9]{2})?"
    rf"|(?P<bsd_mon>{_MON}) +(?P<bsd_day>[0-9]{{1,2}}) (?P<bsd_hms>{_HMS})"
    r"(?:\.(?P<bsd_frac>[0-9]{1,9}))?"
    rf"|(?P<go_date>[0-9]{{4}}/[0-9]{{2}}/[0-9]{{2}}) (?P<go_hms>{_HMS})"
    r"(?:\.(?P<go_frac>[0-9]{1,9}))?"
    r"|(?P<km_pri>[0-9]{1,4}),(?P<km_seq>[0-9]{1,20}),(?P<km_us>[0-9]{1,15}),[^;]*;"
    r")?"
    r"[ \t]?"
)
PREFIX_RE = PREFIX_HEAD_RE + r"(?P<rest>.*)$"
PREFIX_GROUPS = (
    "pri",
    "v5424",
    "fac",
    "lvl",
    "up",
    "ct_mon",
    "ct_day",
    "ct_hms",
    "ct_year",
    "iso_date",
    "iso_hms",
    "iso_sep",
    "iso_frac",
    "iso_tz",
    "bsd_mon",
    "bsd_day",
    "bsd_hms",
    "bsd_frac",
    "go_date",
    "go_hms",
    "go_frac",
    "km_pri",
    "km_seq",
    "km_us",
    "rest",
)

# The plain RFC 3164 line (no priority, no fraction, a tag), with the kernel's own stamp if any:
# what PREFIX_HEAD_RE + HOST_TAG_HEAD_RE + INNER_UPTIME_HEAD_RE read, as one small pattern. The
# host is a run of non-blanks not ending in a colon (``[^ \t]*[^ \t:]`` before a blank), written
# so that each character leads one way: the regex engine reads the groups twice as fast.
BSD_FAST_RE = (
    rf"^(?P<head>(?P<bsd_mon>{_MON}) +(?P<bsd_day>[0-9]{{1,2}}) (?P<bsd_hms>{_HMS}) "
    r"(?P<host>(?:[^ \t:]|:+[^ \t:])+)[ \t]+[^ \t:\[]+(?:\[[0-9]{1,10}\])?:[ \t]?"
    r"(?:\[ *(?P<up2>[0-9]{1,10}\.[0-9]{1,9})\][ \t]?)?)"
)
# After a syslog stamp: "host tag[pid]: message" (RFC 3164), or "tag[pid]: message" when the
# host was left out (``journalctl --no-hostname``, some collectors): a first word ending in a
# colon is a tag, never a host ...
HOST_TAG_HEAD_RE = (
    r"^(?:[^ \t:\[]+(?:\[[0-9]{1,10}\])?:[ \t]"
    r"|(?P<host>[^ \t]+)(?:[ \t]+(?P<tag>[^ \t:\[]+)(?:\[(?P<tpid>[0-9]{1,10})\])?:)?)[ \t]?"
)
HOST_TAG_RE = HOST_TAG_HEAD_RE + r"(?P<body>.*)$"
# ... or "host app procid msgid [sd]|- message" (RFC 5424).
HOST_5424_HEAD_RE = (
    r"^(?P<host>[^ \t]+) (?P<tag>[^ \t]+) (?P<tpid>[^ \t]+) [^ \t]+ (?:-|(?:\[[^\]]*\])+)"
    r"[ \t]?"
)
HOST_5424_RE = HOST_5424_HEAD_RE + r"(?P<body>.*)$"
# A kernel line relayed by syslog still carries its boot-relative stamp: "kernel: [ 12.3] msg".
INNER_UPTIME_HEAD_RE = r"^\[ *(?P<up2>[0-9]{1,10}\.[0-9]{1,9})\][ \t]?"
INNER_UPTIME_RE = INNER_UPTIME_HEAD_RE + r"(?P<body2>.*)$"
# The vectorized path extracts with the ``*_HEAD_RE`` forms (no trailing ``(?P<...>.*)$``, which
# makes polars' capture engine walk the whole line, 5x slower) and takes the rest of the line by
# removing the head match.

# -- the pre-filter ------------------------------------------------------------------------------
# A line is looked at only if it contains one of these (Aho-Corasick over the whole chunk).
STRONG_LITERALS = ("NVRM", "Xid", "PCIe Bus Error", "[Hardware Error]", "NV_ERR_")
WEAK_LITERALS = (
    "EDAC",
    "AER:",
    "mlx5",
    "carrier",
    "blocked for more than",
    "setting system clock to",
    "device marked unhealthy",
    "Machine check",
    "Machine Check",
)
LITERALS = STRONG_LITERALS + WEAK_LITERALS

# -- message shapes --------------------------------------------------------------------------------
_PCI = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?"
_PCI_FULL = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"

# NVRM: Xid (PCI:0000:3b:00): 79, pid=123, name=python, message   (PCI: and pid/name optional)
XID_HEAD_RE = (
    rf"NVRM: Xid \((?:PCI:)?(?P<pci>{_PCI})\):[ \t]*(?P<code>[0-9]{{1,6}})[ \t]*,"
    r"(?: pid=(?P<pid>[^,]{0,40}), name=(?P<proc>[^,]{0,80}),)?[ \t]?"
)
XID_RE = XID_HEAD_RE + r"(?P<msg>.*)$"
# NVLink Xids 144-150: "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 ...)"
# (drivers and log shippers write the fields with irregular spacing: any run of blanks is one)
NVLINK_RE = (
    r"^[ \t]*(?P<unit>[A-Z0-9_]+)[ \t]+(?P<sev>Fatal|Nonfatal)[ \t]+(?P<intr>XC[0-9]+)[ \t]+"
    r"(?P<inst>i[0-9]+)[ \t]+Link[ \t]+(?P<link>-?[0-9]{1,4})[ \t]*"
    r"\([ \t]*(?P<words>0x[0-9a-fA-F]+(?:[ \t]+0x[0-9a-fA-F]+)*)[ \t]*\)"
)
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"; the code,
# the name or both may be given
_ACTION_NAME = r"[A-Za-z][A-Za-z0-9 /_-]*[A-Za-z]"
RECOVERY_RE = (
    r"GPU recovery action changed(?:[ \t]+from[ \t]+(?:(?P<from_code>0x[0-9a-fA-F]+)[ \t]*)?"
    rf"(?:\((?P<from_name>{_ACTION_NAME})\)|(?:{_ACTION_NAME})?))?[ \t]*to[ \t]+"
    r"(?:(?P<to_code>0x[0-9a-fA-F]+)[ \t]*)?"
    rf"(?:\((?P<to_name>{_ACTION_NAME})\)|(?P<to_bare>{_ACTION_NAME}))?"
)
RECOVERY_CODE = 154
# Xid 119: "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (X)"
GSP_RE = (
    r"Timeout after (?P<after_s>[0-9]{1,6})s of waiting for RPC response from "
    r"GPU(?P<rm_gpu>[0-9]{1,3})"
    r" GSP! Expected function (?P<fn>[0-9]{1,6}) \((?P<fn_name>[A-Za-z0-9_]+)\)"
)
XID_CH_RE = r"(?:^|[ ,])Ch (?P<ch>[0-9a-fA-F]{8})"
XID_SM_RE = r"\(GPC (?P<gpc>[0-9]{1,3}), TPC (?P<tpc>[0-9]{1,3}), SM (?P<sm>[0-9]{1,3})\)"
NVLINK_CODES = range(144, 151)
GSP_TIMEOUT_CODE = 119
FALLEN_OFF_CODE = 79

# nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, ...}
SXID_RE = (
    rf"(?:nvidia-nvswitch(?P<switch>[0-9]{{1,3}}): )?SXid \((?:PCI:)?(?P<pci>{_PCI})\): "
    r"(?P<code>[0-9]{1,6}),[ \t]?(?P<msg>.*)$"
)
SXID_DATA_RE = r"Data \{(?P<data>0x[0-9a-fA-F]+(?:, 0x[0-9a-fA-F]+)*)\}"
SXID_SEV_RE = r"(?P<sev>Non-fatal|Nonfatal|Fatal)"

# k8s-device-plugin: "XidCriticalError: Xid=69 on Device=GPU-..., the device will go unhealthy."
DP_XID_RE = (
    r"XidCriticalError: Xid=(?P<code>[0-9]{1,6}) on Device=(?P<dev>[A-Za-z0-9-]{1,80})"
    r"(?:, |$)"
)
DP_UNHEALTHY_RE = r"device marked unhealthy: (?P<dev>[A-Za-z0-9-]{1,80})"

# NVRM chatter that means nothing by itself (counted as noise, documented in kernel.py).
BENIGN_NVRM_RE = (
    r"NVRM: (?:"
    r"loading NVIDIA UNIX"
    r"|GPU at (?:PCI:)?[0-9A-Fa-f:.]+: GPU-"  # the GPU's UUID banner (without PCI: before 2014)
    r"|GPU Board Serial Number"
    r"|GPU[0-9]+ RPC (?:event )?history"
    r"|GPU[0-9]+ GSP RPC buffer contains"
    r"|[ \t]+entry function"
    r"|[ \t]+-?[0-9]+[ \t]+[0-9]+[ \t]+[A-Z_0-9]+"
    r"|_kgspLogXid119"
    r"|(?:GPU[0-9]+ )?_kgspLogRpcTimeout: [A-Z][a-z]"  # the dump's notes after its banner
    # the falcon / RISC-V core dump a GSP timeout prints after its banner: registers, trace PCs
    r"|(?:GPU[0-9]+ )?kflcnCoreDump(?:Nondestructive|Destructive)(?:_IMPL)?: (?:PRI|TRACE|ICD): "
    r"|nvidia-bug-report\.sh"
    r"|persistence mode"
    r")"
)

# Multi-line "fallen off the bus": first line "NVRM: The NVIDIA GPU 0000:b3:00.0", then lines
# "NVRM: (PCI ID: 10de:26b5) installed in this system has" / "NVRM: fallen off the bus and ...".
GPU_HEAD_RE = rf"NVRM: The NVIDIA GPU (?P<pci>{_PCI})(?P<tail>.*)$"
GPU_CONT_RE = (
    r"^[ \t]*NVRM: (?P<text>(?:\(PCI ID: |installed in this system|fallen off the bus"
    r"|not supported by|is not responding).*)$"
)
PCI_ID_RE = r"\(PCI ID: (?P<pci_id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)"
# "NVRM: GPU 0000:09:00.0: GPU has fallen off the bus", "... GPU at PCI:0000:01:00: GPU has ...",
# and the old drivers' "NVRM: GPU at 0000:01:00.0 has fallen off the bus."
FALLEN_SINGLE_RE = rf"NVRM: GPU (?:at )?(?:PCI:)?(?P<pci>{_PCI}):? (?:GPU )?has fallen off the bus"
INIT_FAIL_RE = (
    rf"NVRM: (?:GPU (?P<pci>{_PCI}): )?(?P<what>RmInitAdapter failed!|rm_init_adapter failed"
    r"|RmInitAdapter: [^ ].*|The NVIDIA probe routine (?:failed|was not called)|No NVIDIA GPU found"
    r"|No NVIDIA devices probed)(?P<detail>.*)$"
)
INIT_CODE_RE = r"\((?P<init_code>0x[0-9a-fA-F]+:0x[0-9a-fA-F]+:[0-9]+)\)"
GSP_LINE_RE = (
    rf"NVRM: (?:Rate limiting GSP RPC error prints for GPU at PCI:(?P<pci>{_PCI})"
    r"|(?P<fnname>[_A-Za-z0-9]+): (?:GPU[0-9]+ )?(?:GSP RPC timeout|Timeout after))"
)
# GSP / RM trouble without an Xid: the firmware's heartbeat lost ("_kgspIsHeartbeatTimedOut:
# Heartbeat timed out, ...", "_kgspRpcRecvPoll: GSP RM heartbeat timed out", "LibOS heartbeat
# timed out") and RM's channel watchdog ("krcWatchdog_IMPL: RC watchdog: GPU is probably locked!")
GSP_HEARTBEAT_RE = (
    r"NVRM: (?:GPU[0-9]+ )?(?P<fnname>[_A-Za-z0-9]+): (?:GPU[0-9]+ )?"
    r"(?:GSP RM |GSP |LibOS )?[Hh]eartbeat (?:timed out|lost|timeout)"
)
# The banner of GSP's RPC-timeout dump ("NVRM: GPU6 _kgspLogRpcTimeout: **** GSP Timeout ****"),
# printed with or without an Xid 119 line.
GSP_TIMEOUT_BANNER_RE = (
    r"NVRM: (?:GPU[0-9]+ )?(?P<fnname>_kgspLogRpcTimeout): \*+ ?GSP Timeout ?\*+"
)
RM_WATCHDOG_RE = (
    r"NVRM: (?:GPU[0-9]+ )?(?P<fnname>[_A-Za-z0-9]+): RC watchdog: GPU is probably locked"
)
RESET_REQUIRED_RE = r"NV_ERR_RESET_REQUIRED|GspRmAlloc failed: .*status=0x00000062"

# APEI / GHES record: "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error ..."
APEI_RE = r"^\{(?P<rec>[0-9]{1,6})\}\[Hardware Error\]: (?P<text>.*)$"
APEI_HEAD = "Hardware error from APEI Generic Hardware Error Source"
APEI_KV_RE = r"^[ \t]*(?P<key>[a-z_ ]{2,30}): (?P<value>.*)$"
# AMD's MCE decoder (edac_mce_amd): "[Hardware Error]: MC4 Error (node 3): DRAM ECC error detected
# on the NB." heads a report whose detail lines ("Error Status: Corrected error, ...", "CPU:18
# (10:9:1) MC4_STATUS[...]: 0x...", "MC4_ADDR: 0x...", "cache level: ...") add nothing to count.
AMD_MCE_RE = (
    r"\[Hardware Error\]: MC(?P<bank>[0-9]{1,2}) Error(?: \(node (?P<node_id>[0-9]{1,3})\))?: "
    r"(?P<what>[^.]*ECC error[^.]*)"
)
AMD_MCE_DETAIL_RE = (
    r"\[Hardware Error\]: (?:Error Status: |CPU:[0-9]{1,5} \(|MC[0-9]{1,2}_(?:STATUS|ADDR|MISC)"
    r"|cache level: |Error Addr: )"
)
MCE_RE = (
    r"mce: \[Hardware Error\]: (?:CPU (?P<cpu>[0-9]{1,5}): Machine Check(?P<exc> Exception)?: "
    r"(?P<mcg>[0-9a-fA-F]+) Bank (?P<bank>[0-9]{1,3}): (?P<status>[0-9a-fA-F]+)"
    r"|(?P<logged>Machine check events logged))"
)
EDAC_RE = (
    r"EDAC (?P<mc>(?:[a-z0-9_]+ )?MC[0-9]{1,3}): (?P<count>[0-9]{1,9}) (?P<type>CE|UE) "
    r"(?P<what>[^()]*?) on (?P<loc>[^ ]+)(?: \((?P<detail>.*)\))?"
)
EDAC_BENIGN_RE = r"EDAC [^:]*: (?:HANDLING MCE MEMORY ERROR|Ver:|Giving out device|Seeking for)"
AER_RE = (
    rf"(?P<pci>{_PCI_FULL}): (?:AER: )?(?:PCIe Bus Error: severity=(?P<sev>[^,]+), "
    rf"type=(?P<type>[^,]+), \((?P<agent>[^)]*)\)"
    r"|(?P<sev2>.*?) error (?:message )?received(?: from)?:? "
    rf"(?P<src>{_PCI_FULL}))"
)
IB_PORT_RE = (
    rf"mlx5_core (?P<pci>{_PCI_FULL})(?: (?P<dev>[a-z0-9_]+))?: Port: (?P<port>[0-9]{{1,3}}) "
    r"Link (?P<state>[A-Z_]+)"
)
CARRIER_RE = r"^(?P<ifname>ib[a-z0-9_.]*): (?P<state>lost carrier|Gained carrier)$"
HUNG_RE = (
    r"INFO: task (?P<proc>.{1,64}):(?P<pid>[0-9]{1,10}) blocked for more than "
    r"(?P<secs>[0-9]{1,9}) seconds"
)
RTC_RE = r"setting system clock to (?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[T ](?P<hms>[0-9:]{8}) UTC"

# -- host storage, CPU thermal, NIC health, panics (kernel_families) -------------------------------
# drivers/nvme/host/pci.c nvme_timeout(): "I/O %d QID %d timeout, aborting" (<= 6.2) and
# "I/O tag %d (%04x) opcode %#x (%s) QID %d timeout, aborting req_op:%s(%u) size:%u" (6.3+).
NVME_TIMEOUT_RE = (
    r"(?:nvme )?(?P<ctrl>nvme[0-9]{1,4}): I/O (?:tag )?(?P<tag>[0-9]{1,10}) "
    r"(?:\([0-9a-f]{4}\) )?(?:opcode 0x[0-9a-f]{1,4} \([^)]{0,40}\) )?QID (?P<qid>[0-9]{1,6}) "
    r"timeout, (?P<recovery>aborting|reset controller|disable controller|completion polled)"
)
# drivers/nvme/host/core.c nvme_log_error() (6.0+):
# "nvme0n1: Read(0x2) @ LBA 1234, 8 blocks, Unrecovered Read Error (sct 0x2 / sc 0x81) DNR"
NVME_STATUS_RE = (
    r"(?P<disk>nvme[0-9]{1,4}n[0-9]{1,4}|\?): (?P<op>[A-Za-z ]{1,40})\(0x[0-9a-f]{1,2}\) @ LBA "
    r"(?P<lba>[0-9]{1,20}), (?P<blocks>[0-9]{1,10}) blocks, (?P<status>[^()]{1,80}) "
    r"\(sct (?P<sct>0x[0-9a-f]{1,2}) / sc (?P<sc>0x[0-9a-f]{1,3})\)"
)
# block/blk-core.c blk_print_req_error() and its predecessors (blk_update_request:,
# print_req_error:, end_request:): "I/O error, dev nvme0n1, sector 123 op 0x1:(WRITE) ..."
_BLK_ERRORS = (
    "I/O|timeout|critical space allocation|recoverable transport|critical target|critical nexus"
    "|reservation conflict|critical medium|protection|kernel resource|device resource"
    "|nonblocking retry|device offline|dm internal retry|open zones exceeded"
    "|active zones exceeded|duration limit exceeded|operation not supported"
)
BLK_ERROR_RE = (
    rf"(?P<error>{_BLK_ERRORS}) error, dev (?P<dev>[^ ,]{{1,64}}), sector (?P<sector>[0-9]{{1,20}})"
    r"(?: op 0x[0-9a-f]{1,4}:\((?P<op>[A-Z_]{1,24})\))?"
)
# fs/buffer.c: "Buffer I/O error on dev nvme1n1p1, logical block 0, async page read"
BUFFER_IO_RE = (
    r"Buffer I/O error on (?:dev(?:ice)? )?(?P<dev>[^ ,]{1,64}), logical block "
    r"(?P<block>[0-9]{1,20})"
)
# fs/ext4/super.c __ext4_error / _inode / _file: "EXT4-fs error (device %s): %s:%d: [inode #%lu: ]
# [block %llu: ]comm %s: ..."; __ext4_std_error: "EXT4-fs error (device %s) in %s:%d: %s".
FS_ERROR_RE = (
    r"(?P<fs>EXT[234])-fs error \(device (?P<dev>[^)]{1,64})\)(?::| in) "
    r"(?P<function>[A-Za-z0-9_]{1,64}):[0-9]{1,6}:(?: inode #(?P<inode>[0-9]{1,20}):)?"
    r"(?: block (?P<block>[0-9]{1,20}):)?(?: comm (?P<comm>[^:]{1,64}):)?"
)
# ext4_handle_error(): "EXT4-fs (nvme1n1p1): Remounting filesystem read-only"
FS_READONLY_RE = r"(?P<fs>EXT[234])-fs \((?P<dev>[^)]{1,64})\): Remounting filesystem read-only"
# arch/x86/kernel/cpu/mce/therm_throt.c: "CPU%d: %s temperature above threshold, cpu clock
# throttled (total events = %lu)" (5.8+: "temperature is above threshold, cpu clock is
# throttled"), then "CPU%d: %s temperature/speed normal".
THERMAL_RE = (
    r"CPU(?P<cpu>[0-9]{1,5}): (?P<level>Core|Package) (?P<state>temperature (?:is )?above "
    r"threshold, cpu clock (?:is )?throttled|temperature/speed normal)"
    r"(?: \(total events = (?P<events>[0-9]{1,20})\))?"
)
_MLX5_DEV = rf"mlx5_core (?P<pci>{_PCI_FULL})(?: (?P<dev>[a-z0-9_]+))?: "
_MLX5_FUNC = r"(?:[A-Za-z0-9_]{1,64}:[0-9]{1,6}:\(pid [0-9]{1,10}\): )?"
# drivers/net/ethernet/mellanox/mlx5/core/health.c poll_health(): "Fatal error %u detected",
# "device's health compromised - reached miss count"
MLX5_HEALTH_RE = (
    _MLX5_DEV
    + _MLX5_FUNC
    + r"(?P<what>Fatal error (?P<fatal_error>[0-9]{1,10}) detected|device's health compromised)"
)
# .../mlx5/core/events.c port_module(): "Port module event[error]: module %u, %s, %s" and
# "Port module event: module %u, %s"
MLX5_MODULE_RE = (
    _MLX5_DEV + _MLX5_FUNC + r"Port module event(?:\[error\])?: module (?P<module>[0-9]{1,4}), "
    r"(?P<status>Cable plugged|Cable unplugged|Cable error|Cable disabled|Unknown status)"
    r"(?:, (?P<error>[^\r\n]{1,160}))?"
)
# kernel/panic.c: "Kernel panic - not syncing: %s" and the closing "---[ end Kernel panic - ...".
PANIC_END_RE = r"---\[ end Kernel panic - not syncing"
PANIC_MCE_RE = (
    r"Kernel panic - not syncing: (?P<reason>[^\r\n]{0,200}(?:[Mm]achine [Cc]heck|MCE|MCA "
    r"|broadcast exception handler)[^\r\n]{0,200})"
)
PANIC_RE = (
    r"Kernel panic - not syncing: ?(?P<reason>(?:Watchdog detected )?(?P<known>hung_task"
    r"|softlockup|[Hh]ard LOCKUP|Out of memory|Fatal exception|Attempted to kill init"
    r"|VFS: Unable to mount root fs)?[^\r\n]{0,400})"
)
# kernel/watchdog.c: "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:2291]"
SOFT_LOCKUP_RE = (
    r"BUG: soft lockup - CPU#(?P<cpu>[0-9]{1,5}) stuck for (?P<secs>[0-9]{1,6})s! "
    r"\[(?P<proc>[^\]\r\n]{1,64}):(?P<pid>[0-9]{1,10})\]"
)
# kernel/watchdog_hld.c / watchdog_buddy.c: "Watchdog detected hard LOCKUP on cpu 5"
HARD_LOCKUP_RE = r"Watchdog detected hard LOCKUP on cpu (?P<cpu>[0-9]{1,5})"
# kernel/rcu/tree_stall.h: "rcu: INFO: rcu_sched detected stalls on CPUs/tasks:",
# "INFO: rcu_preempt self-detected stall on CPU"
RCU_STALL_RE = r"INFO: (?P<flavor>rcu_[a-z_]{1,16}) (?:self-)?detected stalls? on CPU"
# arch/x86/mm/fault.c and friends: the first line of an oops ("BUG: unable to handle page fault
# for address: ...", "BUG: kernel NULL pointer dereference, address: ...", "kernel BUG at
# mm/slub.c:305!", "general protection fault, probably for non-canonical address ...") and the
# oops header "Oops: 0000 [#1] SMP NOPTI" (6.9+: "Oops: general protection fault, ...").
OOPS_RE = (
    r"(?P<what>BUG: unable to handle (?:kernel )?(?:page fault|paging request|NULL pointer"
    r" dereference)|BUG: kernel NULL pointer dereference|kernel BUG at (?P<at>[^\r\n!]{1,160})!"
    r"|(?:Oops: )?general protection fault|Oops: (?P<code>[0-9a-f]{4}) \[#(?P<count>[0-9]{1,6})\])"
    r"(?P<detail>[^\r\n]{0,200})"
)
# drivers/edac + arch/x86 mce: "CMCI storm detected: switching to poll mode"
CMCI_STORM_RE = r"CMCI storm (?P<state>detected|subsided)"

STORAGE_LITERALS = (
    "QID",
    "@ LBA",
    "error, dev ",
    "Buffer I/O error",
    "-fs error",
    "Remounting filesystem read-only",
)
HOST_LITERALS = (
    "above threshold",
    "temperature/speed normal",
    "Kernel panic",
    "CMCI storm",
    "soft lockup",
    "hard LOCKUP",
    "detected stall",
    "BUG: ",
    "kernel BUG at",
    "general protection fault",
    "Oops: ",
)
# Lines with these and no known shape are quarantined (like the strong literals).
HOST_STRONG_LITERALS = ("Kernel panic - not syncing", "-fs error (device")
LITERALS = LITERALS + STORAGE_LITERALS + HOST_LITERALS
