"""The NVIDIA Xid catalog: category, typical first action and notes per Xid code.

The packaged copy (``ingest/data/xid_catalog.csv``) mirrors ``shared/reference/xid_catalog.csv``;
a site can pass its own with ``faultlens ingest --xid-catalog PATH``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

import polars as pl

from faultlens.ingest.schema import Action, Severity

CATALOG_SCHEMA = {
    "xid": pl.Int32,
    "name": pl.String,
    "category": pl.String,
    "typical_action": pl.String,
    "notes": pl.String,
}

# Severity follows from the first action NVIDIA's catalog prescribes.
ACTION_SEVERITY = {
    Action.NONE: Severity.INFO,
    Action.RESTART_APP: Severity.WARNING,
    Action.RESET_GPU: Severity.ERROR,
    Action.REBOOT_NODE: Severity.CRITICAL,
    Action.DRAIN_NODE: Severity.CRITICAL,
}


def load_catalog(path: str | Path | None = None) -> pl.DataFrame:
    """The catalog as a frame (packaged copy unless ``path`` is given)."""
    if path is None:
        source = resources.files("faultlens.ingest").joinpath("data/xid_catalog.csv").read_bytes()
        return pl.read_csv(source, schema=CATALOG_SCHEMA)
    return pl.read_csv(path, schema=CATALOG_SCHEMA)


@cache
def packaged_catalog() -> pl.DataFrame:
    frame = load_catalog()
    return frame.with_columns(
        pl.col("typical_action")
        .replace_strict({a.value: ACTION_SEVERITY[a].value for a in Action}, default="warning")
        .alias("severity")
    )


def severity_action_expr(code: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """Expressions giving (severity, action) for an Xid code column, from the packaged catalog.

    Codes missing from the catalog get severity ``warning`` and action null.
    """
    cat = packaged_catalog()
    sev = dict(zip(cat["xid"].to_list(), cat["severity"].to_list(), strict=True))
    act = dict(zip(cat["xid"].to_list(), cat["typical_action"].to_list(), strict=True))
    code = code.cast(pl.Int32)
    return (
        code.replace_strict(sev, default="warning", return_dtype=pl.String),
        code.replace_strict(act, default=None, return_dtype=pl.String),
    )
