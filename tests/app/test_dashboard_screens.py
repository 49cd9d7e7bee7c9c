"""The on-call screens in a real headless Chromium (Playwright), on two databases: the small
demo-like one (``tests.reports.smalldb``, its log lines written to a folder) and one ingested from
``../shared/corpus``. From an incident to its evidence lines, a pasted URL, a click on the fleet
grid, every chart's legend and labels inside its frame, and every page against its reviewed
screenshot in ``tests/data/screenshots/``.

References are written only on purpose: ``FAULTLENS_UPDATE_SCREENSHOTS=1`` (then look at each one
before committing it). A page matches when at most ``MAX_CHANGED`` of its pixels differ by more
than ``PIXEL_TOLERANCE`` in some channel, compared at half size (font hinting and antialiasing move
single pixels). What changes from run to run is masked: the sidebar's freshness line (snapshot
time, database path), the ingest times of the files table, and, on the corpus, the span banner
(some corpus files are stamped from their modification time).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import numpy as np
import pytest
from PIL import Image

from faultlens.app.dashboard import server
from faultlens.ingest.store import Store
from tests.app.test_dashboard_browser import ARGS, CHROMIUM, _wait_idle
from tests.conftest import CORPUS
from tests.reports import smalldb

pytestmark = pytest.mark.integration

SCREENSHOTS = Path(__file__).resolve().parents[1] / "data" / "screenshots"
UPDATE = os.environ.get("FAULTLENS_UPDATE_SCREENSHOTS") == "1"
PIXEL_TOLERANCE = 48  # of 255, in any channel
MAX_CHANGED = 0.015  # share of pixels allowed to differ
VIEWPORT = {"width": 1400, "height": 1000}
PAGES = {  # url path -> the heading it shows
    "overview": "Fleet overview",
    "events": "Event explorer",
    "node": "Node",
    "jobs": "Failed jobs",
    "predictions": "Predictions",
    "stragglers": "Stragglers",
    "recovery": "Recovery what-if",
    "data-health": "Data health",
}
# the corpus opens on a fixed window: its newest stamps come from file modification times
CORPUS_RANGE = "from=2016-06-09&to=2026-08-17"


@dataclass
class Site:
    name: str
    url: str
    db: Path
    query: str = ""  # added to every page's URL


def _demo_db(tmp: Path) -> tuple[Path, Path]:
    """The small database, its events' file and line pointing at log files of a folder."""
    logs = tmp / "logs"
    db = smalldb.build(tmp / "small.duckdb")
    with Store(db) as store:
        for node in smalldb.NODES:
            kern = logs / node / "kern.log"
            kern.parent.mkdir(parents=True, exist_ok=True)
            kern.write_text("".join(f"{node} kernel line {i}\n" for i in range(1, 160)))
            store.execute(
                "UPDATE events SET file = ? WHERE node = ? AND source <> 'slurm'", [str(kern), node]
            )
    return db, logs


def _corpus_db(tmp: Path) -> Path:
    db = tmp / "corpus.duckdb"
    subprocess.run(
        [sys.executable, "-m", "faultlens.app.cli", "ingest", str(CORPUS), "--db", str(db)],
        check=False,  # a few corpus files are expected to fail to parse: counted, not fatal
        capture_output=True,
        timeout=600,
    )
    assert db.is_file()
    return db


def _serve(db: Path, logs: Path, tmp: Path) -> Iterator[str]:
    args = ["--models-dir", str(tmp / "models"), "--logs", str(logs)]
    with server.running(db, args=args, timeout_s=120) as (url, _):
        yield url


@pytest.fixture(scope="module", params=["demo", "corpus"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium missing: apt-get install chromium (.ci/apt-packages.txt)")
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "demo":
        db, logs = _demo_db(tmp)
        query = ""
    else:
        if not CORPUS.is_dir():
            pytest.fail(f"the shared corpus is missing at {CORPUS}")
        db, logs, query = _corpus_db(tmp), CORPUS, CORPUS_RANGE
    for url in _serve(db, logs, tmp):
        yield Site(request.param, url, db, query)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser) -> Iterator:  # noqa: ANN001
    context = browser.new_context(viewport=VIEWPORT)
    yield context.new_page()
    context.close()


def _open(page, site: Site, path: str, query: str = "") -> None:  # noqa: ANN001
    sep = "&" if query and site.query else ""
    q = f"{site.query}{sep}{query}"
    page.goto(f"{site.url}/{path}" + (f"?{q}" if q else ""))
    page.get_by_role("heading", name=PAGES.get(path.split("?")[0], "Node")).first.wait_for(
        timeout=120_000
    )
    _settled(page)


def _settled(page) -> None:  # noqa: ANN001
    """The run finished and every chart is drawn."""
    _wait_idle(page)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot')]"
        ".every(p => p.querySelector('.main-svg'))"
        " && [...document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]')]"
        ".every(c => c.querySelector('svg.marks'))",
        timeout=60_000,
    )
    assert page.locator("[data-testid='stException']").count() == 0, page.content()[:2000]
    assert page.get_by_text("Page not found").count() == 0


