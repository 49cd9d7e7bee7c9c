"""CUDA errors in an application's own log (``ingest.training.cuda``): each form the CUDA
libraries and frameworks print, end to end through ``faultlens ingest``'s line parser, and what
attribution makes of them. The lines are written here from the CUDA runtime's error strings and
the frameworks' message shapes; every expected value is worked out by hand from them."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.attribution import attribute_failures
from faultlens.ingest.base import ParseContext
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from faultlens.ingest.training import cuda

# (line, code, runtime API name, severity, action)
FORMS = [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", 700,
     "cudaErrorIllegalAddress", "warning", "restart_app"),
    ("torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered", 214,
     "cudaErrorECCUncorrectable", "error", "reset_gpu"),
    ("  what():  CUDA error: uncorrectable NVLink error detected during the execution", 220,
     "cudaErrorNvlinkUncorrectable", "error", "reset_gpu"),
    ("RuntimeError: cuda runtime error (4) : unspecified launch failure at /src/THC/copy.cu:85",
     719, "cudaErrorLaunchFailure", "warning", "restart_app"),
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal "
     "memory access was encountered", 700, "cudaErrorIllegalAddress", "warning", "restart_app"),
    ("[trainer] fatal: cudaErrorMisalignedAddress in kernel attn_fwd", 716,
     "cudaErrorMisalignedAddress", "warning", "restart_app"),
    ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", 46,
     "cudaErrorDevicesUnavailable", "warning", "restart_app"),
    ("RuntimeError: CUDA error: device-side assert triggered", 710, "cudaErrorAssert", "info",
     "none"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", 209,
     "cudaErrorNoKernelImageForDevice", "info", "none"),
]  # fmt: skip


def _rows(lines: list[str]) -> pl.DataFrame:
    cand = pl.DataFrame({"line": list(range(1, len(lines) + 1)), "raw": lines})
    result = cuda.rows(cand, ParseContext(file="job.out", job_id="4242", node="gpu-07"))
    return result.tables.get("events", pl.DataFrame())


@pytest.mark.parametrize(("line", "code", "name", "severity", "action"), FORMS)
def test_each_form_names_its_cuda_error(line, code, name, severity, action):
    ev = _rows([line])
    assert ev.height == 1
    r = ev.row(0, named=True)
    assert (r["kind"], r["source"], r["code"], r["subkind"]) == (
        "cuda_error",
        "training",
        code,
        name,
    )
    assert (r["severity"], r["action"]) == (severity, action)
    assert (r["node"], r["job_id"], r["file"], r["line"]) == ("gpu-07", "4242", "job.out", 1)
    assert r["ts"] is None and r["ts_flag"] == "no_ts"  # a traceback line has no time of its own
    assert r["message"] == line.strip()


def test_old_message_keeps_the_release_s_own_number():
    r = _rows([FORMS[3][0]]).row(0, named=True)
    assert r["attrs"] == '{"reported_code":4}'  # CUDA 8's 4 is today's 719


def test_out_of_memory_names_its_gpu():
    line = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 79.10 GiB "
        "total capacity; 75.2 GiB already allocated)"
    )
    r = _rows([line]).row(0, named=True)
    assert (r["code"], r["subkind"], r["gpu_index"], r["severity"]) == (
        2,
        "cudaErrorMemoryAllocation",
        3,
        "info",
    )


def test_unknown_message_is_kept_and_a_bare_symbol_is_not_an_event():
    ev = _rows(
        [
            "RuntimeError: CUDA error: a message of a later toolkit",  # stated: kept, code unknown
            "#define CHECK(x) if ((x) != cudaSuccess) cudaErrorHandler(x)",  # no error stated
            "see CUDA_ERROR_CODES.md",  # an unknown name, no message: not an error
            "python: 'errors': 'CUDA error: misaligned address\\nCUDA kernel errors might be'",
        ]
    )
    assert ev["line"].to_list() == [1, 4]
    assert ev["code"].to_list() == [None, 716]  # the escaped newline ends the message
    assert ev["severity"].to_list() == ["warning", "warning"]


def test_job_output_end_to_end(tmp_path: Path, store: Store):
    # a job's output: a syslog-shipped copy (its prefix gives time and host) and a plain
    # traceback; chatter and the hint lines PyTorch prints after the error are noise
    log = tmp_path / "slurm-4242.out"
    log.write_text(
        "\n".join(
            [
                "epoch 3 step 1200 loss 2.113",  # 1
                "Dec  7 18:33:56 gpu-node-11 python[8123]: RuntimeError: CUDA error: "
                "uncorrectable ECC error encountered",  # 2
                "CUDA kernel errors might be asynchronously reported at some other API call.",  # 3
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",  # 4
                "Traceback (most recent call last):",  # 5
                '  File "train.py", line 88, in <module>',  # 6
                "RuntimeError: CUDA error: an illegal memory access was encountered",  # 7
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB "
                "(GPU 5; 79.1 GiB total capacity)",  # 8
                "#include <cuda_runtime.h>  // cudaErrorCheck helpers",  # 9
            ]
        )
        + "\n"
    )
    jan = datetime(2026, 12, 20).timestamp()
    os.utime(log, (jan, jan))
    ctx = ParseContext(file="", year=2026)
    (f,) = ingest_paths(store, [str(log)], now=datetime(2026, 12, 21), base_ctx=ctx).files
    assert (f.status, f.lines, f.parsed, f.noise, f.quarantined) == ("ok", 9, 3, 6, 0)
    ev = store.query(
        "SELECT line, ts, node, code, gpu_index, job_id FROM events ORDER BY line"
    ).rows()
    assert ev == [
        (2, datetime(2026, 12, 7, 18, 33, 56), "gpu-node-11", 214, None, "4242"),
        (7, None, None, 700, None, "4242"),  # no prefix: kept without a time or node
        (8, None, None, 2, 5, "4242"),
    ]


def test_attribution_weighs_the_gpu_s_errors_above_the_program_s(store: Store):
    t0 = datetime(2026, 12, 1)
    h = timedelta(hours=1)
    store.load_xid_catalog(load_catalog())
    jobs = [("1", "gpu01", "FAILED"), ("2", "gpu02", "FAILED"), ("3", "gpu03", "FAILED")]
    store.insert(
        "jobs",
        pl.DataFrame(
            [
                dict(job_id=j, nodes=[n], n_nodes=1, n_gpus=8, start=t0, end=t0 + 2 * h,
                     state=s, elapsed_s=7200.0)
                for j, n, s in jobs
            ]
        ),
    )  # fmt: skip
    errors = [("gpu01", 214), ("gpu02", 220), ("gpu03", 700)]
    store.insert(
        "events",
        pl.DataFrame(
            [
                dict(ts=t0 + 2 * h - 60 * timedelta(seconds=1), node=n, kind="cuda_error",
                     code=c, source="training")
                for n, c in errors
            ],
            schema_overrides={"code": pl.Int32},
        ),
    )  # fmt: skip
    got = {r["job_id"]: r["cause"] for r in attribute_failures(store).iter_rows(named=True)}
    assert got == {"1": "gpu_memory", "2": "gpu_hardware", "3": "user_unknown"}
