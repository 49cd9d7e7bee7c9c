"""Crash safety of `faultlens run`: kill -9 at random points, over and over, loses nothing.

A real ``faultlens run`` process (real DuckDB file, real textfile, an Alertmanager stand-in so the
alert state file is written) is killed with SIGKILL many times: at a random time over its whole
runtime, and right after it announces (``-v`` logs on stderr) that it starts ingesting, writing
predictions, the textfile or the alert state. The logs grow between runs, so every run ingests.
After every kill: each run in ``predictions`` is complete, the ``.prom`` file is absent or a
complete exposition, the alert state parses, and the lock does not block the next run. At the end a
clean run on the killed database gives exactly the rows of a database that was never killed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest
from prometheus_client.parser import text_string_to_metric_families

from faultlens.app.run import load_config, run_lock
from faultlens.ingest.store import Store
from faultlens.models.predictor import TrainConfig, run_id_for, train_failure_model
from faultlens.models.registry import load_model, save_model
from tests.models.synthetic import random_cluster

REPO = Path(__file__).resolve().parents[2]
N_NODES = 40
AS_OF = (datetime(2025, 3, 30, 12), datetime(2025, 3, 30, 18))  # the runs alternate
XID_LINE = (
    "{ts:%Y-%m-%dT%H:%M:%S}.000001+00:00 {node} kernel: NVRM: Xid (PCI:0000:{bus:02x}:00): "
    "92, pid={pid}, name=python3, High single-bit ECC error rate\n"
)
# stderr markers of app.run (``-v``) -> the phase a kill after them lands in
PHASES = [
    ("ingesting", "ingest"),
    ("ingested", "predict"),
    ("writing predictions", "predictions write"),
    ("predictions written", "after predictions"),
    ("writing textfile", "textfile write"),
    ("textfile written", "alertmanager"),
    ("writing alert state", "alert state write"),
    ("alert state written", "run summary"),
]
# kill mode -> (stderr marker to wait for, or None for a time over the whole run; max delay s)
MODES = {
    "anytime": (None, 0.0),
    "ingest": ("ingesting", 0.3),
    "predictions": ("writing predictions", 0.012),
    "textfile": ("writing textfile", 0.002),
    "alert state": ("writing alert state", 0.002),
}
ORDER = [
    "predictions",
    "anytime",
    "textfile",
    "ingest",
    "predictions",
    "alert state",
    "anytime",
    "textfile",
    "predictions",
    "alert state",
    "ingest",
    "anytime",
]


def trained_model(folder: Path, *, n_nodes: int = N_NODES, seed: int = 3) -> tuple[Path, dict]:
    """A database with a small random cluster and a model trained on it (in ``folder/models``)."""
    db = folder / "f.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=n_nodes, days=30, seed=seed)
        result = train_failure_model(store, as_of=truth["end"], cfg=TrainConfig())
    save_model(folder / "models", result.estimator, result.card)
    return db, truth


class _AlertmanagerStub(BaseHTTPRequestHandler):
    posts = 0

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).posts += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def alertmanager_stub() -> Iterator[str]:
    """An HTTP server that accepts ``POST /api/v2/alerts`` (the state file is kept only then)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AlertmanagerStub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def run_cmd(config: Path, as_of: datetime, *, verbose: bool = True) -> list[str]:
    return [
        sys.executable,
        "-m",
        "faultlens.app.cli",
        *(["-v"] if verbose else []),
        "run",
        "--config",
        str(config),
        "--as-of",
        as_of.isoformat(),
    ]


