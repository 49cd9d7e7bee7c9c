"""Attributes JSON over a frame: encoding rows per group of the same null fields writes exactly
the text of the one-expression form (encode, then strip the nulls) and of the per-line path."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest.nccl import attrs
from faultlens.ingest.nccl.pytorch import attrs_json

# keys the stripping regex drops when null, and two it does not ("x2", "Peer")
KEYS = ("rank", "peer_port", "error", "x2", "Peer")
VALUES = {
    "rank": st.none() | st.integers(-5, 10**12),
    "peer_port": st.none() | st.integers(0, 65535),
    "error": st.none() | st.text(max_size=8),
    "x2": st.none() | st.sampled_from(["a", 'q"uote', "back\\slash", "é", ',"k":null']),
    "Peer": st.none() | st.integers(0, 3),
}
ROWS = st.lists(st.fixed_dictionaries(VALUES), min_size=0, max_size=40)


def _frame(rows: list[dict]) -> pl.DataFrame:
    schema = {k: pl.Int64 if k in ("rank", "peer_port", "Peer") else pl.String for k in KEYS}
    return pl.DataFrame(rows, schema=schema)


@pytest.mark.parametrize("max_groups", [1, attrs.MAX_GROUPS])
@settings(max_examples=150, deadline=None)
@given(rows=ROWS)
def test_grouped_encoding_equals_the_stripped_text(rows: list[dict], max_groups: int) -> None:
    frame = _frame(rows)
    for keys in (KEYS, KEYS[:3]):
        fields = {k: pl.col(k) for k in keys}
        want = frame.select(attrs.json_expr(fields).alias("attrs"))["attrs"]
        attrs.MAX_GROUPS, saved = max_groups, attrs.MAX_GROUPS
        try:
            got = attrs.with_json(frame, fields)["attrs"]
        finally:
            attrs.MAX_GROUPS = saved
        assert got.to_list() == want.to_list()


def test_the_per_line_path_writes_the_same_text() -> None:
    rows = [
        {"rank": 3, "peer_port": None, "error": 'é "x"', "x2": None, "Peer": None},
        {"rank": None, "peer_port": None, "error": None, "x2": None, "Peer": None},
        {"rank": None, "peer_port": 7, "error": None, "x2": None, "Peer": None},
    ]
    fields = {k: pl.col(k) for k in KEYS[:3]}
    got = attrs.with_json(_frame(rows), fields)["attrs"].to_list()
    assert got == [attrs_json({k: r[k] for k in KEYS[:3]}) for r in rows]
    assert got[1] == "{}"
