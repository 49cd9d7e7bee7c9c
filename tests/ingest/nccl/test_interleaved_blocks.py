"""A DistBackendError block (``NCCL error in:``, ``ncclXxxError:``, ``Last error:``, detail)
whose lines other families or other processes' lines come between: folded by the line's process
(its launcher prefix), within ``BLOCK_GAP`` lines, on the line path and the chunk paths alike.
A detail line is seen when it is a candidate: right after ``Last error:``, or holding a literal
(the details behind other lines here say ``Error``)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl

from faultlens.ingest.base import ParseContext
from faultlens.ingest.nccl import parser as nccl
from faultlens.ingest.nccl.pytorch import BLOCK_GAP
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store

LOG = Path(__file__).resolve().parents[2] / "data" / "nccl" / "distbackend-interleaved.log"
DETAIL = "socketStartConnect: Connect to 10.1.2.3<45123> failed : Software caused connection abort"
# line -> (subkind, rank, result_text, last_error), as the file's lines say
WANT = {
    1: ("ncclSystemError", 0, "System call or external library call failed.", DETAIL),
    8: ("ncclRemoteError", 4, None, None),  # line 10 is rank 5's: not this block's detail
    12: ("ncclInvalidUsage", 2, None, None),  # line 13, its own process's, ends the block
    14: ("ncclRemoteError", 2, None, None),
    25: ("ncclSystemError", 3, None, None),
    35: ("ncclSystemError", 3, None, None),  # 10 lines on: beyond the gap
    # two processes' blocks interleaved line by line: each folds its own lines
    37: (
        "ncclSystemError",
        6,
        "System call or external library call failed.",
        "Error while connecting to 10.1.2.6<40006>: Connection refused",
    ),
    38: (
        "ncclRemoteError",
        7,
        "A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Error while receiving from 10.1.2.7<40007>: Connection reset by peer",
    ),
}


def _got(rows: list[dict]) -> dict[int, tuple]:
    out = {}
    for r in rows:
        a = json.loads(r["attrs"]) if r["attrs"] else {}
        out[r["line"]] = (r["subkind"], a.get("rank"), a.get("result_text"), a.get("last_error"))
    return out


def test_the_gap_is_what_the_file_assumes() -> None:
    assert 35 - 25 > BLOCK_GAP >= 6 - 1  # rank 0's block spans 6 lines


def test_folded_by_process_through_the_every_family_reader(store: Store) -> None:
    (f,) = ingest_paths(store, [str(LOG)], now=datetime(2025, 1, 1)).files
    assert f.status == "ok"
    rows = store.query("SELECT * FROM events ORDER BY line").to_dicts()
    assert _got(rows) == WANT
    assert {r["kind"] for r in rows} == {"nccl_error"}


def test_the_line_path_and_the_chunk_path_agree() -> None:
    ctx = ParseContext(file=str(LOG), year=2024)
    text = LOG.read_text().splitlines()
    ref = nccl.reference_parse(list(text), ctx)
    assert _got(ref.tables["events"].to_dicts()) == WANT
    parser = nccl.NcclParser()
    for size in (len(text), 4):  # whole, and cut in chunks that split the blocks
        state = parser.new_state(ctx)
        result = None
        for i in range(0, len(text), size):
            part = parser.parse_chunk(pl.Series(text[i : i + size]), i + 1, ctx, state)
            result = part if result is None else result.merge(part)
        result = result.merge(parser.finish(ctx, state))
        assert _got(result.tables["events"].to_dicts()) == WANT, size
