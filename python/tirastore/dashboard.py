"""``tirastore dashboard``: a live, read-only web view of a database.

    tirastore dashboard cache.db                  # http://127.0.0.1:8050/?token=...
    ssh -L 8050:127.0.0.1:8050 login-node         # then open that URL on your laptop

The page shows, per program, the best time found so far, the measured and
illegal counts and the spread of the repeated times of the fastest
schedules; the fleet's throughput by host, user and source project; the
claims in flight; and the database's health. It polls a JSON endpoint
every two seconds, so records written by other processes appear without a
reload. A project, a host and a user can be chosen: the endpoints pass
them on (``host``, ``user``, ``project``) and the engine answers of the
records they select.

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
other origin. It binds 127.0.0.1 unless told otherwise, and every request
must carry a token (``?token=`` once, then a cookie): every local user can
connect to the loopback address, and the page shows what the database's
permissions may keep from them. Without a token (``--no-token``, loopback
only) whoever can connect reads the page. On a loopback address, requests
must name it in their Host header (a page of another site cannot reach the
server by DNS rebinding).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import http.server
import ipaddress
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
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

#: Seconds between two refreshes of the board, and of the claims, lock
#: and size (the page polls every 2 s: a record appears within ~3 s).
REFRESH_INTERVAL = 1.0

#: Records one refresh reads at most (in chunks of the engine's row
#: budget per hold of the lock): the first one before the page is served,
#: so that it paints within a second on a large database and fills in while
#: the rest is read, slice by slice, between updates of the claims and lock.
REFRESH_SLICE = 25_000


class TokenRequired(ValueError):
    """A non-loopback address was asked for without a token, or a token is unfit."""


class ListenError(OSError):
    """The server cannot listen on the address and port asked for."""


#: A token goes into a URL and a cookie as it is: these characters only,
#: and long enough that it cannot be guessed by trying (every local user
#: can make requests to the loopback address as fast as they like).
TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")
MIN_TOKEN_LENGTH = 16


def is_loopback(host: str) -> bool:
    """Whether *host* (an address or "localhost") is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str) -> None:
    """Refuse a token that does not fit in a URL and a cookie as it is, or is short enough to guess."""
    if not TOKEN_CHARS.fullmatch(token):
        raise TokenRequired("the token may hold letters, digits and . _ ~ - only (it goes into a URL and a cookie)")
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenRequired(f"the token is {len(token)} characters long: give at least {MIN_TOKEN_LENGTH} "
                            f"(--token alone generates one)")


def check_bind(host: str, token: Optional[str]) -> None:
    """Refuse to serve a database's contents on a non-loopback address without a token."""
    if token is not None:
        check_token(token)
    elif not is_loopback(host):
        raise TokenRequired(
            f"refusing to listen on {host} without a token: the page shows the database's contents to whoever "
            f"reaches that address (--no-token is for a loopback address only). Use the default 127.0.0.1 with "
            f"SSH port forwarding (ssh -L 8050:127.0.0.1:8050 login-node), or keep the token (the default; "
            f"--token TOKEN names one)")


def cookie_name(token: str) -> str:
    """The cookie that carries *token*: named after it, so that two dashboards
    open in one browser (on other ports or hosts) do not replace each other's."""
    return "tirastore_dashboard_" + hashlib.sha256(token.encode()).hexdigest()[:12]


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

    def overview(self, since: int, selected: Optional[dict[str, str]] = None) -> dict[str, Any]:
        """The engine's summary of the records *selected* picks (``host``,
        ``user``, ``project``; any when absent), with the health and claims."""
        doc = self.store._call("dashboard_overview", since=since, **(selected or {}))
        with self._lock:
            doc["health"], doc["claims"], doc["error"] = self._health, self._claims, self._error
        doc["now"] = time.time()
        return doc

    def program(self, program_hash: str, selected: Optional[dict[str, str]] = None) -> Any:
        return self.store._call("dashboard_program", program_hash=program_hash, **(selected or {}))


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    dashboard: Dashboard
    token: Optional[str]
    cookie: str
    loopback: bool


class _Server6(_Server):
    address_family = socket.AF_INET6


def _selected(query: dict[str, list[str]]) -> dict[str, str]:
    """The filter a page asks for: host, user and project, those given."""
    return {k: query[k][0] for k in ("host", "user", "project") if k in query}


