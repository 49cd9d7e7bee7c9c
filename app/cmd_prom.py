"""``faultlens ingest --prometheus URL --since 7d``: the CLI side of
``ingest.telemetry.prom.pull``."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

from faultlens.app.common import db_path, emit_json, open_store, utc_now
from faultlens.ingest.http_config import HttpConfig, build_session
from faultlens.ingest.telemetry.common import resolve_gpu_indices
from faultlens.ingest.telemetry.prom import parse_duration, pull


def pull_prometheus(
    url: str,
    *,
    since: str,
    db: Path | None,
    node: str | None,
    json: bool,
    quiet: bool,
    http: HttpConfig | None = None,
) -> None:
    """Pull the DCGM series of ``url`` for the last ``since`` into the database and report.
    ``http``: TLS settings and credentials (faultlens.toml's ``[prometheus.http_config]``);
    secrets given as ``*_env`` are read from the environment here, at the CLI boundary."""
    session = build_session(
        http or HttpConfig(), environ=os.environ, where="prometheus.http_config"
    )
    with open_store(db_path(db)) as store:
        report = pull(
            store, url, since=parse_duration(since), now=utc_now(), node=node, session=session
        )
        resolve_gpu_indices(store)
    if json:
        emit_json({"prometheus": report.to_json()})
    elif not quiet:
        Console(stderr=True).print(
            f"prometheus {report.url}: {len(report.metrics)} metrics, {report.windows} windows, "
            f"{report.samples:,} samples, rows {report.rows}",
            highlight=False,
        )
