"""Slurm parsers: every real file in corpus/slurm, hand-written fixtures in the real formats, the
per-line reference path against the vectorized one, and arbitrary input."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlens.ingest.base import ParseContext, Parsed, Quarantined, numbered
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.slurm.common import expand_nodes, parse_duration, split_state
from faultlens.ingest.slurm.daemon import daemon_chunk, merge_reasons
from faultlens.ingest.slurm.daemon import parse_line as daemon_line
from faultlens.ingest.slurm.nodes import SinfoParser, sinfo_parse_line
from faultlens.ingest.slurm.parsers import PARSERS
from faultlens.ingest.slurm.sacct import layout_from_header, parse_line, sacct_records

NOW = datetime(2026, 1, 1)
DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"
# The column list of the snowman file, as its provenance documents it (sacct --noheader).
SNOWMAN_COLUMNS = (
    "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,"
    "Elapsed,TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,"
    "TRESUsageInMax,TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,"
    "MaxVMSizeNode,MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,"
    "MaxDiskWriteTask,Comment"
).split(",")
SNOWMAN = "sacct-snowman-delim-hb-jobinfo-habrok-gpu-jobs.txt"
TRES_USAGE = "sacct-parsable-tresusage-gpumem-researchcomputing-pr498.txt"


def line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def ingest(store, path: Path, **kw):
    report = ingest_paths(store, [str(path)], now=NOW, **kw)
    (f,) = report.files
    assert f.status in ("ok", "partial"), f.error
    assert f.lines == f.parsed + f.noise + f.quarantined == line_count(path)
    return f


def one(store, sql: str, params=None) -> dict:
    rows = store.query(sql, params).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


# -- the real corpus ----------


def test_every_corpus_file_is_accounted_for(corpus, store):
    files = sorted((corpus / "slurm").iterdir())
    assert len(files) >= 11
    report = ingest_paths(store, [str(f) for f in files], now=NOW)
    for f in report.files:
        assert f.status in ("ok", "partial"), (f.path, f.error)
        assert f.lines == f.parsed + f.noise + f.quarantined == line_count(Path(f.path)), f.path
    formats = {Path(f.path).name: f.format for f in report.files}
    assert formats[SNOWMAN] == "sacct"
    assert formats["sinfo-elasticluster-issue272-down-not-responding.txt"] == "sinfo"
    assert formats["slurmd-journal-bibigrid-issue705-gres-fatal.log"] == "lines"
    # a node list: read by sinfo_json (the fleet and its events) before slurmrestd_nodes
    assert formats["slurmrestd-slurm-web-25.05-node-drain.json"] == "sinfo_json"
    assert formats["slurmrestd-slurm-web-25.05-slurmdb-job-gpus-multi-nodes.json"] == "sacct_json"
    # Headerless sacct without --columns: quarantined with the reason, not guessed.
    reasons = store.query(
        "SELECT DISTINCT reason FROM quarantine WHERE file LIKE ?", [f"%{SNOWMAN}"]
    )["reason"].to_list()
    assert len(reasons) == 1 and "--columns" in reasons[0]


def test_snowman_sacct_with_columns(corpus, store):
    f = ingest(
        store, corpus / "slurm" / SNOWMAN, base_ctx=ParseContext(file="", columns=SNOWMAN_COLUMNS)
    )
    assert (f.parsed, f.quarantined) == (242, 0)
    assert store.count("jobs") == 100 and store.count("job_steps") == 142
    job = one(store, "SELECT * FROM jobs WHERE job_id = '4034541'")
    assert job["state"] == "CANCELLED" and job["state_detail"] == "by 10304007"
    assert job["nodes"] == ["a100gpu2"] and job["n_nodes"] == 1
    assert job["elapsed_s"] == 3 * 3600 + 34 * 60 + 13
    assert job["start"] == datetime(2023, 9, 1, 5, 51, 10)
    arr = one(store, "SELECT * FROM jobs WHERE job_id = '5908801_3'")
    assert arr["array_job_id"] == "5908801" and arr["elapsed_s"] == 86400 + 4 * 3600 + 37 * 60 + 26
    gpu = one(store, "SELECT * FROM jobs WHERE job_id = '7965768'")
    assert gpu["n_gpus"] == 1 and gpu["partition"] == "gpulong"
    never = one(store, "SELECT * FROM jobs WHERE job_id = '4047445'")
    assert never["start"] is None and never["nodes"] == [] and never["end"] is not None
    states = dict(store.query("SELECT state, count(*) AS n FROM jobs GROUP BY state").rows())
    assert states["NODE_FAIL"] == 1 and states["TIMEOUT"] >= 1 and states["PENDING"] >= 1
    step = one(store, "SELECT * FROM job_steps WHERE job_id = '7965768' AND step = 'batch'")
    assert step["state"] == "CANCELLED" and step["nodes"] == ["v100gpu16"]
    ev = one(store, "SELECT * FROM events WHERE kind = 'job_node_fail'")
    assert ev["job_id"] == "7336818" and ev["ts"] == datetime(2024, 3, 19, 22, 45, 33)


def test_tres_usage_noheader_with_columns(corpus, store):
    ctx = ParseContext(file="", columns=["JobID", "TRESUsageInAve"])
    f = ingest(store, corpus / "slurm" / TRES_USAGE, base_ctx=ctx)
    assert (f.parsed, f.quarantined) == (3, 0)
    assert store.query("SELECT job_id FROM jobs")["job_id"].to_list() == ["18194943"]
    steps = store.query("SELECT step FROM job_steps ORDER BY line")["step"].to_list()
    assert steps == ["batch", "extern"]


def test_fixed_width_corpus(corpus, store):
    ingest(store, corpus / "slurm" / "sacct-soperator-pr321-format-maxrss.txt")
    jobs = dict(store.query("SELECT job_id, state FROM jobs").rows())
    assert jobs == {"20": "FAILED", "21": "FAILED", "22": "COMPLETED"}
    step = one(store, "SELECT * FROM job_steps WHERE job_id = '19'")
    assert step["step"] == "0" and step["state"] == "COMPLETED" and step["name"] == "sleep"


def test_node_listings_and_daemon_logs(corpus, store):
    d = corpus / "slurm"
    ingest(store, d / "scontrol-show-node-awsome-distributed-ai-issue195-gres-count-drain.txt")
    ev = one(store, "SELECT * FROM events WHERE kind = 'node_drain'")
    assert ev["node"] == "yigou-dev-102-68" and ev["ts"] == datetime(2024, 12, 19, 11, 3, 34)
    assert ev["subkind"] == "gres/gpu count reported lower than configured (0 < 1)"
    assert json.loads(ev["attrs"])["reason_set_by"] == "slurm" and ev["line"] == 17
    ingest(store, d / "sinfo-elasticluster-issue272-down-not-responding.txt")
    down = store.query(
        "SELECT node, ts, subkind FROM events WHERE kind = 'node_down' ORDER BY node"
    )
    assert down["node"].to_list() == [f"compute00{i}" for i in range(1, 5)]
    assert set(down["ts"]) == {datetime(2016, 6, 9, 22, 22, 36)}
    assert set(down["subkind"]) == {"Not responding"}
    ingest(store, d / "slurmctld-elasticluster-pr504-state-file-errors.log")
    errs = store.query("SELECT * FROM events WHERE kind = 'slurm_error' AND file LIKE '%pr504%'")
    assert errs.height == 5 and set(errs["ts"]) == {datetime(2018, 1, 8, 7, 25, 6)}
    ingest(store, d / "slurmd-journal-bibigrid-issue705-gres-fatal.log")
    fatal = one(store, "SELECT * FROM events WHERE severity = 'critical'")
    assert fatal["node"] == "bibigrid-worker" and fatal["subkind"] == "fatal"
    assert (fatal["ts"].month, fatal["ts"].day, fatal["ts"].hour) == (2, 2, 9)
    assert "/dev/nvidia0" in fatal["message"]


def test_slurmrestd_json(corpus, store):
    d = corpus / "slurm"
    f = ingest(store, d / "slurmrestd-slurm-web-25.05-node-drain.json")
    assert f.parsed == f.lines
    ev = one(store, "SELECT * FROM events")
    assert (ev["node"], ev["kind"], ev["subkind"]) == ("cn2", "node_drain", "ECC memory error")
    assert ev["ts"] == datetime(2025, 5, 20, 17, 30, 49)
    f = ingest(store, d / "slurmrestd-slurm-web-25.05-slurmdb-job-gpus-multi-nodes.json")
    assert f.parsed == f.lines == 391
    job = one(store, "SELECT * FROM jobs")
    assert job["job_id"] == "18" and job["nodes"] == ["ia1", "ia2"] and job["n_nodes"] == 2
    assert job["state"] == "RUNNING" and job["user"] == "crich" and job["account"] == "biology"
    assert job["start"] == datetime(2025, 5, 20, 15, 35, 11) and job["end"] is None
    assert job["n_gpus"] == 0
    step = one(store, "SELECT * FROM job_steps")
    assert step["step"] == "batch" and step["nodes"] == ["ia1"]


def test_k8s_events_accounted(corpus, store):
    f = ingest(store, corpus / "slurm" / "k8s-events-device-plugin-issue119-failedscheduling.txt")
    assert (f.format, f.noise, f.quarantined) == ("k8s_events", 1, 2)
    reasons = store.query("SELECT reason FROM quarantine ORDER BY line")["reason"].to_list()
    assert "FailedScheduling" in reasons[0] and "kubelet" in reasons[1]


# -- hand-written fixtures in the real formats ----------


def test_fixed_width_truncation(store):
    ingest(store, DATA / "sacct-fixed-width-truncated.txt")
    jobs = {r["job_id"]: r for r in store.query("SELECT * FROM jobs").to_dicts()}
    assert jobs["101"]["state"] == "CANCELLED" and jobs["101"]["state_detail"] is None
    assert jobs["101"]["nodes"] == ["gpu001", "gpu002", "gpu003", "gpu004", "gpu007"]
    assert jobs["101"]["elapsed_s"] == 93784 and jobs["101"]["n_gpus"] == 40
    assert jobs["102"]["state"] == "OUT_OF_MEMORY" and jobs["102"]["n_gpus"] == 2
    assert (jobs["102"]["exit_code"], jobs["102"]["exit_signal"]) == (0, 125)
    assert jobs["103"]["state"] == "PREEMPTED" and jobs["103"]["nodes"] == ["a1", "a2", "b3"]
    assert jobs["104"]["start"] is None and jobs["104"]["nodes"] == []
    assert jobs["105_7"]["array_job_id"] == "105"
    assert jobs["106"]["state"] == "TIMEOUT" and jobs["106"]["elapsed_s"] == 2 * 86400 + 17
    step = one(store, "SELECT * FROM job_steps")
    assert (step["step"], step["exit_signal"], step["n_gpus"]) == ("batch", 15, 8)


def test_parsable_requeue_listed_twice(store):
    ingest(store, DATA / "sacct-parsable-requeue-D.txt")
    jobs = {r["job_id"]: r for r in store.query("SELECT * FROM jobs").to_dicts()}
    assert set(jobs) == {"200", "201", "202", "203"}
    assert (jobs["200"]["state"], jobs["200"]["restarts"]) == ("COMPLETED", 1)
    assert jobs["200"]["start"] == datetime(2024, 3, 1, 12, 2, 30) and jobs["200"]["line"] == 4
    assert jobs["200"]["nodes"] == ["a1", "a2", "b3"] and jobs["200"]["n_gpus"] == 24
    assert (jobs["201"]["state"], jobs["201"]["restarts"]) == ("COMPLETED", 1)
    assert (jobs["202"]["exit_code"], jobs["202"]["exit_signal"]) == (11, 0)
    assert jobs["203"]["n_gpus"] == 4 and jobs["203"]["start"] is None  # ReqTRES fallback
    seg = one(store, "SELECT * FROM job_steps WHERE job_id = '202'")
    assert (seg["step"], seg["state"], seg["exit_signal"]) == ("0", "CANCELLED", 11)
    nf = one(store, "SELECT * FROM job_steps WHERE job_id = '200' AND state = 'NODE_FAIL'")
    assert nf["exit_code"] is None and nf["nodes"] == ["a1"]
    ev = store.query("SELECT kind, job_id, node, subkind FROM events ORDER BY line, kind").rows()
    assert ev == [
        ("job_node_fail", "200", "a1", "NODE_FAIL"),
        ("job_requeue", "200", "a1", "NODE_FAIL"),
        ("job_requeue", "201", "gpu007", "REQUEUED"),
    ]


def test_comma_delimiter_noheader_with_columns(store):
    ctx = ParseContext(
        file="",
        columns=["JobID", "State", "ExitCode", "NodeList", "AllocTRES", "Elapsed"],
        delimiter=",",
    )
    ingest(store, DATA / "sacct-comma-noheader.txt", base_ctx=ctx)
    jobs = {r["job_id"]: r for r in store.query("SELECT * FROM jobs").to_dicts()}
    assert jobs["300"]["n_gpus"] == 8 and jobs["300"]["elapsed_s"] == 86400
    assert jobs["300"]["nodes"] == ["gpu01", "gpu02"]
    assert (jobs["301"]["state"], jobs["301"]["exit_code"]) == ("FAILED", 1)


def test_semicolon_header_and_arrays(store):
    ingest(store, DATA / "sacct-semicolon-parsable2.txt")
    jobs = {r["job_id"]: r for r in store.query("SELECT * FROM jobs").to_dicts()}
    assert jobs["400_[1-3]"]["state"] == "PENDING" and jobs["400_[1-3]"]["array_job_id"] == "400"
    assert jobs["400_0"]["nodes"] == ["gpu001", "gpu002"] and jobs["400_0"]["n_gpus"] == 2


def test_sacct_json_2205_requeue(store):
    ingest(store, DATA / "sacct-json-2205-requeue.json")
    job = one(store, "SELECT * FROM jobs")
    assert (job["job_id"], job["state"], job["restarts"]) == ("500", "FAILED", 1)
    assert job["nodes"] == ["gpu1", "gpu3"] and job["n_gpus"] == 16 and job["exit_signal"] == 9
    nf = one(store, "SELECT * FROM events WHERE kind = 'job_node_fail'")
    assert nf["node"] == "gpu2" and nf["ts"] == datetime(2024, 3, 1, 11, 0)


def test_half_written_json_is_quarantined(store):
    f = ingest(store, DATA / "json-half-written.json", fmt="sacct_json")
    assert f.quarantined == f.lines == 5
    reasons = set(store.query("SELECT reason FROM quarantine")["reason"])
    assert len(reasons) == 1 and next(iter(reasons)).startswith("invalid JSON: ")


def test_slurmctld_node_events(store):
    f = ingest(store, DATA / "slurmctld-node-events.log")
    assert (f.parsed, f.quarantined) == (9, 1)
    ev = store.query(
        "SELECT line, kind, node, subkind, code, job_id FROM events ORDER BY line, node"
    )
    assert ev.rows() == [
        (1, "node_not_responding", "gpu001", None, None, None),
        (1, "node_not_responding", "gpu002", None, None, None),
        (2, "node_down", "gpu001", None, None, None),
        (3, "job_node_fail", "gpu001", None, None, "1234"),
        (4, "job_requeue", "gpu001", None, None, "1234"),
        (6, "node_drain", "gpu002", "Xid 79 GPU has fallen off the bus", 79, None),
        (7, "node_resume", "gpu001", None, None, None),
        (8, "node_resume", "gpu001", "IDLE", None, None),
        (
            11,
            "node_drain",
            "gpu005",
            "gres/gpu count reported lower than configured (0 < 8)",
            None,
            None,
        ),
    ]
    assert one(store, "SELECT ts FROM events WHERE line = 6")["ts"] == datetime(2024, 5, 1, 10, 6)
    assert one(store, "SELECT ts_flag FROM events WHERE line = 11")["ts_flag"] == "no_ts"


def test_sinfo_reasons_and_scontrol_blocks(store):
    ingest(store, DATA / "sinfo-R.txt")
    ev = store.query("SELECT node, kind, code, ts FROM events ORDER BY node").rows()
    assert ev == [
        ("gpu001", "node_down", None, datetime(2024, 5, 1, 10, 5)),
        ("gpu002", "node_drain", 79, datetime(2024, 5, 1, 10, 6)),
        ("gpu005", "node_down", None, datetime(2024, 5, 1, 10, 5)),
        ("gpu006", "node_down", None, datetime(2024, 5, 1, 10, 5)),
    ]
    store.execute("DELETE FROM events")
    f = ingest(store, DATA / "scontrol-show-node-blocks.txt")
    assert f.parsed == 12  # every line of the three blocks: each names a node of the fleet
    fleet = store.query(
        "SELECT node, gpus, source, line FROM nodes WHERE source = 'scontrol' ORDER BY node"
    ).rows()
    assert fleet == [
        ("gpu001", 8, "scontrol", 1),
        ("gpu002", 8, "scontrol", 7),
        ("gpu003", 8, "scontrol", 12),
    ]
    ev = store.query("SELECT node, kind, subkind, ts FROM events ORDER BY node").rows()
    assert ev == [
        ("gpu001", "node_down", "Not responding", datetime(2024, 5, 1, 10, 5)),
        ("gpu002", "node_drain", "Xid 79 GPU has fallen off the bus", datetime(2024, 5, 1, 10, 6)),
    ]


def test_tz_option_converts_local_sacct_times(store):
    ctx = ParseContext(file="", options={"tz": "Europe/Amsterdam"})
    ingest(store, DATA / "sacct-parsable-requeue-D.txt", base_ctx=ctx)
    job = one(store, "SELECT start FROM jobs WHERE job_id = '201'")
    assert job["start"] == datetime(2024, 3, 2, 8, 2)


# -- helpers and the per-line reference path ----------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("CANCELLED by 1003", ("CANCELLED", "by 1003")),
        ("CANCELLED+", ("CANCELLED", None)),
        ("OUT_OF_ME+", ("OUT_OF_MEMORY", None)),
        ("NODE_FAIL", ("NODE_FAIL", None)),
        ("None", (None, None)),
        ("", (None, None)),
    ],
)
def test_split_state(text, expected):
    assert split_state(text) == expected


def test_durations_and_hostlists():
    assert parse_duration("1-02:03:04") == 93784
    assert parse_duration("05:00") == 300
    assert parse_duration("UNLIMITED") is None
    assert expand_nodes("gpu[001-004,007]") == ["gpu001", "gpu002", "gpu003", "gpu004", "gpu007"]
    assert expand_nodes("a[1-2],b3") == ["a1", "a2", "b3"]
    assert expand_nodes("GPU-01.cluster.local") == ["gpu-01"]
    assert expand_nodes("None assigned") == []
    assert expand_nodes("gpu[001-0+") is None


def _by_line(result: Parsed | Quarantined | None) -> tuple[str, dict] | None:
    if isinstance(result, Parsed):
        ((table, rows),) = result.rows.items()
        return table, rows[0]
    return None


def _sacct_cases(corpus: Path):
    yield corpus / "slurm" / SNOWMAN, SNOWMAN_COLUMNS, None
    yield corpus / "slurm" / TRES_USAGE, ["JobID", "TRESUsageInAve"], None
    header = (DATA / "sacct-parsable-requeue-D.txt").read_text().splitlines()[0]
    yield DATA / "sacct-parsable-requeue-D.txt", header.rstrip("|").split("|"), "|"


def test_sacct_parse_line_agrees_with_vectorized(corpus):
    for path, columns, delim in _sacct_cases(corpus):
        ctx = ParseContext(file=str(path), columns=columns, delimiter=delim)
        lines = pl.Series(path.read_text().splitlines())
        df = numbered(lines, 1)
        layout = layout_from_header("|".join(columns), None, ctx) if delim else None
        if layout is None:
            from faultlens.ingest.slurm.sacct import layout_without_header

            layout = layout_without_header(lines[0], ctx)
        else:
            df = df.filter(pl.col("line") > 1)
        records, q = sacct_records(df, layout, ctx)
        assert q.height == 0
        vec = {r["line"]: r for r in records.to_dicts()}
        for no, raw in df.iter_rows():
            got = _by_line(parse_line(raw, ctx))
            assert got is not None, (path.name, no)
            table, row = got
            assert (vec[no]["step"] is not None) == (table == "job_steps")
            for key, value in row.items():
                assert vec[no][key] == value, (path.name, no, key)


def _daemon_files(corpus: Path) -> list[Path]:
    return [
        corpus / "slurm" / "slurmctld-elasticluster-pr504-state-file-errors.log",
        corpus / "slurm" / "slurmd-journal-bibigrid-issue705-gres-fatal.log",
        DATA / "slurmctld-node-events.log",
    ]


def test_daemon_parse_line_agrees_with_vectorized(corpus):
    for path in _daemon_files(corpus):
        ctx = ParseContext(file=str(path), mtime=datetime(2026, 11, 29))
        lines = path.read_text().splitlines()
        res = daemon_chunk(pl.Series(lines, dtype=pl.String), 1, ctx)
        vec = res.tables.get("events", pl.DataFrame({"line": []})).to_dicts()
        quarantined = set() if res.quarantine is None else set(res.quarantine["line"])
        expected = []
        for no, raw in enumerate(lines, 1):
            got = daemon_line(raw, ctx)
            assert isinstance(got, Quarantined) == (no in quarantined), (path.name, no)
            if isinstance(got, Parsed):
                expected += [
                    (no, r["kind"], r["node"], r["ts"])
                    for r in got.rows["events"]
                    if "reason set to:" not in r["message"]
                ]
        merged = [(r["line"], r["kind"], r["node"], r["ts"]) for r in vec]
        assert merged == expected, path.name


_EVENT_COLUMNS = (
    "line",
    "kind",
    "node",
    "ts",
    "ts_flag",
    "subkind",
    "code",
    "severity",
    "job_id",
    "message",
    "attrs",
)


def test_daemon_rows_agree_with_parse_line_in_every_column(corpus):
    """The vectorized path (rules as one expression, host lists per distinct string, reasons
    merged over the frame) against ``parse_line`` plus the list-based ``merge_reasons``."""
    for path in [*_daemon_files(corpus), DATA / "slurm-daemon-merge-cases.log"]:
        ctx = ParseContext(file=str(path), mtime=datetime(2026, 11, 29))
        lines = path.read_text().splitlines()
        res = daemon_chunk(pl.Series(lines, dtype=pl.String), 1, ctx)
        rows, quarantined = [], {}
        for no, raw in enumerate(lines, 1):
            got = daemon_line(raw, ctx)
            if isinstance(got, Quarantined):
                quarantined[no] = got.reason
            elif isinstance(got, Parsed):
                rows += [{**r, "line": no} for r in got.rows["events"]]
        expected = [tuple(r.get(c) for c in _EVENT_COLUMNS) for r in merge_reasons(rows)]
        events = res.tables["events"].select(_EVENT_COLUMNS)
        assert list(events.iter_rows()) == expected, path.name
        q = {} if res.quarantine is None else dict(res.quarantine.select("line", "reason").rows())
        assert q == quarantined, path.name
        assert res.parsed_lines.to_list() == sorted({r["line"] for r in rows}), path.name


def test_daemon_reasons_merge_into_the_next_state_change_of_their_node():
    path = DATA / "slurm-daemon-merge-cases.log"
    ctx = ParseContext(file=str(path), mtime=datetime(2026, 11, 29))
    res = daemon_chunk(pl.Series(path.read_text().splitlines(), dtype=pl.String), 1, ctx)
    ev = {(r["line"], r["node"]): r for r in res.tables["events"].to_dicts()}
    # line 1 names gpu[01-03]; line 2 replaces gpu01's reason; line 3 drains gpu01 and gpu02
    assert ev[(3, "gpu01")]["subkind"] == "second reason"
    assert (ev[(3, "gpu02")]["subkind"], ev[(3, "gpu02")]["code"]) == ("Xid 79", 79)
    assert ev[(3, "gpu02")]["message"].endswith("(reason: Xid 79)")
    assert [n for line, n in ev if line in (1, 2)] == ["gpu03"]
    assert [n for line, n in ev if line == 4] == ["gpu05", "gpu06", "gpu07", "gpu09"]
    assert (ev[(9, "gpu-03")]["kind"], ev[(9, "gpu-03")]["job_id"]) == ("job_node_fail", "77")
    assert (17, "host-a") in ev
    assert res.quarantine.filter(pl.col("line") == 6)["reason"][0].startswith("invalid timestamp")


def test_sinfo_parse_line_agrees_with_vectorized(corpus):
    for path in (
        corpus / "slurm" / "sinfo-elasticluster-issue272-down-not-responding.txt",
        DATA / "sinfo-R.txt",
    ):
        lines = path.read_text().splitlines()
        header = next(ln for ln in lines if "NODELIST" in ln)
        parser = SinfoParser()
        ctx = ParseContext(file=str(path))
        state = parser.new_state(ctx)
        res = parser.parse_chunk(pl.Series(lines), 1, ctx, state)
        vec = [(r["line"], r["node"], r["kind"]) for r in res.tables["events"].to_dicts()]
        line_ctx = ParseContext(file=str(path), columns=header.split())
        ref = []
        for no, raw in enumerate(lines, 1):
            got = sinfo_parse_line(raw, line_ctx)
            if isinstance(got, Parsed):
                ref += [(no, r["node"], r["kind"]) for r in got.rows["events"]]
        assert vec == ref


# -- arbitrary input ----------

_SLURMISH = st.sampled_from(
    [
        "JobID|State|NodeList|",
        "JobID State\n----- -----",
        "123|COMPLETED|gpu[1-",
        "1.batch|X|",
        "[2024-01-01T00:00:00] error: Nodes a[1-2 not responding",
        "slurmctld: fatal: x",
        "NodeName=x State=DOWN*",
        "Reason=foo [u@2024-13-01T99:00:00]",
        '{"jobs": [',
        "☃",
        "\x00",
        "REASON USER TIMESTAMP NODELIST",
        "update_node: node  state set to DRAIN",
        "Events:",
    ]
)
_LINES = st.lists(st.one_of(st.text(max_size=60), _SLURMISH), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_LINES)
def test_arbitrary_lines_never_crash_and_are_accounted(lines):
    lines = [ln.replace("\n", " ") or None for ln in lines]
    series = pl.Series(lines, dtype=pl.String)
    non_null = sum(1 for ln in lines if ln is not None)
    for parser in PARSERS:
        for columns in (None, ["JobID", "State", "NodeList"]):
            ctx = ParseContext(file="x", columns=columns, mtime=NOW)
            state = parser.new_state(ctx)
            res = parser.parse_chunk(series, 1, ctx, state).merge(parser.finish(ctx, state))
            assert res.parsed + res.quarantined <= non_null, parser.name
            if res.quarantine is not None:
                assert res.quarantine["line"].is_unique().all()
            for ln in lines:
                parser.parse_line(ln, ctx)
