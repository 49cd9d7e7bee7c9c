"""The normalized schema, declared once: DuckDB DDL and polars schemas both come from here.

Every table of the database is a ``Table`` in ``TABLES``. Parsers build polars frames with
``empty_frame(name)`` / ``conform(name, frame)`` so their output always has the declared columns and
types; the store creates the tables from the same declaration.

Closed vocabularies (sources, event kinds, severities, actions, cause categories) are enums.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import polars as pl

SCHEMA_VERSION = 7


class Source(StrEnum):
    KERNEL = "kernel"
    NCCL = "nccl"
    PYTORCH = "pytorch"
    SLURM = "slurm"
    DCGM = "dcgm"
    NVIDIA_SMI = "nvidia_smi"
    TRAINING = "training"
    K8S = "k8s"
    FABRICMANAGER = "fabricmanager"
    TRACE = "trace"  # public cluster job traces (Alibaba, AcmeTrace)
    INCIDENT = "incident"  # failure tickets, repair logs, public failure records


class Kind(StrEnum):
    """What an event is. ``code`` carries the number (Xid, SXid, errno) where there is one."""

    XID = "xid"
    SXID = "sxid"  # NVSwitch error
    NVLINK = "nvlink"  # NVLink Xid 144-150 and NVLink counters
    FALLEN_OFF_BUS = "fallen_off_bus"
    GPU_INIT_FAIL = "gpu_init_fail"  # RmInitAdapter, probe routine failed
    GSP_TIMEOUT = "gsp_timeout"
    RESET_REQUIRED = "reset_required"
    ECC = "ecc"
    ROW_REMAP = "row_remap"
    PCIE = "pcie"  # PCIe AER
    MEMORY = "memory"  # host EDAC / MCE / APEI memory errors
    MCE = "mce"
    IB_PORT = "ib_port"  # mlx5 / InfiniBand port state change
    HUNG_TASK = "hung_task"
    THERMAL = "thermal"
    STORAGE = "storage"  # NVMe timeouts, block-layer I/O errors, file-system errors
    KERNEL_PANIC = "kernel_panic"  # "Kernel panic - not syncing" (machine-check panics: mce)
    DEVICE_UNHEALTHY = "device_unhealthy"  # k8s device plugin XidCriticalError
    NCCL_ERROR = "nccl_error"
    NCCL_TIMEOUT = "nccl_timeout"  # ProcessGroupNCCL watchdog
    NCCL_WARN = "nccl_warn"
    NCCL_RAS = "nccl_ras"  # NCCL RAS: unresponsive / dead peers, missing ranks (subkind)
    PROCESS_FAILED = "process_failed"  # torchrun ChildFailedError
    CUDA_ERROR = "cuda_error"  # a CUDA error in an application's own log (``training.cuda``)
    NODE_DOWN = "node_down"
    NODE_DRAIN = "node_drain"
    NODE_NOT_RESPONDING = "node_not_responding"
    NODE_RESUME = "node_resume"
    JOB_REQUEUE = "job_requeue"
    JOB_NODE_FAIL = "job_node_fail"
    SLURM_ERROR = "slurm_error"
    DIAG = "diag"  # dcgmi diag result
    TELEMETRY_ERROR = "telemetry_error"
    RESTART = "restart"  # a training job resumed from a checkpoint
    STRAGGLER = "straggler"
    INCIDENT = "incident"  # an incident record: severity critical/error = failure, warning = not


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class Action(StrEnum):
    """Recommended first action (the Xid catalog's ``typical_action`` vocabulary)."""

    NONE = "none"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    DRAIN_NODE = "drain_node"


class CauseCategory(StrEnum):
    """Root-cause categories of a job interruption, in the shape of the Llama 3 table."""

    GPU_HARDWARE = "gpu_hardware"
    GPU_MEMORY = "gpu_memory"
    NETWORK = "network"  # IB / NVLink / switch / cable
    SOFTWARE = "software"  # NCCL / driver / framework
    HOST = "host"  # CPU, host memory, PCIe, OS
    USER_UNKNOWN = "user_unknown"


class IncidentCategory(StrEnum):
    """The taxonomy incident records are mapped to (their own level / class is kept beside)."""

    GPU = "gpu"
    GPU_MEMORY = "gpu_memory"
    NETWORK = "network"
    HOST = "host"
    SOFTWARE = "software"
    USER = "user"
    MAINTENANCE = "maintenance"
    UNKNOWN = "unknown"


SITE_DATASET = "site"  # the dataset of a site's own history (``ingest --dataset`` names others)


@dataclass(frozen=True)
class Column:
    name: str
    sql: str  # DuckDB type
    pl: pl.DataType | type[pl.DataType]


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]

    @property
    def polars_schema(self) -> dict[str, pl.DataType | type[pl.DataType]]:
        return {c.name: c.pl for c in self.columns}

    def ddl(self) -> str:
        cols = ", ".join(f'"{c.name}" {c.sql}' for c in self.columns)
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({cols})"


