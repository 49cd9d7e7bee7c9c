"""The dashboard under Streamlit's AppTest on the small database (``tests.reports.smalldb``), its
range set to the data's seven days, as the page tests open it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.reports import smalldb

MAIN = str(Path(__file__).resolve().parents[2] / "app" / "dashboard" / "main.py")


def small_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The dashboard's first run on a new small database in ``tmp_path`` (its models folder
    ``tmp_path / "models"``), then the range set to exactly the data's days."""
    db = smalldb.build(tmp_path / "small.duckdb")
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    monkeypatch.setenv("FAULTLENS_MODELS_DIR", str(tmp_path / "models"))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    # the last day of data is END - 1 day; the range covers whole days: exactly the 7 days
    last_day = (smalldb.END - timedelta(days=1)).date()
    at.sidebar.date_input("f_range").set_value((smalldb.START.date(), last_day)).run()
    return at
