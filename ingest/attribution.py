"""Joining events to jobs, attributing job failures to causes, and the failure taxonomy.

- ``link_events_to_jobs``: every timed event without a job gets the job running on its node then.
- ``attribute_failures``: for every job that ended FAILED / NODE_FAIL / TIMEOUT, the events on its
  nodes from 10 minutes before to 5 minutes after its end (Meta's window) decide the cause
  category. Hardware evidence outranks its symptoms: an Xid 79 explains the NCCL timeouts that
  follow it, so categories are ranked and the highest-ranked, earliest evidence wins. When the
  job's ranks report a ProcessGroupNCCL watchdog timeout, the collective had been hanging for that
  long before the job died, so the window opens that much earlier (a GPU that hangs at 10:00 kills
  the job at 10:10 through the default 10-minute watchdog).

Categories: ``gpu_hardware`` includes a GPU's own NVLink links (Xid 74, 144-150: on an HGX board
they are part of the GPU, and the Llama 3 table counts them as faulty GPUs); ``network`` is the
fabric between nodes (InfiniBand / RoCE ports, NICs, switches, cables, NCCL network errors) and the
NVSwitch fabric (SXid); NCCL / driver faults and ranks killed by a signal are ``software``;
application Xids (13, 31, 43: the job's own code), ranks that exited with an error code, and failed
jobs with no evidence at all are ``user_unknown``.
- ``taxonomy`` and ``mtbf``: the whole history in the shape of the Llama 3 interruption table.

The cause of an event is declared once, in ``EVENT_CAUSE`` / ``XID_CAUSE`` / ``XID_CATEGORY_CAUSE``.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import polars as pl

from faultlens.ingest.schema import CauseCategory as C
from faultlens.ingest.schema import Kind as K
from faultlens.ingest.schema import empty_frame
from faultlens.ingest.store import Store
from faultlens.ingest.training import cuda

log = logging.getLogger(__name__)

WINDOW_BEFORE = timedelta(minutes=10)
WINDOW_AFTER = timedelta(minutes=5)
FAILED_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT")
MAX_HANG_MS = 2 * 3600 * 1000  # a watchdog timeout longer than this does not widen the window

# Xids whose root cause is clear whatever the catalog's coarse category says.
XID_CAUSE: dict[int, C] = {
    48: C.GPU_MEMORY,
    63: C.GPU_MEMORY,
    64: C.GPU_MEMORY,
    92: C.GPU_MEMORY,
    94: C.GPU_MEMORY,
    95: C.GPU_MEMORY,
    140: C.GPU_MEMORY,
    79: C.GPU_HARDWARE,
    119: C.GPU_HARDWARE,
    120: C.GPU_HARDWARE,
    62: C.GPU_HARDWARE,
    74: C.GPU_HARDWARE,
}
# Otherwise the Xid catalog's category decides.
XID_CATEGORY_CAUSE: dict[str, C] = {
    "hardware": C.GPU_HARDWARE,
    "memory": C.GPU_MEMORY,
    "interconnect": C.GPU_HARDWARE,  # NVLink (Xid 74, 144-150): the GPU's own links
    "thermal": C.GPU_HARDWARE,
    "driver": C.SOFTWARE,
    "application": C.USER_UNKNOWN,  # Xid 13 / 31 / 43: the job's own code, per NVIDIA
    "other": C.USER_UNKNOWN,
}
# Non-Xid event kinds.
EVENT_CAUSE: dict[K, C] = {
    K.FALLEN_OFF_BUS: C.GPU_HARDWARE,
    K.GPU_INIT_FAIL: C.GPU_HARDWARE,
    K.GSP_TIMEOUT: C.GPU_HARDWARE,
    K.RESET_REQUIRED: C.GPU_HARDWARE,
    K.THERMAL: C.GPU_HARDWARE,
    K.DEVICE_UNHEALTHY: C.GPU_HARDWARE,
    K.ECC: C.GPU_MEMORY,
    K.ROW_REMAP: C.GPU_MEMORY,
    K.NVLINK: C.GPU_HARDWARE,
    K.SXID: C.NETWORK,
    K.IB_PORT: C.NETWORK,
    K.NCCL_ERROR: C.NETWORK,
    K.NCCL_RAS: C.NETWORK,  # NCCL RAS: a peer unresponsive / dead, a connection timed out
    K.PCIE: C.HOST,
    K.MEMORY: C.HOST,
    K.MCE: C.HOST,
    K.HUNG_TASK: C.HOST,
    K.STORAGE: C.HOST,
    K.KERNEL_PANIC: C.HOST,
    K.NODE_DOWN: C.HOST,
    K.NODE_NOT_RESPONDING: C.HOST,
    K.JOB_NODE_FAIL: C.HOST,
    K.NCCL_TIMEOUT: C.SOFTWARE,
    K.NCCL_WARN: C.SOFTWARE,
    K.PROCESS_FAILED: C.SOFTWARE,
}
# Rank of a cause as a root cause (lower wins): hardware explains the software symptoms.
CAUSE_RANK: dict[C, int] = {
    C.GPU_MEMORY: 0,
    C.GPU_HARDWARE: 1,
    C.NETWORK: 2,
    C.HOST: 3,
    C.SOFTWARE: 4,
    C.USER_UNKNOWN: 30,  # an application Xid is weaker evidence than a rank killed by a signal
}
# Kinds that are only symptoms of whatever else happened: used only when nothing else is there.
SYMPTOM_KINDS = (
    K.JOB_NODE_FAIL,
    K.NODE_NOT_RESPONDING,
    K.NODE_DOWN,
    K.NCCL_TIMEOUT,
    K.NCCL_RAS,  # what a peer saw of another node's failure: that node's own events decide
    K.PROCESS_FAILED,
)


def _cause_case() -> str:
    """A SQL CASE mapping (kind, code, catalog category) to a cause; built from the dicts above."""
    parts = [
        "CASE",
        # A rank killed by a signal (SIGABRT / SIGSEGV: exit code < 0) crashed in system software;
        # a rank that exited with a code (a Python exception) failed in the user's program.
        f"WHEN e.kind = '{K.PROCESS_FAILED.value}' THEN CASE WHEN TRY_CAST(json_extract_string("
        f"e.attrs, '$.exit_code') AS INTEGER) < 0 THEN '{C.SOFTWARE.value}' "
        f"ELSE '{C.USER_UNKNOWN.value}' END",
    ]
    for code, cause in XID_CAUSE.items():
        parts.append(f"WHEN e.kind = 'xid' AND e.code = {int(code)} THEN '{cause.value}'")
    for cat, cause in XID_CATEGORY_CAUSE.items():
        parts.append(f"WHEN e.kind = 'xid' AND x.category = '{cat}' THEN '{cause.value}'")
    parts.append(f"WHEN e.kind = 'xid' THEN '{C.USER_UNKNOWN.value}'")
    # CPU thermal throttling (kernel therm_throt, sub-kinds cpu_*) is the host's, not the GPU's
    parts.append(f"WHEN e.kind = 'thermal' AND e.subkind LIKE 'cpu_%' THEN '{C.HOST.value}'")
    # a CUDA error the job printed: an uncorrectable ECC / NVLink error is the GPU's; any other
    # (illegal address, launch failure, out of memory) is weighed as an application Xid is
    cuda_k = K.CUDA_ERROR.value
    for codes, cause in (
        (cuda.GPU_MEMORY_CODES, C.GPU_MEMORY),
        (cuda.GPU_HARDWARE_CODES, C.GPU_HARDWARE),
    ):
        listed = ", ".join(str(int(c)) for c in codes)
        parts.append(f"WHEN e.kind = '{cuda_k}' AND e.code IN ({listed}) THEN '{cause.value}'")
    parts.append(f"WHEN e.kind = '{cuda_k}' THEN '{C.USER_UNKNOWN.value}'")
    for kind, cause in EVENT_CAUSE.items():
        parts.append(f"WHEN e.kind = '{kind.value}' THEN '{cause.value}'")
    parts.append("END")
    return " ".join(parts)


def _rank_case(col: str) -> str:
    whens = " ".join(f"WHEN '{c.value}' THEN {r}" for c, r in CAUSE_RANK.items())
    symptoms = ", ".join(f"'{k.value}'" for k in SYMPTOM_KINDS)
    # Symptoms rank after every real cause of any category.
    return (
        f"(CASE {col} {whens} ELSE 9 END) + (CASE WHEN e.kind IN ({symptoms}) THEN 10 ELSE 0 END)"
    )


_JOB_NODES = """(SELECT rowid AS jrid, job_id, unnest(nodes) AS node, start, "end",
                   coalesce(n_gpus, 0) AS n_gpus FROM jobs WHERE start IS NOT NULL)"""
_EVENT_IN_JOB = """e.node = j.node AND e.ts >= j.start
             AND e.ts <= coalesce(j."end", TIMESTAMP '9999-12-31') + INTERVAL 5 MINUTE"""


def link_events_to_jobs(
    store: Store, *, events_above: int | None = None, jobs_above: int | None = None
) -> int:
    """Fill ``events.job_id`` from the job running on the event's node at its time.

    Of several, the job with the most GPUs (then the highest job id) wins. With watermarks
    (rowids, from the last refresh) only the new events are matched with all jobs, and the
    still-unlinked old events only with the new jobs: an old event no old job covered stays out.
    """
    unlinked = "e.job_id IS NULL AND e.ts IS NOT NULL"
    if events_above is None or jobs_above is None:
        pairs = f"FROM events e JOIN {_JOB_NODES} j ON {_EVENT_IN_JOB} WHERE {unlinked}"
        params: list[int] = []
    else:
        pairs = (
            f"FROM events e JOIN {_JOB_NODES} j ON {_EVENT_IN_JOB} WHERE {unlinked} AND e.rowid > ?"
        )
        params = [events_above]
        if store.scalar("SELECT count(*) FROM jobs WHERE rowid > ?", [jobs_above]):
            pairs += (
                f" UNION ALL SELECT e.rowid AS rid, j.job_id, j.n_gpus FROM events e "
                f"JOIN (SELECT * FROM {_JOB_NODES} WHERE jrid > ?) j ON {_EVENT_IN_JOB} "
                f"WHERE {unlinked} AND e.rowid <= ?"
            )
            params += [jobs_above, events_above]
    updated = store.scalar(  # an UPDATE returns the number of rows it changed
        f"""
        UPDATE events SET job_id = m.job_id FROM (
            SELECT rid, arg_max(job_id, struct_pack(g := n_gpus, j := job_id)) AS job_id
            FROM (SELECT e.rowid AS rid, j.job_id, j.n_gpus {pairs})
            GROUP BY rid
        ) m WHERE events.rowid = m.rid
        """,
        params,
    )
    return int(updated or 0)


def _attribution_sql(only: str) -> str:
    """The attribution of failed jobs (``only``: an extra condition on ``jobs``)."""
    states = ", ".join(f"'{s}'" for s in FAILED_STATES)
    return f"""
        WITH failed AS (
            SELECT job_id, state, "end", nodes, coalesce(n_gpus, 0) AS n_gpus,
                   coalesce(elapsed_s, epoch("end") - epoch(start), 0) AS elapsed_s
            FROM jobs WHERE state IN ({states}) AND "end" IS NOT NULL {only}
        ),
        hang AS (
            -- how long the job's collectives hung before the watchdog fired (ms)
            SELECT f.job_id, max(greatest(
                coalesce(TRY_CAST(json_extract_string(e.attrs, '$.ran_for_ms') AS DOUBLE), 0),
                coalesce(TRY_CAST(json_extract_string(e.attrs, '$.timeout_ms') AS DOUBLE), 0)
            )) AS hang_ms
            FROM failed f JOIN events e ON e.job_id = f.job_id AND e.kind = 'nccl_timeout'
            GROUP BY f.job_id
        ),
        fn AS (
            SELECT f.job_id, f."end", unnest(f.nodes) AS node,
                   f."end" - INTERVAL {int(WINDOW_BEFORE.total_seconds())} SECOND
                     - to_milliseconds(CAST(least(coalesce(h.hang_ms, 0), {MAX_HANG_MS}) AS BIGINT))
                     AS lo
            FROM failed f LEFT JOIN hang h ON h.job_id = f.job_id
        ),
        ev AS (
            SELECT fn.job_id, e.node, e.kind, e.code, e.ts, {_cause_case()} AS cause
            FROM fn JOIN events e ON e.node = fn.node
             AND e.ts BETWEEN fn.lo
                          AND fn."end" + INTERVAL {int(WINDOW_AFTER.total_seconds())} SECOND
            LEFT JOIN xid_catalog x ON e.kind = 'xid' AND x.xid = e.code
        ),
        ranked AS (
            SELECT *, row_number() OVER (
                PARTITION BY job_id ORDER BY {_rank_case("cause")}, ts, node, kind, code) AS rn
            FROM ev e WHERE cause IS NOT NULL
        )
        SELECT f.job_id, f.state, f."end", r.node,
               coalesce(r.cause, '{C.USER_UNKNOWN.value}') AS cause,
               r.kind AS evidence_kind, r.code AS evidence_code, r.ts AS evidence_ts,
               f.n_gpus * f.elapsed_s / 3600.0 AS gpu_hours_lost
        FROM failed f LEFT JOIN ranked r ON r.job_id = f.job_id AND r.rn = 1
        ORDER BY f."end", f.job_id
    """


def attribute_failures(store: Store, only_jobs: list[str] | None = None) -> pl.DataFrame:
    """Rebuild ``attributions``: one row per failed job with its cause and deciding evidence.

    With ``only_jobs`` only those jobs' rows are replaced (the others' evidence has not changed).
    """
    if only_jobs is None:
        frame = store.query(_attribution_sql(""))
        with store.transaction():
            store.execute("DELETE FROM attributions")
            store.insert("attributions", frame)
        return frame
    if not only_jobs:
        return empty_frame("attributions")
    only = "AND job_id IN (SELECT unnest(?::VARCHAR[]))"
    frame = store.query(_attribution_sql(only), [only_jobs])
    with store.transaction():
        store.execute(
            "DELETE FROM attributions WHERE job_id IN (SELECT unnest(?::VARCHAR[]))", [only_jobs]
        )
        store.insert("attributions", frame)
    return frame


def jobs_to_reattribute(store: Store, *, events_above: int, jobs_above: int) -> list[str]:
    """Failed jobs whose evidence may have changed since the watermarks: new failed jobs, and
    those with a new event on one of their nodes in the widest window (a maximal watchdog hang
    before it) or a new watchdog timeout of their own."""
    states = ", ".join(f"'{s}'" for s in FAILED_STATES)
    before_s = int(WINDOW_BEFORE.total_seconds()) + MAX_HANG_MS // 1000
    after_s = int(WINDOW_AFTER.total_seconds())
    frame = store.query(
        f"""
        WITH failed AS (
            SELECT rowid AS jrid, job_id, "end", nodes FROM jobs
            WHERE state IN ({states}) AND "end" IS NOT NULL
        ), new_events AS (
            SELECT node, ts, kind, job_id FROM events WHERE rowid > ? AND ts IS NOT NULL
        ), near AS (  -- failed jobs that ended near a new event (the rest cannot be affected)
            SELECT job_id, "end", unnest(nodes) AS node FROM failed
            WHERE "end" BETWEEN (SELECT min(ts) FROM new_events) - INTERVAL {after_s} SECOND
                            AND (SELECT max(ts) FROM new_events) + INTERVAL {before_s} SECOND
        )
        SELECT job_id FROM failed WHERE jrid > ?
        UNION
        SELECT f.job_id FROM near f
          JOIN new_events e ON e.node = f.node
           AND e.ts BETWEEN f."end" - INTERVAL {before_s} SECOND
                        AND f."end" + INTERVAL {after_s} SECOND
        UNION
        SELECT f.job_id FROM failed f JOIN new_events e
          ON e.job_id = f.job_id AND e.kind = 'nccl_timeout'
        """,
        [events_above, jobs_above],
    )
    return sorted(frame["job_id"].to_list())


def taxonomy(store: Store) -> pl.DataFrame:
    """Interruptions by cause category: count, share, GPU-hours lost (the Llama 3 table shape).

    ``share_pct`` is over all failed jobs; ``share_infra_pct`` over those with evidence of a cause
    (everything but ``user_unknown``), which is what the Llama 3 table of interruptions counts.
    """
    return store.query(
        f"""
        SELECT cause, count(*) AS interruptions,
               round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS share_pct,
               CASE WHEN cause <> '{C.USER_UNKNOWN.value}' THEN round(100.0 * count(*) /
                   sum(count(*) FILTER (WHERE cause <> '{C.USER_UNKNOWN.value}')) OVER (), 1)
               END AS share_infra_pct,
               round(sum(gpu_hours_lost), 1) AS gpu_hours_lost
        FROM attributions GROUP BY cause ORDER BY interruptions DESC, cause
        """
    )


def observed_node_days(store: Store) -> float:
    """Node-days covered by the history: distinct nodes x the span of timed events and jobs."""
    row = store.query(
        """
        WITH spans AS (
            SELECT min(ts) AS lo, max(ts) AS hi FROM events WHERE ts IS NOT NULL
            UNION ALL SELECT min(start), max("end") FROM jobs
        ), nodes AS (
            SELECT node FROM events WHERE node IS NOT NULL
            UNION SELECT unnest(nodes) FROM jobs
        )
        SELECT (SELECT count(DISTINCT node) FROM nodes) AS n_nodes,
               epoch(max(hi)) - epoch(min(lo)) AS span_s FROM spans
        """
    ).row(0, named=True)
    if not row["n_nodes"] or not row["span_s"]:
        return 0.0
    return float(row["n_nodes"]) * float(row["span_s"]) / 86400.0


def mtbf(store: Store) -> pl.DataFrame:
    """Per cause category: failures, failures per 1000 node-days, and MTBF per node in hours."""
    node_days = observed_node_days(store)
    frame = store.query("SELECT cause, count(*) AS failures FROM attributions GROUP BY cause")
    total = pl.DataFrame({"cause": ["all"], "failures": [int(frame["failures"].sum() or 0)]})
    frame = pl.concat([frame.cast({"failures": pl.Int64}), total.cast({"failures": pl.Int64})])
    if node_days <= 0:
        return frame.with_columns(
            pl.lit(None, pl.Float64).alias("per_1000_node_days"),
            pl.lit(None, pl.Float64).alias("mtbf_node_h"),
        )
    return frame.with_columns(
        (pl.col("failures") * 1000.0 / node_days).round(2).alias("per_1000_node_days"),
        pl.when(pl.col("failures") > 0)
        .then(node_days * 24.0 / pl.col("failures"))
        .round(0)
        .alias("mtbf_node_h"),
    ).sort("failures", descending=True)


HARDWARE_CAUSES = (C.GPU_HARDWARE, C.GPU_MEMORY, C.NETWORK, C.HOST)


def compare_with_truth(attributions: pl.DataFrame, interruptions: list[dict]) -> dict:
    """Agreement of attributed causes with known causes (e.g. a synthetic cluster's truth).

    ``interruptions``: dicts with ``job_id`` and ``category`` (a CauseCategory value). Returns the
    share of matching jobs overall and over hardware-caused ones, and the confusion pairs.
    """
    truth = pl.DataFrame(
        {
            "job_id": [str(i["job_id"]) for i in interruptions],
            "true_cause": [i["category"] for i in interruptions],
        },
        schema={"job_id": pl.String, "true_cause": pl.String},
    ).unique("job_id", keep="last")
    joined = truth.join(attributions.select("job_id", "cause"), on="job_id", how="left")
    joined = joined.with_columns(pl.col("cause").fill_null("missing"))
    hw = joined.filter(pl.col("true_cause").is_in([c.value for c in HARDWARE_CAUSES]))

    def share(frame: pl.DataFrame) -> float | None:
        if frame.height == 0:
            return None
        return float((frame["cause"] == frame["true_cause"]).mean())

    confusion = (
        joined.filter(pl.col("cause") != pl.col("true_cause"))
        .group_by("true_cause", "cause")
        .len()
        .sort("len", descending=True)
    )
    return {
        "jobs": joined.height,
        "match": share(joined),
        "hardware_jobs": hw.height,
        "hardware_match": share(hw),
        "mismatches": confusion.to_dicts(),
    }


def _resolve_gpu_indices_since(store: Store, *, events_above: int, gpus_above: int) -> int:
    """``resolve_gpu_indices`` for the new events and the events of nodes with new inventory."""
    scope = "events.rowid > ?"
    params: list[int] = [events_above]
    if store.scalar("SELECT count(*) FROM gpus WHERE rowid > ?", [gpus_above]):
        scope = f"({scope} OR events.node IN (SELECT DISTINCT node FROM gpus WHERE rowid > ?))"
        params.append(gpus_above)
    updated = store.scalar(
        "UPDATE events SET gpu_index = m.gpu_index FROM (SELECT node, pci_bus_id, "
        "min(gpu_index) AS gpu_index FROM gpu_inventory WHERE pci_bus_id IS NOT NULL "
        "GROUP BY ALL HAVING count(DISTINCT gpu_index) = 1) m "
        "WHERE events.gpu_index IS NULL AND events.node = m.node "
        f"AND lower(events.gpu) = m.pci_bus_id AND {scope}",
        params,
    )
    return int(updated or 0)


def refresh(store: Store, *, full: bool = False) -> dict[str, int | str]:
    """After an ingest: GPU indices from the inventory, events linked to jobs, failed jobs
    attributed. Idempotent.

    Incremental by default: only the rows loaded since the last refresh (its watermarks, see
    ``ingest.watermarks``) and the failed jobs whose window they fall in are touched; when the
    old rows may have changed, or with ``full``, everything is rebuilt. Both give the same tables.
    """
    from faultlens.ingest import rollups, watermarks
    from faultlens.ingest.telemetry.common import resolve_gpu_indices

    reason = "requested" if full else watermarks.why_full(store, watermarks.load(store))
    if reason is not None:
        log.info("full refresh: %s", reason)
        gpus = resolve_gpu_indices(store)
        with store.transaction():
            linked = link_events_to_jobs(store)
        attributed = attribute_failures(store).height
    else:
        prior = watermarks.load(store)
        ev, jb, gp = (prior[t].max_rowid for t in ("events", "jobs", "gpus"))
        with store.transaction():
            gpus = _resolve_gpu_indices_since(store, events_above=ev, gpus_above=gp)
            linked = link_events_to_jobs(store, events_above=ev, jobs_above=jb)
        jobs = jobs_to_reattribute(store, events_above=ev, jobs_above=jb)
        attributed = attribute_failures(store, jobs).height
    with store.transaction():
        watermarks.save(store, watermarks.current(store))
    rollups.maintain(store, full=reason is not None, relinked=bool(linked or gpus))  # readers'
    return {
        "mode": "full" if reason else "incremental",
        "reason": reason or "",
        "gpu_indices": gpus,
        "events_linked": linked,
        "jobs_attributed": attributed,
    }
