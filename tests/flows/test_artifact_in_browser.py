"""The run's artifact in the Prefect UI, in a real headless Chromium: the chart is shown, nothing is cut off at 1400 px.

A real `prefect server start` with its UI (both of its UIs: the classic one at / and the new one at
/v2), the artifact written by the product's own :func:`flows.run.artifacts.report_markdown`, and a
screenshot of each artifact page. ``GRIDSHIFT_SCREENSHOT_DIR`` keeps the screenshots for a person to look at.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from flows.report.chart import MODE_COLOURS
from flows.run.artifacts import artifact_key, report_markdown
from tests.flows.browser import Browser
from tests.flows.local_server import LocalPrefectServer
from tests.flows.test_run_artifact import placed_report

#: the page's state once the chart image has loaded: its size, the page's width, and anything wider than the window
_SHOWN = """
const img = [...document.querySelectorAll('img')].find(i => i.src.startsWith('data:image/svg+xml'));
if (!img || !img.complete || img.naturalWidth === 0) return null;
const box = img.getBoundingClientRect();
const root = img.closest('article') || document.body;
const wide = [...root.querySelectorAll('*')].filter(e => !e.closest('pre, code, details'))
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
               || (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible'))
  .map(e => e.tagName + ': ' + (e.textContent || '').slice(0, 60));
return {width: box.width, height: box.height, right: box.right, natural: img.naturalWidth,
        page: document.documentElement.scrollWidth, window: window.innerWidth, wide: wide, text: root.innerText};
"""


def _share_of(colour: str, image: object) -> float:
    """The share of the screenshot's pixels in ``colour`` (give or take the browser's scaling)."""
    import numpy as np

    want = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    pixels = np.asarray(image.convert("RGB"), dtype=int).reshape(-1, 3)  # type: ignore[attr-defined]
    return float(np.mean(np.all(np.abs(pixels - want) < 12, axis=1)))


@pytest.mark.slow
@pytest.mark.timeout(600)  # a server start and two page loads on a loaded 2-core machine: a hang guard
def test_the_prefect_ui_shows_the_runs_chart_and_cuts_nothing_off(tmp_path: Path) -> None:
    from PIL import Image

    report = placed_report()  # a fleet run: the placement table and its long reasons too
    report["modes"][0]["settings"] = "power limit 700 W (set by gridshift, read back from the GPU); " * 4
    browser = Browser(tmp_path / "chromium-profile")  # first: skips (fails in CI) without Chromium, before the server
    server = LocalPrefectServer(tmp_path, ui=True)
    try:
        server.start()
        created = httpx.post(f"{server.url}/artifacts/", timeout=60,
                             json={"key": artifact_key(report["run_id"]), "type": "markdown",
                                   "data": report_markdown(report), "description": "browser test"})
        created.raise_for_status()
        artifact_id = created.json()["id"]
        base = server.url.removesuffix("/api")
        for ui in ("", "/v2"):
            browser.go(f"{base}{ui}/artifacts/artifact/{artifact_id}")
            shown = browser.wait_for(_SHOWN)
            shot = browser.screenshot(tmp_path / f"artifact{ui.replace('/', '-') or '-v1'}.png")
            if os.environ.get("GRIDSHIFT_SCREENSHOT_DIR"):
                shutil.copy(shot, Path(os.environ["GRIDSHIFT_SCREENSHOT_DIR"]) / shot.name)
            assert shown["natural"] >= 400 and shown["width"] >= 400 and shown["height"] >= 180, (ui, shown)
            assert shown["right"] <= shown["window"] and shown["page"] <= shown["window"], (ui, shown)
            assert shown["wide"] == [], (ui, shown["wide"])
            for words in ("Saving", "saved", "nominal start (2026-03-02 01:00 UTC) in speed mode", "baseline",
                          "Placement", "moved up from", "queued"):
                assert words in shown["text"], (ui, words)
            with Image.open(shot) as image:  # the chart is drawn on the page, not only loaded: its mode colours
                assert _share_of(MODE_COLOURS["speed"], image) > 0.0004, ui
                assert _share_of(MODE_COLOURS["efficiency"], image) > 0.0004, ui
    finally:
        browser.close()
        server.stop()
