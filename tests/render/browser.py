"""Headless Chromium driven over the DevTools protocol: load a page, collect every console
error and uncaught exception, evaluate DOM checks, take a screenshot.

Debian's chromium (``apt-get install chromium``; `.ci/run` installs it). Tests skip when it is
absent, unless ``TRACECOMM_REQUIRE_BROWSER=1`` (set by `.ci/run`) turns that into a failure.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
# Flags for a machine with a closed network (no background connections) running as root.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    "--remote-debugging-port=0",
)


def chromium_or_skip() -> str:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("TRACECOMM_REQUIRE_BROWSER"):
        pytest.fail("no chromium on PATH, and TRACECOMM_REQUIRE_BROWSER is set")
    pytest.skip("no chromium on PATH (apt-get install chromium)")


@dataclass
class PageLoad:
    console_errors: list[str] = field(default_factory=list)
    network_requests: list[str] = field(default_factory=list)


class Page:
    """One tab; every method waits for its answer."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self._ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)
        self.load = PageLoad()

    def close(self) -> None:
        self._ws.close()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = params.get("args", [])
            self.load.console_errors.append(
                " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            )
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            self.load.console_errors.append(f"uncaught: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.load.console_errors.append(f"log: {params['entry'].get('text')}")
        elif method == "Network.requestWillBeSent":
            self.load.network_requests.append(params.get("request", {}).get("url", ""))

    def open(self, url: str, ready: str = "true", timeout: float = 20.0) -> PageLoad:
        """Navigate, wait until ``ready`` (a JS expression) is true; collect errors meanwhile."""
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(f"document.readyState === 'complete' && ({ready})") is True:
                break
            time.sleep(0.1)
        else:
            raise TimeoutError(f"{url}: not ready after {timeout} s ({ready})")
        self.evaluate("new Promise(r => setTimeout(r, 200))")  # late errors, if any
        return self.load

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path, width: int = 1280) -> Path:
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextmanager
def chromium_page() -> Iterator[Page]:
    binary = chromium_or_skip()
    # chromium's helper processes may still write the profile as it shuts down
    with tempfile.TemporaryDirectory(
        prefix="tracecomm-chromium-", ignore_cleanup_errors=True
    ) as profile:
        # chromium leaves its singleton socket folders in TMPDIR: keep them in the profile
        scratch = Path(profile) / "tmp"
        scratch.mkdir()
        proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}/data", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopped whole below
            env={**os.environ, "TMPDIR": str(scratch)},
        )
        try:
            port = _devtools_port(Path(profile) / "data", proc)
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
            page_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            page = Page(page_url)
            try:
                yield page
            finally:
                page.close()
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before DevTools started")
        if marker.exists():
            lines = marker.read_text().split()
            if lines:
                return int(lines[0])
        time.sleep(0.05)
    raise TimeoutError("chromium's DevTools port did not appear")
