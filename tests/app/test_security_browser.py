"""The dashboard behind a real login proxy, in a real browser.

nginx (Debian) with ``auth_basic`` in front of ``faultlens dashboard --auth proxy``: nginx passes
the signed-in user in ``X-Forwarded-User`` and connects to the dashboard from 127.0.0.3
(``proxy_bind``), the only address the dashboard trusts. Headless Chromium (Playwright) signs in
through nginx and sees the pages; a browser that reaches the dashboard's port directly, even with
a forged header, gets no page; wrong credentials get nginx's 401. Every request the page makes
goes to this machine (the favicon included), and a log line holding a script stays text.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.app.test_dashboard_browser import ARGS, CHROMIUM, _free_port, _wait_http, _wait_idle
from tests.integration_helpers import tls
from tests.reports import smalldb

pytestmark = pytest.mark.integration

PROXY_ADDR = "127.0.0.3"  # nginx's source address towards the dashboard
USER, PASSWORD = "alice", "correct horse battery"

NGINX_CONF = """\
{user}
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
  server {{
    listen 127.0.0.1:{port};
    auth_basic "faultlens";
    auth_basic_user_file {prefix}/htpasswd;
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_bind {proxy_addr};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-User $remote_user;
      proxy_read_timeout 1h;
    }}
  }}
}}
"""


def test_dashboard_on_a_network_address_without_auth_exits_2(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "faultlens.app.cli",
            "dashboard",
            "--host",
            "0.0.0.0",
            "--db",
            str(tmp_path / "x.duckdb"),
            "--port",
            str(_free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert "refusing --host 0.0.0.0 without authentication" in res.stderr


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(nginx URL, direct dashboard URL)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium missing: apt-get install chromium (.ci/apt-packages.txt)")
    nginx = tls.need("nginx", "nginx")
    db = smalldb.build(tmp_path / "small.duckdb")
    port, upstream = _free_port(), _free_port()
    dash = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultlens.app.cli",
            "dashboard",
            "--db",
            str(db),
            "--port",
            str(upstream),
            "--models-dir",
            str(tmp_path / "models"),
            "--auth",
            "proxy",
            "--trusted-proxy",
            PROXY_ADDR,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    hashed = tls.bcrypt_hash(PASSWORD)
    (prefix / "htpasswd").write_text(f"{USER}:{hashed}\n")
    conf = prefix / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            user="user root;" if os.geteuid() == 0 else "",
            prefix=prefix,
            port=port,
            upstream=upstream,
            proxy_addr=PROXY_ADDR,
        )
    )
    direct = f"http://127.0.0.1:{upstream}"
    try:
        _wait_http(direct, dash)
        with tls.daemon(
            [nginx, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"], prefix / "nginx.out"
        ) as proc:
            url = f"http://127.0.0.1:{port}"

            def up() -> bool:
                assert proc.poll() is None, (prefix / "error.log").read_text()[-2000:]
                return requests.get(url, timeout=2).status_code == 401

            tls.wait_until(up, 30, "nginx")
            yield url, direct
    finally:
        os.killpg(dash.pid, 15)
        dash.wait(timeout=30)


def _page_text(page) -> str:  # noqa: ANN001
    return page.inner_text("body")


def test_login_through_the_proxy_and_none_without(proxied: tuple[str, str]) -> None:
    from playwright.sync_api import sync_playwright

    url, direct = proxied
    assert requests.get(f"{url}/_stcore/health", timeout=5).status_code == 401
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        # signed in through nginx: the pages
        ctx = browser.new_context(http_credentials={"username": USER, "password": PASSWORD})
        seen: list[str] = []
        ctx.on("request", lambda r: seen.append(r.url))
        page = ctx.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(url)
        page.get_by_role("heading", name="Fleet overview").wait_for(timeout=60_000)
        _wait_idle(page)
        assert f"signed in as {USER}" in _page_text(page)
        page.goto(f"{url}/events")
        page.get_by_role("heading", name="Event explorer").wait_for(timeout=60_000)
        _wait_idle(page)
        assert page.evaluate("() => typeof window.alert_called") == "undefined"
        assert not dialogs
        outside = [
            u
            for u in seen
            if not u.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:"))
        ]
        assert not outside, outside  # nothing fetched from outside the machine
        icon = page.evaluate(
            "() => [...document.querySelectorAll('link[rel*=icon]')].map(l => l.href)"
        )
        assert icon and all(h.startswith(url) for h in icon), icon
        ctx.close()

        # straight to the dashboard's port, with a forged header: no page
        for headers in ({"X-Forwarded-User": USER}, {}):
            ctx = browser.new_context(extra_http_headers=headers)
            page = ctx.new_page()
            page.goto(direct)
            page.get_by_role("heading", name="faultlens").wait_for(timeout=60_000)
            _wait_idle(page)
            text = _page_text(page)
            assert "reached through the team's login proxy" in text, text[:500]
            assert "Fleet overview" not in text and "Events" not in text
            page.goto(f"{direct}/events")
            page.get_by_role("heading", name="faultlens").wait_for(timeout=60_000)
            _wait_idle(page)
            assert "Event explorer" not in _page_text(page)
            ctx.close()

        # wrong password: nginx refuses, the dashboard is never reached
        ctx = browser.new_context(http_credentials={"username": USER, "password": "wrong"})
        page = ctx.new_page()
        response = page.goto(url)
        assert response is not None and response.status == 401
        assert "Fleet overview" not in _page_text(page)
        ctx.close()
        browser.close()
