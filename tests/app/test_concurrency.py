"""Concurrency soak: readers (dashboard, `faultlens report`) while writers (ingest, run) write.

For ``$FAULTLENS_SOAK_S`` seconds (default 120), all at once, on one live database:

- a writer appends kernel Xid lines to per-node logs and drops new sacct and DCGM scrape files
  (known counts), then runs ``faultlens ingest`` on them, round after round;
- the scheduled job, ``faultlens run --config``, every 15 s (it ingests the sacct and DCGM folders
  too, so ingest and run contend for DuckDB's one writer);
- ``faultlens report`` in a loop, each a complete HTML document;
- a real ``faultlens dashboard`` whose pages a headless Chromium reloads in a loop.

A writer turned away because the other holds the database exits with ``ExitCode.LOCKED`` and is
run again, so nothing is lost. At the end the database holds exactly the rows written, no page
showed an exception, and the dashboard's event count grew while it ran.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest

from faultlens.app.common import ExitCode
from faultlens.app.dashboard import server
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from tests.app.test_dashboard_browser import (
    ARGS,
    CHROMIUM,
    PAGES,
    _wait_idle,
)
from tests.app.test_run_crash import REPO, trained_model

SOAK_S = float(os.environ.get("FAULTLENS_SOAK_S", "120"))
RUN_EVERY_S = 15.0
AS_OF = datetime(2025, 3, 26)  # after all generated data
T0 = datetime(2025, 3, 20)
NODES = [f"node{n:03d}" for n in range(4)]
XID_PER_NODE, JOBS_PER_ROUND = 40, 5
TELEMETRY_PER_ROUND = len(NODES) * 8 * 2  # two metrics per GPU
XID_LINE = (
    "{ts:%Y-%m-%dT%H:%M:%S}.{us:06d}+00:00 {node} kernel: NVRM: Xid "
    "(PCI:0000:{bus:02x}:00): 92, pid={pid}, name=python3, "
    "High single-bit ECC error rate\n"
)
SACCT_HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|"
    "Elapsed|NNodes|NodeList|ReqTRES|AllocTRES|\n"
)
SACCT_ROW = (
    "{id}|{id}|train{id}|alice|research|gpu|COMPLETED|0:0|{t}|{t}|{end}|00:30:00|1|{node}|"
    "billing=8,cpu=8,gres/gpu=8,node=1|billing=8,cpu=8,gres/gpu=8,node=1|\n"
)
DCGM_SAMPLE = (
    '{metric}{{gpu="{g}",UUID="GPU-{n:08d}-{g:04d}-0000-0000-000000000000",'
    'pci_bus_id="00000000:{bus:02X}:00.0",device="nvidia{g}",'
    'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"}} {value} {ms}\n'
)
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Feed:
    """The log folders and what has been written to them."""

    root: Path
    rounds: int = 0
    xid_lines: int = 0
    jobs: int = 0
    samples: int = 0

    def __post_init__(self) -> None:
        for sub in ("kern", "sacct", "dcgm", "staging"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def paths(self) -> list[str]:
        return [str(self.root / sub) for sub in ("kern", "sacct", "dcgm")]

    def write_round(self) -> None:
        """Append to each node's kernel log; drop one sacct and one scrape file (renamed into
        place, so no reader sees half of one)."""
        r = self.rounds
        t = T0 + timedelta(minutes=10 * r)
        for n, node in enumerate(NODES):
            text = "".join(
                XID_LINE.format(
                    ts=t + timedelta(seconds=i), us=n, node=node, bus=0x18 + i % 8, pid=100 * r + i
                )
                for i in range(XID_PER_NODE)
            )
            with open(self.root / "kern" / f"{node}.log", "a") as f:
                f.write(text)
        end = f"{t + timedelta(minutes=30):%Y-%m-%dT%H:%M:%S}"
        start = f"{t:%Y-%m-%dT%H:%M:%S}"
        rows = "".join(
            SACCT_ROW.format(
                id=10_000 + JOBS_PER_ROUND * r + k, t=start, end=end, node=NODES[k % len(NODES)]
            )
            for k in range(JOBS_PER_ROUND)
        )
        self._drop("sacct", f"sacct-{r:05d}.txt", SACCT_HEADER + rows)
        ms = int((t - datetime(1970, 1, 1)).total_seconds() * 1000)
        samples = "".join(
            DCGM_SAMPLE.format(
                metric=metric,
                g=g,
                n=n,
                bus=0x18 + g,
                node=node,
                ms=ms,
                value=40 + g + r % 7 if metric.endswith("TEMP") else 300 + r,
            )
            for metric in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
            for n, node in enumerate(NODES)
            for g in range(8)
        )
        self._drop("dcgm", f"scrape-{r:05d}.prom", samples)
        self.rounds += 1
        self.xid_lines += len(NODES) * XID_PER_NODE
        self.jobs += JOBS_PER_ROUND
        self.samples += TELEMETRY_PER_ROUND

    def _drop(self, folder: str, name: str, text: str) -> None:
        tmp = self.root / "staging" / name
        tmp.write_text(text)
        os.replace(tmp, self.root / folder / name)


@dataclass
class Tally:
    """What every loop did; ``errors`` holds anything that went wrong in a thread."""

    calls: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, key: str = "calls") -> None:
        with self.lock:
            d = getattr(self, key)
            d[what] = d.get(what, 0) + 1


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faultlens.app.cli", *args], cwd=REPO, capture_output=True, text=True
    )


def until_not_locked(
    name: str, args: list[str], ok: set[int], tally: Tally, grace_s: float = 120.0
) -> None:
    """Run a writer until it is not turned away by the other writer; any other failure is an
    error. Keeps retrying (also after the soak ends) so that no round is left unwritten."""
    give_up = time.monotonic() + grace_s
    while True:
        done = cli(*args)
        tally.add(name)
        if done.returncode in ok:
            return
        if done.returncode != ExitCode.LOCKED:
            tally.errors.append(f"{name} exited {done.returncode}: {done.stderr[-1500:]}")
            return
        tally.add(name, "retries")
        if "in use by another process" not in done.stderr and "holds" not in done.stderr:
            tally.errors.append(f"{name}: exit 6 without a lock message: {done.stderr[-500:]}")
        if time.monotonic() > give_up:  # (a new process takes seconds to start: no pause)
            tally.errors.append(f"{name} still locked out after {grace_s:.0f}s")
            return


def guarded(fn: Callable[[], None], tally: Tally) -> Callable[[], None]:
    def body() -> None:
        try:
            fn()
        except Exception as e:  # reported by the test, not lost in a thread
            tally.errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")

    return body


class _Balance(HTMLParser):
    """Counts opening and closing tags of the elements that must be closed."""

    CLOSED = {"html", "head", "body", "section", "div", "table", "script", "style", "header"}

    def __init__(self) -> None:
        super().__init__()
        self.depth: dict[str, int] = {}
        self.negative = False

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in self.CLOSED:
            self.depth[tag] = self.depth.get(tag, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.CLOSED:
            self.depth[tag] = self.depth.get(tag, 0) - 1
            self.negative |= self.depth[tag] < 0


def check_html(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>"), path
    assert TRACEBACK not in text
    parser = _Balance()
    parser.feed(text)
    parser.close()
    assert not parser.negative and set(parser.depth.values()) <= {0}, parser.depth
    assert parser.depth.get("body") == 0 and "html" in parser.depth


@pytest.fixture
def live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Feed, Path, Path]]:
    """A live database with one round ingested, a trained model, the run's config."""
    # Real settings: a log written in the last 30 s is read up to its last complete line (the
    # writer appends while ingest and run read; a half-written line must wait, not be lost).
    monkeypatch.setenv("FAULTLENS_LIVE_WRITE_S", "30")
    _, _ = trained_model(tmp_path / "model")
    models = tmp_path / "model" / "models"
    db = tmp_path / "live.duckdb"
    feed = Feed(tmp_path / "logs")
    feed.write_round()
    done = cli("ingest", "--db", str(db), "--quiet", *feed.paths)
    assert done.returncode == 0, done.stderr
    config = tmp_path / "faultlens.toml"
    config.write_text(
        f'[faultlens]\ndb = "{db}"\nmodels_dir = "{models}"\n'
        f'[ingest]\npaths = ["{feed.root}/kern/*.log", "{feed.root}/sacct/*.txt", '
        f'"{feed.root}/dcgm/*.prom"]\n'
        f'[prometheus]\ntextfile = "{tmp_path}/textfile/faultlens.prom"\n'
    )
    yield db, feed, models, config


