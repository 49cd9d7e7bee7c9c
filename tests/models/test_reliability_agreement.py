"""One failure rate: the demo's stage, `faultlens reliability --json`, the report and the
dashboard's overview print the same number for the same window, and it is the one this test
counts from its own timeline (hardware Xid episodes over fleet node-days).

The database is built as a user would: kernel logs, an sacct file and a ``sinfo -N -l`` node
list written from the constants below, fed through `faultlens ingest`. The node list names two
idle nodes that neither log nor run jobs: they are in the fleet (the old per-front-end rates,
which counted the nodes that log or ran jobs, gave another number). The data runs from ``START`` to the last second of the
last day, so every front end's default window (the data's span; the dashboard's whole days; the
report's ``--since`` to the newest record) is the same ``DAYS`` days.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from faultlens.app.cli import app

START = datetime(2026, 3, 1)
DAYS = 10
END = START + timedelta(days=DAYS)  # exclusive
NODES = [f"gpu{i:03d}" for i in range(1, 15)]  # the fleet, as sinfo lists it
JOB_NODES = "gpu[001-012]"  # the job below runs on 12 of them
SNAPSHOT = START + timedelta(days=4, hours=12)  # when sinfo was run
# (hours after START, node, Xid, counts as a failure): Xid 79 / 48 are hardware failures, 13 is
# an application error; the second Xid 79 on gpu002 is 20 minutes after the first (one episode)
XIDS = (
    (0.0, "gpu001", 13, False),
    (34.0, "gpu002", 79, True),
    (34 + 1 / 3, "gpu002", 79, True),
    (51.5, "gpu003", 13, False),
    (75.0, "gpu002", 79, True),
    (132.0, "gpu005", 79, True),
    (170.25, "gpu007", 48, True),
    (239.0, "gpu009", 79, True),
)
EPISODE_GAP_H = 1.0
TEXT = {
    13: "Graphics Exception",
    48: "DBE (double bit error) ECC error",
    79: "GPU has fallen off the bus.",
}
MAIN = str(Path(__file__).resolve().parents[2] / "app" / "dashboard" / "main.py")
runner = CliRunner()


def expected_rate() -> float:
    """Failures per 1000 node-days from the timeline: episodes per node, 14 nodes x 10 days."""
    episodes = 0
    last: dict[str, float] = {}
    for t_h, node, _, failure in sorted(XIDS):
        if not failure:
            continue
        if node not in last or t_h - last[node] > EPISODE_GAP_H:
            episodes += 1
        last[node] = t_h
    return episodes * 1000.0 / (len(NODES) * DAYS)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rate")
    lines = []
    for t_h, node, xid, _ in XIDS:
        ts = (START + timedelta(hours=t_h)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
        lines.append(
            f"{ts} {node} kernel: NVRM: Xid (PCI:0000:3b:00): {xid}, pid=4242, "
            f"name=python, {TEXT[xid]}"
        )
    (folder / "kern.log").write_text("\n".join(lines) + "\n")
    last = END - timedelta(seconds=1)
    (folder / "sacct.txt").write_text(
        "JobID|JobName|User|Partition|NodeList|NNodes|Submit|Start|End|State|ExitCode\n"
        f"100|pretrain|alice|gpu|{JOB_NODES}|12|{START:%Y-%m-%dT%H:%M:%S}|"
        f"{START:%Y-%m-%dT%H:%M:%S}|{last:%Y-%m-%dT%H:%M:%S}|COMPLETED|0:0\n"
    )
    (folder / "sinfo.txt").write_text(
        f"{SNAPSHOT:%a %b %d %H:%M:%S %Y}\n"
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON\n"
        + "".join(
            f"{n}       1      gpu*        {'idle' if i > 11 else 'mix'} 64     2:32:1 512000"
            "        0      1   (null) none\n"
            for i, n in enumerate(NODES)
        )
    )
    path = folder / "rate.duckdb"
    files = [str(folder / f) for f in ("kern.log", "sacct.txt", "sinfo.txt")]
    result = runner.invoke(app, ["ingest", *files, "--db", str(path), "-q"])
    assert result.exit_code == 0, result.output
    return path


def _demo_rate(db: Path) -> str:
    from faultlens.app.demo_stages import stage_attribution
    from faultlens.ingest.store import Store

    console = Console(record=True, width=400)
    with Store(db) as store:
        stage_attribution(store, {}, console)
    text = console.export_text()
    m = re.search(r"Failures and MTBF: ([\d.]+) failures per 1000 node-days", text)
    assert m, text
    return m.group(1)


def _reliability_rate(db: Path) -> str:
    result = runner.invoke(app, ["reliability", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["window"] == [START.isoformat(), END.isoformat()]
    assert doc["nodes"] == len(NODES) and doc["node_days"] == pytest.approx(len(NODES) * DAYS)
    return f"{doc['failures_per_1000_node_days']:.2f}"


def _report_rate(db: Path, out: Path) -> str:
    args = ["report", "--db", str(db), "--since", START.date().isoformat(), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    # the overview's number and the reliability section's: both must be there, and agree
    found = re.findall(r'Failures / 1000 node-days</div><div class="value">([^<]+)</div>', html)
    assert len(found) == 2 and found[0] == found[1], found
    return found[0].strip()


def _dashboard_rate(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    monkeypatch.setenv("FAULTLENS_MODELS_DIR", str(tmp_path / "models"))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    last_day = (END - timedelta(days=1)).date()
    at.sidebar.date_input("f_range").set_value((START.date(), last_day)).run()
    assert not at.exception, [e.value for e in at.exception]
    return {m.label: m.value for m in at.metric}["Failures / 1000 node-days"]


def test_demo_reliability_report_and_dashboard_print_one_rate(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = f"{expected_rate():.2f}"
    assert want == "35.71"  # 5 episodes over 140 node-days (the timeline, counted by hand)
    printed = {
        "reliability": _reliability_rate(db),
        "report": _report_rate(db, tmp_path / "r.html"),
        "dashboard": _dashboard_rate(db, tmp_path, monkeypatch),
        "demo": _demo_rate(db),
    }
    assert printed == dict.fromkeys(printed, want)


def test_failure_trend_adds_up_to_the_headline_rate(db: Path) -> None:
    """The overview's per-day chart counts the same failures over the same fleet: its days hold
    every failure once, and their mean rate is the headline rate (a constant fleet, whole days)."""
    from faultlens.ingest.store import Store
    from faultlens.reports import q_fleet
    from faultlens.reports.filters import Filters
    from faultlens.reports.reliability import window_rate

    with Store(db) as store:
        f = Filters(since=START, until=END)
        rate = window_rate(store, f)
        trend = q_fleet.failure_trend(rate.failures, f, rate.fleet.nodes)
    assert trend.height == DAYS
    assert int(trend["failures"].sum()) == rate.n_failures == 5
    assert float(trend["per_1000_node_days"].mean()) == pytest.approx(expected_rate(), abs=0.01)
