"""``faultlens dashboard`` as a child process on a free local port: start it, wait until it answers
its health check, stop it (SIGTERM to its process group, as a terminal's Ctrl-C would).

Used by the browser tests and ``bench/bench_dashboard.py``; imports nothing heavy (no Streamlit).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """Until ``url``'s Streamlit health check answers 200; fails if ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)  # polling a starting server
    raise RuntimeError(f"dashboard did not answer at {url} within {timeout_s:.0f} s")


@contextmanager
def running(
    db: str | Path,
    *,
    args: Sequence[str] = (),
    host: str = "127.0.0.1",
    port: int | None = None,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    output: IO[Any] | int | None = subprocess.DEVNULL,
    timeout_s: float = 60.0,
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``faultlens dashboard --db DB --host HOST --port PORT [ARGS]`` running: (url, process).

    ``env`` is added to this process's environment (``FAULTLENS_DB`` is set to ``db``);
    ``output`` receives the server's stdout and stderr."""
    port = port or free_port(host)
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultlens.app.cli", "dashboard", "--db", str(db)]
        + ["--host", host, "--port", str(port), *args],
        cwd=cwd,
        env={**os.environ, "FAULTLENS_DB": str(db), **(env or {})},
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://{host}:{port}"
    try:
        wait_http(url, proc, timeout_s)
        yield url, proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM to the dashboard's process group, then wait for it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    proc.wait(timeout=timeout_s)
