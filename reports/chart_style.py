"""What every chart shares, whichever library draws it (plotly in ``reports.figures``, Vega-Lite
on the dashboard's overview, ``app.dashboard.vega``): the palette, the state colours, the fleet
grid's layout and the Xid labels. Imports no charting library.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

PALETTE = (
    "#4c78a8",
    "#f58518",
    "#e45756",
    "#72b7b2",
    "#54a24b",
    "#eeca3b",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
)
XID_LABEL_CHARS = 26
SEVERITY_COLOR = {
    "info": "#9ecae1",
    "warning": "#eeca3b",
    "error": "#f58518",
    "critical": "#e45756",
}
# telemetry: a few samples per GPU are drawn as points too (a line needs two, one sample alone
# would leave an empty chart); a span shorter than this gets this much either side (no
# sub-millisecond axis)
FEW_SAMPLES = 30
MIN_TIME_SPAN = timedelta(hours=1)
GAP_FACTOR = 3.0  # a step this many times the typical one is a hole: the line stops there


def gap_segments(frame: pl.DataFrame, factor: float = GAP_FACTOR) -> pl.Series:
    """For telemetry rows sorted by GPU then time: a segment number per row that changes after
    each step longer than ``factor`` times the GPU's median step (and with the GPU), so a line
    drawn per segment stops where the telemetry stops instead of ramping across the hole."""
    step = pl.col("ts").diff().over("gpu")
    typical = step.median().over("gpu")
    new = (pl.col("gpu") != pl.col("gpu").shift()).fill_null(True) | (
        step > typical * factor
    ).fill_null(False)
    return frame.select(new.cum_sum().cast(pl.Int32).alias("segment")).to_series()


def xid_label(xid: int, name: str | None) -> str:
    """``Xid 45 PREEMPTIVE_REMOVAL`` from the catalog's ``ROBUST_CHANNEL_PREEMPTIVE_REMOVAL (...)``:
    the words that tell Xids apart, within ``XID_LABEL_CHARS`` so the margin holds them whole."""
    short = (name or "").split(" (")[0].removeprefix("ROBUST_CHANNEL_")
    return _cut(f"Xid {xid} {short}".strip(), XID_LABEL_CHARS)


def _cut(text: str | None, n: int) -> str:
    """``text`` shortened to ``n`` characters (an ellipsis marks the cut): labels fit the margin."""
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


# -- fleet state -----------------------------------------------------------------------------------
STATE_COLOR = {
    "down": "#e45756",
    "drained": "#b279a2",
    "at risk": "#f58518",
    "degraded": "#eeca3b",
    "healthy": "#54a24b",
}
GRID_COLUMNS = 15  # nodes to a row; a large fleet gets twice as many, half the size
GRID_PX = 300  # width of the grid itself
GRID_LABEL_PX = 100  # the group names left of it
LARGE_FLEET = 150
LABEL_PX = 12  # a group name needs this much height: closer ones are left to the hover


def grid_columns(n_nodes: int) -> int:
    return GRID_COLUMNS if n_nodes <= LARGE_FLEET else 2 * GRID_COLUMNS


def grid_positions(frame: pl.DataFrame, columns: int = GRID_COLUMNS) -> pl.DataFrame:
    """``frame`` (``q_state.fleet_state``) with ``col`` / ``row`` cells: groups by their worst
    state then name, each starting a new row, its nodes in name order ``columns`` to a row."""
    rows, cols, row = [], [], 0
    worst = {s: i for i, s in enumerate(STATE_COLOR)}  # groups needing a look come first
    rank = frame.group_by("group").agg(
        pl.col("state").replace_strict(worst, default=len(worst)).min().alias("_rank")
    )
    out = frame.join(rank, on="group").sort("_rank", "group", "node").drop("_rank")
    for _, part in out.group_by("group", maintain_order=True):
        for i in range(part.height):
            rows.append(row + i // columns)
            cols.append(i % columns)
        row += -(-part.height // columns)
    return out.with_columns(pl.Series("col", cols, pl.Int32), pl.Series("row", rows, pl.Int32))


def _group_ticks(cells: pl.DataFrame, pitch: float) -> tuple[list[int], list[str]]:
    """The first row of each group, leaving out names that would overlap the one above."""
    firsts = cells.group_by("group", maintain_order=True).agg(pl.col("row").min())
    gap = max(1, -(-LABEL_PX // max(int(pitch), 1)))
    vals: list[int] = []
    text: list[str] = []
    for group, row in firsts.iter_rows():
        if not vals or row - vals[-1] >= gap:
            vals.append(row)
            text.append(_cut(group, 14))
    return vals, text