@pytest.fixture
def dashboard(live: tuple[Path, Feed, Path, Path], tmp_path: Path) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium missing: apt-get install chromium (.ci/apt-packages.txt)")
    db, _, models, _ = live
    with (
        open(tmp_path / "dashboard.log", "wb") as log,
        server.running(db, args=["--models-dir", str(models)], cwd=REPO, output=log) as (url, _),
    ):
        yield url


def _writer(feed: Feed, db: Path, tally: Tally, stop: threading.Event) -> None:
    while not stop.is_set():
        feed.write_round()
        until_not_locked("ingest", ["ingest", "--db", str(db), "--quiet", *feed.paths], {0}, tally)


def _scheduler(config: Path, tally: Tally, stop: threading.Event) -> None:
    while True:
        until_not_locked(
            "run",
            ["run", "--config", str(config), "--as-of", AS_OF.isoformat()],
            {ExitCode.OK, ExitCode.ATTENTION},
            tally,
        )
        if stop.wait(RUN_EVERY_S):
            return


def _reporter(db: Path, out: Path, tally: Tally, stop: threading.Event) -> None:
    out.mkdir()
    while not stop.is_set():
        target = out / f"report-{tally.calls.get('report', 0):03d}.html"
        done = cli("report", "--db", str(db), "--since", "30d", "--out", str(target))
        tally.add("report")
        if done.returncode != 0:
            tally.errors.append(f"report exited {done.returncode}: {done.stderr[-1500:]}")
            continue
        try:
            check_html(target)
        except AssertionError as e:
            tally.errors.append(f"report {target.name} not well-formed: {e}")
        target.unlink()  # 5 MB each


