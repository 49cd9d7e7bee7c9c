"""Credentials for Prometheus and Alertmanager, the way Prometheus' ``http_config`` has them.

Unit tests of the parsing (secrets only from files or the environment, never echoed), then
integration tests against a real Prometheus and a real Alertmanager started with a
``--web.config.file`` requiring basic auth over TLS (a CA made in the test): the pull and the
push work with the right credentials and fail with a clear message with wrong ones.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultlens.app.alerts import DeliveryError, post_alerts
from faultlens.app.cli import app
from faultlens.app.run import load_config
from faultlens.ingest.errors import ConfigError, InputError
from faultlens.ingest.http_config import HttpConfig, build_session, parse_http_config
from faultlens.ingest.store import Store
from faultlens.ingest.telemetry.prom import pull
from tests.integration_helpers import tls

PASSWORD = "s3cret-Pa55-word"


def _basic(tmp_path: Path, password: str = PASSWORD) -> dict:
    name = "pw" if password == PASSWORD else "pw-wrong"
    (tmp_path / name).write_text(password + "\n")
    return {"basic_auth": {"username": tls.USER, "password_file": name}}


def test_basic_auth_password_from_a_file(tmp_path: Path) -> None:
    cfg = parse_http_config(_basic(tmp_path), base=tmp_path)
    session = build_session(cfg, environ={})
    assert session.auth == (tls.USER, PASSWORD)  # the file's line, newline stripped
    assert PASSWORD not in repr(cfg) and PASSWORD not in cfg.describe()
    assert "basic auth as faultlens" in cfg.describe()


def test_bearer_token_from_the_environment(tmp_path: Path) -> None:
    cfg = parse_http_config(
        {"authorization": {"credentials_env": "AM_TOKEN"}}, base=tmp_path, where="alertmanager"
    )
    session = build_session(cfg, environ={"AM_TOKEN": "tok-123"})
    assert session.headers["Authorization"] == "Bearer tok-123"
    with pytest.raises(ConfigError, match="AM_TOKEN is not set"):
        build_session(cfg, environ={})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"basic_auth": {"username": "u", "password": "inline"}}, "not written in the config"),
        ({"authorization": {"credentials": "inline"}}, "not written in the config"),
        ({"basic_auth": {"username": "u"}}, "needs username and password_file"),
        ({"tls_config": {"cert_file": "c.pem"}}, "cert_file and key_file go together"),
        ({"tls": {}}, "unknown key"),
        ({"tls_config": {"ca_flie": "x"}}, "unknown key"),
        (
            {
                "basic_auth": {"username": "u", "password_env": "P"},
                "authorization": {"credentials_env": "T"},
            },
            "mutually exclusive",
        ),
    ],
)
def test_invalid_http_config_is_a_config_error(tmp_path: Path, doc: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        parse_http_config(doc, base=tmp_path)
    assert "inline" not in str(e.value)  # the refused secret itself is not repeated


def test_missing_files_are_named(tmp_path: Path) -> None:
    cfg = parse_http_config({"tls_config": {"ca_file": "nope.pem"}}, base=tmp_path)
    with pytest.raises(ConfigError, match="ca_file: no file"):
        build_session(cfg, environ={})
    cfg = parse_http_config(
        {"basic_auth": {"username": "u", "password_file": "missing"}}, base=tmp_path
    )
    with pytest.raises(ConfigError, match="cannot read"):
        build_session(cfg, environ={})


def test_faultlens_toml_sections(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(PASSWORD)
    (tmp_path / "ca.pem").write_text("")
    toml = tmp_path / "faultlens.toml"
    toml.write_text(
        '[prometheus]\nurl = "https://prom:9090"\n'
        '[prometheus.http_config.tls_config]\nca_file = "ca.pem"\nserver_name = "prom.internal"\n'
        '[prometheus.http_config.basic_auth]\nusername = "faultlens"\npassword_file = "pw"\n'
        '[alertmanager]\nurl = "https://am:9093"\n'
        '[alertmanager.http_config.authorization]\ncredentials_env = "AM_TOKEN"\n'
    )
    cfg = load_config(toml, db=tmp_path / "x.duckdb", environ={"AM_TOKEN": "t"})
    assert cfg.prometheus_url == "https://prom:9090"
    assert cfg.prometheus_http.tls.ca_file == (tmp_path / "ca.pem").resolve()
    assert cfg.prometheus_http.tls.server_name == "prom.internal"
    assert cfg.prometheus_http.username == "faultlens"
    assert cfg.alertmanager_http.credentials is not None
    assert PASSWORD not in repr(cfg) and "AM_TOKEN': 't'" not in repr(cfg)
    assert load_config(toml).alertmanager_http != HttpConfig()


# -- real servers -----------------------------------------------------------------------------

EXPOSITION = (
    b"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="gpu-tls-01"} 41\n'
    b'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2",Hostname="gpu-tls-01"} 43\n'
)


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(EXPOSITION)))
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tls.Pki:
    return tls.make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_prometheus(tmp_path_factory: pytest.TempPathFactory, pki: tls.Pki):
    """One server for the module's tests (starting it and waiting for scrapes takes ~10 s)."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    binary = tls.need("prometheus", "prometheus")
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    port = tls.free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter.server_address[1]}']\n"
    )
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--web.config.file={tls.web_config(tmp_path, pki, PASSWORD)}",
    ]
    url = f"https://127.0.0.1:{port}"
    client = tls.TlsSession(pki, PASSWORD)
    try:
        with tls.daemon(args, tmp_path / "prometheus.log") as proc:

            def scraped() -> bool:
                assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
                r = client.get(
                    f"{url}/api/v1/query",
                    params={"query": "count_over_time(DCGM_FI_DEV_GPU_TEMP[1m])"},
                    timeout=2,
                )
                result = r.json()["data"]["result"] if r.status_code == 200 else []
                return len(result) == 2 and all(float(s["value"][1]) >= 2 for s in result)

            tls.wait_until(scraped, 90, "Prometheus (TLS) to scrape the exporter")
            yield url
    finally:
        exporter.shutdown()
        exporter.server_close()


