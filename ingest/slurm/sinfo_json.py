"""``sinfo --json`` and ``squeue --json`` documents -> the fleet (``nodes``) and node events.

Shapes read (whole documents; every line of one belongs to it, so all are parsed):

- ``sinfo --json`` of Slurm 23.02-25.x: a top-level ``sinfo`` list of rows, each with
  ``nodes.nodes`` (names), ``node.state`` (a list of flags), ``partition.name``, ``gres.total``
  (``gpu:8``) and ``reason`` (``description`` / ``time`` / ``user``);
- ``sinfo --json`` of 22.05 and slurmrestd's ``/nodes``: a top-level ``nodes`` list of nodes with
  ``name``, ``state`` (text or list), ``state_flags``, ``partitions``, ``gres`` and ``reason``;
- ``squeue --json`` (22.05-25.x): a ``jobs`` list with ``job_state`` (text or list), ``nodes`` (a
  host list) and ``partition``: the nodes of running jobs are sightings of the fleet.

Node events (down, drained, not responding) come from ``json_docs.node_event``, the same rule as
slurmrestd's node lists. A document of another shape is quarantined with the reason.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from faultlens.ingest.base import RAW_KEEP_CHARS, ChunkResult, ParseContext, numbered
from faultlens.ingest.schema import Source
from faultlens.ingest.slurm.common import epoch_to_dt, result
from faultlens.ingest.slurm.fleet_rows import fleet_frame
from faultlens.ingest.slurm.json_docs import node_event

# squeue states whose nodes are really allocated (a pending job's "nodes" is empty)
_HOLDING = ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "CONFIGURING", "SIGNALING")


def _number(value: Any) -> Any:
    """Slurm 23+ wraps numbers as ``{"set": true, "number": N}``."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) else None
    return value


