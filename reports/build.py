"""``build_report``: a snapshot of the database, the sections over a window, written as HTML / PDF.

The window ends at the last data (or ``now`` if the data runs past it) and starts ``since`` before
that: a report on last month's logs is not empty because it is run today.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from faultlens.ingest.errors import ConfigError, StoreError
from faultlens.reports import q_fleet
from faultlens.reports.filters import Filters
from faultlens.reports.render import ReportMeta, write_html, write_pdf
from faultlens.reports.sections import build_sections
from faultlens.reports.snapshot import Snapshot, SnapshotReader

log = logging.getLogger(__name__)

_SINCE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hdw])\s*$")
_UNIT = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}


def parse_since(text: str) -> timedelta | datetime:
    """``7d`` / ``36h`` / ``2w`` -> a duration; an ISO date or time -> that instant."""
    m = _SINCE_RE.match(text)
    if m:
        return float(m.group(1)) * _UNIT[m.group(2)]
    try:
        return datetime.fromisoformat(text).replace(tzinfo=None)
    except ValueError as e:
        raise ConfigError(f"--since {text!r}: give a duration like 7d, 36h, 2w or a date") from e


def first_snapshot(
    reader: SnapshotReader, db: Path, attempts: int = 40, pause_s: float = 0.25
) -> Snapshot:
    """The reader's first snapshot; a database that changes while it is copied (an ingest is
    writing) is copied again, for up to ``attempts`` tries."""
    for _ in range(attempts):
        snap = reader.refresh()
        if snap is not None:
            return snap
        if not db.exists():
            raise StoreError(f"no database at {db}: run `faultlens ingest` or `faultlens demo`")
        time.sleep(pause_s)
    raise StoreError(
        f"could not take a consistent copy of {db} ({reader.last_error}); try again later"
    )


def build_report(
    db: Path,
    out: Path,
    *,
    since: timedelta | datetime,
    now: datetime,
    fmt: str = "html",
    models_dir: Path | None = None,
    workdir: Path | None = None,
) -> Path:
    """Write the report of ``db`` over the window to ``out`` (html or pdf); returns the path."""
    if fmt not in ("html", "pdf"):
        raise ConfigError(f"--format {fmt!r}: html or pdf")
    reader = SnapshotReader(db, workdir, with_rollups=False)  # each query runs once: no rollups
    try:
        snap = first_snapshot(reader, db)
        lo, hi = q_fleet.data_range(snap.store)
        until = min(now, hi + timedelta(seconds=1)) if hi else now
        start = since if isinstance(since, datetime) else until - since
        start = max(start, lo) if lo else start  # no node-days before the first data
        f = Filters(since=start, until=until)
        sections = build_sections(snap.store, f, models_dir)
        meta = ReportMeta(
            title="faultlens reliability report",
            window=f"{start:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC",
            db=str(db),
            as_of=hi or snap.as_of,  # the data's newest stamp, not when it was copied
            generated=now,
        )
        writer = write_pdf if fmt == "pdf" else write_html
        return writer(sections, meta, out)
    finally:
        reader.close()


def demo_report(store: Any) -> Path | None:
    """The demo's report: the whole history of the open database as HTML in ``reports/`` beside
    it, or None for an in-memory database.

    Reads the database by its path (a snapshot copy, as any reader does).
    """
    db = Path(getattr(store, "path", ":memory:"))
    if str(db) == ":memory:":
        return None
    store.execute("CHECKPOINT")  # the snapshot copies the file: flush the WAL into it first
    lo, hi = q_fleet.data_range(store)
    now = hi or datetime(1970, 1, 1)
    span = (hi - lo) if lo and hi else timedelta(days=7)
    out_dir = db.resolve().parent / "reports"
    out = out_dir / f"faultlens-report-{now:%Y%m%dT%H%M}.html"
    return build_report(
        db,
        out,
        since=span + timedelta(seconds=1),
        now=now + timedelta(seconds=1),
        models_dir=db.resolve().parent / "models",
    )
