"""CUDA errors in an application's own log: what a job saw of its GPU.

When the kernel log is out of reach (a Kubernetes pod, a user's job output, a ticket with the
traceback pasted), the training job's own output still names the CUDA error that stopped it, in
one of the forms the CUDA libraries and the frameworks print:

- PyTorch (and most frameworks on the runtime API): ``RuntimeError: CUDA error: an illegal
  memory access was encountered``, ``torch.AcceleratorError: CUDA error: ...``, a ``c10::Error``'s
  ``what():  CUDA error: ...``; the old ``cuda runtime error (4) : unspecified launch failure at
  file:line`` (that number is the CUDA release's own, kept as ``attrs.reported_code``);
- the driver API's names (JAX / XLA, CuPy, cuda-memcheck): ``CUDA_ERROR_ILLEGAL_ADDRESS``,
  ``CUDA_ERROR_ECC_UNCORRECTABLE``; the runtime API's (C++ programs): ``cudaErrorIllegalAddress``;
- PyTorch's allocator: ``CUDA out of memory. Tried to allocate ... (GPU 0; ...)``.

Each becomes a ``cuda_error`` event (source ``training``): ``code`` the CUDA error number of the
current toolkit (700 illegal address, 214 uncorrectable ECC, 220 uncorrectable NVLink, ...),
``subkind`` its runtime API name, severity and action from what the error says of the GPU (as
the Xid catalog's actions set an Xid's severity): an uncorrectable ECC or NVLink error is the
GPU's (``reset_gpu``: error), a kernel fault such as an illegal address can be the program's or
the GPU's (``restart_app``: warning, like Xid 13 / 31), a lost or missing device is a warning,
running out of memory, an assertion or a build / driver mismatch are the program's or the
setup's (``none``: info). A ``CUDA error:`` message this table does not know is still an event,
its code unknown (null); a line that only names a CUDA symbol without an error is noise.

The time, node and GPU are what the line's prefix says (``ingest.prefixes``: a traceback line
has none, so the event keeps ``ts`` null, counted and shown as such, never guessed); the job is
the file's (``--job`` / the path). The kernel log's Xid, where there is one, stays the better
evidence of the cause (``ingest.attribution``).
"""

from __future__ import annotations

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext
from faultlens.ingest.catalog import ACTION_SEVERITY
from faultlens.ingest.schema import Action, Kind, Source, conform

# What the scan looks for (``ingest.lines``): a line holding none of these is not a candidate.
LITERALS = ("CUDA error", "cuda runtime error", "CUDA_ERROR_", "cudaError", "CUDA out of memory")
ANCHOR = r"CUDA error|[Cc]uda runtime error \(|CUDA_ERROR_[A-Z]|cudaError[A-Z]|CUDA out of memory"

