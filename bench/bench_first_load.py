"""The dashboard's cold first load, taken apart: Streamlit's start-up, our imports, the first
screen's queries, and the rest (Streamlit's frontend in the browser, the first run's drawing).

For each way of serving (``copy``: the oldest baseline, a private copy of the database;
``published-cold``: what the writer published, the first page's modules imported by the first
visitor's run, the baseline of the preloading; ``published``: what ``faultlens dashboard`` does,
the published view with the first page's modules imported in the background once the server
has started, ``app/dashboard/serve.py``), ``--tries`` times, alternating: start
``faultlens dashboard`` (server start-up:
from the process start to its first HTTP answer) and open the overview in headless Chromium
(first load: from the request to the overview drawn, as ``bench_dashboard`` measures it). In fresh
interpreters, the same number of times: ``import streamlit``; importing the overview page (our
modules, with streamlit); opening the reader and running the overview's queries (the first
screen). The load average is recorded beside every try (the machine is shared).

Every process runs from cached bytecode, as an installed faultlens does (pip and
``make install`` compile it; a sandbox's ``PYTHONDONTWRITEBYTECODE`` would make every start
compile Streamlit, plotly and faultlens again), after one untimed start that writes it;
``--compile-every-start`` measures the sandbox's way instead.

The database is ``bench_dashboard``'s (``python -m bench.bench_dashboard`` builds it).

Usage: python -m bench.bench_first_load --db /tmp/bench_dash.duckdb [--tries 2]
Results: bench/out/bench_first_load.json and .md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_dashboard import ARGS, CHROMIUM, IDLE_JS, OUT
from bench.bench_ingest_nccl import bytecode_env
from faultlens.app.dashboard import server

# how the dashboard is served: the reader, and whether the first page is preloaded
READERS = {
    "copy": {"FAULTLENS_READER": "copy", "FAULTLENS_DASHBOARD_PRELOAD": "0"},
    "published-cold": {
        "FAULTLENS_READER": "published",
        "FAULTLENS_DASHBOARD_PRELOAD": "0",
        "FAULTLENS_FIRST_SCREEN": "0",
    },
    # the first screen computed by the first run (what the writer stored ignored): the baseline
    # of the writer's first screen
    "published-computed": {
        "FAULTLENS_READER": "published",
        "FAULTLENS_DASHBOARD_PRELOAD": "1",
        "FAULTLENS_FIRST_SCREEN": "0",
    },
    "published": {"FAULTLENS_READER": "published", "FAULTLENS_DASHBOARD_PRELOAD": "1"},
}
BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}  # empty: unset for the child (cached bytecode)
ENV: dict[str, str] = {}  # what every timed child gets on top of this process's environment
IMPORTS = {
    "import streamlit": "import streamlit",
    "import the overview page": "import faultlens.app.dashboard.views.overview",
}


def first_screen(db: str, mode: str) -> float:
    """Open the reader and run what the overview asks for first (in this process)."""
    from faultlens.reports import first_screen as screen
    from faultlens.reports.snapshot import SnapshotReader

    os.environ.update({k: v for k, v in READERS[mode].items() if k == screen.ENV})
    t0 = time.perf_counter()
    reader = SnapshotReader(db, tempfile.mkdtemp(), published=mode.startswith("published"))
    snap = reader.refresh()
    screen.compute(snap)
    elapsed = time.perf_counter() - t0
    reader.close()
    return elapsed


def _fresh(code: str) -> float:
    """Seconds ``code`` takes in a fresh interpreter (its last line prints them)."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **ENV},
    ).stdout
    return float(out.strip().splitlines()[-1])


def _import_s(statement: str) -> float:
    return _fresh(
        f"import time\nt = time.perf_counter()\n{statement}\nprint(time.perf_counter() - t)"
    )


def _screen_s(db: Path, mode: str) -> float:
    code = (
        "from bench.bench_first_load import first_screen\n"
        f"print(first_screen({str(db)!r}, {mode!r}))"
    )
    return _fresh(code)


