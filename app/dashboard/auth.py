"""Who may see the dashboard: the bind check of ``faultlens dashboard`` and the page gate.

Three modes:

- ``none``: no login. Allowed on a loopback address only (the person at the machine, or an SSH
  tunnel), or on a network address with ``--insecure-no-auth``, which warns on every start.
- ``proxy``: a reverse proxy (oauth2-proxy, nginx ``auth_request`` / ``auth_basic``) has signed
  the user in and names them in a header (``X-Forwarded-User`` by default). The header is
  believed only on connections whose TCP peer is one of ``trusted_proxies``; anything else — a
  browser that reaches the port directly, with or without a forged header — sees no page.
  (The dashboard process is started with ``FORWARDED_ALLOW_IPS`` empty, so the server never
  replaces the peer address by an ``X-Forwarded-For`` value.)
- ``oidc``: Streamlit's own OpenID Connect login (``st.login``), configured in the ``[auth]``
  table of a Streamlit secrets file (``.streamlit/secrets.toml``); needs ``Authlib``.

Roles (optional): with ``operators`` listed, only those users also see raw log lines (the
source-context view); everyone else signed in sees the aggregate pages. Without a list,
everyone signed in is an operator.

The settings travel from the CLI to the Streamlit process as JSON in ``$FAULTLENS_DASHBOARD_AUTH``.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from faultlens.ingest.errors import ConfigError

AUTH_ENV = "FAULTLENS_DASHBOARD_AUTH"
MODES = ("none", "proxy", "oidc")
OIDC_KEYS = ("redirect_uri", "cookie_secret")
OIDC_PROVIDER_KEYS = ("client_id", "client_secret", "server_metadata_url")

HOW_TO = """\
the dashboard would serve every page, raw log lines included, to anyone who can reach {host}.
Pick one:
  - behind a login proxy (oauth2-proxy, nginx auth_request / auth_basic) on this host:
      faultlens dashboard --host {host} --auth proxy --trusted-proxy 127.0.0.1
    (the proxy sets X-Forwarded-User; see README "Deploying for a team")
  - Streamlit's OpenID Connect login: an [auth] table (redirect_uri, cookie_secret, client_id,
    client_secret, server_metadata_url) in .streamlit/secrets.toml, then
      faultlens dashboard --host {host} --auth oidc
  - keep it on this machine: --host 127.0.0.1 (reach it through `ssh -L 8501:127.0.0.1:8501`)
  - or, knowingly, --insecure-no-auth"""


@dataclass(frozen=True)
class AuthSettings:
    mode: str = "none"
    proxy_header: str = "X-Forwarded-User"
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    operators: tuple[str, ...] = ()
    insecure: bool = False

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str | None) -> AuthSettings:
        """The settings the CLI passed; unreadable settings fail closed (proxy mode, trusting
        no address: nobody gets in)."""
        if not text:
            return cls()
        try:
            doc = json.loads(text)
            return cls(
                mode=str(doc["mode"]),
                proxy_header=str(doc["proxy_header"]),
                trusted_proxies=tuple(doc["trusted_proxies"]),
                operators=tuple(doc["operators"]),
                insecure=bool(doc["insecure"]),
            )
        except (ValueError, KeyError, TypeError):
            return cls(mode="proxy", trusted_proxies=())


def settings_from(
    config: dict[str, Any],
    *,
    auth: str | None,
    trusted_proxies: list[str] | None,
    proxy_header: str | None,
    operators: list[str] | None,
    insecure: bool,
) -> AuthSettings:
    """Command-line options over the ``[dashboard]`` table of faultlens.toml over defaults."""
    mode = auth or str(config.get("auth", "none"))
    if mode not in MODES:
        raise ConfigError(f"dashboard auth {mode!r}: one of {', '.join(MODES)}")
    proxies = trusted_proxies or config.get("trusted_proxies") or ["127.0.0.1", "::1"]
    for p in proxies:
        try:
            ipaddress.ip_network(str(p), strict=False)
        except ValueError:
            raise ConfigError(f"trusted proxy {p!r}: an IP address or network") from None
    return AuthSettings(
        mode=mode,
        proxy_header=proxy_header or str(config.get("proxy_header", "X-Forwarded-User")),
        trusted_proxies=tuple(str(p) for p in proxies),
        operators=tuple(str(o) for o in (operators or config.get("operators") or [])),
        insecure=insecure,
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: may resolve to anything


def check_bind(host: str, settings: AuthSettings, secrets_file: Path | None) -> list[str]:
    """Refuse (``ConfigError``, exit 2) to serve a network address without a login; returns
    warnings to print. ``secrets_file``: the Streamlit secrets file used in ``oidc`` mode."""
    warnings = []
    if settings.mode == "oidc":
        check_oidc(secrets_file)
    elif settings.mode == "none" and not is_loopback(host):
        if not settings.insecure:
            raise ConfigError(
                "refusing --host " + host + " without authentication: " + HOW_TO.format(host=host)
            )
        warnings.append(
            f"WARNING: --insecure-no-auth: every page, raw log lines included, is served "
            f"without a login to anyone who can reach {host}"
        )
    if settings.mode == "proxy" and not is_loopback(host):
        warnings.append(
            f"proxy mode: the {settings.proxy_header} header is believed only from "
            f"{', '.join(settings.trusted_proxies)}; only the proxy may connect from there"
        )
    return warnings


def check_oidc(secrets_file: Path | None) -> None:
    """The ``[auth]`` table Streamlit's ``st.login`` needs, and Authlib (which it uses)."""
    where = secrets_file or Path(".streamlit/secrets.toml")
    try:
        doc = tomllib.loads(where.read_text())
    except OSError:
        raise ConfigError(
            f"--auth oidc: no Streamlit secrets file at {where}: write an [auth] table there "
            f"({', '.join(OIDC_KEYS + OIDC_PROVIDER_KEYS)}) or name the file in "
            "[dashboard] secrets_file (README: Deploying for a team)"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--auth oidc: {where}: {e}") from None
    section = doc.get("auth")
    if not isinstance(section, dict):
        raise ConfigError(f"--auth oidc: {where} has no [auth] table")
    missing = [k for k in OIDC_KEYS if not section.get(k)]
    provider = {k: section.get(k) for k in OIDC_PROVIDER_KEYS}
    nested = [v for v in section.values() if isinstance(v, dict)]
    if not all(provider.values()) and not any(
        all(n.get(k) for k in OIDC_PROVIDER_KEYS) for n in nested
    ):
        missing.append("client_id / client_secret / server_metadata_url")
    if missing:
        raise ConfigError(f"--auth oidc: [auth] in {where} lacks {', '.join(missing)}")
    try:
        import authlib  # noqa: F401  (st.login's OIDC client)
    except ImportError:
        raise ConfigError("--auth oidc needs Authlib: pip install 'faultlens[oidc]'") from None


@dataclass(frozen=True)
class Viewer:
    """Who is looking, and whether they may see raw log lines."""

    name: str | None
    operator: bool
    refused: str | None = None  # why no page is shown (None: let in)
    oidc: bool = False  # signed in through st.login (so st.logout applies)


def peer_trusted(peer: str | None, trusted: tuple[str, ...]) -> bool:
    """Is the TCP peer one of the trusted proxies? (``None``: Streamlit's way to say loopback.)"""
    try:
        addr = ipaddress.ip_address(peer or "127.0.0.1")
    except ValueError:
        return False
    for entry in trusted:
        try:
            if addr in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def proxy_viewer(settings: AuthSettings, peer: str | None, user: str | None) -> Viewer:
    """The decision of proxy mode, from the connection's peer address and the user header."""
    if not peer_trusted(peer, settings.trusted_proxies):
        return Viewer(None, False, "This dashboard is reached through the team's login proxy.")
    if not user or not user.strip():
        return Viewer(None, False, "Not signed in: the login proxy named no user.")
    return viewer_for(settings, user.strip())


def viewer_for(settings: AuthSettings, user: str | None) -> Viewer:
    operator = not settings.operators or (user is not None and user in settings.operators)
    return Viewer(user, operator)


def current_viewer() -> Viewer:
    """The viewer of the running Streamlit session (decision only, nothing drawn)."""
    import os

    import streamlit as st

    settings = AuthSettings.from_env(os.environ.get(AUTH_ENV))
    if settings.mode == "proxy":
        user = st.context.headers.get(settings.proxy_header)
        return proxy_viewer(settings, st.context.ip_address, user)
    if settings.mode == "oidc":
        if not st.user.is_logged_in:
            return Viewer(None, False, "oidc")
        user = str(st.user.get("email") or st.user.get("name") or "")
        return replace(viewer_for(settings, user), oidc=True)
    return Viewer(None, True)  # no login: the person at this machine


def gate() -> Viewer:
    """Run first on every page: stops the script (no page, no navigation) unless let in."""
    import streamlit as st

    viewer = current_viewer()
    if viewer.refused == "oidc":
        st.title("faultlens")
        st.button("Log in", on_click=st.login, type="primary")
        st.stop()
    if viewer.refused:
        st.title("faultlens")
        st.info(viewer.refused)
        st.stop()
    if viewer.name:
        with st.sidebar:
            role = "operator" if viewer.operator else "viewer"
            st.caption(f"signed in as {viewer.name} ({role})")
            if viewer.oidc:  # st.user.is_logged_in exists only with an [auth] table
                st.button("Log out", on_click=st.logout)
    return viewer