def _c(name: str, sql: str) -> Column:
    return Column(name, sql, _SQL_TO_PL[sql])


TS = pl.Datetime("us")
_SQL_TO_PL: dict[str, pl.DataType | type[pl.DataType]] = {
    "TIMESTAMP": TS,
    "VARCHAR": pl.String,
    "INTEGER": pl.Int32,
    "BIGINT": pl.Int64,
    "DOUBLE": pl.Float64,
    "BOOLEAN": pl.Boolean,
    "VARCHAR[]": pl.List(pl.String),
}

# Source-location columns shared by every table of parsed rows: which file and 1-based line.
_LOC = (_c("file", "VARCHAR"), _c("line", "BIGINT"))

EVENTS = Table(
    "events",
    (
        _c("ts", "TIMESTAMP"),  # UTC; NULL when only a boot-relative stamp is known
        _c("uptime_s", "DOUBLE"),  # boot-relative stamp, when the line had one
        # NULL, or why ts is approximate / missing: boot_relative, no_ts, year_from_mtime,
        # tz_unknown, tz_ambiguous, tz_gap, ...
        _c("ts_flag", "VARCHAR"),
        _c("node", "VARCHAR"),
        # how the node was known: line (named in the file), option (--node), path
        # (--node-from-path), rank_map (the job's NCCL rank map); NULL when nothing names one
        _c("node_source", "VARCHAR"),
        _c("gpu", "VARCHAR"),  # PCI bus id 0000:3b:00.0, or the GPU index as text
        _c("gpu_index", "INTEGER"),
        _c("source", "VARCHAR"),
        _c("kind", "VARCHAR"),
        _c("subkind", "VARCHAR"),  # e.g. ncclSystemError, AER Corrected, Nonfatal
        _c("code", "INTEGER"),  # Xid / SXid number
        _c("severity", "VARCHAR"),
        _c("action", "VARCHAR"),
        _c("job_id", "VARCHAR"),
        _c("pid", "BIGINT"),
        _c("process", "VARCHAR"),
        _c("message", "VARCHAR"),
        _c("attrs", "VARCHAR"),  # JSON object of source-specific fields
        *_LOC,
    ),
)

JOBS = Table(
    "jobs",
    (
        _c("job_id", "VARCHAR"),
        _c("array_job_id", "VARCHAR"),
        _c("name", "VARCHAR"),
        _c("user", "VARCHAR"),
        _c("account", "VARCHAR"),
        _c("partition", "VARCHAR"),
        _c("nodes", "VARCHAR[]"),
        _c("n_nodes", "INTEGER"),
        _c("n_gpus", "INTEGER"),
        _c("submit", "TIMESTAMP"),
        _c("start", "TIMESTAMP"),
        _c("end", "TIMESTAMP"),
        # NULL, or why a submit / start / end the record printed is NULL: ambiguous_date,
        # relative_time, date_only, unreadable_time (``slurm.timefmt``), tz_ambiguous / tz_gap
        # (a zone-less time the --tz zone shows twice or skips: ``ingest.zones``)
        _c("time_flag", "VARCHAR"),
        _c("elapsed_s", "DOUBLE"),
        _c("state", "VARCHAR"),  # COMPLETED, FAILED, NODE_FAIL, CANCELLED, TIMEOUT, ...
        _c("state_detail", "VARCHAR"),  # e.g. "by 1003" of "CANCELLED by 1003"
        _c("exit_code", "INTEGER"),
        _c("exit_signal", "INTEGER"),
        _c("restarts", "INTEGER"),
        _c("source", "VARCHAR"),  # slurm, alibaba2020, alibaba2023, acme, synth
        *_LOC,
    ),
)

