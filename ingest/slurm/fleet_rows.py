"""Slurm node lists -> ``nodes`` (the fleet table): one row per node a listing names.

``sinfo`` (text and ``--json``), ``squeue`` (text and ``--json``) and ``scontrol show node`` all
say which nodes the site runs; each row they give becomes a sighting of every node of its host
list (expanded by ``python-hostlist``, ``ingest.slurm.common.nodes_expr``) with its partition,
its GPUs (the ``gpu`` entries of its Gres: ``gpu:8``, ``gpu:a100:4(S:0-1)``, summed), its state,
and when it was seen (the listing's own time where it has one; else the file's time). A node
seen once counts the whole window in the fleet model (``models.fleet``).
"""

from __future__ import annotations

import re
from datetime import datetime

import polars as pl

from faultlens.ingest.base import ParseContext
from faultlens.ingest.schema import SITE_DATASET
from faultlens.ingest.slurm.common import gpus_expr, gpus_in, nodes_expr

_GPU_ENTRY = r"(?:^|,)gpu(?::[^:,()\s]+)?:\d+"


def gres_gpus(text: str | None) -> int | None:
    """``gpus_from_gres`` of one string (the reference for the vectorized one)."""
    found = re.findall(_GPU_ENTRY, text or "")
    return sum(int(re.search(r"(\d+)$", f)[1]) for f in found) if found else None


def node_gpus(gres: str | None, tres: str | None = None) -> int | None:
    """A node's GPUs: its Gres entries, else its TRES (``gres/gpu=4``)."""
    n = gres_gpus(gres)
    return n if n is not None else gpus_in(tres)


def gpus_from_gres(gres: pl.Expr) -> pl.Expr:
    """GPUs in a Gres string (``gpu:8``, ``gpu:h100:8(S:0-1),shard:4``, ``gpu:a:2,gpu:b:2``);
    null when it names none."""
    counts = gres.str.extract_all(_GPU_ENTRY).list.eval(
        pl.element().str.extract(r"(\d+)$").cast(pl.Int64)
    )
    return pl.when(counts.list.len() > 0).then(counts.list.sum()).otherwise(None).cast(pl.Int32)


def dataset_of(ctx: ParseContext) -> str:
    return str((ctx.options or {}).get("dataset") or SITE_DATASET)


def seen_at(ctx: ParseContext) -> datetime | None:
    """When a listing without a time of its own was taken: the file's modification time."""
    return ctx.mtime.replace(tzinfo=None) if ctx.mtime else None


def fleet_frame(
    rows: pl.DataFrame,
    ctx: ParseContext,
    source: str,
    *,
    nodelist: str = "nodelist",
    partition: str | None = "partition",
    gres: str | None = "gres",
    gpus: str | None = None,
    tres: str | None = None,
    seen: str | None = None,
    state: str | None = None,
) -> pl.DataFrame:
    """``nodes`` rows from ``rows`` (one per listing row, with a ``line`` column): the host
    list in column ``nodelist`` expanded, GPUs from ``gpus`` (a count) or ``gres`` (text)."""
    if rows.height == 0:
        return pl.DataFrame()

    def col(name: str | None, dtype: pl.DataType) -> pl.Expr:
        if name and name in rows.columns:
            return pl.col(name).cast(dtype)
        return pl.lit(None, dtype)

    n_gpus = col(gpus, pl.Int32) if gpus else gpus_from_gres(col(gres, pl.String))
    if tres:  # scontrol's CfgTRES: gres/gpu=4
        n_gpus = pl.coalesce(n_gpus, gpus_expr(col(tres, pl.String)))
    when = pl.coalesce(col(seen, pl.Datetime("us")), pl.lit(seen_at(ctx), pl.Datetime("us")))
    part = col(partition, pl.String).str.strip_chars_end("*")  # sinfo marks the default: gpu*
    part = pl.when(part.is_in(["", "(null)", "n/a"])).then(None).otherwise(part)
    return (
        rows.select(
            pl.lit(dataset_of(ctx)).alias("dataset"),
            nodes_expr(col(nodelist, pl.String)).alias("node"),
            part.alias("partition"),
            pl.lit(None, pl.String).alias("rack"),
            n_gpus.alias("gpus"),
            when.alias("first_seen"),
            when.alias("last_seen"),
            pl.lit(source).alias("source"),
            pl.lit(ctx.file).alias("file"),
            pl.col("line").cast(pl.Int64),
            col(state, pl.String).alias("state"),
        )
        .explode("node")
        .drop_nulls("node")
    )
