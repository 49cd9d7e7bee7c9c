"""HTTP client settings for the servers faultlens talks to (Prometheus, Alertmanager).

The shape is Prometheus' own ``http_config``, so an SRE can copy a scrape job's block::

    [prometheus.http_config.tls_config]
    ca_file = "/etc/faultlens/ca.pem"
    cert_file = "/etc/faultlens/client.pem"   # client certificate (mutual TLS), optional
    key_file = "/etc/faultlens/client-key.pem"
    server_name = "prometheus.internal"       # name the server certificate must carry
    insecure_skip_verify = false

    [prometheus.http_config.basic_auth]
    username = "faultlens"
    password_file = "/etc/faultlens/prometheus.password"   # or password_env = "PROM_PASSWORD"

    [alertmanager.http_config.authorization]
    type = "Bearer"
    credentials_file = "/etc/faultlens/am.token"           # or credentials_env = "AM_TOKEN"

Secrets are read from a file or an environment variable, never from the config file or the
command line (an inline ``password`` / ``credentials`` is refused with a ``ConfigError``). They are
read once, when the session is built, and never appear in ``repr``, logs, errors or the database:
``HttpConfig`` only holds where a secret comes from. The environment is read by the caller (the CLI
passes ``os.environ``), not here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from faultlens.ingest.errors import ConfigError, InputError

log = logging.getLogger(__name__)

_SECTIONS = {"tls_config", "basic_auth", "authorization"}
_TLS_KEYS = {"ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify"}
_BASIC_KEYS = {"username", "username_file", "password_file", "password_env"}
_AUTHZ_KEYS = {"type", "credentials_file", "credentials_env"}
_INLINE_SECRETS = {"password", "credentials", "bearer_token"}


@dataclass(frozen=True)
class SecretRef:
    """Where a secret is read from: a file (first line, whitespace stripped) or an env variable."""

    file: Path | None = None
    env: str | None = None

    def __repr__(self) -> str:
        return f"SecretRef(file={self.file}, env={self.env})"

    def read(self, environ: Mapping[str, str], what: str) -> str:
        if self.file is not None:
            try:
                value = self.file.read_text().strip()
            except OSError as e:
                raise ConfigError(f"{what}: cannot read {self.file}: {e.strerror or e}") from None
            if not value:
                raise ConfigError(f"{what}: {self.file} is empty")
            return value
        if self.env is not None:
            value = environ.get(self.env, "").strip()
            if not value:
                raise ConfigError(f"{what}: environment variable {self.env} is not set")
            return value
        raise ConfigError(f"{what}: give a *_file or *_env")


@dataclass(frozen=True)
class TlsConfig:
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class HttpConfig:
    """Prometheus-style ``http_config``: TLS, basic auth or an ``Authorization`` header."""

    tls: TlsConfig = field(default_factory=TlsConfig)
    username: str | None = None
    password: SecretRef | None = None
    auth_type: str = "Bearer"
    credentials: SecretRef | None = None

    def describe(self) -> str:
        """What is configured, without a secret: for logs and error messages."""
        parts = []
        if self.tls.ca_file or self.tls.cert_file or self.tls.insecure_skip_verify:
            parts.append("tls")
        if self.password is not None:
            parts.append(f"basic auth as {self.username}")
        if self.credentials is not None:
            parts.append(f"{self.auth_type} authorization")
        return ", ".join(parts) or "no credentials"


def _section(doc: Mapping[str, Any], name: str, keys: set[str], where: str) -> dict[str, Any]:
    sec = doc.get(name) or {}
    if not isinstance(sec, Mapping):
        raise ConfigError(f"{where}.{name} must be a table")
    inline = sorted(_INLINE_SECRETS & set(sec))
    if inline:
        raise ConfigError(
            f"{where}.{name}.{inline[0]}: secrets are not written in the config file; "
            "read them from a file (password_file / credentials_file) or the environment "
            "(password_env / credentials_env)"
        )
    unknown = set(sec) - keys
    if unknown:
        raise ConfigError(f"{where}.{name}: unknown key(s) {sorted(unknown)}")
    return dict(sec)


def _ref(sec: Mapping[str, Any], stem: str, base: Path, where: str) -> SecretRef | None:
    file, env = sec.get(f"{stem}_file"), sec.get(f"{stem}_env")
    if file and env:
        raise ConfigError(f"{where}: give {stem}_file or {stem}_env, not both")
    if file:
        return SecretRef(file=_path(file, base))
    if env:
        return SecretRef(env=str(env))
    return None


def _path(value: Any, base: Path) -> Path:
    p = Path(str(value)).expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def parse_http_config(
    doc: Mapping[str, Any] | None, *, base: Path, where: str = "http_config"
) -> HttpConfig:
    """An ``http_config`` table (from ``faultlens.toml``) -> ``HttpConfig``; relative paths are
    relative to ``base`` (the config file's folder). ``ConfigError`` on anything unknown."""
    if not doc:
        return HttpConfig()
    unknown = set(doc) - _SECTIONS
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)} (tls_config, basic_auth, authorization)"
        )
    tls = _section(doc, "tls_config", _TLS_KEYS, where)
    basic = _section(doc, "basic_auth", _BASIC_KEYS, where)
    authz = _section(doc, "authorization", _AUTHZ_KEYS, where)
    if basic and authz:
        raise ConfigError(f"{where}: basic_auth and authorization are mutually exclusive")
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if bool(cert) != bool(key):
        raise ConfigError(f"{where}.tls_config: cert_file and key_file go together")
    username = basic.get("username")
    if basic.get("username_file"):
        username = SecretRef(file=_path(basic["username_file"], base)).read({}, where)
    password = _ref(basic, "password", base, f"{where}.basic_auth")
    if basic and (not username or password is None):
        raise ConfigError(f"{where}.basic_auth: needs username and password_file (or _env)")
    credentials = _ref(authz, "credentials", base, f"{where}.authorization")
    if authz and credentials is None:
        raise ConfigError(f"{where}.authorization: needs credentials_file (or credentials_env)")
    return HttpConfig(
        tls=TlsConfig(
            ca_file=_path(tls["ca_file"], base) if tls.get("ca_file") else None,
            cert_file=_path(cert, base) if cert else None,
            key_file=_path(key, base) if key else None,
            server_name=str(tls["server_name"]) if tls.get("server_name") else None,
            insecure_skip_verify=bool(tls.get("insecure_skip_verify", False)),
        ),
        username=str(username) if username else None,
        password=password,
        auth_type=str(authz.get("type") or "Bearer"),
        credentials=credentials,
    )


