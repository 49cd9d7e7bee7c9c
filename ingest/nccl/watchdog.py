"""The rest of PyTorch's watchdog family and torchrun / elastic worker failures: the shapes and
what each says, as pure functions of a line's text (``pytorch.handle_line`` makes the events).

ProcessGroupNCCL.cpp (PyTorch 2.x), each in any prefix:

- ``failure detected by watchdog at work sequence id: 52 PG status: last enqueued work: 52, last
  completed work: 51`` -> ``nccl_error`` / ``watchdog_failure``;
- ``Process group watchdog thread terminated with exception: <what>`` (not a timeout: those are
  ``rethrown`` timeouts) -> ``nccl_error`` / ``watchdog_terminated``;
- ``ProcessGroupNCCL's watchdog got stuck for 480 seconds ...`` -> ``nccl_timeout`` /
  ``watchdog_stuck``; ``Heartbeat monitor timed out!`` -> ``nccl_timeout`` / ``heartbeat_timeout``;
- flight-recorder notices (``preparing to dump debug info``, ``FlightRecorder is disabled``,
  ``Finished flight recorder successfully``) -> ``nccl_error`` / ``flight_recorder`` at ``info``.

torch.distributed.elastic, glog or logging form::

    E0419 12:00:00.123456 140234 torch/distributed/elastic/multiprocessing/api.py:869] failed
    (exitcode: -9) local_rank: 3 (pid: 12345) of binary: /usr/bin/python3
    torch.distributed.elastic.multiprocessing.api.SignalException: Process 4400 got signal: 15

-> ``process_failed`` / ``elastic_worker`` (a negative exit code is the signal that killed the
worker) or ``signal``.
"""

from __future__ import annotations

import re
import signal
from typing import Any

from faultlens.ingest.schema import Kind, Severity

FAILURE_DETECTED = re.compile(
    r"[Ff]ailure detected by watchdog at work sequence id: (?P<seq_num>-?[0-9]+)"
    r"(?: PG status: last enqueued work: (?P<last_enqueued>-?[0-9]+), last completed work: "
    r"(?P<last_completed>-?[0-9]+))?"
)
WATCHDOG_TERMINATED = re.compile(r"[Ww]atchdog thread terminated with exception: ?(?P<what>.*)$")
WATCHDOG_STUCK = re.compile(
    r"[Ww]atchdog (?:got stuck|has been stuck|stuck) for (?P<stuck_s>[0-9]+) ?(?:seconds|s)\b"
)
HEARTBEAT_TIMEOUT = re.compile(
    r"Heartbeat monitor timed out|[Hh]eartbeat monitor (?:thread )?(?:is )?stuck"
)
FLIGHT_RECORDER = re.compile(
    r"[Ff]light ?[Rr]ecorder|fr_trace|(?:preparing|try our best) to dump (?:the )?debug info"
)
ELASTIC_FAILED = re.compile(
    r"failed \(exitcode: (?P<exit_code>-?[0-9]+)\) local_rank: (?P<local_rank>-?[0-9]+) "
    r"\(pid: (?P<pid>[0-9]+)\)(?: of binary: (?P<binary>\S+))?"
)
SIGNAL_EXCEPTION = re.compile(
    r"SignalException: Process (?P<pid>[0-9]+) got signal: (?P<signal>[0-9]+)"
)
# a glog stamp whose source is a path (``torch/distributed/elastic/.../api.py:826]``)
GLOG_ANY = re.compile(
    r"(?:^|[\s\[])(?P<sev>[EWIF])(?P<md>[0-9]{4}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]+))? +[0-9]+ [^\s\]]+:[0-9]+\]"
)


def _ints(m: re.Match[str]) -> dict[str, Any]:
    return {k: int(v) if v not in (None, "") else None for k, v in m.groupdict().items()}


def signal_name(number: int | None) -> str | None:
    """``SIGKILL`` for 9, ...; None for a number that is no signal here."""
    try:
        return signal.Signals(number).name if number is not None else None
    except ValueError:
        return None


def watchdog_report(text: str) -> tuple[Kind, str, Severity, dict[str, Any]] | None:
    """(kind, subkind, severity, attrs) of a watchdog report other than a timeout, or None."""
    if m := FAILURE_DETECTED.search(text):
        return Kind.NCCL_ERROR, "watchdog_failure", Severity.ERROR, _ints(m)
    if WATCHDOG_TERMINATED.search(text):
        return Kind.NCCL_ERROR, "watchdog_terminated", Severity.ERROR, {}
    if m := WATCHDOG_STUCK.search(text):
        return Kind.NCCL_TIMEOUT, "watchdog_stuck", Severity.ERROR, _ints(m)
    if HEARTBEAT_TIMEOUT.search(text):
        return Kind.NCCL_TIMEOUT, "heartbeat_timeout", Severity.ERROR, {}
    if FLIGHT_RECORDER.search(text):
        return Kind.NCCL_ERROR, "flight_recorder", Severity.INFO, {}
    return None


def elastic_failure(text: str) -> tuple[str, int, dict[str, Any]] | None:
    """(subkind, pid, attrs) of an elastic worker failure or agent signal, or None."""
    if m := ELASTIC_FAILED.search(text):
        code = int(m["exit_code"])
        attrs = {
            "exit_code": code,
            "local_rank": int(m["local_rank"]),
            "binary": m["binary"],
            "signal": -code if code < 0 else None,
            "signal_name": signal_name(-code) if code < 0 else None,
        }
        return "elastic_worker", int(m["pid"]), attrs
    if m := SIGNAL_EXCEPTION.search(text):
        number = int(m["signal"])
        return "signal", int(m["pid"]), {"signal": number, "signal_name": signal_name(number)}
    return None
