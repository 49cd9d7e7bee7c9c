"""Batch reports and the charts the dashboard shares: figures, sections, HTML / PDF writers."""

from __future__ import annotations

from faultlens.reports.build import build_report, demo_report, parse_since

__all__ = ["build_report", "demo_report", "parse_since"]
