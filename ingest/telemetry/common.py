"""GPU telemetry shared pieces: samples -> telemetry / gpus / events rows, and the GPU inventory.

Every telemetry source (dcgm-exporter scrapes, Prometheus ``query_range`` exports and live pulls,
nvidia-smi, dcgmi) ends up in three tables:

- ``telemetry(ts, node, gpu, metric, value)``: long form, DCGM field names;
- ``gpus(node, gpu_index, pci_bus_id, uuid, model, serial, ...)``: one row per GPU seen per file,
  deduplicated by the ``gpu_inventory`` view;
- ``events``: telemetry-borne faults (an Xid reported by dcgm-exporter, a failed diag, ...).

``samples_to_tables`` turns a frame of Prometheus-style samples (line, value, ts, series key) and
the frame of their distinct series (metric name and the DCGM labels split into columns) into
those rows, vectorized: everything about a series is computed once per series, and a sample
only costs an integer join. ``resolve_gpu_indices`` joins
events that name a GPU by PCI id (kernel Xid lines) to the GPU index telemetry uses.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl

from faultlens.ingest.base import ParseContext, fmt, node_expr, pci_expr
from faultlens.ingest.catalog import severity_action_expr
from faultlens.ingest.schema import TS, Kind, Source, conform, empty_frame
from faultlens.ingest.store import Store
from faultlens.ingest.zones import to_utc, zone_of

# Prometheus label -> our column in the samples frame.
LABELS = {
    "gpu": "gpu",
    "UUID": "uuid",
    "pci_bus_id": "pci",
    "device": "device",
    "Hostname": "hostname",
    "modelName": "model",
    "err_code": "err_code",
    "err_msg": "err_msg",
    "xid": "xid",
    "DCGM_FI_DRIVER_VERSION": "driver",
    "instance": "instance",
    "GPU_I_ID": "gpu_i_id",  # MIG: the GPU instance, one series per instance
    "GPU_I_PROFILE": "gpu_profile",
    "pod": "pod",  # Kubernetes: the workload the GPU is allocated to
    "namespace": "namespace",
    "container": "container",
}
# Label spellings exporters use for the same thing, read as the first one set: dcgm-exporter's
# ``Hostname`` (a relabelled or older exporter's ``hostname``); the workload's ``pod`` /
# ``namespace`` / ``container`` (older exporters' ``pod_name`` / ``pod_namespace`` /
# ``container_name``; behind a Prometheus that scraped the exporter's own pod, the workload's are
# ``exported_*`` and the plain ones name the exporter).
LABEL_ALIASES: dict[str, tuple[str, ...]] = {
    "Hostname": ("Hostname", "hostname"),
    "pod": ("exported_pod", "pod", "pod_name"),
    "namespace": ("exported_namespace", "namespace", "pod_namespace"),
    "container": ("exported_container", "container", "container_name"),
}
# the telemetry columns that come from a series' labels as they are
SERIES_COLUMNS = ("gpu_instance", "gpu_profile", "pod", "namespace", "container")
# A chunk's samples: one row per sample; ``key`` points at its series in the labels frame.
SAMPLE_SCHEMA: dict[str, Any] = {
    "line": pl.Int64,
    "value": pl.Float64,
    "ts": TS,
    "key": pl.Int64,
}
# The distinct series of a chunk (few: one per metric per GPU per exporter): the metric name and
# one column per known label. Per-series work (label parsing, node normalization, the metric name)
# is done once per series here, never once per sample.
LABEL_SCHEMA: dict[str, Any] = {
    "key": pl.Int64,
    "metric": pl.String,
    **{col: pl.String for col in LABELS.values()},
}

# Metrics that carry Xid errors: the last Xid code as the value (DCGM_FI_DEV_XID_ERRORS, with
# err_code / err_msg labels in newer exporters), or a count per ``xid`` label.
XID_VALUE_METRICS = ("DCGM_FI_DEV_XID_ERRORS",)
XID_COUNT_METRICS = ("DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS_ACTIVE")


def default_ts(ctx: ParseContext) -> tuple[datetime | None, str | None]:
    """(naive UTC time, flag) of samples without their own stamp: the given scrape time
    (``scrape_ts``), else the file mtime. A scrape time with an offset is that instant; one
    without is the site zone's wall clock (``tz``, else UTC), and a wall clock the zone has
    twice or never is None, flagged ``tz_ambiguous`` / ``tz_gap`` (``zones.to_utc``)."""
    scrape = ctx.options.get("scrape_ts")
    if scrape is not None:
        if isinstance(scrape, str):
            scrape = datetime.fromisoformat(scrape)
        if scrape.utcoffset() is not None:
            return scrape.astimezone(UTC).replace(tzinfo=None), "scrape_ts"
        utc, flag = to_utc(scrape.replace(tzinfo=None), zone_of(ctx))
        return utc, flag or "scrape_ts"
    return ctx.mtime, "file_mtime"


def _conform(frame: pl.DataFrame, schema: dict[str, Any]) -> pl.DataFrame:
    return frame.select(
        [
            (pl.col(c).cast(t, strict=False) if c in frame.columns else pl.lit(None, t)).alias(c)
            for c, t in schema.items()
        ]
    )


def empty_samples() -> pl.DataFrame:
    return pl.DataFrame(schema=SAMPLE_SCHEMA)


def conform_samples(frame: pl.DataFrame) -> pl.DataFrame:
    return _conform(frame, SAMPLE_SCHEMA)


def conform_labels(frame: pl.DataFrame) -> pl.DataFrame:
    return _conform(frame, LABEL_SCHEMA)


def aliased(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` with each ``LABEL_ALIASES`` name set from the first of its spellings."""
    out = dict(labels)
    for name, spellings in LABEL_ALIASES.items():
        out[name] = next((labels[s] for s in spellings if labels.get(s)), labels.get(name))
    return out


