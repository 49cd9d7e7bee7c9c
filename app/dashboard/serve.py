"""``python -m faultlens.app.dashboard.serve run main.py [streamlit options]``: Streamlit's own
command line (what ``python -m streamlit`` runs), with the first page made ready in the
background once the server has started.

A page script runs in the session's script thread, and the first visitor's first run used to
import the overview's modules and open the database's reader there (its first snapshot and the
overview's default view: about 1.2 s of the cold first load at 50M events). Done here instead,
on a daemon thread, they are ready by the time a browser has loaded Streamlit's frontend, or
nearly: a run that starts before the import ends waits on the same module locks (it never
imports twice), and the reader is a ``st.cache_resource``, opened once whoever asks first.
Nothing else changes: same options, same process, same exit code.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time

# what the entry script and the default page import (in the order the first run needs them)
FIRST_PAGE = (
    "faultlens.app.dashboard.auth",
    "faultlens.app.dashboard.ui",
    "faultlens.app.dashboard.panels",
    "faultlens.app.dashboard.views",
    "faultlens.app.dashboard.views.overview",
)

log = logging.getLogger(__name__)


def _server_started(timeout_s: float = 60.0) -> None:
    """Until Streamlit's runtime has started (its server answers): preloading while the server
    starts would only make it answer later (one interpreter lock for both)."""
    from streamlit.runtime import Runtime, RuntimeState

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if Runtime.exists() and Runtime.instance().state != RuntimeState.INITIAL:
            return
        time.sleep(0.05)  # polling Streamlit's start-up, which has no hook for it


class _NotThisThread(logging.Filter):
    """Drops Streamlit's "missing ScriptRunContext" warnings of the preload thread (it runs
    outside any session on purpose); every other thread's records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName != PRELOAD_THREAD


PRELOAD_THREAD = "faultlens-preload"
READY = "modules imported, database reader open"
NO_DATABASE = "modules imported; no database yet"
CONTEXT_LOGGER = "streamlit.runtime.scriptrunner_utils.script_run_context"


def preload(modules: tuple[str, ...] = FIRST_PAGE) -> None:
    """Once the server has started: import ``modules`` and open the database's reader (its
    first snapshot). A failure is left to the page, which shows it."""
    logging.getLogger(CONTEXT_LOGGER).addFilter(_NotThisThread())
    try:
        _server_started()
        t0 = time.perf_counter()
        for name in modules:
            importlib.import_module(name)
        from faultlens.app.dashboard import ui

        what = READY if ui.open_reader() else NO_DATABASE
        print(  # the operator's sign that a first visit will not wait for it
            f"faultlens dashboard: first page ready in {time.perf_counter() - t0:.1f} s ({what})",
            file=sys.stderr,
            flush=True,
        )
    except Exception:  # noqa: BLE001 - the page's own run shows the error to the user
        log.debug("preloading the first page failed", exc_info=True)


PRELOAD_ENV = "FAULTLENS_DASHBOARD_PRELOAD"  # "0": no preloading (the benchmark's baseline)


def main(argv: list[str] | None = None) -> None:
    if os.environ.get(PRELOAD_ENV, "1") != "0":
        threading.Thread(target=preload, name=PRELOAD_THREAD, daemon=True).start()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *(sys.argv[1:] if argv is None else argv)]
    streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    main()
