"""Shared fixtures: where the real corpus lives, and fresh databases per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FAULTLENS_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"
REFERENCE = SHARED / "reference"

# Tests write a log and ingest it at once: read it to its end, last line without ``\n`` included
# (ingest.reader holds back the partial last line of a file modified in the last 30 s). Set for
# the whole session, module-scoped fixtures and CLI subprocesses included; the tests of that
# hold-back set ``FAULTLENS_LIVE_WRITE_S`` back to 30 themselves.
os.environ["FAULTLENS_LIVE_WRITE_S"] = "0"


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.fail(f"the shared corpus is missing at {CORPUS} (set FAULTLENS_SHARED)")
    return CORPUS


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture
def store(db_path: Path):
    from faultlens.ingest.store import Store

    with Store(db_path) as s:
        yield s