JOB_STEPS = Table(
    "job_steps",
    (
        _c("job_id", "VARCHAR"),
        _c("step", "VARCHAR"),  # batch, extern, 0, 1, ...
        _c("name", "VARCHAR"),
        _c("nodes", "VARCHAR[]"),
        _c("n_gpus", "INTEGER"),
        _c("start", "TIMESTAMP"),
        _c("end", "TIMESTAMP"),
        _c("elapsed_s", "DOUBLE"),
        _c("state", "VARCHAR"),
        _c("state_detail", "VARCHAR"),
        _c("exit_code", "INTEGER"),
        _c("exit_signal", "INTEGER"),
        *_LOC,
    ),
)

TELEMETRY = Table(
    "telemetry",
    (
        _c("ts", "TIMESTAMP"),
        _c("node", "VARCHAR"),
        _c("gpu", "INTEGER"),  # GPU index on the node
        _c("metric", "VARCHAR"),  # DCGM field name, e.g. DCGM_FI_DEV_GPU_TEMP
        _c("value", "DOUBLE"),
        # a MIG instance's own series (dcgm-exporter's GPU_I_ID / GPU_I_PROFILE); NULL: whole GPU
        _c("gpu_instance", "INTEGER"),
        _c("gpu_profile", "VARCHAR"),  # e.g. 1g.10gb
        # the Kubernetes workload the GPU (or instance) was given to, when the exporter says
        _c("pod", "VARCHAR"),
        _c("namespace", "VARCHAR"),
        _c("container", "VARCHAR"),
    ),
)

GPUS = Table(
    "gpus",
    (
        _c("node", "VARCHAR"),
        _c("gpu_index", "INTEGER"),
        _c("pci_bus_id", "VARCHAR"),  # 0000:3b:00.0
        _c("uuid", "VARCHAR"),
        _c("model", "VARCHAR"),
        _c("serial", "VARCHAR"),
        _c("driver_version", "VARCHAR"),
        _c("vbios_version", "VARCHAR"),
        _c("first_seen", "TIMESTAMP"),
        _c("last_seen", "TIMESTAMP"),
        _c("source", "VARCHAR"),
        _c("file", "VARCHAR"),
    ),
)

NCCL_RANKS = Table(
    "nccl_ranks",
    (
        _c("ts", "TIMESTAMP"),
        _c("job_id", "VARCHAR"),
        _c("node", "VARCHAR"),
        _c("pid", "BIGINT"),
        _c("comm_id", "VARCHAR"),
        _c("rank", "INTEGER"),
        _c("nranks", "INTEGER"),
        _c("cuda_dev", "INTEGER"),
        _c("bus_id", "VARCHAR"),  # normalized 0000:3b:00.0
        _c("nccl_version", "VARCHAR"),
        _c("nic", "VARCHAR"),
        _c("transport", "VARCHAR"),
        *_LOC,
    ),
)

LINK_HEALTH = Table(
    "link_health",
    (
        _c("ts", "TIMESTAMP"),
        _c("node", "VARCHAR"),
        _c("test", "VARCHAR"),  # all_reduce_perf, sendrecv_perf, ...
        _c("size_bytes", "BIGINT"),
        _c("count", "BIGINT"),
        _c("dtype", "VARCHAR"),
        _c("redop", "VARCHAR"),
        _c("in_place", "BOOLEAN"),
        _c("time_us", "DOUBLE"),
        _c("algbw_gbs", "DOUBLE"),
        _c("busbw_gbs", "DOUBLE"),
        _c("wrong", "BIGINT"),
        *_LOC,
    ),
)

