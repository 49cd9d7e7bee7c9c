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
The database is built as ingest leaves it: its rollups kept by the writer (``ingest.rollups``).
Also measured: the reader's snapshot (copy, rollups checked; in this process) against the baseline
in the same run, the reader's work before ingest kept the rollups (copy + every rollup rebuilt from
all events); the dashboard's first load (from the first request to the overview drawn); and a
write while the dashboard runs (``--write-events`` appended, the writer's incremental rollups),
after which every page's first render is timed again.
The machine's load average is recorded with the results (the machine is shared).

Usage: python -m bench.bench_dashboard [--events 50000000] [--db /tmp/bench_dash.duckdb] [--reuse]
       [--repeat 3] [--label TEXT]
Results: bench/out/bench_dashboard.json and .md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from bench.dashboard_report import report
from faultlens.app.dashboard import server
from faultlens.ingest import publish, rollups
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
        INSERT INTO telemetry (ts, node, gpu, metric, value) SELECT TIMESTAMP '2025-01-01' + INTERVAL (m * 10) MINUTE, node, g,
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
    publish.enable(db)  # as a dashboard would have asked: the writer publishes when it closes
    with Store(db) as store:  # what ingest's refresh does after a write: the rollups, once
        done = rollups.maintain(store)
    print(f"rollups built by the writer: {done}", file=sys.stderr)


def append(db: Path, n_events: int, serial: int) -> dict:
    """A write: ``n_events`` more events (as one ingest would load), then the writer's rollup
    upkeep (``ingest.rollups.maintain``, incremental: only the new rows), publishing as a
    ``faultlens`` command does (with the overview's first screen, ``reports.first_screen``)."""
    from faultlens.app.cli import save_first_screen
    from faultlens.ingest import hooks

    hooks.after_publish(save_first_screen)
    with Store(db) as store:
        t0 = time.perf_counter()
        lo = int(store.scalar("SELECT count(*) FROM events")) + serial
        sql = EVENTS_SQL.replace("FROM range(?) t(i)", "FROM range(?, ?) t(i)")
        store.execute(sql, [DAYS, NODES, lo, lo + n_events])
        load_s = time.perf_counter() - t0
        # what refresh's hook does: the new events fall in no job, so no old row was relinked
        t1 = time.perf_counter()
        done = rollups.maintain(store, relinked=False)  # and publishes for readers
        maintain_s = time.perf_counter() - t1
        published = getattr(store, "published", None)  # what that publish did
        # a write whose refresh relinked old events: the copied rows follow (a join on events)
        t1 = time.perf_counter()
        relinked = rollups.maintain(store, relinked=True)
        relinked_s = time.perf_counter() - t1
        relink_published = getattr(store, "published", None)
        store.execute("CHECKPOINT")
    closed = getattr(store, "published", None)  # closing: nothing changed since
    print(
        f"write of {n_events:,} events: load {load_s:.2f} s, rollups {done}, "
        f"following a relink {relinked['seconds']} s; with their publishes {maintain_s:.2f} s "
        f"({published}) and {relinked_s:.2f} s ({relink_published}); close {closed}",
        file=sys.stderr,
    )
    return {
        "events": n_events,
        "load_s": round(load_s, 2),
        "rollups": done,
        "relinked_s": relinked["seconds"],
        "published": published,
        "maintain_with_publish_s": round(maintain_s, 2),
        "relink_published": relink_published,
        "relink_with_publish_s": round(relinked_s, 2),
        "close_published": closed,
    }


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


def baseline_reader_cost(db: Path) -> dict:
    """The reader's work before rollups were kept by ingest (the baseline): copy the database
    and its WAL, then rebuild every rollup in the copy from all events."""
    import shutil
    import tempfile

    from faultlens.reports.rollups import prepare

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        target = Path(tmp) / "copy.duckdb"
        shutil.copyfile(db, target)
        if Path(f"{db}.wal").exists():
            shutil.copyfile(f"{db}.wal", f"{target}.wal")
        copy_s = time.perf_counter() - t0
        with Store(target) as rw:
            full = rollups.maintain(rw, full=True)
            prepare(rw)
            rw.execute("CHECKPOINT")
        total = time.perf_counter() - t0
    print(f"baseline reader (copy + full rollups) {total:.1f} s", file=sys.stderr)
    return {"seconds": round(total, 2), "copy_s": round(copy_s, 2), "rollups_s": full["seconds"]}


def reader_cost(db: Path, published: bool = True) -> dict:
    """The reader's work now: open what the writer published (``published``), or the copy
    reader's (copy, check the rollups ingest kept); no views computed ahead."""
    import tempfile

    from faultlens.reports.snapshot import SnapshotReader

    with tempfile.TemporaryDirectory() as tmp:
        reader = SnapshotReader(db, tmp, published=published)
        t0 = time.perf_counter()
        snap = reader.refresh()
        total = time.perf_counter() - t0
        build = dict(getattr(snap, "build", {}) or {})
        reader.close()
    label = "published" if published else "copy"
    print(f"{label} reader {total:.2f} s: {build}", file=sys.stderr)
    return {"seconds": round(total, 3), **build}


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


def _open_page(page, runs: Runs, nav, path: str) -> float:  # noqa: ANN001
    """Click ``path``'s link in the navigation; seconds until its run finished, page drawn."""
    link = nav.get_by_role("link", name=NAV[path])
    link.wait_for()
    page.evaluate(ARM_JS)
    seen = runs.finished  # a click in the navigation
    link.click()
    runs.wait_after(seen)
    page.get_by_role("heading", name=PAGES[path]).first.wait_for(timeout=120_000)
    return runs.since_click()


def after_write(page, runs: Runs, nav, write: Callable[[], dict], rounds: int = 2) -> dict:  # noqa: ANN001
    """A write while the dashboard runs, then every page opened ``rounds`` times: the first
    visits are served by the previous snapshot while the new one is taken in the background."""
    out: dict[str, Any] = {"write": write()}
    for r in range(rounds):
        out[f"round_{r + 1}"] = {
            path or "overview": round(_open_page(page, runs, nav, path), 3) for path in PAGES
        }
        print(f"after a write, round {r + 1}: {out[f'round_{r + 1}']}", file=sys.stderr)
    return out


def measure(
    url: str,
    repeat: int = 3,
    pages: list[str] | None = None,
    cpu: bool = False,
    write: Callable[[], dict] | None = None,
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
        for path in PAGES:
            if pages and (path or "overview") not in pages:
                continue
            first = _open_page(page, runs, nav, path)
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
        if write is not None:
            results["after_write"] = after_write(page, runs, nav, write)
        browser.close()
    return results


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
    ap.add_argument(
        "--no-rebuild-baseline",
        action="store_true",
        help="Skip the copy + every rollup rebuilt baseline (minutes at 50M events).",
    )
    ap.add_argument("--name", default="bench_dashboard", help="Result file name in bench/out.")
    ap.add_argument(
        "--readers",
        nargs="+",
        default=["copy", "published"],
        choices=["copy", "published"],
        help="How the dashboard reads, each measured in turn (copy: the baseline).",
    )
    ap.add_argument(
        "--write-events",
        type=int,
        default=100_000,
        help="Events appended while the dashboard runs, then every page timed (0: no write).",
    )
    return ap.parse_args()


def _run(a: argparse.Namespace, mode: str, write: Callable[[], dict] | None) -> dict:
    """The browser's measures with the dashboard reading the ``mode`` way (copy / published)."""
    with server.running(a.db, timeout_s=120, env={"FAULTLENS_READER": mode}) as (url, _):
        results = measure(url, a.repeat, a.pages, a.cpu_profile, write=write)
    startup = results.pop("startup")
    return {"startup": startup, "after_write": results.pop("after_write", None), "pages": results}


def main() -> None:
    a = _args()
    if not a.reuse:
        build(a.db, a.events)
    load_before = os.getloadavg()
    nan = {"seconds": float("nan")}
    # the readers in the same run: copy + every rollup rebuilt (the oldest baseline), the copy
    # reader (copy, rollups kept by ingest), and the published view
    skip_rebuild = a.no_snapshot_cost or a.no_rebuild_baseline
    baseline = nan if skip_rebuild else baseline_reader_cost(a.db)
    copy_reader = nan if a.no_snapshot_cost else reader_cost(a.db, published=False)
    reader = nan if a.no_snapshot_cost else reader_cost(a.db)
    writes = iter(range(1, 1_000))
    write = (lambda: append(a.db, a.write_events, next(writes))) if a.write_events else None
    modes = {mode: _run(a, mode, write) for mode in a.readers}
    reader_after = nan if a.no_snapshot_cost else reader_cost(a.db)
    n = duckdb.connect(str(a.db), read_only=True).execute("SELECT count(*) FROM events").fetchone()
    doc = {
        "events": n[0],
        "label": a.label,
        "targets": {"first_render_s": FIRST_RENDER_S, "filter_change_s": FILTER_S},
        "load_average_1_5_15": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
            "cores": os.cpu_count(),
        },
        "baseline_reader": baseline,
        "copy_reader": copy_reader,
        "reader": reader,
        "reader_after_write": reader_after,
        "repeat": a.repeat,
        "modes": modes,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.name}.json").write_text(json.dumps(doc, indent=2))
    (OUT / f"{a.name}.md").write_text("\n".join(report(doc)) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
