"""The NCCL / PyTorch parser on its raw-scan path (``ingest.scan``) against the line-splitting path
(every line through ``parse_chunk``): identical rows and counts on every real file."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest import registry, scan
from faultlens.ingest.base import ParseContext
from faultlens.ingest.nccl import line as nccl_line
from faultlens.ingest.nccl import parser as nccl
from faultlens.ingest.nccl import vec as nccl_vec
from faultlens.ingest.pipeline import ingest_paths, uses_prefilter
from faultlens.ingest.store import Store
from tests.conftest import CORPUS

NOW = datetime(2025, 1, 1)
DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"
CORPUS_FILES = sorted(p.name for p in (CORPUS / "nccl").glob("*")) if CORPUS.is_dir() else []
TABLES = ("events", "link_health", "nccl_ranks", "quarantine")


def ingest_with(
    parser: nccl.NcclParser, path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict, dict[str, pl.DataFrame]]:
    monkeypatch.setitem(registry.REGISTRY, "nccl", parser)
    with Store(db) as store:
        report = ingest_paths(
            store, [str(path)], now=NOW, fmt="nccl", base_ctx=ParseContext(file="", year=2024)
        )
        (f,) = report.files
        assert f.status in ("ok", "partial"), f.error
        tables = {t: store.query(f"SELECT * FROM {t}") for t in TABLES}
    return f.to_json(), tables


def assert_same_ingest(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    new_parser, old_parser = nccl.NcclParser("nccl"), nccl.NcclParser("nccl", prefilter=False)
    assert uses_prefilter(new_parser) and not uses_prefilter(old_parser)
    new, new_tables = ingest_with(new_parser, path, tmp_path / "new.duckdb", monkeypatch)
    old, old_tables = ingest_with(old_parser, path, tmp_path / "old.duckdb", monkeypatch)
    assert new == old
    for table in TABLES:
        a, b = new_tables[table], old_tables[table]
        cols = [c for c in a.columns if c not in ("id", "ingested_at")]
        a = a.select(cols).sort(cols, nulls_last=True)
        b = b.select(cols).sort(cols, nulls_last=True)
        assert a.equals(b), (table, a.head(5).to_dicts(), b.head(5).to_dicts())
    return new


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_corpus_file_same_on_both_paths(
    corpus: Path, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = assert_same_ingest(corpus / "nccl" / name, tmp_path, monkeypatch)
    assert report["parsed"] + report["noise"] + report["quarantined"] == report["lines"]


def test_all_corpus_files_in_one_log(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every real file and fixture back to back, twice (state carried across their lines), with a
    too-long line, CRLF endings, invalid UTF-8 and no final newline."""
    parts = [p.read_bytes() for p in sorted((corpus / "nccl").glob("*"))]
    parts += [p.read_bytes() for p in sorted(DATA.glob("*"))]
    body = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)
    path = tmp_path / "mixed.log"
    path.write_bytes(
        body
        + body.replace(b"\n", b"\r\n")
        + b"x NCCL WARN "
        + b"y" * (2 << 20)
        + b"\n"
        + b"[rank1]: Last error:\n[rank1]: bad \xff detail\nhost:1:2 [0] NCCL WARN z"
    )
    report = assert_same_ingest(path, tmp_path, monkeypatch)
    assert report["lines"] == path.read_bytes().count(b"\n") + 1
    assert report["quarantined"] >= 1  # the over-long line
    assert report["parsed"] > 200


def test_test_rows_of_a_generated_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nccl-tests rows with no test name / host lines in the batch take the vectorized path."""
    rows = [
        f"  {1 << k:>10}  {1 << k >> 2:>10}     float     sum      -1   {k + 1.5:7.2f}  "
        f"{k / 10:6.2f}  {k / 5:6.2f}      {'N/A' if k == 3 else 0}   {k + 2.25:7.2f}  "
        f"{k / 10:6.2f}  {k / 5:6.2f}      0"
        for k in range(20)
    ]
    path = tmp_path / "all_reduce.log"
    path.write_text(
        "\n".join(
            [
                "gpu-01:10:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
                *rows,
                "host-a:   8  2  float sum -1 1.0 2.0 3.0 0",
            ]
        )
        + "\n"
    )
    assert_same_ingest(path, tmp_path, monkeypatch)
    with Store(tmp_path / "new.duckdb") as store:
        lh = store.query("SELECT * FROM link_health ORDER BY line, in_place")
    assert lh.height == 41
    first = lh.row(0, named=True)
    assert (first["test"], first["size_bytes"], first["count"], first["dtype"]) == (
        "all_reduce_perf",
        1,
        0,
        "float",
    )
    assert (first["time_us"], first["in_place"], first["wrong"]) == (1.5, False, 0)
    assert lh.filter(pl.col("line") == 5)["wrong"].to_list() == [None, 0]  # N/A
    assert lh.row(-1, named=True)["node"] == "host-a"


def test_hyperscan_engine_is_used_when_available() -> None:
    assert scan.available()  # the x86-64 wheel is installed in the dev environment


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 300, 90])
def test_distbackend_blocks_vectorized_equal_reference(chunk_bytes: int) -> None:
    """The vectorized DistBackendError blocks (and the shapes left to the handler) against the
    per-line reference, also with blocks cut by chunk and batch ends."""
    from tests.ingest.nccl.test_nccl import assert_same, both_paths

    path = DATA / "distbackend-blocks.log"
    ctx = ParseContext(file=str(path), year=2024)
    vec, ref = both_paths(path, ctx, chunk_bytes=chunk_bytes)
    assert_same(vec, ref)
    ev = ref.tables["events"].sort("line")
    assert ev["line"].to_list() == [1, 6, 9, 13, 15, 21, 22, 24, 26, 28, 32, 33, 34]
    first = ev.row(0, named=True)
    assert first["subkind"] == "ncclSystemError"
    assert first["message"].splitlines()[1:3] == [
        "ncclSystemError: System call or external library call failed.",
        "Last error:",
    ]
    assert json.loads(first["attrs"]) == {
        "exception": "DistBackendError",
        "last_error": "socketStartConnect: Connect to "
        "10.1.2.3<45123> failed : Software caused connection abort",
        "nccl_version": "2.20.5",
        "peer": "10.1.2.3",
        "peer_port": 45123,
        "rank": 0,
        "reason": "unhandled system error",
        "result_text": "System call or external library call failed.",
        "where": "../ProcessGroupNCCL.cpp:2027",
    }


def test_distbackend_blocks_mostly_take_the_vectorized_path() -> None:
    path = DATA / "distbackend-blocks.log"
    ctx = ParseContext(file=str(path), year=2024)
    lines = pl.Series(path.read_text().splitlines())
    parser = nccl.NcclParser()
    state = parser.new_state(ctx)
    cand = nccl_vec.candidates(lines, 1, state)
    frame = nccl_vec.nccl_groups(
        cand.with_columns(is_row=pl.col("raw").str.contains(nccl_line.ROW_HINT))
    )
    events, taken = nccl_vec.error_blocks(frame, ctx, state, frame["line"].max())
    assert events is not None
    assert events["line"].to_list() == [1, 6, 9, 13, 28]  # the plain shapes; 34 may go on
    assert frame.filter(taken)["line"].to_list() == [1, 2, 3, 4, 6, 7, 9, 10, 11, 13, 28, 29, 30]
