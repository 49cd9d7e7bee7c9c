"""Dashboard latency on a large database, measured from a real browser.

Generates a database of ``--events`` events (default 50 million) directly in DuckDB (2,048 nodes,
90 days, a realistic mix of kinds, Xid codes and severities; jobs, attributions, predictions and
some telemetry), starts ``faultlens dashboard`` on a free port, and with headless Chromium
(Playwright) measures for every page the first render (from the mouse press on the page's link in
the navigation to the end of the Streamlit run, the page drawn) and a filter change (from the press
on a cluster, then on one node, in the sidebar drop-downs to the end of the rerun, the page
drawn), each filter change ``--repeat`` times (the median is reported). Times are
taken on the browser's clock from the press itself (Playwright's own checks before it clicks are
not the user's wait); the end of a run is the ``script_finished`` message on the websocket.
Targets: first render <= 2 s, filter change <= 0.5 s.
Also measured: the snapshot the dashboard takes when it starts (copy + rollup tables, in this
process), and the dashboard's first load (snapshot, rollups and the default views computed ahead).
The machine's load average is recorded with the results (the machine is shared).

Usage: python -m bench.bench_dashboard [--events 50000000] [--db /tmp/bench_dash.duckdb] [--reuse]
       [--repeat 3] [--label TEXT]
Results: bench/out/bench_dashboard.json and .md
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import duckdb

from faultlens.ingest.store import Store

OUT = Path(__file__).resolve().parent / "out"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PAGES = {
    "": "Fleet overview",
    "events": "Event explorer",
    "node": "Node",
    "jobs": "Failed jobs",
    "predictions": "Predictions",
    "stragglers": "Stragglers",
    "recovery": "Recovery what-if",
    "data-health": "Data health",
}
NAV = {
    "": "Overview",
    "events": "Events",
    "node": "Node",
    "jobs": "Jobs",
    "predictions": "Predictions",
    "stragglers": "Stragglers",
    "recovery": "Recovery what-if",
    "data-health": "Data health",
}
FIRST_RENDER_S, FILTER_S = 2.0, 0.5
NODES, DAYS = 2048, 90

EVENTS_SQL = """
INSERT INTO events (ts, node, gpu, gpu_index, source, kind, code, severity, job_id, message,
                    file, line)
