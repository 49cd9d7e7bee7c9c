"""The streamed read of a ``sacct --json`` document gives the whole-document read's rows and
line accounting: on the real corpus document, on a big one generated from it (pretty-printed and
one-line, requeued jobs listed twice), and on a damaged one (every line quarantined)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.slurm import json_docs
from faultlens.ingest.slurm.json_docs import SlurmJsonParser
from faultlens.ingest.store import Store

NOW = datetime(2026, 1, 1)
REAL = "slurm/slurmrestd-slurm-web-25.05-slurmdb-job-gpus-multi-nodes.json"


def _ingest(path: Path, db: Path, *, stream: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(SlurmJsonParser, "stream_min_bytes", 0 if stream else 1 << 62)
    with Store(db) as store:
        report = ingest_paths(store, [str(path)], now=NOW)
        tables = {
            name: store.query(f"SELECT * FROM {name} ORDER BY ALL")
            for name in ("jobs", "job_steps", "events")
        }
        tables["quarantine"] = store.query("SELECT line FROM quarantine ORDER BY line")
        tables["files"] = store.query(
            "SELECT format, lines, parsed, noise, quarantined, status FROM ingested_files"
        )
    return report.files[0], tables


def _same(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> None:
    for name in a:
        assert a[name].equals(b[name]), name


def _big_document(corpus: Path, n_jobs: int, requeue_every: int = 7) -> dict:
    """The corpus job repeated with new ids, states and times; every seventh job listed twice
    (a requeue: the earlier record is superseded)."""
    template = json.loads((corpus / REAL).read_text())
    jobs = []
    for i in range(n_jobs):
        job = json.loads(json.dumps(template["jobs"][0]))
        job["job_id"] = 5000 + i
        job["state"]["current"] = ["FAILED" if i % 3 == 0 else "COMPLETED"]
        job["time"]["start"] = 1_721_000_000 + 600 * i
        job["time"]["end"] = 1_721_000_000 + 600 * i + 300
        for step in job.get("steps") or []:
            step["step"]["id"] = f"{5000 + i}.batch"
        jobs.append(job)
        if requeue_every and i % requeue_every == 0:
            again = json.loads(json.dumps(job))
            again["state"]["current"] = ["REQUEUED"]
            jobs.insert(len(jobs) - 1, again)
    return {**template, "jobs": jobs}


def test_real_document_streams_like_the_whole_read(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, t_whole = _ingest(
        corpus / REAL, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch
    )
    streamed, t_stream = _ingest(
        corpus / REAL, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch
    )
    _same(t_whole, t_stream)
    assert t_stream["jobs"].height == 1 and t_stream["job_steps"].height >= 1
    assert streamed.lines == len((corpus / REAL).read_text().splitlines())
    assert (streamed.parsed, streamed.noise) == (whole.parsed, whole.noise)


def _exact_not_called(*args: object, **kwargs: object) -> None:
    raise AssertionError("the document was folded whole")


@pytest.mark.parametrize("indent", [2, None])
def test_big_generated_document_streams_like_the_whole_read(
    indent: int | None, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_docs, "RECORD_BATCH", 50)  # many batches
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(_big_document(corpus, 300), indent=indent) + "\n\n")
    whole, t_whole = _ingest(path, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch)
    # a requeued job's listings stand together: batches end between jobs, never inside them
    monkeypatch.setattr(json_docs, "stream_jobs_whole", _exact_not_called)
    streamed, t_stream = _ingest(path, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    _same(t_whole, t_stream)
    assert t_stream["jobs"].height == 300
    jobs = t_stream["jobs"]
    assert jobs.filter(pl.col("job_id") == "5000")["restarts"].to_list() == [1]
    n = len(path.read_text().split("\n")) - 1
    assert (streamed.lines, streamed.parsed, streamed.noise) == (n, n - 1, 1)  # one blank line


@pytest.mark.parametrize("indent", [2, None])
def test_batches_are_folded_apart_with_a_small_line_cursor(
    indent: int | None, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_docs, "RECORD_BATCH", 40)
    monkeypatch.setattr(json_docs, "CURSOR_BYTES", 3000)  # the cursor reads many small chunks
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(_big_document(corpus, 200, requeue_every=0), indent=indent))
    whole, t_whole = _ingest(path, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(json_docs, "stream_jobs_whole", _exact_not_called)
    streamed, t_stream = _ingest(path, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    _same(t_whole, t_stream)
    assert t_stream["jobs"].height == 200
    assert (streamed.lines, streamed.parsed) == (whole.lines, whole.parsed)


def test_a_job_listed_in_two_batches_is_folded_whole(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_docs, "RECORD_BATCH", 3)
    doc = _big_document(corpus, 30, requeue_every=4)
    # the superseded listings first, apart from the jobs' last ones (other batches)
    first = [j for j in doc["jobs"] if j["state"]["current"] == ["REQUEUED"]]
    doc["jobs"] = first + [j for j in doc["jobs"] if j["state"]["current"] != ["REQUEUED"]]
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(doc, indent=2))
    whole, t_whole = _ingest(path, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch)
    calls = []
    folded_whole = json_docs.stream_jobs_whole
    monkeypatch.setattr(
        json_docs, "stream_jobs_whole", lambda *a: calls.append(1) or folded_whole(*a)
    )
    streamed, t_stream = _ingest(path, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    assert calls == [1]
    _same(t_whole, t_stream)
    assert t_stream["jobs"].filter(pl.col("job_id") == "5004")["restarts"].to_list() == [1]


def test_damaged_big_document_is_quarantined_line_by_line(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_docs, "RECORD_BATCH", 20)  # records made before the damage
    text = json.dumps(_big_document(corpus, 80), indent=2)
    path = tmp_path / "sacct.json"
    path.write_text(text[: len(text) * 3 // 4])  # half-written
    whole, t_whole = _ingest(path, tmp_path / "w.duckdb", stream=False, monkeypatch=monkeypatch)
    streamed, t_stream = _ingest(path, tmp_path / "s.duckdb", stream=True, monkeypatch=monkeypatch)
    assert t_stream["jobs"].height == 0 and t_stream["job_steps"].height == 0
    assert whole.quarantined == streamed.quarantined == streamed.lines > 0
    assert t_whole["quarantine"].equals(t_stream["quarantine"])


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 6), min_size=1, max_size=40),
    queries=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 5)), max_size=15),
    chunk=st.sampled_from([16, 64, 4096]),
)
def test_line_cursor_finds_what_the_whole_index_finds(ids, queries, chunk, tmp_path_factory):
    """The forward cursor against the index of the whole document, for searches whose start
    never decreases (as the stream's are), with ids absent or repeated and chunks of any size."""
    path = tmp_path_factory.mktemp("cursor") / "doc.json"
    path.write_text("".join(f'  "job_id": {i},\n' if i % 3 else "  {\n" for i in ids))
    lines = path.read_text().splitlines()
    df = pl.DataFrame({"line": list(range(1, len(lines) + 1)), "raw": lines})
    whole = json_docs._LineIndex(df, "job_id", False)
    json_docs_chunk = json_docs.CURSOR_BYTES
    try:
        json_docs.CURSOR_BYTES = chunk
        cursor = json_docs._LineCursor(str(path), False, {"job": ("job_id", False)})
    finally:
        json_docs.CURSOR_BYTES = json_docs_chunk
    start = 1
    try:
        for value, step in queries:
            start += step
            assert cursor.find("job", value, start) == whole.find(value, start)
    finally:
        cursor.close()
