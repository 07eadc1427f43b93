"""Headless Chromium from Debian's packages, driven through ChromeDriver's WebDriver API with httpx.

No browser library: the W3C WebDriver protocol is a few JSON requests (new session, go to a URL, run
a script, take a screenshot). Missing Chromium or ChromeDriver skips the test with the reason, and
FAILS it under ``CI=true`` (``.ci/run`` installs both).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.flows.local_server import free_port, unavailable

CHROMIUM = os.environ.get("GRIDSHIFT_TEST_CHROMIUM", "/usr/bin/chromium")
#: what the machine's own notes start Chromium with: no sandbox as root, no network of its own
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")


class Browser:
    """One Chromium session at a fixed window size; ``close()`` ends it and its driver."""

    def __init__(self, profile: Path, *, width: int = 1400, height: int = 2000) -> None:
        driver = shutil.which("chromedriver")
        if not Path(CHROMIUM).is_file() or driver is None:
            unavailable("Chromium and ChromeDriver are not installed (apt-get install chromium chromium-driver)")
        assert driver is not None
        self.port = free_port()
        self._driver = subprocess.Popen([driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120)
        self._wait_for_driver()
        options = {"binary": CHROMIUM, "args": [*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"]}
        answer = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}})
        self.session = f"/session/{answer['sessionId']}"

    def _wait_for_driver(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self._http.get("/status").json()["value"]["ready"]:
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.2)  # polling a subprocess's readiness, not timing the code under test
        self.close()
        unavailable("ChromeDriver did not answer within 60 s")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=body)
        value = response.json().get("value")
        if response.status_code >= 400:
            raise AssertionError(f"WebDriver {method} {path}: {value}")
        return value

    def go(self, url: str) -> None:
        self._call("POST", f"{self.session}/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """The value of a script's ``return`` in the page."""
        return self._call("POST", f"{self.session}/execute/sync", {"script": script, "args": list(args)})

    def wait_for(self, script: str, timeout_s: float = 90.0) -> Any:
        """Run ``script`` until it returns something truthy (a page that fetches and renders takes a while)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.run(script)
            if value:
                return value
            time.sleep(0.5)  # waiting for the page to render, not timing it
        pytest.fail(f"the page did not show what was waited for within {timeout_s:.0f} s: {script[:120]}")

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self._call("GET", f"{self.session}/screenshot")))
        return path

    def close(self) -> None:
        try:
            if hasattr(self, "session"):
                self._http.request("DELETE", self.session)
        except httpx.HTTPError:
            pass
        self._http.close()
        self._driver.terminate()
        try:
            self._driver.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._driver.kill()