def _cookies(header: str) -> SimpleCookie:
    """The Cookie header's cookies (a malformed one: none)."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        pass
    return jar


def _host_of(header: str) -> str:
    """The host of a Host header: name:port, [v6]:port, or without a port."""
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


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
        query = parse_qs(url.query, keep_blank_values=True)  # project= selects records without a project
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
                self._send_json(self.server.dashboard.overview(since, _selected(query)), head)
            elif url.path == "/api/program":
                self._send_json(self.server.dashboard.program(query.get("hash", [""])[0], _selected(query)), head)
            else:
                self._send_error(HTTPStatus.NOT_FOUND, "no such page")
        except ValueError as e:
            self._send_error(HTTPStatus.BAD_REQUEST, str(e))
        except (OSError, TimeoutError) as e:
            self._send_error(HTTPStatus.SERVICE_UNAVAILABLE, f"{type(e).__name__}: {e}")

    def _allowed(self, query: dict[str, list[str]]) -> bool:
        """The token (with one: from the query, else its cookie), and on a
        loopback address a Host header naming the loopback address."""
        token = self.server.token
        if token is not None:
            given = query.get("token", [None])[0]
            if given is None:
                morsel = _cookies(self.headers.get("Cookie", "")).get(self.server.cookie)
                given = morsel.value if morsel else None
            # compare_digest: the time taken does not tell how much of it matched.
            if given is None or not hmac.compare_digest(given.encode(), token.encode()):
                self._send_error(HTTPStatus.FORBIDDEN, "a valid token is required: open the URL that "
                                 "`tirastore dashboard` printed (…/?token=…)")
                return False
        if self.server.loopback:
            host = _host_of(self.headers.get("Host") or "")
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
            self.send_header("Set-Cookie", f"{self.server.cookie}={self.server.token}; Path=/; HttpOnly; "
                             f"SameSite=Strict")
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


def make_server(dashboard: Optional[Dashboard], host: str = "127.0.0.1", port: int = 8050,
                token: Optional[str] = None) -> _Server:
    """Bind the page's server (not yet serving); refuses a non-loopback *host* without *token*.

    :raises ValueError: *port* is not a port number (0: any free port).
    :raises ListenError: the address is not this machine's, the port is in use or not allowed.
    """
    check_bind(host, token)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is not a port number (0 to 65535; 0: any free port)")
    addr = host.strip("[]")
    shown = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
    try:
        family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server = (_Server6 if family == socket.AF_INET6 else _Server)((addr, port), _Handler)
    except socket.gaierror as e:
        raise ListenError(f"cannot listen on {host}: {e.strerror} (give an address of this machine, "
                          f"or 127.0.0.1)") from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            why = f"{shown} is already in use (another dashboard?): choose another port with --port N, " \
                  f"or --port 0 for any free one"
        elif e.errno == errno.EACCES:
            why = f"not allowed to listen on {shown} (ports below 1024 need privileges): choose another port " \
                  f"with --port N"
        elif e.errno == errno.EADDRNOTAVAIL:
            why = f"cannot listen on {shown}: {host} is not an address of this machine"
        else:
            why = f"cannot listen on {shown}: {e.strerror or e}"
        err = ListenError(why)
        err.errno = e.errno
        raise err from None
    server.dashboard, server.token, server.loopback = dashboard, token, is_loopback(addr)  # type: ignore[assignment]
    server.cookie = cookie_name(token) if token is not None else ""
    return server


def new_token() -> str:
    """A random token (32 characters of the URL-safe alphabet)."""
    return secrets.token_urlsafe(24)


def url_of(server: _Server) -> str:
    """The URL to open: the server's address and port, with its token."""
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    if server.token:
        url += f"?token={server.token}"
    return url


def serve(db: str, host: str = "127.0.0.1", port: int = 8050, token: Optional[str] = None,
          lock_timeout: Optional[float] = None, stale_lock_timeout: Optional[float] = None,
          announce: Callable[[str, str], None] = lambda url, shown: print(f"serving {shown} on {url}")) -> None:
    """Serve the dashboard of *db* until interrupted.

    *announce* gets the URL to open (with the token) and the database's
    location as the page shows it (a server's URL without its password).
    """
    server = make_server(None, host, port, token)  # before opening anything: a taken port fails at once
    try:
        dashboard = Dashboard(db, lock_timeout=lock_timeout, stale_lock_timeout=stale_lock_timeout)
        try:
            server.dashboard = dashboard
            dashboard.start()
            announce(url_of(server), str(dashboard.store.db_path))
            sys.stdout.flush()
            server.serve_forever(poll_interval=0.5)
        finally:
            dashboard.close()
    finally:
        server.server_close()