TRAIN_STEPS = Table(
    "train_steps",
    (
        _c("ts", "TIMESTAMP"),
        _c("job_id", "VARCHAR"),
        _c("node", "VARCHAR"),
        _c("rank", "INTEGER"),
        _c("framework", "VARCHAR"),  # megatron, hf_trainer, lightning, torchtitan
        _c("step", "BIGINT"),
        _c("total_steps", "BIGINT"),
        _c("step_time_s", "DOUBLE"),
        _c("tokens_per_s", "DOUBLE"),
        _c("samples_per_s", "DOUBLE"),
        _c("loss", "DOUBLE"),
        _c("lr", "DOUBLE"),
        *_LOC,
    ),
)

QUARANTINE = Table(
    "quarantine",
    (_c("file", "VARCHAR"), _c("line", "BIGINT"), _c("raw", "VARCHAR"), _c("reason", "VARCHAR")),
)

INGESTED_FILES = Table(
    "ingested_files",
    (
        _c("path", "VARCHAR"),
        _c("fingerprint", "VARCHAR"),  # sha256 of the first head_len bytes
        _c("head_len", "BIGINT"),
        _c("bytes", "BIGINT"),  # bytes consumed so far (a grown log is read from here)
        _c("lines", "BIGINT"),
        _c("parsed", "BIGINT"),
        _c("noise", "BIGINT"),
        _c("quarantined", "BIGINT"),
        _c("format", "VARCHAR"),
        _c("status", "VARCHAR"),
        _c("error", "VARCHAR"),
        _c("ingested_at", "TIMESTAMP"),
        _c("boot_time", "TIMESTAMP"),  # learned or given boot time, for a grown dmesg file
        _c("tail_fingerprint", "VARCHAR"),  # sha256 of the raw bytes just before ``bytes``
    ),
)

XID_CATALOG = Table(
    "xid_catalog",
    (
        _c("xid", "INTEGER"),
        _c("name", "VARCHAR"),
        _c("category", "VARCHAR"),
        _c("typical_action", "VARCHAR"),
        _c("notes", "VARCHAR"),
    ),
)

PREDICTIONS = Table(
    "predictions",
    (
        _c("run_id", "VARCHAR"),
        _c("made_at", "TIMESTAMP"),
        _c("node", "VARCHAR"),
        _c("gpu", "VARCHAR"),
        _c("target", "VARCHAR"),  # failure, straggler
        _c("horizon", "DOUBLE"),  # hours
        _c("score", "DOUBLE"),
        _c("action", "VARCHAR"),
        _c("top_features", "VARCHAR"),  # JSON list of {feature, value, contribution}
        _c("model_version", "VARCHAR"),
    ),
)

ATTRIBUTIONS = Table(
    "attributions",
    (
        _c("job_id", "VARCHAR"),
        _c("state", "VARCHAR"),
        _c("end", "TIMESTAMP"),
        _c("node", "VARCHAR"),  # the node whose evidence decided the cause
        _c("cause", "VARCHAR"),  # CauseCategory
        _c("evidence_kind", "VARCHAR"),
        _c("evidence_code", "INTEGER"),
        _c("evidence_ts", "TIMESTAMP"),
        _c("gpu_hours_lost", "DOUBLE"),
    ),
)

# What ``refresh()`` had seen of each table it reads, so the next one touches only what is new.
REFRESH_STATE = Table(
    "refresh_state",
    (
        _c("tbl", "VARCHAR"),
        _c("max_rowid", "BIGINT"),  # the highest rowid seen (rows above it are new)
        _c("n_rows", "BIGINT"),
        _c("untimed", "BIGINT"),  # events without ts at or below max_rowid
        _c("mark", "VARCHAR"),  # identity of the row at max_rowid, or a small table's digest
    ),
)