@dataclass
class Watched:
    """A ``faultlens run`` whose stderr is read line by line as it comes."""

    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    seen: dict[str, threading.Event] = field(default_factory=dict)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, cmd: list[str]) -> Watched:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        w = cls(proc, seen={m: threading.Event() for m, _ in PHASES})
        w.reader = threading.Thread(target=w._read, daemon=True)
        w.reader.start()
        return w

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            for marker, event in self.seen.items():
                if f"faultlens.app.run: {marker}" in line:
                    event.set()

    def wait_for(self, marker: str, timeout_s: float) -> bool:
        """Until ``marker`` is logged (True) or the process ends or the timeout passes (False)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.seen[marker].wait(timeout=0.05):
                return True
            if self.proc.poll() is not None:
                return self.seen[marker].is_set()
        return False

    def finish(self) -> int:
        rc = self.proc.wait()
        assert self.reader is not None
        self.reader.join()
        return rc

    def phase(self) -> str:
        """The phase the process was in when it ended (after the last marker it logged)."""
        last = "startup"
        for line in self.lines:
            for marker, name in PHASES:
                if f"faultlens.app.run: {marker}" in line:
                    last = name
        return last


def append_logs(logs: Path, round_no: int, lines_per_file: int = 150) -> int:
    """Append Xid lines to each node's log (round ``round_no``); returns the lines written."""
    logs.mkdir(exist_ok=True)
    t0 = datetime(2025, 3, 28) + timedelta(hours=4 * round_no)
    for n in range(3):
        node = f"node{n:03d}"
        text = "".join(
            XID_LINE.format(
                ts=t0 + timedelta(seconds=7 * i), node=node, bus=0x18 + i % 8, pid=1000 + i
            )
            for i in range(lines_per_file)
        )
        with open(logs / f"{node}.log", "a") as f:
            f.write(text)
    return 3 * lines_per_file


def write_config(
    path: Path, db: Path, models: Path, logs: Path, textfile: Path, alertmanager: str | None
) -> Path:
    text = (
        f'[faultlens]\ndb = "{db}"\nmodels_dir = "{models}"\n'
        f'[ingest]\npaths = ["{logs}/*.log"]\n[prometheus]\ntextfile = "{textfile}"\n'
    )
    if alertmanager:
        text += f'[alertmanager]\nurl = "{alertmanager}"\nmin_action = "watch"\n'
    path.write_text(text)
    return path


def prom_samples(path: Path) -> dict[str, list]:
    """Samples per metric family of a textfile; raises if it is not valid exposition."""
    return {fam.name: fam.samples for fam in text_string_to_metric_families(path.read_text())}


def check_invariants(db: Path, cfg_path: Path, run_rows: int, run_ids: set[str]) -> None:
    cfg = load_config(cfg_path)
    with run_lock(cfg.lock_file):  # a killed run's flock died with it
        pass
    if db.exists():
        with Store(db, read_only=True) as store:
            per_run = dict(
                store.query("SELECT run_id, count(*) FROM predictions GROUP BY run_id").iter_rows()
            )
            files = store.query("SELECT path, lines FROM ingested_files")
            events = dict(
                store.query(
                    "SELECT file, count(*) FROM events WHERE file IS NOT NULL GROUP BY file"
                ).iter_rows()
            )
        assert set(per_run) <= run_ids and set(per_run.values()) <= {run_rows}, per_run
        for path, lines in files.iter_rows():  # every Xid line is an event: all of a file or none
            assert events.get(path, 0) == lines, (path, lines, events.get(path))
        assert set(events) <= set(files["path"]), "events of a file without its registry row"
    assert cfg.textfile is not None
    assert {p.name for p in cfg.textfile.parent.glob("*.prom")} <= {cfg.textfile.name}
    if cfg.textfile.exists():
        fams = prom_samples(cfg.textfile)
        assert len(fams["faultlens_risk_score"]) == run_rows
        assert fams["faultlens_model_info"][0].labels["run_id"] in run_ids
        assert len(fams["faultlens_last_run_timestamp_seconds"]) == 1  # written last
    if cfg.alert_state.exists():
        state = json.loads(cfg.alert_state.read_text())
        assert all(set(v) == {"labels", "startsAt", "endsAt"} for v in state.values())


def latest_run(db: Path, run_id: str) -> pl.DataFrame:
    with Store(db, read_only=True) as store:
        return store.query(
            "SELECT node, gpu, target, horizon, score, top_features, model_version "
            "FROM predictions WHERE run_id = ? ORDER BY node, gpu NULLS FIRST",
            [run_id],
        )