SELECT ts, node, gpu, gpu_index, source, kind, code, severity, NULL, message, file, line FROM (
  SELECT TIMESTAMP '2025-01-01' + to_microseconds((hash(i) % (? * 86400000000))::BIGINT) AS ts,
         CASE WHEN i % 2 = 0 THEN 'gpu' ELSE 'dgx' END || lpad(((i // 2) % (? // 2))::VARCHAR, 4,
         '0') AS node,
         (i % 8)::VARCHAR AS gpu, (i % 8)::INTEGER AS gpu_index,
         (['kernel', 'nccl', 'slurm', 'dcgm'])[1 + (i % 4)] AS source,
         CASE WHEN i % 1000 = 0 THEN 'xid' WHEN i % 97 = 0 THEN 'nccl_warn'
              WHEN i % 89 = 0 THEN 'pcie' ELSE 'diag' END AS kind,
         CASE WHEN i % 1000 = 0 THEN ([13, 31, 43, 48, 63, 74, 79, 94, 109, 119])[1 + (i // 1000)
              % 10] END AS code,
         CASE WHEN i % 1000 = 0 THEN 'critical' WHEN i % 97 = 0 THEN 'warning'
              WHEN i % 89 = 0 THEN 'error' ELSE 'info' END AS severity,
         'event ' || i AS message, '/logs/node' || (i % 2048) || '/kern.log' AS file,
         i AS line
  FROM range(?) t(i)
) ORDER BY ts
"""


def build(db: Path, n_events: int) -> None:
    if db.exists():
        db.unlink()
    Store(db).close()  # the schema
    con = duckdb.connect(str(db))
    t0 = time.perf_counter()
    con.execute(EVENTS_SQL, [DAYS, NODES, n_events])
    con.execute(
        """
        INSERT INTO jobs (job_id, name, "user", partition, nodes, n_nodes, n_gpus, submit, start,
                          "end", elapsed_s, state, source)
        SELECT i::VARCHAR, 'train', 'u' || (i % 50), 'gpu',
               [CASE WHEN i % 2 = 0 THEN 'gpu' ELSE 'dgx' END
                || lpad((i % 1024)::VARCHAR, 4, '0')],
               1, 8, s, s, s + INTERVAL 6 HOUR, 21600,
               CASE WHEN i % 10 = 0 THEN 'NODE_FAIL' WHEN i % 7 = 0 THEN 'FAILED'
                    ELSE 'COMPLETED' END, 'bench'
        FROM (SELECT i, TIMESTAMP '2025-01-01' + to_microseconds((hash(i * 7) %
              (? * 86400000000))::BIGINT) AS s FROM range(50000) t(i))
    """,
        [DAYS - 1],
    )
    con.execute("""
        INSERT INTO attributions SELECT job_id, state, "end", nodes[1],
            (['gpu_hardware', 'gpu_memory', 'network', 'software', 'host'])
                [1 + (hash(job_id) % 5)::BIGINT],
            'xid', 79, "end", 48.0 FROM jobs WHERE state <> 'COMPLETED'
    """)
    con.execute(
        """
        INSERT INTO predictions SELECT 'run-' || d, TIMESTAMP '2025-01-01' + INTERVAL (d) DAY,
            node, NULL, 'failure', 24.0, (hash(node || d) % 1000) / 1000.0, 'none',
            '[{"feature": "xid_24h", "value": 1, "contribution": 0.5}]', 'bench'
        FROM (SELECT DISTINCT node FROM events), range(?) t(d)
    """,
        [DAYS],
    )
    con.execute(
        """
        INSERT INTO telemetry SELECT TIMESTAMP '2025-01-01' + INTERVAL (m * 10) MINUTE, node, g,
            'DCGM_FI_DEV_GPU_TEMP', 50 + (hash(node || m || g) % 30)
        FROM (SELECT DISTINCT node FROM events ORDER BY node LIMIT 64), range(? * 144) t(m),
             range(8) u(g)
    """,
        [DAYS],
    )
    con.execute("CHECKPOINT")
    con.close()
    print(
        f"built {n_events:,} events in {time.perf_counter() - t0:.0f} s "
        f"({db.stat().st_size / 1e9:.2f} GB)",
        file=sys.stderr,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


IDLE_JS = (
    "() => document.querySelector('[data-testid=\"stApp\"]')"
    "?.getAttribute('data-test-script-state') === 'notRunning'"
    " && !document.querySelector('[data-testid=\"stSkeleton\"]')"
)


ARM_JS = """() => {
  if (!window.__armed) {
    window.__armed = true;
    document.addEventListener('mousedown', () => { window.__clickAt = performance.now(); }, true);
  }
}"""
SINCE_CLICK_JS = "() => (performance.now() - window.__clickAt) / 1000"


class Runs:
    """Counts the script runs the server reports finished (``script_finished`` on the websocket):
    a rerun of a few milliseconds is seen too, which the page's DOM state may never show."""

    def __init__(self, page) -> None:  # noqa: ANN001
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self.page, self.finished, self._msg = page, 0, ForwardMsg
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: bytes | str) -> None:
        if isinstance(payload, bytes):
            msg = self._msg()
            try:
                msg.ParseFromString(payload)
            except Exception:  # noqa: BLE001 - not a ForwardMsg
                return
            if msg.WhichOneof("type") == "script_finished":
                self.finished += 1

    def since_click(self) -> float:
        """Seconds from the last mouse press in the page (browser clock) to now."""
        return float(self.page.evaluate(SINCE_CLICK_JS))

    def wait_after(self, seen: int, timeout_s: float = 120.0) -> None:
        """Until a run that started after ``seen`` finished and the page is drawn."""
        deadline = time.perf_counter() + timeout_s
        while self.finished <= seen:
            if time.perf_counter() > deadline:
                raise TimeoutError("no script run finished")
            self.page.wait_for_timeout(5)  # lets Playwright deliver the websocket events
        self.page.wait_for_function(IDLE_JS, timeout=timeout_s * 1000)


def snapshot_cost(db: Path) -> dict:
    """Copy + rollups of ``db`` as the dashboard does it at start (without the warm-up)."""
    import tempfile

    from faultlens.reports.snapshot import SnapshotReader

    with tempfile.TemporaryDirectory() as tmp:
        reader = SnapshotReader(db, tmp)
        t0 = time.perf_counter()
        snap = reader.refresh()
        total = time.perf_counter() - t0
        build = dict(getattr(snap, "build", {}) or {})
        reader.close()
    print(f"snapshot {total:.1f} s: {build}", file=sys.stderr)
    return {"seconds": round(total, 2), **build}


NODE = "gpu0007"
COUNT_JS = """() => ({
  elements: document.querySelectorAll('[data-testid="stElementContainer"]').length,
  charts: document.querySelectorAll('.js-plotly-plot').length,
  dom_nodes: document.getElementsByTagName('*').length})"""
BUSY = {
    "TaskDuration": "task_s",
    "ScriptDuration": "script_s",
    "LayoutDuration": "layout_s",
    "RecalcStyleDuration": "style_s",
}


class Probe:
    """The browser's own counters (Chrome DevTools Protocol ``Performance.getMetrics``) around a
    filter change: main-thread time busy on tasks, scripts, layout and style, which the load of
    a shared machine inflates far less than the wall time; and, with ``cpu``, a sampled CPU
    profile of the page whose self time is summed per script (plotly, Streamlit, ...)."""

    def __init__(self, page, cpu: bool = False) -> None:  # noqa: ANN001
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.send("Performance.enable")
        self.cpu, self.page, self._before = cpu, page, {}
        self.by_script: dict[str, float] = {}
        if cpu:
            self.cdp.send("Profiler.enable")
            self.cdp.send("Profiler.setSamplingInterval", {"interval": 200})

    def _metrics(self) -> dict[str, float]:
        got = self.cdp.send("Performance.getMetrics")["metrics"]
        return {m["name"]: m["value"] for m in got if m["name"] in BUSY}

    def start(self) -> None:
        self._before = self._metrics()
        if self.cpu:
            self.cdp.send("Profiler.start")

    def stop(self) -> dict[str, float]:
        after = self._metrics()
        out = {BUSY[k]: round(after[k] - self._before.get(k, 0.0), 3) for k in after}
        if self.cpu:
            self._add_profile(self.cdp.send("Profiler.stop")["profile"])
        out.update(self.page.evaluate(COUNT_JS))
        return out

    def _add_profile(self, profile: dict) -> None:
        nodes = {n["id"]: n for n in profile["nodes"]}
        deltas = profile.get("timeDeltas", [])
        for sample, dt in zip(profile.get("samples", []), deltas[1:] + [0], strict=True):
            frame = nodes[sample]["callFrame"]
            url = frame.get("url") or frame.get("functionName") or "?"
            name = url.rsplit("/", 1)[-1].split("?")[0] or "?"
            self.by_script[name] = self.by_script.get(name, 0.0) + dt / 1e6

    def take_profile(self) -> dict[str, float]:
        top = sorted(self.by_script.items(), key=lambda kv: -kv[1])[:12]
        self.by_script = {}
        return {k: round(v, 3) for k, v in top}


def _pick(
    page,
    runs: Runs,
    sidebar,
    which: int,
    name: str,  # noqa: ANN001
    probe: Probe | None = None,
    seen_busy: list | None = None,
) -> float:
    """Choose ``name`` in the sidebar's ``which``-th multiselect, time it, then clear it again."""
    box = sidebar.locator("[data-testid='stMultiSelect']").nth(which)
    box.click()
    page.keyboard.type(name)
    option = page.get_by_role("option", name=name, exact=True)
    option.wait_for()
    page.evaluate(ARM_JS)
    seen = runs.finished  # from the press on the option
    if probe is not None:
        probe.start()
    option.click()
    runs.wait_after(seen)
    took = runs.since_click()
    if probe is not None and seen_busy is not None:
        seen_busy.append(probe.stop())
    page.keyboard.press("Escape")
    seen = runs.finished  # back to no filter for the next measurement
    box.locator("[aria-label*='Clear']").first.click(timeout=5_000)
    runs.wait_after(seen)
    return took


def _median_busy(tries: list[dict]) -> dict[str, float]:
    keys = tries[0].keys() if tries else ()
    return {k: round(statistics.median(t[k] for t in tries), 3) for k in keys}


def measure(
    url: str, repeat: int = 3, pages: list[str] | None = None, cpu: bool = False
) -> dict[str, dict]:
    from playwright.sync_api import sync_playwright

    results: dict[str, dict] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        runs = Runs(page)
        probe = Probe(page, cpu=cpu)
        t0 = time.perf_counter()
        page.goto(url)  # the first snapshot of the database is taken here
        page.get_by_role("heading", name="Fleet overview").wait_for(timeout=600_000)
        page.wait_for_function(IDLE_JS, timeout=600_000)
        results["startup"] = {"first_load_s": round(time.perf_counter() - t0, 2)}
        print(f"first load {results['startup']['first_load_s']:.1f} s", file=sys.stderr)
        nav = page.locator("[data-testid='stSidebarNav']")
        sidebar = page.locator("[data-testid='stSidebar']")
        for path, title in PAGES.items():
            if pages and (path or "overview") not in pages:
                continue
            link = nav.get_by_role("link", name=NAV[path])
            link.wait_for()
            page.evaluate(ARM_JS)
            seen = runs.finished  # a click in the navigation
            link.click()
            runs.wait_after(seen)
            page.get_by_role("heading", name=title).first.wait_for(timeout=120_000)
            first = runs.since_click()
            changes, node_changes, busy, node_busy = [], [], [], []
            for _ in range(repeat):  # the machine is shared: the median of a few tries
                # a cluster (precomputed), then one node (not)
                changes.append(_pick(page, runs, sidebar, 0, "dgx", probe, busy))
                node_changes.append(_pick(page, runs, sidebar, 1, NODE, probe, node_busy))
            change, node_change = statistics.median(changes), statistics.median(node_changes)
            errors = page.locator("[data-testid='stException']").count()
            results[path or "overview"] = {
                "first_render_s": round(first, 3),
                "filter_change_s": round(change, 3),
                "node_filter_change_s": round(node_change, 3),
                "filter_change_tries_s": [round(x, 3) for x in changes],
                "node_filter_change_tries_s": [round(x, 3) for x in node_changes],
                "browser_cluster": _median_busy(busy),
                "browser_node": _median_busy(node_busy),
                "exceptions": errors,
            }
            if cpu:
                results[path or "overview"]["cpu_self_s_by_script"] = probe.take_profile()
            b, nb = (
                results[path or "overview"]["browser_cluster"],
                results[path or "overview"]["browser_node"],
            )
            print(
                f"{path or 'overview':12s} first {first:.2f} s  cluster {change:.2f} s "
                f"(busy {b.get('task_s', 0):.2f})  node {node_change:.2f} s "
                f"(busy {nb.get('task_s', 0):.2f})  elements {b.get('elements')}"
                f"{'  EXCEPTION' if errors else ''}",
                file=sys.stderr,
            )
        browser.close()
    return results


def _table(results: dict[str, dict]) -> list[str]:
    lines = [
        "| page | first render (s) | filter change: cluster, median / min (s) | browser "
        "busy: cluster, all / script+layout+style (s) | filter change: one node, median / "
        "min (s) | browser busy: one node, all / script+layout+style (s) | elements |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for page, r in results.items():
        cells = [page, f"{r['first_render_s']:.2f}"]
        for wall, tries, busy in (
            ("filter_change_s", "filter_change_tries_s", "browser_cluster"),
            ("node_filter_change_s", "node_filter_change_tries_s", "browser_node"),
        ):
            b = r.get(busy, {})
            main = sum(b.get(k, 0.0) for k in ("script_s", "layout_s", "style_s"))
            cells += [
                f"{r[wall]:.2f} / {min(r[tries]):.2f}",
                f"{b.get('task_s', float('nan')):.2f} / {main:.2f}",
            ]
        cells.append(str(r.get("browser_cluster", {}).get("elements", "-")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _start(db: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultlens.app.cli",
            "dashboard",
            "--db",
            str(db),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/_stcore/health", timeout=2)
            break
        except OSError:
            time.sleep(0.2)  # polling a starting server
    return proc, url


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000_000)
    ap.add_argument("--db", type=Path, default=Path("/tmp/bench_dash.duckdb"))
    ap.add_argument("--reuse", action="store_true", help="Use --db as it is.")
    ap.add_argument("--label", default="", help="A note kept with the results.")
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="Filter changes timed per page and filter (the median is reported).",
    )
    ap.add_argument("--pages", nargs="*", help="Only these pages (overview, events, node, ...).")
    ap.add_argument(
        "--cpu-profile",
        action="store_true",
        help="Also sample the page's CPU profile (self time per script).",
    )
    ap.add_argument(
        "--no-snapshot-cost", action="store_true", help="Skip timing the snapshot in this process."
    )
    ap.add_argument("--name", default="bench_dashboard", help="Result file name in bench/out.")
    return ap.parse_args()


def main() -> None:
    a = _args()
    if not a.reuse:
        build(a.db, a.events)
    load_before = os.getloadavg()
    snapshot = {"seconds": float("nan")} if a.no_snapshot_cost else snapshot_cost(a.db)
    proc, url = _start(a.db)
    try:
        results = measure(url, a.repeat, a.pages, a.cpu_profile)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    n = duckdb.connect(str(a.db), read_only=True).execute("SELECT count(*) FROM events").fetchone()
    load = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }
    startup = results.pop("startup")
    doc = {
        "events": n[0],
        "label": a.label,
        "targets": {"first_render_s": FIRST_RENDER_S, "filter_change_s": FILTER_S},
        "load_average_1_5_15": load,
        "snapshot": snapshot,
        "startup": startup,
        "repeat": a.repeat,
        "pages": results,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.name}.json").write_text(json.dumps(doc, indent=2))
    rolled = snapshot.get("rollups", {})
    lines = [
        f"# Dashboard latency, {n[0]:,} events (from Chromium)",
        "",
        f"{a.label}  ",
        f"Load average (1/5/15 min) before {load['before']}, after "
        f"{load['after']}, on {load['cores']} cores.  ",
        f"Snapshot at start: {snapshot['seconds']:.1f} s (copy {snapshot.get('copy_s')} s, "
        f"rollups {rolled.get('seconds')} s). First load of the dashboard (snapshot, "
        f"rollups, default views computed ahead): {startup['first_load_s']:.1f} s.",
        "",
        f"Filter changes: median of {a.repeat} tries each. Browser busy: the "
        "browser's own counters over the change (Chrome DevTools Performance.getMetrics): "
        "all tasks of the page (TaskDuration) / main-thread JavaScript + layout + style "
        "(ScriptDuration + LayoutDuration + RecalcStyleDuration); the rest of a change is "
        "the server, the websocket and paint. Elements: Streamlit elements on the page "
        "(sidebar included).",
        "",
        *_table(results),
    ]
    (OUT / f"{a.name}.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
