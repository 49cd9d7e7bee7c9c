"""A throw-away certificate authority and Prometheus-style ``--web.config.file`` for tests.

Certificates are made with the ``openssl`` command (Debian ``openssl``), the bcrypt hash of the
basic-auth password with ``htpasswd -B`` (Debian ``apache2-utils``), both in the test's
``tmp_path``. The server certificate names only ``SERVER_NAME`` (no IP address), so a client
connecting to 127.0.0.1 must be told the name (``tls_config.server_name``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

SERVER_NAME = "metrics.faultlens.test"
USER = "faultlens"


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    other_ca: Path  # a CA that did not sign the server certificate


def need(binary: str, package: str) -> str:
    found = shutil.which(binary) or (
        f"/usr/bin/{binary}" if os.access(f"/usr/bin/{binary}", os.X_OK) else None
    )
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"{binary} is missing (apt-get install {package})")
    pytest.skip(f"{binary} not installed (apt-get install {package})")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([need("openssl", "openssl"), *args], cwd=cwd, check=True, capture_output=True)


def _ca(folder: Path, name: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-keyout",
        f"{name}-key.pem",
        "-out",
        f"{name}.pem",
        "-subj",
        f"/CN={name}",
        cwd=folder,
    )


def make_pki(folder: Path) -> Pki:
    """A CA, a server certificate for ``SERVER_NAME`` signed by it, and an unrelated CA."""
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    (folder / "san.ext").write_text(
        f"subjectAltName=DNS:{SERVER_NAME}\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server-key.pem",
        "-out",
        "server.csr",
        "-subj",
        f"/CN={SERVER_NAME}",
        cwd=folder,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "server.pem",
        "-extfile",
        "san.ext",
        cwd=folder,
    )
    return Pki(
        folder / "ca.pem", folder / "server.pem", folder / "server-key.pem", folder / "other-ca.pem"
    )


def bcrypt_hash(password: str) -> str:
    out = subprocess.run(
        [need("htpasswd", "apache2-utils"), "-nbBC", "10", USER, password],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return out.split(":", 1)[1]


def web_config(folder: Path, pki: Pki, password: str) -> Path:
    """``--web.config.file`` of Prometheus / Alertmanager: TLS with ``pki`` and basic auth."""
    path = folder / "web.yml"
    path.write_text(
        "tls_server_config:\n"
        f"  cert_file: {pki.cert}\n"
        f"  key_file: {pki.key}\n"
        "basic_auth_users:\n"
        f"  {USER}: '{bcrypt_hash(password)}'\n"
    )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], deadline_s: float, what: str) -> None:
    """Poll ``check`` until it is true or the deadline passes (bounded, no blind sleep)."""
    end = time.monotonic() + deadline_s
    pause = threading.Event()
    while time.monotonic() < end:
        try:
            if check():
                return
        except requests.RequestException:
            pass
        pause.wait(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def daemon(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


class TlsSession(requests.Session):
    """A test-side client of the TLS servers (to check readiness and read back state)."""

    def __init__(self, pki: Pki, password: str) -> None:
        from requests.adapters import HTTPAdapter

        super().__init__()
        self.trust_env = False  # else $REQUESTS_CA_BUNDLE silently replaces ``verify``
        self.verify = str(pki.ca)
        self.auth = (USER, password)

        class _Named(HTTPAdapter):
            def init_poolmanager(self, *a, **kw):  # noqa: ANN002, ANN003
                kw["server_hostname"] = SERVER_NAME
                kw["assert_hostname"] = SERVER_NAME
                super().init_poolmanager(*a, **kw)

        self.mount("https://", _Named())