def _flags(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [str(s).upper() for s in items if s]


def _text(value: Any) -> str | None:
    if isinstance(value, list):
        return ",".join(str(v) for v in value if v) or None
    return str(value) if value not in (None, "") else None


def sinfo_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per node of a ``sinfo`` or ``nodes`` document: the node_event fields and the
    fleet's (nodelist, partition, gres)."""
    out: list[dict[str, Any]] = []
    for row in doc.get("sinfo") or []:
        if not isinstance(row, dict):
            continue
        names = (row.get("nodes") or {}).get("nodes") or []
        reason = row.get("reason") if isinstance(row.get("reason"), dict) else {}
        for name in names if isinstance(names, list) else [names]:
            out.append(
                {
                    "name": name,
                    "state": _flags((row.get("node") or {}).get("state")),
                    "reason": reason.get("description") or None,
                    "reason_changed_at": _number(reason.get("time")),
                    "reason_set_by_user": reason.get("user") or None,
                    "partition": (row.get("partition") or {}).get("name"),
                    "gres": (row.get("gres") or {}).get("total"),
                }
            )
    for node in doc.get("nodes") or []:
        if not isinstance(node, dict):
            continue
        state = _flags(node.get("state")) + _flags(node.get("state_flags"))
        out.append(
            {
                "name": node.get("name") or node.get("hostname"),
                "state": state,
                "reason": node.get("reason") or None,
                "reason_changed_at": _number(node.get("reason_changed_at")),
                "reason_set_by_user": node.get("reason_set_by_user"),
                "partition": _text(node.get("partitions")),
                "gres": node.get("gres") or None,
            }
        )
    return out


def squeue_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for job in doc.get("jobs") or []:
        if isinstance(job, dict) and set(_flags(job.get("job_state"))) & set(_HOLDING):
            nodes = job.get("nodes")
            if isinstance(nodes, str) and nodes.strip():
                out.append(
                    {
                        "name": nodes,
                        "partition": job.get("partition"),
                        "seen": epoch_to_dt(_number(job.get("start_time"))),
                    }
                )
    return out


def _line_of(df: pl.DataFrame, key: str, names: list[str], first_line: int) -> list[int]:
    """The line of each name in order of appearance: a ``"key": "name"`` pair, else a bare
    list element (``"name",``, the ``nodes.nodes`` list of Slurm 23+), else the document's
    first line."""
    pair = pl.col("raw").str.extract(rf'"{key}":\s*"([^"]*)"')
    bare = pl.col("raw").str.extract(r'^\s*"([^"]*)",?\s*$')
    found = df.select("line", pl.coalesce(pair, bare).alias("v")).drop_nulls("v")
    at: dict[str, list[int]] = {}
    for line, v in found.iter_rows():
        at.setdefault(v, []).append(line)
    out, used = [], dict.fromkeys(at, 0)
    for n in names:
        lines = at.get(str(n)) or []
        i = used.get(str(n), 0)
        out.append(lines[min(i, len(lines) - 1)] if lines else first_line)
        used[str(n)] = i + 1
    return out


def document_tables(
    doc: Any, df: pl.DataFrame, ctx: ParseContext, first_line: int
) -> dict[str, pl.DataFrame] | str:
    if not isinstance(doc, dict):
        return "JSON document is not an object (not sinfo / squeue JSON)"
    if isinstance(doc.get("sinfo"), list) or isinstance(doc.get("nodes"), list):
        rows = sinfo_rows(doc)
        key, source = "name", "sinfo"
    elif isinstance(doc.get("jobs"), list):
        rows = squeue_rows(doc)
        key, source = "nodes", "squeue"
    else:
        return "JSON document has no 'sinfo', 'nodes' or 'jobs' list (not sinfo / squeue JSON)"
    if not rows:
        return {}
    lines = _line_of(df, key, [r["name"] for r in rows], first_line)
    frame = pl.DataFrame(
        [{**r, "line": ln} for r, ln in zip(rows, lines, strict=True)],
        infer_schema_length=None,
        schema_overrides={"state": pl.List(pl.String), "seen": pl.Datetime("us")},
    )
    tables = {
        "nodes": fleet_frame(
            frame.with_columns(
                pl.col("state").list.join("+").alias("_state")
                if "state" in frame.columns
                else pl.lit(None, pl.String).alias("_state")
            ),
            ctx,
            source,
            nodelist="name",
            seen="seen" if "seen" in frame.columns else None,
            state="_state",
        )
    }
    if source == "sinfo":
        as_of = doc.get("last_update")
        events = [
            ev
            for r, ln in zip(rows, lines, strict=True)
            if (ev := node_event(r, ctx, ln, _number(as_of))) is not None
        ]
        if events:
            tables["events"] = pl.DataFrame(events, infer_schema_length=None)
    return tables


class SlurmListJsonParser:
    """``sinfo --json`` / ``squeue --json``: whole JSON documents."""

    name = "sinfo_json"
    source = Source.SLURM
    whole_file = True
    max_line_bytes = 1 << 30

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines[:400])
        if not text.lstrip().startswith("{"):
            return 0.0
        if '"sinfo"' in text:
            return 0.95
        squeue = '"jobs"' in text and '"job_state"' in text and '"steps"' not in text
        nodes = '"nodes"' in text and '"jobs"' not in text and '"partitions"' in text
        return 0.95 if squeue or nodes else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Any:
        """A one-line document (``sinfo --json | jq -c``): its chunk path over one line."""
        return self.parse_chunk(pl.Series([line]), 1, ctx, None).to_line_result()

    def new_state(self, ctx: ParseContext) -> None:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        df = numbered(lines, first_line).filter(pl.col("raw").is_not_null())
        text = "\n".join(lines.fill_null("").to_list())
        if not text.strip():
            return ChunkResult()
        try:
            tables = document_tables(json.loads(text), df, ctx, first_line)
        except (ValueError, RecursionError) as e:
            tables = f"invalid JSON: {e}"
        except (AttributeError, TypeError, OverflowError) as e:
            tables = f"unexpected sinfo / squeue JSON structure: {e}"
        if isinstance(tables, str):
            return ChunkResult(
                quarantine=df.select(
                    "line",
                    pl.col("raw").str.slice(0, RAW_KEEP_CHARS),
                    pl.lit(tables).alias("reason"),
                )
            )
        out = result(tables, parsed=df.height)
        out.parsed_lines = df["line"].cast(pl.Int64)
        return out

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()