# The last scheduled run's prediction, kept with the digest of the inputs it was computed from
# (``ingest.watermarks.data_mark``): a run that finds the same digest, the same ``as_of``, model
# and settings reuses it (its rows are in ``predictions`` under ``run_id``) instead of scoring.
RUN_CACHE = Table(
    "run_cache",
    (
        _c("run_id", "VARCHAR"),
        _c("as_of", "TIMESTAMP"),
        _c("model_version", "VARCHAR"),
        _c("settings", "VARCHAR"),  # JSON: scheduler, dashboard URL, faultlens version
        _c("data_mark", "VARCHAR"),
        _c("n_rows", "BIGINT"),  # the run's rows in ``predictions``
        _c("alerts", "VARCHAR"),  # JSON: the run's alerts as ``predict`` built them
        _c("saved_at", "TIMESTAMP"),  # wall-clock time of the run that saved it
    ),
)

# Suggested drains and what became of them (``models.drains``): was the node drained (its Slurm
# state in later data) and did it fail within the horizon.
DRAIN_OUTCOMES = Table(
    "drain_outcomes",
    (
        _c("run_id", "VARCHAR"),
        _c("made_at", "TIMESTAMP"),
        _c("node", "VARCHAR"),
        _c("action", "VARCHAR"),  # drain_after_jobs | drain_now
        _c("score", "DOUBLE"),
        _c("horizon", "DOUBLE"),  # hours
        _c("drained_at", "TIMESTAMP"),  # first drain / down state seen after made_at
        _c("drain_state", "VARCHAR"),  # DRAIN, DOWN, ...
        _c("drain_file", "VARCHAR"),
        _c("drain_line", "BIGINT"),
        _c("failed_at", "TIMESTAMP"),  # first failure episode within the horizon
        _c("outcome", "VARCHAR"),  # DrainOutcome
        _c("checked_at", "TIMESTAMP"),  # newest data when the outcome was decided
    ),
)

# The fleet: one row per node sighting (a node list, an inventory, an incident file), dated.
NODES = Table(
    "nodes",
    (
        _c("dataset", "VARCHAR"),
        _c("node", "VARCHAR"),
        _c("partition", "VARCHAR"),
        _c("rack", "VARCHAR"),
        _c("gpus", "INTEGER"),
        _c("first_seen", "TIMESTAMP"),
        _c("last_seen", "TIMESTAMP"),
        _c("source", "VARCHAR"),  # incident, sinfo, inventory, ...
        *_LOC,
        _c("state", "VARCHAR"),  # the node's state as listed (sinfo / scontrol: IDLE+DRAIN, ...)
    ),
)

# Failure and repair records; each also gives an ``incident`` event on its node.
INCIDENTS = Table(
    "incidents",
    (
        _c("dataset", "VARCHAR"),
        _c("node", "VARCHAR"),
        _c("gpu", "VARCHAR"),
        _c("start", "TIMESTAMP"),
        _c("end", "TIMESTAMP"),
        _c("repair_h", "DOUBLE"),
        _c("level", "VARCHAR"),  # the record's own top category (LANL: Hardware, Software, ...)
        _c("class", "VARCHAR"),  # its sub-category
        _c("description", "VARCHAR"),
        _c("category", "VARCHAR"),  # IncidentCategory
        _c("severity", "VARCHAR"),  # critical / error: a failure; warning: a degradation
        _c("attrs", "VARCHAR"),
        *_LOC,
    ),
)

# Lifetimes of replaceable units (GPUs by serial), for survival analysis.
LIFETIMES = Table(
    "lifetimes",
    (
        _c("dataset", "VARCHAR"),
        _c("unit", "VARCHAR"),
        _c("node", "VARCHAR"),
        _c("batch", "VARCHAR"),
        _c("start", "TIMESTAMP"),
        _c("end", "TIMESTAMP"),
        _c("life_h", "DOUBLE"),
        _c("failed", "BOOLEAN"),
        _c("cause", "VARCHAR"),
        *_LOC,
    ),
)

# Which dataset an ingested file belongs to (files not listed are the site's own).
DATASET_FILES = Table("dataset_files", (_c("dataset", "VARCHAR"), _c("file", "VARCHAR")))