def _browser(db: Path, mode: str) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    t0 = time.perf_counter()
    with server.running(db, timeout_s=120, env={**ENV, **READERS[mode]}) as (url, _):
        start_s = time.perf_counter() - t0
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            seen: dict[str, float] = {}

            def on_socket(ws) -> None:  # noqa: ANN001
                seen.setdefault("socket", time.perf_counter())
                ws.on("framereceived", lambda _: seen.setdefault("frame", time.perf_counter()))

            page.on("websocket", on_socket)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            t1 = time.perf_counter()
            page.goto(url)
            page.get_by_role("heading", name="Fleet overview").wait_for(timeout=600_000)
            page.wait_for_function(IDLE_JS, timeout=600_000)
            load_s = time.perf_counter() - t1
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            browser.close()
    socket = seen.get("socket", float("nan")) - t1
    frame = seen.get("frame", float("nan")) - t1
    return {
        "server_start_s": round(start_s, 2),
        "first_load_s": round(load_s, 2),
        # the page's HTML and Streamlit's frontend loaded, up to its websocket opening
        "frontend to websocket (s)": round(socket, 2),
        # from the websocket to the first message of the script's run (session, imports)
        "websocket to first message (s)": round(frame - socket, 2),
        "first message to overview drawn (s)": round(load_s - frame, 2),
        # the browser's main thread busy over the whole load (Chrome DevTools TaskDuration)
        "browser busy (s)": round(metrics.get("TaskDuration", float("nan")), 2),
        "browser scripts (s)": round(metrics.get("ScriptDuration", float("nan")), 2),
    }


def _store_first_screen(db: Path) -> float | None:
    """What a writer's publish does once per generation (``reports.first_screen.save``), on the
    database's current one; its seconds (None: stored before, by its writer)."""
    from faultlens.ingest import publish
    from faultlens.reports import first_screen as screen

    folder = publish.folder_of(db.resolve())
    manifest = publish.read_manifest(folder)
    if manifest is None:
        raise SystemExit(f"{db}: nothing published (build it with bench.bench_dashboard)")
    t0 = time.perf_counter()
    return round(time.perf_counter() - t0, 2) if screen.save(folder, manifest) else None


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", type=Path, default=Path("/tmp/bench_dash.duckdb"))
    ap.add_argument("--tries", type=int, default=2)
    ap.add_argument(
        "--compile-every-start",
        action="store_true",
        help="Keep this environment's PYTHONDONTWRITEBYTECODE (a sandbox's): no cached bytecode.",
    )
    a = ap.parse_args()
    writer_s = _store_first_screen(a.db)
    if not a.compile_every_start:
        ENV.update(BYTECODE)
        bytecode_env()  # faultlens compiled; the libraries' bytecode is written by the warm-up
        _browser(a.db, "published")  # untimed: every module the pages import, cached
    tries: dict[str, list[dict]] = {m: [] for m in READERS}
    for _ in range(a.tries):
        for mode in READERS:  # alternating: the machine's load drifts
            row = _browser(a.db, mode)
            row |= {k: round(_import_s(v), 2) for k, v in IMPORTS.items()}
            row["first screen queries"] = round(_screen_s(a.db, mode), 2)
            row["load_1min"] = _load()[0]
            tries[mode].append(row)
            print(mode, row, file=sys.stderr)
    doc = {
        "db": str(a.db),
        "bytecode": "compiled every start" if a.compile_every_start else "cached",
        "tries": tries,
        "median": {
            m: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            for m, rows in tries.items()
        },
        "cores": os.cpu_count(),
        "writer's first screen (s)": writer_s,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_first_load.json").write_text(json.dumps(doc, indent=2))
    keys = list(doc["median"]["copy"])
    lines = [
        f"# Dashboard cold first load ({a.tries} tries per reader, medians; bytecode "
        f"{doc['bytecode']})",
        "",
        "| figure | " + " | ".join(READERS) + " |",
        "|---|" + "---:|" * len(READERS),
    ]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(f"{doc['median'][m][k]:.2f}" for m in READERS) + " |")
    (OUT / "bench_first_load.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
