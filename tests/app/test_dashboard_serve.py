"""``faultlens dashboard`` prepares the first page once its server answers (``dashboard.serve``):
a real server on a real database says so, and the page it then serves is the overview."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from faultlens.app.dashboard import server
from faultlens.app.dashboard.serve import NO_DATABASE, PRELOAD_ENV, READY
from tests.reports import smalldb

pytestmark = pytest.mark.integration


def _wait_for(log: Path, text: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = log.read_text(errors="replace")
        if text in out:
            return out
        time.sleep(0.2)  # polling the server's output
    return log.read_text(errors="replace")


def test_the_first_page_is_ready_before_anyone_opens_it(tmp_path: Path) -> None:
    db = smalldb.build(tmp_path / "fl.duckdb")
    log = tmp_path / "server.log"
    with log.open("w") as out, server.running(db, output=out) as (url, _proc):
        text = _wait_for(log, READY)
        assert "first page ready in" in text and READY in text, text
        # and nothing of Streamlit's complaints about a thread outside a session
        assert "missing ScriptRunContext" not in text, text
        with urllib.request.urlopen(url + "/_stcore/health", timeout=10) as r:
            assert r.status == 200


def test_preloading_can_be_turned_off(tmp_path: Path) -> None:
    db = smalldb.build(tmp_path / "fl.duckdb")
    log = tmp_path / "server.log"
    with log.open("w") as out, server.running(db, output=out, env={PRELOAD_ENV: "0"}) as (url, _):
        time.sleep(3)  # as long as the preload takes on this database: it must not come
        assert READY not in log.read_text(errors="replace")


def test_without_a_database_it_says_there_is_none(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("w") as out, server.running(tmp_path / "absent.duckdb", output=out):
        text = _wait_for(log, NO_DATABASE)
        assert NO_DATABASE in text and READY not in text, text
    assert not (tmp_path / "absent.duckdb").exists()  # a reader never creates the database
