"""Event attributes as JSON over a whole frame: ``pytorch.attrs_json`` (compact, keys sorted, nulls
dropped) for every row, in the text the per-line path writes.

polars' ``struct.json_encode`` writes null fields as ``null``. Rather than strip them from the
encoded text with a regex on every row, rows are encoded in groups that have the same null fields,
each group as a struct of its other fields alone (a batch has a handful of such groups); past
``MAX_GROUPS`` groups the text is stripped instead.
"""

from __future__ import annotations

import re

import polars as pl

MAX_GROUPS = 32
# names whose null the stripping regex removes (any other key keeps its ``null``)
_DROPPABLE = re.compile(r"[a-z_]+")


def json_expr(fields: dict[str, pl.Expr]) -> pl.Expr:
    """``pytorch.attrs_json`` as one expression: encoded, then the null fields stripped."""
    encoded = pl.struct([fields[k].alias(k) for k in sorted(fields)]).struct.json_encode()
    return encoded.str.replace_all(r',"[a-z_]+":null', "").str.replace(r'^\{"[a-z_]+":null,?', "{")


def with_json(frame: pl.DataFrame, fields: dict[str, pl.Expr], name: str = "attrs") -> pl.DataFrame:
    """``frame`` with a column ``name``: ``json_expr(fields)`` of each row, encoded per group of
    rows with the same null fields."""
    keys = sorted(fields)
    values = frame.select([fields[k].alias(k) for k in keys])
    droppable = [k for k in keys if _DROPPABLE.fullmatch(k)]
    if not droppable or frame.height == 0:
        return frame.with_columns(values.select(json_expr(fields).alias(name)).to_series())
    # bit i of a row's signature: its i-th droppable field is null
    signature = values.select(
        pl.sum_horizontal(
            pl.col(k).is_null().cast(pl.Int64) * (1 << i) for i, k in enumerate(droppable)
        )
    ).to_series()
    groups = signature.unique()
    if groups.len() > MAX_GROUPS:
        plain = {k: pl.col(k) for k in keys}
        return frame.with_columns(values.select(json_expr(plain).alias(name)).to_series())
    out = pl.Series(name, [None] * frame.height, dtype=pl.String)
    for group in groups.to_list():
        rows = (signature == group).arg_true()
        kept = [k for k in keys if k not in droppable or not group >> droppable.index(k) & 1]
        if kept:
            text = values.select(pl.struct(kept).gather(rows).struct.json_encode()).to_series()
        else:
            text = pl.Series([r"{}"] * rows.len(), dtype=pl.String)
        out = out.scatter(rows, text)
    return frame.with_columns(out)
