"""Prometheus: duration parsing, and the live pull against a real Prometheus on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from faultlens.ingest.errors import InputError
from faultlens.ingest.telemetry.prom import parse_duration, pull

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NODE = "gpu-int-01"
GPUS = 2


def test_parse_duration():
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("90") == timedelta(seconds=90)
    with pytest.raises(InputError):
        parse_duration("soon")


def test_pull_reports_an_unreachable_server(store):
    with pytest.raises(InputError, match="cannot reach Prometheus"):
        pull(
            store,
            "http://127.0.0.1:9",
            since=timedelta(minutes=5),
            now=datetime(2025, 1, 1),
            timeout_s=2,
        )


def exposition() -> bytes:
    lines = [
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
    ]
    for g in range(GPUS):
        lines.append(
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",UUID="GPU-0000000{g}-aaaa-bbbb-cccc-dddddddddddd",'
            f'pci_bus_id="00000000:{0x19 + 0x22 * g:02X}:00.0",device="nvidia{g}",'
            f'modelName="NVIDIA H100 80GB HBM3",Hostname="{NODE}"}} {40 + g}'
        )
    lines += [
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
        f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",'
        f'Hostname="{NODE}"}} 312.5',
    ]
    return ("\n".join(lines) + "\n").encode()


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = exposition()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, deadline_s: float, what: str) -> None:
    """Poll ``check`` until it is true or the deadline passes (bounded, no blind sleep)."""
    end = time.monotonic() + deadline_s
    pause = threading.Event()
    while time.monotonic() < end:
        try:
            if check():
                return
        except requests.RequestException:
            pass
        pause.wait(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def prometheus(tmp_path: Path):
    if not Path(PROMETHEUS).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("the prometheus binary is missing in CI (Debian package `prometheus`)")
        pytest.skip("prometheus binary not installed (apt-get install prometheus)")
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=exporter.serve_forever, daemon=True)
    thread.start()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter.server_address[1]}']\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def enough_samples() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            r = requests.get(
                f"{url}/api/v1/query",
                timeout=2,
                params={"query": "count_over_time(DCGM_FI_DEV_GPU_TEMP[1m])"},
            )
            result = r.json()["data"]["result"] if r.status_code == 200 else []
            return len(result) == GPUS and all(float(s["value"][1]) >= 3 for s in result)

        wait_until(enough_samples, 90, "Prometheus to scrape the exporter")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()
        exporter.shutdown()
        exporter.server_close()


@pytest.mark.integration
def test_pull_from_a_real_prometheus(prometheus, store):
    now = datetime.now(UTC).replace(tzinfo=None)  # the server stamps with the real clock
    report = pull(
        store,
        prometheus,
        since=timedelta(minutes=2),
        now=now,
        step_s=1.0,
        chunk=timedelta(seconds=20),
    )
    assert report.metrics == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    assert report.windows >= 2 * 6  # 2 minutes in 20 s windows, per metric
    temps = store.query(
        "SELECT gpu, min(value) AS lo, max(value) AS hi, count(*) AS n FROM telemetry "
        "WHERE node = ? AND metric = 'DCGM_FI_DEV_GPU_TEMP' GROUP BY gpu ORDER BY gpu",
        [NODE],
    ).rows()
    assert [(g, lo, hi) for g, lo, hi, _ in temps] == [(0, 40.0, 40.0), (1, 41.0, 41.0)]
    assert all(n >= 2 for *_, n in temps), (temps, report)
    assert (
        store.scalar("SELECT value FROM telemetry WHERE metric = 'DCGM_FI_DEV_POWER_USAGE' LIMIT 1")
        == 312.5
    )
    inv = store.query(
        "SELECT DISTINCT gpu_index, pci_bus_id FROM gpus WHERE pci_bus_id IS NOT NULL ORDER BY 1"
    ).rows()
    assert inv == [(0, "0000:19:00.0"), (1, "0000:3b:00.0")]
    first = store.count("telemetry")

    def more_data() -> bool:  # wait until the server has newer samples than the first pull
        r = requests.get(
            f"{prometheus}/api/v1/query",
            params={"query": "timestamp(DCGM_FI_DEV_GPU_TEMP)"},
            timeout=2,
        ).json()["data"]["result"]
        return bool(r) and float(r[0]["value"][1]) > now.replace(tzinfo=UTC).timestamp() + 2

    wait_until(more_data, 30, "newer samples")
    later = datetime.now(UTC).replace(tzinfo=None)
    again = pull(
        store,
        prometheus,
        since=timedelta(minutes=2),
        now=later,
        step_s=1.0,
        chunk=timedelta(seconds=20),
    )
    assert again.samples > 0
    assert store.count("telemetry") == first + again.samples
    dupes = store.scalar("SELECT count(*) - count(DISTINCT (ts, node, gpu, metric)) FROM telemetry")
    assert dupes == 0
    marks = store.query("SELECT url, metric, samples FROM prom_marks ORDER BY metric").rows()
    per_metric = store.query(
        "SELECT metric, count(*) AS n FROM telemetry GROUP BY metric ORDER BY metric"
    ).rows()
    assert marks == [(prometheus, m, n) for m, n in per_metric]
    assert [m for m, _ in per_metric] == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    assert store.count("ingested_files") == 0  # the registry holds files only
