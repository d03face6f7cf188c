"""One headless Chromium for the browser tests, driven over the DevTools protocol.

Standard library only: Chromium is started with ``--remote-debugging-pipe`` and reads
protocol messages (JSON, each ended by a NUL byte) from file descriptor 3 and writes its
answers to file descriptor 4. One browser serves every page of a test module, so loading
all the decks costs seconds, not a browser start per deck.

    with Chromium(binary) as browser:
        page = browser.new_page(1280, 720)
        page.goto("file:///.../04_scaling.slides.html")
        report = page.evaluate("window.kvSlideFit()")
        png = page.screenshot()
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    # decks are opened from files, as a lecturer opens them from a USB stick; fonts and
    # scripts next to them must load
    "--allow-file-access-from-files",
]


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        if path := shutil.which(name):
            return path
    return None


class ProtocolError(RuntimeError):
    pass


class Chromium:
    """A headless Chromium and its DevTools pipe; a context manager that stops it."""

    def __init__(self, binary: str, timeout: float = 60.0):
        self.binary, self.timeout = binary, timeout
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict] = []

    # -- process -------------------------------------------------------------------------
    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="kv-chromium-")
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()
        # the child's ends, moved to fds >= 10 (close-on-exec), out of the way of 3 and 4
        child_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_child_r)
        os.close(from_child_w)

        def wire():  # in the child, before exec: fd 3 reads commands, fd 4 writes answers
            os.dup2(child_r, 3)  # dup2 leaves 3 and 4 inheritable; everything else of ours
            os.dup2(child_w, 4)  # is close-on-exec (PEP 446)

        cmd = [self.binary, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={self._profile}"]
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=False,  # keep the 3 and 4 made in wire(); nothing else is inheritable
                preexec_fn=wire,
            )
        finally:
            os.close(child_r)
            os.close(child_w)
        self.version = self.send("Browser.getVersion")["product"]
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (ProtocolError, OSError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- protocol ------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise ProtocolError(f"Chromium closed the pipe (exit {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(
        self,
        method: str,
        params: dict | None = None,
        *,
        session: str | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Send one command and wait for its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise ProtocolError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            if "method" in answer:
                self._events.append(answer)

    def wait_event(self, method: str, *, session: str | None, timeout: float | None = None):
        """Wait for an event (or take it if it already arrived)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, ev in enumerate(self._events):
                if ev["method"] == method and ev.get("sessionId") == session:
                    return self._events.pop(i)
            message = self._read_message(deadline)
            if "method" in message:  # not a late answer to a command that timed out
                self._events.append(message)

    def new_page(self, width: int, height: int) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page


class Page:
    """One tab: navigate, evaluate JavaScript, take a screenshot."""

    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, params: dict | None = None, timeout: float | None = None):
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def goto(self, url: str, timeout: float | None = None) -> None:
        self.browser._events = [
            e for e in self.browser._events if e.get("sessionId") != self.session
        ]
        result = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if result.get("errorText"):
            raise ProtocolError(f"cannot open {url}: {result['errorText']}")
        self.browser.wait_event("Page.loadEventFired", session=self.session, timeout=timeout)

    def evaluate(self, expression: str, timeout: float | None = None):
        """The value of a JavaScript expression (a promise is awaited), as JSON data."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise ProtocolError(f"JavaScript error in {expression!r}: {text}")
        return result["result"].get("value")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])
