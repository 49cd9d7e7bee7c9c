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


# Xid 154 names the recovery the driver now requires (``GPU recovery action changed from 0x0
# (None) to 0x1 (GPU Reset Required)``): that action, not the catalog's ``none``, is the event's.
RECOVERY_ACTIONS: dict[str, tuple[Severity, Action]] = {
    "none": (Severity.INFO, Action.NONE),
    "gpu reset required": (Severity.ERROR, Action.RESET_GPU),
    "node reboot required": (Severity.CRITICAL, Action.REBOOT_NODE),
    "os reboot": (Severity.CRITICAL, Action.REBOOT_NODE),
    "node reboot": (Severity.CRITICAL, Action.REBOOT_NODE),
    "drain p2p": (Severity.CRITICAL, Action.DRAIN_NODE),
    "drain and reset": (Severity.CRITICAL, Action.DRAIN_NODE),
}
RECOVERY_CODES = {
    "0x0": "none",
    "0x1": "gpu reset required",
    "0x2": "node reboot required",
    "0x3": "drain p2p",
    "0x4": "drain and reset",
}


def recovery_action(name: str | None, code: str | None) -> tuple[str, str] | None:
    """(severity, action) of the recovery an Xid 154 line names (by name, else by its code)."""
    key = " ".join((name or "").lower().split())
    if key not in RECOVERY_ACTIONS:
        key = RECOVERY_CODES.get((code or "").lower(), "")
    found = RECOVERY_ACTIONS.get(key)
    return (found[0].value, found[1].value) if found else None


def recovery_action_expr(name: pl.Expr, code: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """``recovery_action`` as expressions (null where the line names no known action)."""
    key = name.str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()
    by_code = code.str.to_lowercase().replace_strict(RECOVERY_CODES, default=None)
    key = pl.when(key.is_in(list(RECOVERY_ACTIONS))).then(key).otherwise(by_code)
    sev = {k: v[0].value for k, v in RECOVERY_ACTIONS.items()}
    act = {k: v[1].value for k, v in RECOVERY_ACTIONS.items()}
    return (
        key.replace_strict(sev, default=None, return_dtype=pl.String),
        key.replace_strict(act, default=None, return_dtype=pl.String),
    )


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