def label_dicts_to_frame(
    label_sets: list[dict[str, str]], first_key: int = 0, metrics: list[str | None] | None = None
) -> pl.DataFrame:
    """Prometheus label dicts -> a labels frame with keys ``first_key``, ``first_key + 1``, ...

    The metric of each set is ``metrics[i]`` if given, else its ``__name__`` label.
    """
    if metrics is None:
        metrics = [labels.get("__name__") for labels in label_sets]
    rows = [
        {
            "key": first_key + i,
            "metric": metric,
            **{col: labels.get(name) for name, col in LABELS.items()},
        }
        for i, (labels, metric) in enumerate(zip(map(aliased, label_sets), metrics, strict=True))
    ]
    return (
        conform_labels(pl.DataFrame(rows, schema=LABEL_SCHEMA))
        if rows
        else conform_labels(pl.DataFrame(schema=LABEL_SCHEMA))
    )


def derive_labels(labels: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """Per series: normalized node, GPU index and PCI id (computed once per distinct series).

    A frame that already has them (a parser's per-file cache of series) is returned as it is.
    """
    if "node" in labels.columns:
        return labels
    inst_host = pl.col("instance").str.replace(r":[0-9]+$", "")
    from_device = pl.col("device").str.extract(r"^nvidia([0-9]+)$")
    return labels.with_columns(
        node=node_expr(pl.coalesce(pl.col("hostname"), inst_host, pl.lit(ctx.node, pl.String))),
        gpu_index=pl.coalesce(pl.col("gpu"), from_device).cast(pl.Int32, strict=False),
        pci_bus_id=pci_expr(pl.col("pci")),
        gpu_instance=pl.col("gpu_i_id").cast(pl.Int32, strict=False),
        # an empty label (a GPU no pod holds) is no workload
        **{c: pl.when(pl.col(c) != "").then(pl.col(c)) for c in SERIES_COLUMNS[1:]},
    )


def samples_to_tables(
    samples: pl.DataFrame,
    labels: pl.DataFrame,
    ctx: ParseContext,
    *,
    source: Source,
    xid_state: dict | None = None,
) -> dict[str, pl.DataFrame]:
    """Samples (``SAMPLE_SCHEMA``) and their series (``LABEL_SCHEMA``, or already passed through
    ``derive_labels``) -> telemetry, gpus and events frames.

    Per-sample work is one join on the integer ``key``; everything about a series (metric name,
    node, GPU index, ...) is computed on the few distinct series. ``xid_state`` (kept by the caller
    across chunks) remembers the last Xid state per GPU so that an Xid repeated by every scrape
    becomes one event, not one per scrape.
    """
    if samples.height == 0:
        return {}
    ts0, flag = default_ts(ctx)
    lab = derive_labels(labels, ctx)
    if samples.get_column("ts").null_count() > 0:
        samples = samples.with_columns(
            ts_flag=pl.when(pl.col("ts").is_null()).then(pl.lit(flag)),
            ts=pl.coalesce(pl.col("ts"), pl.lit(ts0, TS)),
        )
    else:
        samples = samples.with_columns(ts_flag=pl.lit(None, pl.String))
    # only the MIG / workload columns some series has travel through the join (most scrapes
    # have none: ``conform`` gives the rest as nulls, which cost nothing per sample)
    extra = [c for c in SERIES_COLUMNS if lab.get_column(c).null_count() < lab.height]
    telemetry = samples.join(
        lab.select("key", "node", "gpu_index", "metric", *extra), on="key", how="left"
    ).select("ts", "node", pl.col("gpu_index").alias("gpu"), "metric", "value", *extra)
    out = {"telemetry": telemetry, "gpus": _gpus(samples, lab, ctx, source)}
    events = _xid_events(samples, lab, ctx, source, xid_state if xid_state is not None else {})
    if events.height:
        out["events"] = events
    return out


def _gpus(
    samples: pl.DataFrame, lab: pl.DataFrame, ctx: ParseContext, source: Source
) -> pl.DataFrame:
    seen_keys = samples.group_by("key").agg(
        first_seen=pl.col("ts").min(), last_seen=pl.col("ts").max()
    )
    seen = seen_keys.join(lab, on="key").filter(
        pl.col("gpu_index").is_not_null() | pl.col("uuid").is_not_null()
    )
    if seen.height == 0:
        return empty_frame("gpus")
    gpus = seen.group_by(
        "node", "gpu_index", "pci_bus_id", "uuid", "model", pl.col("driver").alias("driver_version")
    ).agg(first_seen=pl.col("first_seen").min(), last_seen=pl.col("last_seen").max())
    return conform(
        "gpus",
        gpus.with_columns(source=pl.lit(source.value), file=pl.lit(ctx.file)).sort(
            "node", "gpu_index", nulls_last=True
        ),
    )


_XID_GROUP = ["node", "gpu_index", "uuid", "metric", "xid"]  # one Xid state per group


def _xid_events(
    samples: pl.DataFrame, lab: pl.DataFrame, ctx: ParseContext, source: Source, state: dict
) -> pl.DataFrame:
    xid = lab.filter(pl.col("metric").is_in(XID_VALUE_METRICS + XID_COUNT_METRICS))
    if xid.height == 0:
        return empty_frame("events")
    # Series -> group id (several series share a group, e.g. as the err_code label changes).
    groups = xid.select(_XID_GROUP).unique(maintain_order=True).with_row_index("gid")
    xid = xid.join(groups, on=_XID_GROUP, how="left", nulls_equal=True)
    per_series = xid.select(
        "key",
        "gid",
        is_count=pl.col("metric").is_in(XID_COUNT_METRICS),
        label_code=pl.coalesce(
            pl.col("xid").cast(pl.Int32, strict=False),
            pl.col("err_code").cast(pl.Int32, strict=False),
        ),
    )
    cand = samples.join(per_series, on="key", how="inner")
    if cand.height == 0:
        return empty_frame("events")
    finite = pl.col("value").is_finite()
    code = pl.coalesce(
        pl.col("label_code"),
        pl.when(~pl.col("is_count") & finite).then(pl.col("value")).cast(pl.Int32, strict=False),
    )
    active = pl.when(finite & (pl.col("value") != 0)).then(code).otherwise(0).cast(pl.Int64)
    cand = cand.with_columns(code=code, active=active.fill_null(0)).sort("ts", "line")
    # Only changes matter: a GPU whose Xid gauge reads 79 on every scrape had one Xid 79.
    keys = groups.select(_XID_GROUP).rows()
    carried = pl.Series("carried", [state.get(k, 0) for k in keys], dtype=pl.Int64)
    cand = cand.with_columns(
        prev=pl.coalesce(
            pl.col("active").shift(1).over("gid"),
            pl.col("gid").replace_strict(groups.get_column("gid"), carried),
        ),
    )
    for gid, last in cand.group_by("gid").agg(pl.col("active").last()).rows():
        state[keys[gid]] = last
    ev = cand.filter((pl.col("active") != pl.col("prev")) & (pl.col("active") != 0))
    if ev.height == 0:
        return empty_frame("events")
    ev = ev.drop("gid", "is_count", "label_code").join(xid.drop("gid"), on="key", how="left")
    severity, action = severity_action_expr(pl.col("code"))
    msg = pl.coalesce(
        pl.col("err_msg"),
        fmt("{} = {}", pl.col("metric"), pl.col("value").cast(pl.String)),
    )
    attrs = pl.struct(
        pl.col("uuid"), pl.col("metric"), pl.col("value"), pl.col("model")
    ).struct.json_encode()
    events = ev.select(
        "ts",
        "ts_flag",
        "node",
        pl.coalesce(pl.col("pci_bus_id"), pl.col("gpu_index").cast(pl.String)).alias("gpu"),
        "gpu_index",
        pl.lit(source.value).alias("source"),
        pl.lit(Kind.XID.value).alias("kind"),
        pl.col("code").cast(pl.Int32),
        severity.alias("severity"),
        action.alias("action"),
        msg.alias("message"),
        attrs.alias("attrs"),
        pl.lit(ctx.file).alias("file"),
        "line",
    )
    return conform("events", events)


# -- the GPU inventory -----------------------------------------------------------------------------


def gpu_inventory(store: Store) -> pl.DataFrame:
    """The deduplicated GPU inventory (the ``gpu_inventory`` view), ordered by node and index."""
    return store.query("SELECT * FROM gpu_inventory ORDER BY node, gpu_index")


def resolve_gpu_indices(store: Store) -> int:
    """Set ``events.gpu_index`` from the inventory where an event names its GPU by PCI id.

    Only events whose index is still unknown are touched, and a (node, PCI id) that maps to more
    than one index is left alone, so calling this again (after more ingest) is safe.
    Returns the number of events updated.
    """
    pending = (
        "FROM events e, (SELECT node, pci_bus_id, min(gpu_index) AS gpu_index FROM gpu_inventory "
        "WHERE pci_bus_id IS NOT NULL GROUP BY ALL HAVING count(DISTINCT gpu_index) = 1) m "
        "WHERE e.gpu_index IS NULL AND e.node = m.node AND lower(e.gpu) = m.pci_bus_id"
    )
    n = int(store.scalar(f"SELECT count(*) {pending}") or 0)
    if n:
        with store.transaction():
            store.execute(
                "UPDATE events SET gpu_index = m.gpu_index FROM (SELECT node, pci_bus_id, "
                "min(gpu_index) AS gpu_index FROM gpu_inventory WHERE pci_bus_id IS NOT NULL "
                "GROUP BY ALL HAVING count(DISTINCT gpu_index) = 1) m "
                "WHERE events.gpu_index IS NULL AND events.node = m.node "
                "AND lower(events.gpu) = m.pci_bus_id"
            )
    return n
