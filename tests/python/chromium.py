"""A headless Chromium driven through the DevTools protocol over a pipe.

Debian's ``chromium`` with ``--remote-debugging-pipe`` reads protocol
commands on its descriptor 3 and writes answers and events on 4, each a
JSON message ended by NUL. That needs nothing but the standard library
(no websocket client, no Node, no Playwright download), and, unlike
``--dump-dom``, lets a test watch one page live: evaluate script in it
while another process writes to the database, and take a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional


def executable() -> Optional[str]:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(RuntimeError):
    pass


#: Seconds the first command may wait for the browser to start.
STARTUP_TIMEOUT = 90


class Chromium:
    """One headless browser with one page (a target attached in flat mode)."""

    def __init__(self, width: int = 1280, height: int = 1100) -> None:
        exe = executable()
        if exe is None:
            raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
        self.profile = tempfile.mkdtemp(prefix="tirastore-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        # Above 4, so that putting one on 3 or 4 never replaces the other.
        for_child = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5) for fd in (cmd_r, out_w)]
        os.close(cmd_r)
        os.close(out_w)
        cmd_r, out_w = for_child
        args = ["--headless", "--disable-gpu", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-dev-shm-usage", "--mute-audio",
                f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(0, "--no-sandbox")  # Chromium's sandbox refuses to run as root
        # A trampoline puts the pipes on 3 and 4, where Chromium expects
        # them (dash's redirections take single-digit descriptors only).
        trampoline = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); " \
                     "os.execv(sys.argv[3], sys.argv[3:])"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", trampoline, str(cmd_r), str(out_w), exe, *args], pass_fds=(cmd_r, out_w),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.profile, "stderr"), "wb"))
        os.close(cmd_r)
        os.close(out_w)
        self._next = 0
        self._replies: dict[int, dict] = {}
        self.events: list[dict] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # The first answer waits for the browser's own start-up, which on
        # 2 cores shared with `go test ./...` took over 20 s once.
        target = self.send("Target.createTarget", {"url": "about:blank"}, timeout=STARTUP_TIMEOUT)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=self.session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=self.session)

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._out_r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            with self._cond:
                for m in msgs:
                    doc = json.loads(m)
                    if "id" in doc:
                        self._replies[doc["id"]] = doc
                    else:
                        self.events.append(doc)
                self._cond.notify_all()

    def send(self, method: str, params: Optional[dict] = None, session: Optional[str] = None,
             timeout: float = 20) -> Any:
        with self._cond:
            self._next += 1
            mid = self._next
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise ProtocolError(f"no answer to {method} (chromium exit status {self.proc.poll()})")
                self._cond.wait(left)
            doc = self._replies.pop(mid)
        if "error" in doc:
            raise ProtocolError(f"{method}: {doc['error']}")
        return doc.get("result", {})

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, session=self.session)

    def evaluate(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                      session=self.session)
        if "exceptionDetails" in r:
            raise ProtocolError(f"{expression!r} threw: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15) -> Any:
        """Evaluate *expression* until it is truthy; return its value (None if it never was)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                v = self.evaluate(expression)
            except ProtocolError:  # the page is loading
                v = None
            if v or time.monotonic() > deadline:
                return v
            time.sleep(0.1)

    def errors(self) -> list[str]:
        """The page's uncaught exceptions and its console and browser errors (CSP violations among them)."""
        out = []
        with self._cond:
            for e in self.events:
                if e.get("method") == "Runtime.exceptionThrown":
                    out.append(json.dumps(e["params"]["exceptionDetails"])[:500])
                elif e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                    out.append(e["params"]["entry"]["text"])
        return out

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (ProtocolError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        self._reader.join(5)
        os.close(self._out_r)
        shutil.rmtree(self.profile, ignore_errors=True)
