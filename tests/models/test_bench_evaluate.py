"""The evaluation bench's own path (bench/bench_evaluate.py): what it ingests reaches the features."""

from __future__ import annotations

from faultlens.ingest.store import Store


def test_dmesg_kernel_logs_get_their_node_from_the_folder(tmp_path) -> None:
    from bench.bench_evaluate import _build

    truth, failed = _build(7, None, 16, 3.0, tmp_path)
    assert failed == 0
    dmesg = sorted(n["node"] for n in truth["nodes"] if n["log_format"] == "dmesg")
    assert dmesg  # the cluster has host-less kernel logs to place (else the test says nothing)
    with Store(tmp_path / "db.duckdb", read_only=True) as store:
        rows = store.query(
            "SELECT regexp_extract(file, '/nodes/([^/]+)/kern[.]log$', 1) AS folder, "
            "count(*) FILTER (WHERE node IS NULL) AS no_node, "
            "count(*) FILTER (WHERE node = regexp_extract(file, '/nodes/([^/]+)/kern[.]log$', 1)) "
            "AS own FROM events WHERE list_contains(?::VARCHAR[], "
            "regexp_extract(file, '/nodes/([^/]+)/kern[.]log$', 1)) GROUP BY folder ORDER BY folder",
            [dmesg],
        )
    # every host-less log with events (a quiet node's may have none in three days) is placed
    assert rows.height and set(rows["folder"].to_list()) <= set(dmesg)
    assert rows["no_node"].to_list() == [0] * rows.height
    assert min(rows["own"].to_list()) > 0
