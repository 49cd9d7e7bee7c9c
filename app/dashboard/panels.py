"""Panels several pages show: the data's span, the incidents list, events without time or node,
and an evidence line with the lines around it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl
import streamlit as st

from faultlens.app.dashboard import ui, urls
from faultlens.app.dashboard.views import query, query_soon
from faultlens.reports import q_state
from faultlens.reports.filters import Filters

RUNBOOK_CHARS = 180


def _when(ts: datetime | None) -> str:
    return f"{ts:%Y-%m-%d %H:%M}" if ts else "undated"


def span_banner(f: Filters) -> pl.DataFrame:
    """One line saying what the data covers, the newest line per source, and what is missing a
    time or a node (shown below, never dropped unseen). Returns the per-source span."""
    span = query(q_state.data_span)
    if span.height == 0:
        return span
    dated = span.filter(pl.col("first").is_not_null())
    lo, hi = dated["first"].min(), dated["newest"].max()
    newest = " · ".join(f"{r['source']} {_when(r['newest'])}" for r in span.iter_rows(named=True))
    undated = int(span.filter(pl.col("source") != "slurm jobs")["undated"].sum() or 0)
    no_node = int(span["no_node"].sum() or 0)
    shown = f"{_when(f.since)} to {_when(f.until)}" if f.since and f.until else "everything"
    text = (
        f"**Data span** {_when(lo)} to {_when(hi)} UTC · showing {shown} · "
        f"**newest line per source:** {newest}"
    )
    if undated or no_node:
        text += (
            f" · :orange[**{undated:,} events without a time, {no_node:,} without a node**] "
            "(panel *Events without a time or a node* below)"
        )
    st.markdown(text)
    return span


def md_text(text: Any) -> str:
    """A table cell as markdown text: pipes, markup and line breaks neutralized."""
    out = str(text if text is not None else "")
    for ch in ("\\", "|", "*", "_", "`", "[", "]", "<", ">", "#"):
        out = out.replace(ch, "\\" + ch)
    return out.replace("\n", " ")


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _short(subject: str) -> str:
    """``file /a/b/kern.log`` -> ``file kern.log`` (the evidence link has the whole path)."""
    return "file " + subject.rsplit("/", 1)[-1] if subject.startswith("file ") else subject


SEVERITY_COLOR = {"critical": "red", "error": "orange", "warning": "violet"}


def incidents_table(f: Filters, frame: pl.DataFrame) -> str:
    """Incidents as one markdown list (one element to draw): each subject links to its node
    page and each evidence file:line to the node page showing the lines around it; the runbook
    line under it."""
    items = []
    for r in frame.iter_rows(named=True):
        node = r["nodes"].split(",")[0] if r["nodes"] else None
        subject = md_text(_short(r["subject"]))
        if node:
            subject = f"[{subject}]({urls.node_link(f, node)})"
        where = f"{(r['file'] or '?').rsplit('/', 1)[-1]}:{r['line']}"
        evidence = f"[{md_text(where)}]({urls.node_link(f, node, r['file'], r['line'])})"
        color = SEVERITY_COLOR.get(r["severity"], "gray")
        seen = (
            _when(r["first_seen"])
            if r["first_seen"] == r["last_seen"]
            else f"{_when(r['first_seen'])} → {_when(r['last_seen'])}"
        )
        items.append(
            f"- :{color}[**{r['severity']}**] {subject} · **{md_text(r['cause'])}** · "
            f"{r['events']:,} events, {r['ranks']} ranks · {seen} · `{r['action']}` · "
            f"{evidence}  \n  :gray[{md_text(_cut(r['runbook'] or '', RUNBOOK_CHARS))}]"
        )
    return "\n".join(items)


def unplaced_panel(span: pl.DataFrame) -> None:
    """Events without a time or a node, per file, with the re-ingest command that places them."""
    events = span.filter(pl.col("source") != "slurm jobs") if span.height else span
    missing = int(events["undated"].sum() or 0) + int(events["no_node"].sum() or 0)
    if not missing:
        return
    with st.expander("Events without a time or a node", expanded=False):
        st.markdown(
            "These events are kept and counted, but no time range or node filter can select "
            "them. Re-read the file with what it lacks: `faultlens ingest --reparse PATH "
            "--boot-time 'YYYY-MM-DD HH:MM:SS'` (boot-relative stamps) and/or `--node NODE` "
            "(logs that do not name their host)."
        )
        _unplaced_table()


def _unplaced_table() -> None:
    """The per-file table: a scan of every event (a second or more at 50M events), so the page
    is drawn without waiting for it and the table appears once it is counted."""
    ready, table = query_soon(q_state.unplaced_events)
    if ready:
        st.dataframe(table, hide_index=True, key="unplaced")
    else:
        _unplaced_pending()


UNPLACED_PENDING = "Counting them per file (a scan of every event)…"


@st.fragment(run_every=1.0)
def _unplaced_pending() -> None:
    """Looks again every second; once the table is counted the page runs again to show it."""
    if query_soon(q_state.unplaced_events, wait_s=0.0)[0]:
        st.rerun()
    st.caption(UNPLACED_PENDING)


def evidence() -> None:
    """The evidence line named by the URL (``file`` and ``line``), with the lines around it."""
    file, line = st.query_params.get("file"), st.query_params.get("line")
    if not file or not (line or "").isdigit():
        return
    st.subheader("Evidence")
    ui.source_context(file, int(line))
