"""Batch reports and the charts the dashboard shares: figures, sections, HTML / PDF writers."""

from __future__ import annotations

from typing import Any

__all__ = ["build_report", "demo_report", "parse_since"]


def __getattr__(name: str) -> Any:
    """``build_report`` and the rest on first use: the dashboard's pages import ``reports.*``
    modules without paying for the report writer (jinja2, the HTML / PDF templates)."""
    if name in __all__:
        from faultlens.reports import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