class _ServerNameAdapter(HTTPAdapter):
    """``tls_config.server_name``: the name sent as SNI and checked in the server certificate
    (when the URL's host is an address or an alias the certificate does not carry)."""

    def __init__(self, server_name: str) -> None:
        self._server_name = server_name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["server_hostname"] = self._server_name
        kwargs["assert_hostname"] = self._server_name
        super().init_poolmanager(*args, **kwargs)


def _check_files(tls: TlsConfig, where: str) -> None:
    for name in ("ca_file", "cert_file", "key_file"):
        path = getattr(tls, name)
        if path is not None and not path.is_file():
            raise ConfigError(f"{where}.tls_config.{name}: no file {path}")


class ConfiguredSession(requests.Session):
    """A session that knows its ``HttpConfig`` (to say what was sent when a server refuses)."""

    def __init__(self, http_config: HttpConfig) -> None:
        super().__init__()
        self.http_config = http_config


def build_session(
    cfg: HttpConfig, *, environ: Mapping[str, str], where: str = "http_config"
) -> ConfiguredSession:
    """A ``requests.Session`` speaking with ``cfg``'s TLS settings and credentials. Secrets are
    read here (files, or ``environ``); ``ConfigError`` if one is missing or unreadable."""
    _check_files(cfg.tls, where)
    session = ConfiguredSession(cfg)
    session.trust_env = False  # no proxy or .netrc credentials picked up behind our back
    if cfg.tls.insecure_skip_verify:
        session.verify = False
    elif cfg.tls.ca_file is not None:
        session.verify = str(cfg.tls.ca_file)
    if cfg.tls.cert_file is not None and cfg.tls.key_file is not None:
        session.cert = (str(cfg.tls.cert_file), str(cfg.tls.key_file))
    if cfg.tls.server_name:
        session.mount("https://", _ServerNameAdapter(cfg.tls.server_name))
    if cfg.password is not None:
        session.auth = (cfg.username or "", cfg.password.read(environ, f"{where}.basic_auth"))
    elif cfg.credentials is not None:
        token = cfg.credentials.read(environ, f"{where}.authorization")
        session.headers["Authorization"] = f"{cfg.auth_type} {token}"
    log.debug("HTTP session for %s: %s", where, cfg.describe())
    return session


def explain_status(status: int, cfg: HttpConfig | None) -> str:
    """A hint for an HTTP refusal (401 / 403), saying what was sent (never the secret)."""
    if status == 401:
        sent = cfg.describe() if cfg is not None else "no credentials"
        return f"authentication failed (sent {sent}): check the http_config credentials"
    if status == 403:
        return "forbidden: the credentials are not allowed to do this"
    return ""


def request_error(service: str, url: str, e: requests.RequestException) -> InputError:
    """A one-line message for a failed request; TLS problems say which setting to look at."""
    if isinstance(e, requests.exceptions.SSLError):
        return InputError(
            f"TLS handshake with {service} at {url} failed ({_short(e)}): check tls_config "
            "(ca_file, server_name, cert_file / key_file)"
        )
    return InputError(f"cannot reach {service} at {url}: {_short(e)}")


def _short(e: Exception) -> str:
    text = str(e)
    for marker in (
        "certificate verify failed",
        "hostname mismatch",
        "tlsv13 alert",
        "sslv3 alert",
        "wrong version number",
        "Connection refused",
    ):
        if marker in text:
            return marker
    return text[:200]
