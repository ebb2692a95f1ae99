"""``tirastore dashboard``: a live, read-only web view of a database.

    tirastore dashboard cache.db                  # http://127.0.0.1:8050/
    ssh -L 8050:127.0.0.1:8050 login-node         # then open it on your laptop

The page shows, per program, the best time found so far, the measured and
illegal counts and the spread of the repeated times of the fastest
schedules; the fleet's throughput by host, user and source project; the
claims in flight; and the database's health. It polls a JSON endpoint
every two seconds, so records written by other processes appear without a
reload.

All aggregation is the engine's (``core/dashboard``, through the C methods
``dashboard_refresh``, ``dashboard_overview`` and ``dashboard_program``):
one background thread here asks it to read what is new, a bounded chunk
per hold of the lock, and the handlers only pass its answers on. The
claims (``TiraStore.claims``), the lock (``lock_status``) and the last
check (``last_check``) are the library's own calls.

The server is the standard library's :class:`http.server.ThreadingHTTPServer`
(no dependency to install on a login node). It serves files of this
package only (the page, its script and style, and the vendored uPlot
charting library), answers GET and HEAD only (no endpoint writes), and
sends a strict Content-Security-Policy: no inline script or style, no
other origin. It binds 127.0.0.1 unless told otherwise; any other address
needs a token, which every request must carry (``?token=`` once, then a
cookie). On the loopback address, requests must name it in their Host
header (a page of another site cannot reach the server by DNS rebinding).
"""

from __future__ import annotations

import hmac
import http.server
import ipaddress
import json
import os
import secrets
import sys
import threading
import time
from http import HTTPStatus
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlsplit

from tirastore import _native
from tirastore.store import TiraStore

#: The page's files: served by name, nothing else of the directory.
ASSETS_DIR = Path(__file__).with_name("dashboard_assets")
_ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}

#: Everything the page needs comes from this server; nothing inline.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

_COOKIE = "tirastore_dashboard"

#: Seconds between two refreshes of the board, and of the claims, lock
#: and size (the page polls every 2 s: a record appears within ~3 s).
REFRESH_INTERVAL = 1.0

#: Records one refresh reads at most (in chunks of the engine's row
#: budget per hold of the lock): the first one before the page is served,
#: so that it paints within a second on a large database and fills in while
#: the rest is read, slice by slice, between updates of the claims and lock.
REFRESH_SLICE = 25_000


class TokenRequired(ValueError):
    """A non-loopback address was asked for without a token."""


def is_loopback(host: str) -> bool:
    """Whether *host* (an address or "localhost") is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: Optional[str]) -> None:
    """Refuse to serve a database's contents on a non-loopback address without a token."""
    if not is_loopback(host) and not token:
        raise TokenRequired(
            f"refusing to listen on {host}: the page shows the database's contents to whoever reaches that "
            f"address. Use the default 127.0.0.1 with SSH port forwarding (ssh -L 8050:127.0.0.1:8050 "
            f"login-node), or give --token (a token is generated and printed) or --token TOKEN")