def _http(tmp_path: Path, pki: tls.Pki, password: str, **tls_extra: object) -> HttpConfig:
    doc = _basic(tmp_path, password)
    doc["tls_config"] = {"ca_file": str(pki.ca), "server_name": tls.SERVER_NAME, **tls_extra}
    return parse_http_config(doc, base=tmp_path)


@pytest.mark.integration
def test_pull_over_tls_with_basic_auth(secure_prometheus: str, tmp_path: Path, pki) -> None:
    now = datetime.now(UTC).replace(tzinfo=None)  # the server stamps samples with the clock
    with Store(tmp_path / "ok.duckdb") as store:
        session = build_session(_http(tmp_path, pki, PASSWORD), environ={})
        report = pull(
            store, secure_prometheus, since=timedelta(minutes=2), now=now, session=session, step_s=1
        )
        assert report.metrics == ["DCGM_FI_DEV_GPU_TEMP"]
        assert report.samples >= 2  # both GPUs' series came through
        nodes = store.query("SELECT DISTINCT node FROM telemetry").to_series().to_list()
        assert nodes == ["gpu-tls-01"]


@pytest.mark.integration
def test_pull_fails_clearly_with_wrong_credentials(
    secure_prometheus: str, tmp_path: Path, pki
) -> None:
    now = datetime.now(UTC).replace(tzinfo=None)
    cases = [
        (_http(tmp_path, pki, "wrong-password"), "HTTP 401, authentication failed"),
        (
            parse_http_config(
                {"tls_config": {"ca_file": str(pki.ca), "server_name": tls.SERVER_NAME}},
                base=tmp_path,
            ),
            "HTTP 401",
        ),
        (_http(tmp_path, pki, PASSWORD, ca_file=str(pki.other_ca)), "TLS handshake .* failed"),
        (  # right CA, but the URL's 127.0.0.1 is not the name in the certificate
            parse_http_config({"tls_config": {"ca_file": str(pki.ca)}}, base=tmp_path),
            "TLS handshake .* failed",
        ),
    ]
    with Store(tmp_path / "bad.duckdb") as store:
        for cfg, message in cases:
            session = build_session(cfg, environ={})
            with pytest.raises(InputError, match=message) as e:
                pull(store, secure_prometheus, since=timedelta(minutes=1), now=now, session=session)
            assert "wrong-password" not in str(e.value)
        assert store.count("telemetry") == 0


@pytest.mark.integration
def test_cli_pull_reads_the_secret_from_the_environment(
    secure_prometheus: str, tmp_path: Path, pki
) -> None:
    db = tmp_path / "cli.duckdb"
    toml = tmp_path / "faultlens.toml"
    toml.write_text(
        f'[faultlens]\ndb = "{db}"\n'
        f'[prometheus]\nurl = "{secure_prometheus}"\n'
        f'[prometheus.http_config.tls_config]\nca_file = "{pki.ca}"\n'
        f'server_name = "{tls.SERVER_NAME}"\n'
        f'[prometheus.http_config.basic_auth]\nusername = "{tls.USER}"\n'
        'password_env = "FAULTLENS_TEST_PROM_PASSWORD"\n'
    )
    env = {"FAULTLENS_TEST_PROM_PASSWORD": PASSWORD}
    res = CliRunner().invoke(
        app, ["ingest", "--config", str(toml), "--since", "2m", "--json"], env=env
    )
    assert res.exit_code == 0, (res.stdout, res.stderr)
    assert '"samples"' in res.stdout and PASSWORD not in res.stdout + res.stderr
    assert PASSWORD.encode() not in db.read_bytes()  # nor stored in the database
    res = CliRunner().invoke(
        app,
        ["ingest", "--config", str(toml), "--since", "2m"],
        env={"FAULTLENS_TEST_PROM_PASSWORD": "nope"},
    )
    assert res.exit_code == 3
    assert "authentication failed" in res.stderr and "nope" not in res.stderr