EVENTS_SHOWN = re.compile(r"Rows per table:.*?\bevents ([\d,]+)")


def _browse(url: str, tally: Tally, stop: threading.Event) -> tuple[list[int], list[str]]:
    """Reload every page in turn until ``stop``; the events count Data health showed, and the
    snapshot warnings the sidebar showed."""
    from playwright.sync_api import sync_playwright

    shown: list[int] = []
    warnings: list[str] = []
    paths = list(PAGES)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        i = 0
        while not stop.is_set():
            path = "data-health" if i % 3 == 0 else paths[(i // 3) % len(paths)]
            i += 1
            page.goto(f"{url}/{path}")
            page.get_by_role("heading", name=PAGES[path]).first.wait_for(timeout=90_000)
            _wait_idle(page)
            tally.add("page load")
            body = page.inner_text("body")
            shown_errors = page.locator(
                "[data-testid='stException'], [data-testid='stAlertContentError']"
            ).all_inner_texts()
            if shown_errors or TRACEBACK in body:
                tally.errors.append(
                    f"page /{path} shows an error: {' | '.join(shown_errors) or body}"[:3000]
                )
            if "snapshot failed" in body:
                warnings.append(
                    f"/{path}: " + next(ln for ln in body.splitlines() if "snapshot failed" in ln)
                )
            if path == "data-health":
                m = EVENTS_SHOWN.search(body)
                if m is None:
                    tally.errors.append(f"/data-health shows no events count: {body[:800]}")
                else:
                    shown.append(int(m.group(1).replace(",", "")))
        browser.close()
    return shown, warnings


def _db_counts(db: Path) -> dict[str, int]:
    with Store(db, read_only=True) as store:
        return {
            "events": store.scalar("SELECT count(*) FROM events"),
            "events_distinct": store.scalar(
                "SELECT count(*) FROM (SELECT DISTINCT file, line FROM events)"
            ),
            "jobs": store.scalar("SELECT count(*) FROM jobs"),
            "jobs_distinct": store.scalar("SELECT count(DISTINCT job_id) FROM jobs"),
            "telemetry": store.scalar("SELECT count(*) FROM telemetry"),
            "telemetry_distinct": store.scalar(
                "SELECT count(*) FROM (SELECT DISTINCT ts, node, gpu, metric FROM telemetry)"
            ),
            "failed_files": store.scalar(
                "SELECT count(*) FROM ingested_files WHERE status NOT IN ('ok')"
            ),
            "runs": store.scalar("SELECT count(DISTINCT run_id) FROM predictions"),
        }


@pytest.mark.integration
@pytest.mark.slow
def test_readers_and_writers_for_minutes(live, dashboard: str, tmp_path: Path) -> None:
    db, feed, _, config = live
    tally, stop = Tally(), threading.Event()
    threads = [
        threading.Thread(target=guarded(lambda: _writer(feed, db, tally, stop), tally)),
        threading.Thread(target=guarded(lambda: _scheduler(config, tally, stop), tally)),
        threading.Thread(
            target=guarded(lambda: _reporter(db, tmp_path / "reports", tally, stop), tally)
        ),
    ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    timer = threading.Timer(SOAK_S, stop.set)
    timer.start()
    try:
        shown, warnings = _browse(dashboard, tally, stop)
    finally:
        stop.set()
        timer.cancel()
        for t in threads:
            t.join()
    soak_s = time.monotonic() - t0
    counts = _db_counts(db)
    print(
        f"soak {soak_s:.0f}s: rounds={feed.rounds} calls={tally.calls} "
        f"retries={tally.retries} events shown={shown} warnings={warnings} counts={counts}"
    )
    server_log = (tmp_path / "dashboard.log").read_text(errors="replace")[-6000:]
    assert tally.errors == [], "\n\n".join([*tally.errors, "dashboard log:", server_log])
    assert counts["events"] == counts["events_distinct"] == feed.xid_lines
    assert counts["jobs"] == counts["jobs_distinct"] == feed.jobs
    assert counts["telemetry"] == counts["telemetry_distinct"] == feed.samples
    assert counts["failed_files"] == 0 and counts["runs"] == 1
    at_least = max(1, int(SOAK_S // 60))  # (each call takes seconds on a loaded machine)
    assert feed.rounds > at_least and tally.calls.get("run", 0) >= at_least
    assert tally.calls.get("report", 0) >= at_least
    assert len(shown) >= 2 and shown[-1] > shown[0] and shown == sorted(shown), shown
    assert shown[-1] <= feed.xid_lines


def test_a_line_half_written_when_ingest_reads_is_not_lost(tmp_path: Path) -> None:
    line = XID_LINE.format(ts=T0, us=0, node="node000", bus=0x18, pid=1)
    log = tmp_path / "kern.log"
    log.write_text(line + line[:60])  # the logger is in the middle of its write()
    now = datetime.fromtimestamp(log.stat().st_mtime, UTC).replace(tzinfo=None)
    with Store(tmp_path / "f.duckdb") as store:
        ingest_paths(store, [str(log)], now=now, fmt="kernel", live_write_s=30)  # the CLI's
        with open(log, "a") as f:
            f.write(line[60:])
        ingest_paths(store, [str(log)], now=now, live_write_s=30)
        events = store.scalar("SELECT count(*) FROM events")
        quarantined = store.scalar("SELECT count(*) FROM quarantine")
    assert (events, quarantined) == (2, 0)


HOLD = (
    "import sys; from ingest.store import Store; s = Store(sys.argv[1]); print('held', "
    "flush=True); sys.stdin.read(); s.close()"
)


def test_a_writer_waits_for_or_is_told_the_database_is_busy(tmp_path: Path) -> None:
    from faultlens.app.run import open_store
    from faultlens.ingest.store import DatabaseBusyError

    db = tmp_path / "f.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(DatabaseBusyError, match="in use by another process"):
            open_store(db, wait_s=0.0)
        log = tmp_path / "kern.log"
        log.write_text(XID_LINE.format(ts=T0, us=0, node="node000", bus=0x18, pid=1))
        done = cli("ingest", "--db", str(db), "--quiet", str(log))
        assert done.returncode == ExitCode.LOCKED and "try again later" in done.stderr
        release = threading.Timer(0.5, holder.stdin.close)  # the other writer finishes
        release.start()
        with open_store(db, wait_s=60.0) as store:  # the run waits for it
            assert store.count("events") == 0
        release.join()
    finally:
        if holder.stdin and not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(timeout=30)
