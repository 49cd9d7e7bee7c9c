"""The dashboard and the report in a real headless Chromium (Playwright), one browser session.

Starts ``faultlens dashboard`` on a free port, visits every page, changes a filter, checks the
numbers and that no exception is shown, and saves screenshots; then opens the HTML report with all
network requests blocked and checks its charts render.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultlens.app.dashboard import server
from tests.reports import smalldb

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PAGES = {  # url path -> text the page must show ("" is the default page, the overview)
    "": "Fleet overview",
    "events": "Event explorer",
    "node": "Node",
    "jobs": "Failed jobs",
    "predictions": "Predictions",
    "stragglers": "Stragglers",
    "recovery": "Recovery what-if",
    "data-health": "Data health",
}


_free_port, _wait_http = server.free_port, server.wait_http  # (other browser tests use these)


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium missing: apt-get install chromium (.ci/apt-packages.txt)")
    db = smalldb.build(tmp_path / "small.duckdb")
    args = ["--models-dir", str(tmp_path / "models")]
    with server.running(db, args=args, output=subprocess.PIPE) as (url, _):
        yield url, db


def _wait_idle(page) -> None:  # noqa: ANN001
    """Until Streamlit finished the run (no 'Running...' status widget) and content is there."""
    page.wait_for_selector("[data-testid='stMain']", timeout=30_000)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'"
        " && !document.querySelector('[data-testid=\"stSkeleton\"]')",
        timeout=60_000,
    )


def _no_exception(page) -> None:  # noqa: ANN001
    assert page.locator("[data-testid='stException']").count() == 0, page.content()[:2000]


def test_dashboard_and_report_in_chromium(dashboard: tuple[str, Path], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    url, db = dashboard
    shots = tmp_path / "shots"
    shots.mkdir()
    report = tmp_path / "report.html"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "faultlens.app.cli",
            "report",
            "--db",
            str(db),
            "--since",
            "30d",
            "--out",
            str(report),
        ],
        check=True,
        capture_output=True,
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for path, title in PAGES.items():
            page.goto(f"{url}/{path}")
            page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)
            _wait_idle(page)
            _no_exception(page)
            page.screenshot(path=str(shots / f"{path or 'overview'}.png"), full_page=True)
        _check_overview_numbers(page, url)
        _check_report_offline(browser, report, shots)
        browser.close()
    assert len(list(shots.glob("*.png"))) == len(PAGES) + 2


def _metric(page, label: str) -> str:  # noqa: ANN001
    box = page.locator("[data-testid='stMetric']", has_text=label).first
    return box.locator("[data-testid='stMetricValue']").inner_text().strip()


def _check_overview_numbers(page, url: str) -> None:  # noqa: ANN001
    page.goto(url)
    page.get_by_role("heading", name="Fleet overview").wait_for(timeout=60_000)
    _wait_idle(page)
    # default range: the whole week of data (less than 30 days)
    assert (
        _metric(page, "Failures / 1000 node-days")
        == f"{smalldb.FAILURES * 1000 / (len(smalldb.NODES) * 7):.2f}"
    )
    assert _metric(page, "Jobs lost") == "2"
    # change a filter: the dgx-b cluster only
    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.locator("[data-testid='stMultiSelect']").first.click()
    page.get_by_role("option", name="dgx-b").click()
    page.keyboard.press("Escape")
    # (the failure rate is the same as the fleet's, 1 of 2 nodes vs 3 of 6: wait for the jobs)
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stMetric\"]')]"
        ".some(m => m.innerText.includes('Jobs lost') && m.querySelector("
        "'[data-testid=\"stMetricValue\"]').innerText.trim() === '1')",
        timeout=60_000,
    )
    _wait_idle(page)
    assert _metric(page, "Failures / 1000 node-days") == f"{1000 / (2 * 7):.2f}"
    assert _metric(page, "Jobs lost") == "1"
    _no_exception(page)


def _check_report_offline(browser, report: Path, shots: Path) -> None:  # noqa: ANN001
    context = browser.new_context(offline=True)
    requests: list[str] = []

    def block(route) -> None:  # noqa: ANN001
        if not route.request.url.startswith("file:"):
            requests.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", block)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    dialogs: list[str] = []  # an injected <script>alert(...)</script> would open one

    def on_dialog(dialog) -> None:  # noqa: ANN001
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(report.as_uri())
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
    n_plots = page.locator(".js-plotly-plot").count()
    assert n_plots >= 15
    assert page.locator(".js-plotly-plot .main-svg").count() >= n_plots
    assert not errors, errors
    assert not [r for r in requests if not r.startswith("data:")], requests
    # a log line holding markup stays text
    assert page.get_by_text(smalldb.SCRIPT_LINE).count() >= 1
    assert dialogs == []
    # the listener does see an alert the page really opens
    page.evaluate("() => alert('probe')")
    assert dialogs == ["probe"]
    text = page.inner_text("body")
    assert re.search(r"Jobs lost\s+2 of 3", text), text[:1500]
    page.screenshot(path=str(shots / "report.png"), full_page=False)
    page.screenshot(path=str(shots / "report-full.png"), full_page=True)
    context.close()