@pytest.fixture
def secure_alertmanager(tmp_path: Path, pki: tls.Pki):
    binary = tls.need("prometheus-alertmanager", "prometheus-alertmanager")
    cfg = tmp_path / "alertmanager.yml"
    cfg.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    port = tls.free_port()
    args = [
        binary,
        f"--config.file={cfg}",
        f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--web.config.file={tls.web_config(tmp_path, pki, PASSWORD)}",
        "--cluster.listen-address=",
    ]
    url = f"https://127.0.0.1:{port}"
    client = tls.TlsSession(pki, PASSWORD)
    with tls.daemon(args, tmp_path / "alertmanager.log") as proc:

        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()[-2000:]
            return client.get(f"{url}/-/ready", timeout=2).status_code == 200

        tls.wait_until(ready, 60, "Alertmanager (TLS) to be ready")
        yield url, client


def _alert(node: str) -> dict:
    now = datetime.now(UTC)
    return {
        "labels": {"alertname": "FaultlensFailureRisk", "node": node, "source": "faultlens"},
        "annotations": {"summary": "test"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }


@pytest.mark.integration
def test_push_over_tls_with_basic_auth(secure_alertmanager, tmp_path: Path, pki) -> None:
    url, client = secure_alertmanager
    session = build_session(_http(tmp_path, pki, PASSWORD), environ={})
    post_alerts(url, [_alert("gpu-tls-07")], session=session)
    shown = client.get(f"{url}/api/v2/alerts", timeout=5).json()
    assert [a["labels"]["node"] for a in shown] == ["gpu-tls-07"]

    wrong = build_session(_http(tmp_path, pki, "wrong-password"), environ={})
    with pytest.raises(DeliveryError, match="401: authentication failed") as e:
        post_alerts(url, [_alert("gpu-tls-08")], session=wrong)
    assert "wrong-password" not in str(e.value)
    untrusted = build_session(_http(tmp_path, pki, PASSWORD, ca_file=str(pki.other_ca)), environ={})
    with pytest.raises(DeliveryError, match="TLS handshake"):
        post_alerts(url, [_alert("gpu-tls-09")], session=untrusted)
    anonymous = build_session(
        parse_http_config(
            {"tls_config": {"ca_file": str(pki.ca), "server_name": tls.SERVER_NAME}},
            base=tmp_path,
        ),
        environ={},
    )
    with pytest.raises(DeliveryError, match="401: authentication failed .sent tls"):
        post_alerts(url, [_alert("gpu-tls-10")], session=anonymous)
    shown = client.get(f"{url}/api/v2/alerts", timeout=5).json()
    assert [a["labels"]["node"] for a in shown] == ["gpu-tls-07"]


@pytest.mark.integration
def test_run_pushes_with_the_configured_credentials(
    secure_alertmanager, tmp_path: Path, pki
) -> None:
    """`faultlens run`'s delivery step: faultlens.toml's [alertmanager.http_config], the
    password from the environment the CLI passes."""
    from faultlens.app.run import _alertmanager

    url, client = secure_alertmanager
    toml = tmp_path / "faultlens.toml"
    toml.write_text(
        f'[alertmanager]\nurl = "{url}"\nmin_action = "watch"\n'
        f'[alertmanager.http_config.tls_config]\nca_file = "{pki.ca}"\n'
        f'server_name = "{tls.SERVER_NAME}"\n'
        f'[alertmanager.http_config.basic_auth]\nusername = "{tls.USER}"\n'
        'password_env = "FAULTLENS_TEST_AM_PASSWORD"\n'
    )
    alert = {
        "node": "gpu-run-01",
        "gpu": None,
        "action": "drain_now",
        "score": 0.97,
        "top_features": [],
    }
    now = datetime.now(UTC).replace(tzinfo=None)
    cfg = load_config(
        toml, db=tmp_path / "f.duckdb", environ={"FAULTLENS_TEST_AM_PASSWORD": "wrong-password"}
    )
    plan, error = _alertmanager(cfg, [alert], "run-1", "v1", 24.0, now)
    assert error is not None and "authentication failed" in error
    assert "wrong-password" not in error
    cfg = load_config(
        toml, db=tmp_path / "f.duckdb", environ={"FAULTLENS_TEST_AM_PASSWORD": PASSWORD}
    )
    plan, error = _alertmanager(cfg, [alert], "run-1", "v1", 24.0, now)
    assert error is None and len(plan.new) == 1
    shown = client.get(f"{url}/api/v2/alerts", timeout=5).json()
    assert [(a["labels"]["node"], a["labels"]["severity"]) for a in shown] == [
        ("gpu-run-01", "critical")
    ]
