"""Shared fixtures: where the real corpus lives, and fresh databases per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FAULTLENS_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"
REFERENCE = SHARED / "reference"


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