# What each ingested file gave, kept by ``load()`` from the rows it writes, so that ``status``,
# the unplaced-event counts and the newest row per node and source never scan ``events`` or
# ``telemetry``. One row per (file, source, kind, node); telemetry rows have source
# ``telemetry`` and no kind (samples are not keyed by file: ``file`` is the file that gave them,
# and its telemetry rows stay when the file is re-parsed, as the samples do).
EVENT_SUMMARY = Table(
    "event_summary",
    (
        _c("tbl", "VARCHAR"),  # events or telemetry
        _c("file", "VARCHAR"),
        _c("source", "VARCHAR"),
        _c("kind", "VARCHAR"),
        _c("node", "VARCHAR"),
        _c("n", "BIGINT"),  # rows
        _c("no_ts", "BIGINT"),  # of them without a wall-clock time
        _c("last_ts", "TIMESTAMP"),  # the newest time among them
    ),
)
TELEMETRY_SOURCE = "telemetry"  # event_summary's source for the telemetry table's samples

# The live Prometheus pull's high-water marks: per server and metric, the end of the last window
# written (in the same transaction as its samples) and how many samples came so far.
PROM_MARKS = Table(
    "prom_marks",
    (
        _c("url", "VARCHAR"),
        _c("metric", "VARCHAR"),
        _c("until", "TIMESTAMP"),  # end of the last pulled window (UTC)
        _c("samples", "BIGINT"),
        _c("pulled_at", "TIMESTAMP"),
    ),
)

# The store's own bookkeeping: which schema version the file is at.
SCHEMA_VERSION_TABLE = Table("schema_version", (_c("version", "INTEGER"),))

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        EVENTS,
        JOBS,
        JOB_STEPS,
        TELEMETRY,
        GPUS,
        NCCL_RANKS,
        LINK_HEALTH,
        TRAIN_STEPS,
        QUARANTINE,
        INGESTED_FILES,
        XID_CATALOG,
        PREDICTIONS,
        ATTRIBUTIONS,
        REFRESH_STATE,
        RUN_CACHE,
        DRAIN_OUTCOMES,
        NODES,
        INCIDENTS,
        LIFETIMES,
        DATASET_FILES,
        EVENT_SUMMARY,
        PROM_MARKS,
    )
}

# Views, by name: the deduplicated GPU inventory (one row per node and GPU index).
VIEWS: dict[str, str] = {
    "gpu_inventory": """
SELECT node, gpu_index,
       arg_max(pci_bus_id, last_seen) FILTER (WHERE pci_bus_id IS NOT NULL) AS pci_bus_id,
       arg_max(uuid, last_seen) FILTER (WHERE uuid IS NOT NULL) AS uuid,
       arg_max(model, last_seen) FILTER (WHERE model IS NOT NULL) AS model,
       arg_max(serial, last_seen) FILTER (WHERE serial IS NOT NULL) AS serial,
       arg_max(driver_version, last_seen) FILTER (WHERE driver_version IS NOT NULL)
           AS driver_version,
       arg_max(vbios_version, last_seen) FILTER (WHERE vbios_version IS NOT NULL)
           AS vbios_version,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen,
       list_sort(list_distinct(list(source))) AS sources, count(*) AS sightings
FROM gpus
WHERE node IS NOT NULL AND gpu_index IS NOT NULL
GROUP BY node, gpu_index
""",
}


def view_ddl(name: str) -> str:
    return f"CREATE OR REPLACE VIEW {name} AS {VIEWS[name]}"


def lake_view_ddl(name: str, select_sql: str) -> str:
    """A declared table presented as a view over a Parquet lake (``ingest.lake``)."""
    if name not in TABLES:
        raise ValueError(f"not a declared table: {name}")
    return f"CREATE OR REPLACE VIEW {name} AS {select_sql}"


def declared_names() -> set[str]:
    """Every table and view a faultlens database holds, as declared here (the rollups, declared
    below, appear with the first refresh)."""
    return {*TABLES, SCHEMA_VERSION_TABLE.name, *VIEWS, *ROLLUP_TABLES, *ROLLUP_VIEWS}


def empty_frame(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema=TABLES[table].polars_schema)


def conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Give ``frame`` exactly the declared columns of ``table`` (missing ones null), typed."""
    schema = TABLES[table].polars_schema
    unknown = set(frame.columns) - set(schema)
    if unknown:
        raise ValueError(f"columns not in table {table}: {sorted(unknown)}")
    exprs = [
        (
            pl.col(name).cast(dtype, strict=False) if name in frame.columns else pl.lit(None, dtype)
        ).alias(name)
        for name, dtype in schema.items()
    ]
    return frame.select(exprs)


# -- Rollups: aggregates of ``events`` kept by ingest (``ingest.rollups``) -------------------------
# Not in ``TABLES`` (no parser writes them, ``status`` does not count them, the lake does not export
# them): ``ingest.rollups.maintain`` creates them and keeps them up to date after every refresh,
# adding only the events above its watermark. Readers (``reports.rollups``) answer counts from them.

# Events per hour x source x kind x code x severity (one row per key).
ROLLUP_FLEET_HOUR = Table(
    "rollup_fleet_hour",
    (
        _c("hour", "TIMESTAMP"),
        _c("source", "VARCHAR"),
        _c("kind", "VARCHAR"),
        _c("code", "INTEGER"),
        _c("severity", "VARCHAR"),
        _c("n", "BIGINT"),
    ),
)
# Events per day x node x source x kind x code x severity, with their first and last stamp.
ROLLUP_NODE_DAY = Table(
    "rollup_node_day",
    (
        _c("day", "TIMESTAMP"),
        _c("node", "VARCHAR"),
        _c("source", "VARCHAR"),
        _c("kind", "VARCHAR"),
        _c("code", "INTEGER"),
        _c("severity", "VARCHAR"),
        _c("n", "BIGINT"),
        _c("first_ts", "TIMESTAMP"),
        _c("last_ts", "TIMESTAMP"),
    ),
)
# A copy of the events the detail views list: warning or worse, out of service (down, drain,
# resume), and every GPU hardware kind (so that models.target's failure events are all here).
ROLLUP_NOTABLE = Table(
    "rollup_notable",
    (
        _c("event_rowid", "BIGINT"),  # the row in ``events`` (job_id / gpu_index follow it)
        _c("ts", "TIMESTAMP"),
        _c("node", "VARCHAR"),
        _c("gpu", "VARCHAR"),
        _c("gpu_index", "INTEGER"),
        _c("source", "VARCHAR"),
        _c("kind", "VARCHAR"),
        _c("subkind", "VARCHAR"),
        _c("code", "INTEGER"),
        _c("severity", "VARCHAR"),
        _c("job_id", "VARCHAR"),
        _c("message", "VARCHAR"),
        _c("attrs", "VARCHAR"),
        *_LOC,
    ),
)
# What the rollups had seen of ``events``: the same columns as ``refresh_state``.
ROLLUP_STATE = Table("rollup_state", REFRESH_STATE.columns)

ROLLUP_TABLES: dict[str, Table] = {
    t.name: t for t in (ROLLUP_FLEET_HOUR, ROLLUP_NODE_DAY, ROLLUP_NOTABLE, ROLLUP_STATE)
}
# Views over the rollups (and the small tables): the data's range and the node list.
ROLLUP_VIEWS: dict[str, str] = {
    "rollup_info": (
        "CREATE OR REPLACE VIEW rollup_info AS SELECT "
        "(SELECT min(lo) FROM (SELECT min(first_ts) AS lo FROM rollup_node_day "
        " UNION ALL SELECT min(start) FROM jobs)) AS lo, "
        "(SELECT max(hi) FROM (SELECT max(last_ts) AS hi FROM rollup_node_day "
        ' UNION ALL SELECT max("end") FROM jobs)) AS hi, '
        "(SELECT list(DISTINCT node ORDER BY node) FROM (SELECT DISTINCT node FROM "
        "rollup_node_day UNION ALL SELECT node FROM gpus UNION ALL SELECT unnest(nodes) FROM jobs)"
        " WHERE node IS NOT NULL) AS nodes"
    ),
}
