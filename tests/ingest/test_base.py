"""Helpers every parser shares."""

from __future__ import annotations

import polars as pl
import pytest

from faultlens.ingest import base


@pytest.mark.parametrize("min_repeat", [0, 10**9])
def test_per_distinct_adds_the_columns_of_each_key_in_row_order(
    monkeypatch: pytest.MonkeyPatch, min_repeat: int
) -> None:
    monkeypatch.setattr(base, "PER_DISTINCT_MIN_REPEAT", min_repeat)
    msgs = ["ab", None, "ab", "c", None, "ab"]
    frame = pl.DataFrame({"line": [1, 2, 3, 4, 5, 6], "msg": msgs})
    got = base.per_distinct(
        frame, pl.col("msg"), lambda f: f.with_columns(n=pl.col("msg").str.len_chars())
    )
    assert got.columns == ["line", "msg", "n"]
    assert got["line"].to_list() == [1, 2, 3, 4, 5, 6]
    assert got["n"].to_list() == [2, None, 2, 1, None, 2]


def test_per_distinct_runs_once_per_key_when_keys_repeat() -> None:
    seen: list[int] = []

    def added(f: pl.DataFrame) -> pl.DataFrame:
        seen.append(f.height)
        return f.with_columns(n=pl.col("msg").str.len_chars())

    frame = pl.DataFrame({"msg": ["x", "yy"] * 50})
    got = base.per_distinct(frame, pl.col("msg"), added)
    assert seen == [2]
    assert got["n"].to_list() == [1, 2] * 50
    few = pl.DataFrame({"msg": ["x", "yy", "x"]})  # fewer than two rows per key: per row
    base.per_distinct(few, pl.col("msg"), added)
    assert seen == [2, 3]
