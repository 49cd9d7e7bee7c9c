"""Incremental refresh gives the same tables as the full rebuild after any sequence of loads.

Two database files receive the same sequence of loads (events, jobs, inventory rows, a learned
boot time, a file's rows replaced); one is refreshed incrementally after each load, the other
with ``full=True``. Events, attributions and the GPU indices must be identical.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlens.ingest.attribution import refresh
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.store import Store

T0 = datetime(2026, 3, 1)
NODES = ("gpu01", "gpu02", "gpu03")
PCI = ("0000:3b:00.0", "0000:5e:00.0")
STATES = ("FAILED", "NODE_FAIL", "COMPLETED", "TIMEOUT")

minute = st.integers(min_value=0, max_value=400)
event = st.fixed_dictionaries(
    {
        "node": st.sampled_from(NODES),
        "minute": st.one_of(st.none(), minute),  # None: only a boot-relative stamp
        "kind": st.sampled_from(("xid", "xid", "nccl_timeout", "nccl_error", "node_down")),
        "code": st.sampled_from((79, 13, 48, 31)),
        "pci": st.sampled_from(PCI),
        "hang_min": st.integers(min_value=0, max_value=60),
    }
)
job = st.fixed_dictionaries(
    {
        "nodes": st.lists(st.sampled_from(NODES), min_size=1, max_size=3, unique=True),
        "start": minute,
        "length": st.integers(min_value=1, max_value=200),
        "state": st.sampled_from(STATES),
        "n_gpus": st.sampled_from((8, 16)),
    }
)
gpu = st.fixed_dictionaries(
    {
        "node": st.sampled_from(NODES),
        "index": st.integers(min_value=0, max_value=2),
        "pci": st.sampled_from(PCI),
    }
)
step = st.one_of(
    st.tuples(st.just("events"), st.lists(event, min_size=1, max_size=12)),
    st.tuples(st.just("jobs"), st.lists(job, min_size=1, max_size=4)),
    st.tuples(st.just("gpus"), st.lists(gpu, min_size=1, max_size=3)),
    st.tuples(st.just("boot"), st.integers(min_value=0, max_value=300)),
    st.tuples(st.just("reparse"), st.integers(min_value=0, max_value=9)),
    st.tuples(st.just("nothing"), st.none()),
)


class Loader:
    """Applies a load to a database the way ingest would (append rows of one file)."""

    def __init__(self) -> None:
        self.n_files = 0

    def apply(self, store: Store, kind: str, payload: object) -> None:
        self.n_files += 1
        name = f"/logs/f{self.n_files}.log"
        if kind == "events":
            store.insert("events", _events(payload, name))  # type: ignore[arg-type]
        elif kind == "jobs":
            store.insert("jobs", _jobs(payload, name, self.n_files))  # type: ignore[arg-type]
        elif kind == "gpus":
            store.insert("gpus", _gpus(payload, name))  # type: ignore[arg-type]
        elif kind == "boot":  # a dmesg file learned its boot time: old rows get a ts
            for file in store.query("SELECT DISTINCT file FROM events WHERE ts IS NULL")["file"]:
                store.resolve_boot_relative(file, T0 + timedelta(minutes=int(payload)))  # type: ignore[arg-type]
        elif kind == "reparse":  # a file's events replaced by a corrected parse (shifted node)
            files = sorted(store.query("SELECT DISTINCT file FROM events")["file"].to_list())
            if not files:
                return
            file = files[int(payload) % len(files)]  # type: ignore[call-overload]
            with store.transaction():
                rows = store.query("SELECT * FROM events WHERE file = ?", [file])
                store.execute("DELETE FROM events WHERE file = ?", [file])
                store.insert(
                    "events",
                    rows.with_columns(
                        pl.lit(None, pl.String).alias("job_id"),
                        pl.lit(None, pl.Int32).alias("gpu_index"),
                        pl.col("node").replace({"gpu01": "gpu02", "gpu02": "gpu03"}),
                    ),
                )
            store.execute("CHECKPOINT")  # compacts the deleted rows: rowids move


def _events(items: list[dict], file: str) -> pl.DataFrame:
    rows = []
    for line, e in enumerate(items, start=1):
        ts = None if e["minute"] is None else T0 + timedelta(minutes=e["minute"], seconds=line)
        hang_ms = e["hang_min"] * 60_000
        rows.append(
            {
                "ts": ts,
                "uptime_s": 60.0 * line if ts is None else None,
                "ts_flag": "boot_relative" if ts is None else None,
                "node": e["node"],
                "gpu": e["pci"],
                "source": "kernel" if e["kind"] in ("xid", "node_down") else "nccl",
                "kind": e["kind"],
                "code": e["code"] if e["kind"] == "xid" else None,
                "attrs": json.dumps({"timeout_ms": hang_ms})
                if e["kind"] == "nccl_timeout"
                else None,
                "file": file,
                "line": line,
            }
        )
    return pl.DataFrame(rows)


def _jobs(items: list[dict], file: str, serial: int) -> pl.DataFrame:
    rows = []
    for line, j in enumerate(items, start=1):
        start = T0 + timedelta(minutes=j["start"])
        end = start + timedelta(minutes=j["length"])
        rows.append(
            {
                "job_id": f"{serial}{line:02d}",
                "nodes": j["nodes"],
                "n_nodes": len(j["nodes"]),
                "n_gpus": j["n_gpus"],
                "start": start,
                "end": end,
                "elapsed_s": 60.0 * j["length"],
                "state": j["state"],
                "file": file,
                "line": line,
            }
        )
    return pl.DataFrame(rows)


def _gpus(items: list[dict], file: str) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"node": g["node"], "gpu_index": g["index"], "pci_bus_id": g["pci"], "file": file}
            | {"last_seen": T0, "source": "nvidia_smi"}
            for g in items
        ]
    )


def _tables(store: Store) -> dict[str, list[tuple]]:
    return {
        "events": store.query("SELECT * FROM events ORDER BY file, line, node").rows(),
        "attributions": store.query("SELECT * FROM attributions ORDER BY job_id").rows(),
    }


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(step, min_size=1, max_size=6))
def test_incremental_equals_full_after_any_sequence(steps: list[tuple[str, object]]) -> None:
    catalog = load_catalog()
    with tempfile.TemporaryDirectory() as tmp:
        inc, full = Store(Path(tmp) / "inc.duckdb"), Store(Path(tmp) / "full.duckdb")
        try:
            loaders = {id(inc): Loader(), id(full): Loader()}
            for s in (inc, full):
                s.load_xid_catalog(catalog)
            for kind, payload in steps:
                for s in (inc, full):
                    loaders[id(s)].apply(s, kind, payload)
                refresh(inc)
                refresh(full, full=True)
                assert _tables(inc) == _tables(full), (kind, payload)
        finally:
            inc.close()
            full.close()


def test_second_refresh_is_incremental_and_touches_only_new_rows(tmp_path: Path) -> None:
    """An append after a refresh is handled incrementally; an event no job covers stays out."""
    with Store(tmp_path / "t.duckdb") as store:
        store.load_xid_catalog(load_catalog())
        loader = Loader()
        job = {"nodes": ["gpu01"], "start": 0, "length": 60, "state": "FAILED", "n_gpus": 8}
        loader.apply(store, "jobs", [job])
        outside = dict(node="gpu02", minute=10, kind="xid", code=79, pci=PCI[0], hang_min=0)
        loader.apply(store, "events", [outside])
        first = refresh(store)
        assert first["mode"] == "full" and first["reason"] == "no watermarks yet"
        assert first["events_linked"] == 0
        inside = dict(outside, node="gpu01", minute=55)
        loader.apply(store, "events", [inside])
        second = refresh(store)
        assert second["mode"] == "incremental", second["reason"]
        assert second["events_linked"] == 1
        assert second["jobs_attributed"] == 1  # the failed job whose window holds the new Xid
        got = store.query("SELECT job_id, cause, evidence_code FROM attributions").rows()
        assert got == [("101", "gpu_hardware", 79)]
        third = refresh(store)
        assert (third["mode"], third["events_linked"], third["jobs_attributed"]) == (
            "incremental",
            0,
            0,
        )
        assert refresh(store, full=True)["mode"] == "full"
        assert store.query("SELECT job_id, cause FROM attributions").rows() == [
            ("101", "gpu_hardware")
        ]
