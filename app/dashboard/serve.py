"""``python -m faultlens.app.dashboard.serve run main.py [streamlit options]``: Streamlit's own
command line (what ``python -m streamlit`` runs), with the first page's modules imported in the
background while the server starts.

A page script is run in the session's script thread, and the first visitor's first run used to
import the overview's modules there (plotly, the report queries, the figures: about 1.4 s of the
cold first load). Imported here instead, on a daemon thread started before the server, they are
in ``sys.modules`` by the time a browser has loaded Streamlit's frontend: the page's run finds
them there (a run that starts before the import ends waits on the same module locks, it never
imports twice). Nothing else changes: same options, same process, same exit code.
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
    "plotly.graph_objects",
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


def preload(modules: tuple[str, ...] = FIRST_PAGE) -> None:
    """Once the server has started, import ``modules``, then build and serialize a figure of
    the overview's trace types (plotly loads its validators on first use); a failure is left
    to the page, which shows it."""
    try:
        _server_started()
        for name in modules:
            importlib.import_module(name)
        import plotly.graph_objects as go
        import plotly.io as pio

        pio.to_json(go.Figure([go.Bar(x=[1], y=[1]), go.Scatter(x=[1], y=[1])]), validate=True)
    except Exception:  # noqa: BLE001 - the page's own import shows the error to the user
        log.debug("preloading the first page failed", exc_info=True)


PRELOAD_ENV = "FAULTLENS_DASHBOARD_PRELOAD"  # "0": no preloading (the benchmark's baseline)


def main(argv: list[str] | None = None) -> None:
    if os.environ.get(PRELOAD_ENV, "1") != "0":
        threading.Thread(target=preload, name="faultlens-preload", daemon=True).start()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *(sys.argv[1:] if argv is None else argv)]
    streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    main()