def _file_line(path: str, number: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        for i, text in enumerate(fh, 1):
            if i == number:
                return text.rstrip("\n")
    raise AssertionError(f"{path} has no line {number}")


def test_an_incident_links_to_its_evidence_lines(site: Site, page) -> None:  # noqa: ANN001
    _open(page, site, "overview")
    link = page.locator("[data-testid='stMain'] a[href*='file=']").first
    href = link.get_attribute("href") or ""
    params = parse_qs(urlparse(href).query)
    file, line = params["file"][0], int(params["line"][0])
    if link.get_attribute("target") == "_blank":
        with page.context.expect_page() as opened:
            link.click()
        evidence = opened.value
    else:
        link.click()
        evidence = page
    evidence.get_by_role("heading", name="Evidence", exact=True).wait_for(timeout=120_000)
    _settled(evidence)
    context = evidence.locator("[data-testid='stCode']").last.inner_text()
    expected = _file_line(file, line)
    assert f">{line:>8} | {expected}" in context, context
    if "node" in params:
        assert params["node"][0] in evidence.url


def test_a_pasted_url_opens_the_same_view(site: Site, page) -> None:  # noqa: ANN001
    with Store(site.db, read_only=True) as store:
        row = store.query(
            "SELECT node, file, line, ts FROM events WHERE node IS NOT NULL AND ts IS NOT NULL "
            "AND file IS NOT NULL AND severity IN ('error', 'critical') ORDER BY ts DESC LIMIT 1"
        ).row(0, named=True)
    day = row["ts"].date()
    query = urlencode(
        {"node": row["node"], "file": row["file"], "line": row["line"], "from": day, "to": day}
    )
    page.goto(f"{site.url}/node?{query}")
    page.get_by_role("heading", name="Evidence", exact=True).wait_for(timeout=120_000)
    _settled(page)
    assert _picked_node(page) == row["node"]
    dates = page.locator("[data-testid='stSidebar'] [data-testid='stDateInput'] input")
    shown = [dates.nth(i).input_value() for i in range(dates.count())]
    assert shown and all(v == str(day) for v in shown), shown
    context = page.locator("[data-testid='stCode']").last.inner_text()
    assert f">{row['line']:>8} | {_file_line(row['file'], row['line'])}" in context
    kept = parse_qs(urlparse(page.url).query)  # the URL still says what is shown
    assert kept["node"] == [row["node"]] and kept["from"] == [str(day)]


def test_a_click_on_the_fleet_grid_opens_the_node(site: Site, page) -> None:  # noqa: ANN001
    if site.name != "demo":
        pytest.skip("one fleet is enough for the click")
    _open(page, site, "overview")
    # gpu002's square: Vega-Lite draws each node a mark, described by its fields
    square = page.locator(
        ".st-key-fleet_grid path[aria-roledescription='square']"
        f"[aria-label*='node: {smalldb.RISKY_NODE};']"
    )
    assert square.count() == 1
    square.hover()
    square.click()
    page.get_by_role("heading", name="Node").first.wait_for(timeout=60_000)
    page.wait_for_url("**/node?*", timeout=60_000)
    _settled(page)
    assert parse_qs(urlparse(page.url).query)["node"] == [smalldb.RISKY_NODE]
    assert _picked_node(page) == smalldb.RISKY_NODE


def _picked_node(page) -> str:  # noqa: ANN001
    box = page.locator("[data-testid='stSelectbox']", has_text="Node").first
    return box.locator("input").first.input_value()


CHART_GEOMETRY = """
() => [...document.querySelectorAll('.js-plotly-plot')].map(p => {
  const svg = p.querySelector('.main-svg').getBoundingClientRect();
  const inside = r => r.width === 0 || (r.left >= svg.left - 1 && r.right <= svg.right + 1
                                        && r.top >= svg.top - 1 && r.bottom <= svg.bottom + 1);
  const legend = p.querySelector('.legend');
  const ticks = [...p.querySelectorAll('.xtick text, .ytick text')];
  const xt = [...p.querySelectorAll('.xtick text')].map(t => t.getBoundingClientRect());
  const lg = legend ? legend.getBoundingClientRect() : null;
  const overlap = lg ? xt.some(r => r.width && r.left < lg.right && r.right > lg.left
                                    && r.top < lg.bottom && r.bottom > lg.top) : false;
  return {title: (p.querySelector('.gtitle') || {}).textContent || '',
          legend_inside: legend ? inside(lg) : true,
          ticks_inside: ticks.every(t => inside(t.getBoundingClientRect())),
          legend_over_ticks: overlap};
})
"""

# Vega-Lite charts (the overview's): every label, legend entry and title within the chart's frame
VEGA_GEOMETRY = """
() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].map(c => {
  const svg = c.querySelector('svg.marks'), box = svg.getBoundingClientRect();
  const inside = r => r.width === 0 || (r.left >= box.left - 1 && r.right <= box.right + 1
                                        && r.top >= box.top - 1 && r.bottom <= box.bottom + 1);
  const texts = [...svg.querySelectorAll('text')];
  const title = svg.querySelector('.role-title-text');
  return {title: title ? title.textContent : '',
          legend_inside: [...svg.querySelectorAll('.role-legend text')]
                           .every(t => inside(t.getBoundingClientRect())),
          ticks_inside: texts.every(t => inside(t.getBoundingClientRect())),
          legend_over_ticks: false};
})
"""


def test_every_page_matches_its_reviewed_screenshot(
    site: Site,
    page,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    failures = []
    scripts: list[str] = []  # every page draws Vega-Lite: the browser never loads plotly.js
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    for path in PAGES:
        _open(page, site, path)
        for chart in page.evaluate(CHART_GEOMETRY) + page.evaluate(VEGA_GEOMETRY):
            problems = [k for k in ("legend_inside", "ticks_inside") if not chart[k]]
            problems += ["legend_over_ticks"] if chart["legend_over_ticks"] else []
            if problems:
                failures.append(f"{path}: chart {chart['title']!r}: {', '.join(problems)}")
        masks = [page.locator("[data-testid='stSidebar'] [data-testid='stCaptionContainer']")]
        if path == "data-health":
            masks.append(page.locator("[data-testid='stDataFrame']").first)
        if site.name == "corpus" and path == "overview":
            masks.append(page.locator("[data-testid='stMarkdown']", has_text="Data span").first)
        shot = page.screenshot(animations="disabled", mask=masks, caret="hide")
        problem = _compare(shot, SCREENSHOTS / f"{site.name}-{path}.png", tmp_path)
        if problem:
            failures.append(f"{path}: {problem}")
    assert scripts, "no script requests seen: the check below would prove nothing"
    assert not [u for u in scripts if "plotly" in u.lower()], scripts
    assert not failures, "\n".join(failures)


def _half(png: bytes | Path) -> Image.Image:
    import io

    image = Image.open(io.BytesIO(png) if isinstance(png, bytes) else png).convert("RGB")
    if image.size == (VIEWPORT["width"], VIEWPORT["height"]):
        image = image.resize((image.width // 2, image.height // 2), Image.Resampling.LANCZOS)
    return image


def _compare(shot: bytes, reference: Path, out: Path) -> str | None:
    """None when the screenshot matches the reference (written instead, on purpose only); a
    mismatch leaves the screenshot in ``out`` to look at."""
    actual = _half(shot)
    if UPDATE:
        reference.parent.mkdir(parents=True, exist_ok=True)
        actual.save(reference, optimize=True)
        return None
    if not reference.is_file():
        return f"no reference {reference.name}: run with FAULTLENS_UPDATE_SCREENSHOTS=1, look at it"
    expected = Image.open(reference).convert("RGB")
    if expected.size != actual.size:
        return f"size {actual.size} != reference {expected.size}"
    diff = np.abs(np.asarray(actual, np.int16) - np.asarray(expected, np.int16)).max(axis=2)
    changed = float((diff > PIXEL_TOLERANCE).mean())
    if changed > MAX_CHANGED:
        actual.save(out / reference.name)
        return (
            f"{changed:.1%} of pixels differ from {reference.name} (at most {MAX_CHANGED:.1%}); "
            f"this run's: {out / reference.name}"
        )
    return None