def ingested(db: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    with Store(db, read_only=True) as store:
        events = store.query(
            "SELECT file, line, ts, node, gpu, code FROM events "
            "WHERE file IS NOT NULL ORDER BY file, line"
        )
        files = store.query("SELECT path, bytes, lines, parsed FROM ingested_files ORDER BY path")
    return events, files


def _kill_once(cmd: list[str], mode: str, clean_s: float, rng: random.Random) -> tuple[str, bool]:
    marker, max_delay_s = MODES[mode]
    w = Watched.start(cmd)
    if marker is None:
        delay_s = rng.uniform(0.0, clean_s)
    elif w.wait_for(marker, timeout_s=10 * clean_s + 60):
        delay_s = rng.uniform(0.0, max_delay_s)
    else:
        delay_s = 0.0  # the run ended before the marker: nothing left to kill
    try:
        w.proc.wait(timeout=delay_s)
    except subprocess.TimeoutExpired:
        os.kill(w.proc.pid, signal.SIGKILL)
    rc = w.finish()
    killed = rc == -signal.SIGKILL
    assert killed or rc in (0, 4), (rc, "".join(w.lines)[-2000:])
    return (w.phase() if killed else "completed"), killed


@pytest.mark.slow
def test_kill_9_during_run_never_leaves_part_of_a_run(
    tmp_path: Path, alertmanager_stub: str
) -> None:
    base_db, _ = trained_model(tmp_path)
    models = tmp_path / "models"
    version = load_model(models).card["model_version"]
    run_ids = {run_id_for(t, version) for t in AS_OF}
    logs = tmp_path / "logs"
    clean_db = tmp_path / "clean.duckdb"
    shutil.copyfile(base_db, clean_db)
    cfg = write_config(
        tmp_path / "faultlens.toml",
        base_db,
        models,
        logs,
        tmp_path / "textfile" / "faultlens.prom",
        alertmanager_stub,
    )
    lines_written = append_logs(logs, 0)

    t0 = time.monotonic()  # the first run is not killed: it measures a run
    first = Watched.start(run_cmd(cfg, AS_OF[0]))
    assert first.finish() in (0, 4), "".join(first.lines)[-2000:]
    clean_s = time.monotonic() - t0
    run_rows = len(prom_samples(cfg.parent / "textfile" / "faultlens.prom")["faultlens_risk_score"])
    assert run_rows == N_NODES * 9  # every node and each of its 8 GPUs
    check_invariants(base_db, cfg, run_rows, run_ids)

    rng = random.Random(11)
    n_kills = int(os.environ.get("FAULTLENS_CRASH_KILLS", "8"))
    phases: dict[str, int] = {}
    kills = 0
    for i in range(n_kills):
        lines_written += append_logs(logs, i + 1)
        mode = ORDER[i % len(ORDER)]
        phase, killed = _kill_once(run_cmd(cfg, AS_OF[i % 2]), mode, clean_s, rng)
        kills += killed
        phases[phase] = phases.get(phase, 0) + 1
        check_invariants(base_db, cfg, run_rows, run_ids)
    left_by_kills = len([*cfg.parent.glob(".*.tmp"), *(cfg.parent / "textfile").glob(".*.tmp")])
    print(
        f"kills={kills} of {n_kills} runs, phases={phases}, run_s={clean_s:.1f}, "
        f"temporary files left by kills={left_by_kills}"
    )
    assert kills >= n_kills // 2 and len(set(phases) - {"completed"}) >= 2, phases

    final = Watched.start(run_cmd(cfg, AS_OF[0]))  # a clean re-run after the kills
    assert final.finish() in (0, 4), "".join(final.lines)[-2000:]
    check_invariants(base_db, cfg, run_rows, run_ids)
    leftovers = [*cfg.parent.glob(".*.tmp"), *(cfg.parent / "textfile").glob(".*.tmp")]
    assert leftovers == [], "temporary files of killed runs were not cleaned up"

    clean_cfg = write_config(
        tmp_path / "clean.toml",
        clean_db,
        models,
        logs,
        tmp_path / "clean-textfile" / "faultlens.prom",
        None,
    )
    done = subprocess.run(
        run_cmd(clean_cfg, AS_OF[0], verbose=False), cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode in (0, 4), done.stderr
    expected = latest_run(clean_db, run_id_for(AS_OF[0], version))
    got = latest_run(base_db, run_id_for(AS_OF[0], version))
    assert expected.height == run_rows and got.equals(expected)
    events, files = ingested(base_db)
    clean_events, clean_files = ingested(clean_db)
    assert events.height == lines_written and events.equals(clean_events)
    assert files.equals(clean_files)
    clean_prom = prom_samples(tmp_path / "clean-textfile" / "faultlens.prom")
    assert (
        prom_samples(cfg.parent / "textfile" / "faultlens.prom")["faultlens_risk_score"]
        == clean_prom["faultlens_risk_score"]
    )