class Dashboard:
    """The state behind the page: the open store, and what the refresher last read."""

    def __init__(self, db: str, lock_timeout: Optional[float] = None,
                 stale_lock_timeout: Optional[float] = None) -> None:
        self.store = TiraStore(db, allow_cpu_mismatch=True, lock_timeout=lock_timeout,
                               stale_lock_timeout=stale_lock_timeout, create=False)
        self.server_db = not isinstance(self.store.db_path, Path)
        self.stale_lock_timeout = stale_lock_timeout
        self._lock = threading.Lock()
        self._health: dict[str, Any] = {"db_path": str(self.store.db_path), "server": self.server_db}
        self._claims: list[dict[str, Any]] = []
        self._error: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.caught_up = False

    # -- the refresher ---------------------------------------------------------

    def refresh(self) -> None:
        """Read what is new: records (the engine's board), claims, lock, size, last check."""
        try:
            self.caught_up = self.store._call("dashboard_refresh", max_rows=REFRESH_SLICE)["caught_up"]
            claims = self.store._call("claims")
            health: dict[str, Any] = {"db_path": str(self.store.db_path), "server": self.server_db}
            if not self.server_db:
                health["size"] = os.stat(self.store.db_path).st_size
                health["lock"] = _native.call(0, "lock_status", db_path=str(self.store.db_path),
                                              stale_lock_timeout=self.stale_lock_timeout)
            health["last_check"] = self.store._call("last_check")
            error = None
        except (OSError, ValueError, TimeoutError) as e:  # shown on the page; the next refresh tries again
            claims, health, error = None, None, f"{type(e).__name__}: {e}"
        with self._lock:
            if claims is not None:
                self._claims, self._health = claims, health
            self._error = error

    def start(self) -> None:
        """Read the database once, then follow it in a background thread."""
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="tirastore-dashboard-refresh", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0 if not self.caught_up else REFRESH_INTERVAL):
            self.refresh()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.store.close()

    # -- what the handlers answer ----------------------------------------------

    def overview(self, since: int) -> dict[str, Any]:
        doc = self.store._call("dashboard_overview", since=since)
        with self._lock:
            doc["health"], doc["claims"], doc["error"] = self._health, self._claims, self._error
        doc["now"] = time.time()
        return doc

    def program(self, program_hash: str) -> Any:
        return self.store._call("dashboard_program", program_hash=program_hash)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    dashboard: Dashboard
    token: Optional[str]
    loopback: bool


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    server_version = "tirastore-dashboard"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a page polling every 2 s would fill the terminal

    # Only GET and HEAD are served: nothing here writes.
    def do_POST(self) -> None:
        self._send_error(HTTPStatus.METHOD_NOT_ALLOWED, "the dashboard is read-only")

    do_PUT = do_DELETE = do_PATCH = do_POST

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if not self._allowed(query):
            return
        try:
            if url.path == "/":
                self._send_file("index.html", "text/html; charset=utf-8", head,
                                set_cookie=self.server.token is not None)
            elif url.path.startswith("/assets/") and url.path[len("/assets/"):] in _ASSETS:
                name = url.path[len("/assets/"):]
                self._send_file(name, _ASSETS[name], head)
            elif url.path == "/api/overview":
                since = int(query.get("since", ["0"])[0])
                self._send_json(self.server.dashboard.overview(since), head)
            elif url.path == "/api/program":
                self._send_json(self.server.dashboard.program(query.get("hash", [""])[0]), head)
            else:
                self._send_error(HTTPStatus.NOT_FOUND, "no such page")
        except ValueError as e:
            self._send_error(HTTPStatus.BAD_REQUEST, str(e))
        except (OSError, TimeoutError) as e:
            self._send_error(HTTPStatus.SERVICE_UNAVAILABLE, f"{type(e).__name__}: {e}")

    def _allowed(self, query: dict[str, list[str]]) -> bool:
        """The token (with one), else a Host header naming the loopback address."""
        token = self.server.token
        if token is not None:
            given = query.get("token", [None])[0]
            if given is None:
                morsel = SimpleCookie(self.headers.get("Cookie", "")).get(_COOKIE)
                given = morsel.value if morsel else None
            if given is None or not hmac.compare_digest(given.encode(), token.encode()):
                self._send_error(HTTPStatus.FORBIDDEN, "a valid token is required: open the URL that "
                                 "`tirastore dashboard` printed (…/?token=…)")
                return False
            return True
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        if not is_loopback(host):
            self._send_error(HTTPStatus.FORBIDDEN, f"Host {host!r} is not this machine's loopback address")
            return False
        return True

    def _headers(self, status: int, ctype: str, length: int, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")

    def _send_file(self, name: str, ctype: str, head: bool, set_cookie: bool = False) -> None:
        body = (ASSETS_DIR / name).read_bytes()
        self._headers(HTTPStatus.OK, ctype, len(body), cache=name != "index.html")
        if set_cookie:
            self.send_header("Set-Cookie", f"{_COOKIE}={self.server.token}; Path=/; HttpOnly; SameSite=Strict")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _send_json(self, doc: Any, head: bool) -> None:
        # NaN/Infinity never reach here (the engine sends null), and
        # allow_nan=False makes sure of it: the page's JSON.parse reads neither.
        body = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        self._headers(HTTPStatus.OK, "application/json; charset=utf-8", len(body))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _send_error(self, status: int, message: str) -> None:
        body = (message + "\n").encode()
        self._headers(status, "text/plain; charset=utf-8", len(body))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def make_server(dashboard: Dashboard, host: str = "127.0.0.1", port: int = 8050,
                token: Optional[str] = None) -> _Server:
    """Bind the page's server (not yet serving); refuses a non-loopback *host* without *token*."""
    check_bind(host, token)
    server = _Server((host, port), _Handler)
    server.dashboard, server.token, server.loopback = dashboard, token, is_loopback(host)
    return server


def new_token() -> str:
    """A random token for a non-loopback address."""
    return secrets.token_urlsafe(24)


def serve(db: str, host: str = "127.0.0.1", port: int = 8050, token: Optional[str] = None,
          lock_timeout: Optional[float] = None, stale_lock_timeout: Optional[float] = None,
          announce: Callable[[str], None] = print) -> None:
    """Serve the dashboard of *db* until interrupted; *announce* gets the URL to open."""
    check_bind(host, token)  # before opening anything
    dashboard = Dashboard(db, lock_timeout=lock_timeout, stale_lock_timeout=stale_lock_timeout)
    try:
        server = make_server(dashboard, host, port, token)
        dashboard.start()
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{server.server_address[1]}/"
        if token:
            url += f"?token={token}"
        announce(url)
        sys.stdout.flush()
        try:
            server.serve_forever(poll_interval=0.5)
        finally:
            server.server_close()
    finally:
        dashboard.close()
