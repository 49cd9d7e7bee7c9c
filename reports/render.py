"""Writing a report: one self-contained HTML file (plotly.js inlined once, no CDN), or a PDF.

Everything that comes from logs reaches the page through Jinja2 with autoescape on, so a log line
holding ``<script>`` stays text; figures are plotly's own HTML, whose JSON escapes ``<`` and ``>``.
The PDF is headless Chromium's print of the HTML file.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
from jinja2 import Environment, PackageLoader, select_autoescape
from plotly.offline import get_plotlyjs

from faultlens.ingest.errors import ConfigError, FaultlensError
from faultlens.reports.sections import Section

log = logging.getLogger(__name__)

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
MAX_CELL = 300  # characters of a table cell; a log message can be long
# No mode bar: a report is read (and printed), not explored; its toolbar would print on every chart
FIGURE_CONFIG = {"displayModeBar": False, "displaylogo": False, "responsive": True}


@dataclass
class ReportMeta:
    title: str
    window: str
    db: str
    as_of: datetime
    generated: datetime


def _env() -> Environment:
    return Environment(
        loader=PackageLoader("faultlens.reports", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
    )


def _table(frame: pl.DataFrame) -> dict[str, Any]:
    rows = []
    for row in frame.iter_rows():
        rows.append([_cell(v) for v in row])
    return {"columns": frame.columns, "rows": rows}


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, datetime):
        return f"{v:%Y-%m-%d %H:%M:%S}"
    text = str(v)
    return text if len(text) <= MAX_CELL else text[:MAX_CELL] + "…"


def render_html(sections: list[Section], meta: ReportMeta) -> str:
    """The report as one HTML document that opens offline."""
    view = []
    for s in sections:
        figs = [
            fig.to_html(
                full_html=False,
                include_plotlyjs=False,
                config=FIGURE_CONFIG,
            )
            for fig in s.figures
        ]
        view.append(
            {
                "title": s.title,
                "anchor": s.anchor,
                "numbers": s.numbers,
                "note": s.note,
                "figures": figs,
                "tables": [(c, _table(t)) for c, t in s.tables],
            }
        )
    return (
        _env()
        .get_template("report.html.j2")
        .render(
            title=meta.title,
            window=meta.window,
            db=meta.db,
            as_of=f"{meta.as_of:%Y-%m-%d %H:%M} UTC",
            generated=f"{meta.generated:%Y-%m-%d %H:%M} UTC",
            sections=view,
            plotly_js=get_plotlyjs(),
        )
    )


def write_html(sections: list[Section], meta: ReportMeta, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_html(sections, meta), encoding="utf-8")
    tmp.replace(out)
    return out


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def write_pdf(
    sections: list[Section], meta: ReportMeta, out: Path, timeout_s: float = 120.0
) -> Path:
    """Print the HTML report to PDF with headless Chromium."""
    browser = find_chromium()
    if browser is None:
        raise ConfigError("PDF needs Chromium (`apt-get install chromium`); use --format html")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="faultlens-report-") as tmp:
        html = write_html(sections, meta, Path(tmp) / "report.html")
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={tmp}/profile",
            "--no-pdf-header-footer",
            "--virtual-time-budget=10000",
            f"--print-to-pdf={out.resolve()}",
            html.as_uri(),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise FaultlensError(f"chromium could not print the report: {e}") from e
    if proc.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise FaultlensError(f"chromium could not print the report: {' | '.join(tail)}")
    return out