# (code, runtime API name, driver API name, cudaGetErrorString's text, action)
ERRORS: tuple[tuple[int, str, str, str, Action], ...] = (
    (214, "cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE",
     "uncorrectable ECC error encountered", Action.RESET_GPU),
    (220, "cudaErrorNvlinkUncorrectable", "CUDA_ERROR_NVLINK_UNCORRECTABLE",
     "uncorrectable NVLink error detected during the execution", Action.RESET_GPU),
    (700, "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered", Action.RESTART_APP),
    (701, "cudaErrorLaunchOutOfResources", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch", Action.NONE),
    (702, "cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT",
     "the launch timed out and was terminated", Action.RESTART_APP),
    (710, "cudaErrorAssert", "CUDA_ERROR_ASSERT", "device-side assert triggered", Action.NONE),
    (714, "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR",
     "hardware stack error", Action.RESTART_APP),
    (715, "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
     "an illegal instruction was encountered", Action.RESTART_APP),
    (716, "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS",
     "misaligned address", Action.RESTART_APP),
    (717, "cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
     "operation not supported on global/shared address space", Action.RESTART_APP),
    (718, "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC", "invalid program counter",
     Action.RESTART_APP),
    (719, "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure",
     Action.RESTART_APP),
    (46, "cudaErrorDevicesUnavailable", "CUDA_ERROR_DEVICES_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable", Action.RESTART_APP),
    (100, "cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected",
     Action.RESTART_APP),
    (802, "cudaErrorSystemNotReady", "CUDA_ERROR_SYSTEM_NOT_READY",
     "system not yet initialized", Action.RESTART_APP),
    (999, "cudaErrorUnknown", "CUDA_ERROR_UNKNOWN", "unknown error", Action.RESTART_APP),
    (3, "cudaErrorInitializationError", "CUDA_ERROR_NOT_INITIALIZED", "initialization error",
     Action.RESTART_APP),
    (2, "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", Action.NONE),
    (1, "cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE", "invalid argument", Action.NONE),
    (101, "cudaErrorInvalidDevice", "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal",
     Action.NONE),
    (209, "cudaErrorNoKernelImageForDevice", "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device", Action.NONE),
    (35, "cudaErrorInsufficientDriver", "CUDA_ERROR_INSUFFICIENT_DRIVER",
     "CUDA driver version is insufficient for CUDA runtime version", Action.NONE),
    (803, "cudaErrorSystemDriverMismatch", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination", Action.NONE),
    (804, "cudaErrorCompatNotSupportedOnDevice", "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility was attempted on non supported HW", Action.NONE),
)  # fmt: skip
OOM_CODE = 2
# codes whose error is the GPU's own (``ingest.attribution`` maps them to its causes)
GPU_MEMORY_CODES = (214,)
GPU_HARDWARE_CODES = (220,)

_BY_TEXT = {text.lower(): code for code, _, _, text, _ in ERRORS}
_BY_NAME = {rt: code for code, rt, _, _, _ in ERRORS} | {dr: code for code, _, dr, _, _ in ERRORS}
_NAME = {code: rt for code, rt, _, _, _ in ERRORS}
_ACTION = {code: act.value for code, _, _, _, act in ERRORS}
_SEVERITY = {code: ACTION_SEVERITY[act].value for code, _, _, _, act in ERRORS}
# the message after "CUDA error: " / "cuda runtime error (N) : ", up to a quote, an escaped
# newline, a period or " at file:line" (the message itself holds none of them)
_STOP = r"[^\\'\"\n.]*?"
_TEXT = rf"CUDA error: ?(?P<text>{_STOP})(?: at [^ ]+:[0-9]+)?\s*(?:[\\'\".]|$)"
_OLD = (
    rf"[Cc]uda runtime error \((?P<reported>[0-9]+)\) ?: ?(?P<old>{_STOP})"
    r"(?: at [^ ]+:[0-9]+|[\\'\".]|\s*$)"
)
_SYMBOL = r"(?P<sym>CUDA_ERROR_[A-Z_]+|cudaError[A-Za-z]+)"
_OOM_GPU = r"CUDA out of memory\.?.*?\(GPU (?P<gpu>[0-9]+)[;)]"


def rows(cand: pl.DataFrame, ctx: ParseContext) -> ChunkResult:
    """Candidate lines (``line``, ``raw``: the text after any outer prefix) -> ``cuda_error``
    events; lines that state no CUDA error are left out (noise)."""
    empty = ChunkResult(parsed_lines=pl.Series("line", [], dtype=pl.Int64))
    if cand.height == 0:
        return empty
    raw = pl.col("raw")
    f = cand.with_columns(
        _t=raw.str.extract_groups(_TEXT),
        _o=raw.str.extract_groups(_OLD),
        sym=raw.str.extract(_SYMBOL, 1),
        oom=raw.str.contains("CUDA out of memory", literal=True),
        gpu_index=raw.str.extract(_OOM_GPU, 1).cast(pl.Int32, strict=False),
    ).unnest("_t", "_o")
    text = pl.coalesce(pl.col("text"), pl.col("old")).str.strip_chars().str.to_lowercase()
    code = pl.coalesce(
        pl.col("sym").replace_strict(_BY_NAME, default=None, return_dtype=pl.Int32),
        text.replace_strict(_BY_TEXT, default=None, return_dtype=pl.Int32),
        pl.when(pl.col("oom")).then(pl.lit(OOM_CODE, pl.Int32)),
    )
    stated = pl.col("text").is_not_null() | pl.col("old").is_not_null()
    f = f.with_columns(code=code).filter(pl.col("code").is_not_null() | stated)
    if f.height == 0:
        return empty
    c = pl.col("code")
    events = f.select(
        ts=pl.lit(None, pl.Datetime("us")),
        ts_flag=pl.lit("no_ts"),
        node=pl.lit(ctx.node, pl.String),
        gpu_index="gpu_index",
        source=pl.lit(Source.TRAINING.value),
        kind=pl.lit(Kind.CUDA_ERROR.value),
        subkind=c.replace_strict(_NAME, default=None, return_dtype=pl.String),
        code=c,
        severity=c.replace_strict(_SEVERITY, default="warning", return_dtype=pl.String),
        action=c.replace_strict(_ACTION, default=None, return_dtype=pl.String),
        job_id=pl.lit(ctx.job_id, pl.String),
        message=raw.str.strip_chars().str.slice(0, 2000),
        attrs=pl.concat_str(pl.lit('{"reported_code":'), pl.col("reported"), pl.lit("}")),
        file=pl.lit(ctx.file),
        line="line",
    )
    events = conform("events", events)
    return ChunkResult(
        tables={"events": events}, parsed=events.height, parsed_lines=events.get_column("line")
    )
