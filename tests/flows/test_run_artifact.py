"""The run's Prefect artifact (flows/run/artifacts.py): the saving, the chart, short tables, the placement, the JSON read back."""

from __future__ import annotations

import base64
import json
import re
from datetime import timedelta

from flows.run.artifacts import report_from_markdown, report_markdown
from tests.flows.test_run_chart import NOMINAL, deferred_report


def placed_report() -> dict:
    """A fleet run: placed on a site, queued behind another run, moved up when its GPUs came free early."""
    report = deferred_report()
    start = NOMINAL + timedelta(hours=2)
    report["extra"].update({
        "site": "gb", "gpu_limit": "gridshift-gpus-gb", "gpus": [0, 1],
        "gpus_asked_at": start.isoformat(), "gpus_acquired_at": (start + timedelta(seconds=40)).isoformat(),
        "placement": {"site": "gb", "start": (start + timedelta(minutes=30)).isoformat(),
                      "finish": (start + timedelta(hours=3)).isoformat(), "gpus": 2, "queued": True,
                      "placed_at": NOMINAL.isoformat(), "carbon_g": 310.5,
                      "moved_up_from": (start + timedelta(minutes=30)).isoformat(),
                      "reasons": ["gb: 18 % less carbon than de over the window (forecast, modelled) " * 3]}})
    return report


def test_the_artifact_says_what_was_saved_and_shows_the_chart() -> None:
    markdown = report_markdown(deferred_report())
    assert "**Saving**: saved **260.4 g CO2 (46.5 %)** against the baseline, the nominal start (2026-03-02 01:00 UTC)" in markdown
    image = re.search(r"!\[chart of run [^]]*\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", markdown)
    assert image is not None and base64.b64decode(image.group(1)).decode().startswith("<svg")
    assert "| nominal start | 2026-03-02 01:00:00 UTC | the cron time under a deployment |" in markdown
    assert "| baseline | 560.0000 g | modelled" in markdown and "| start | 2026-03-02 03:00:00 UTC | deferred 2 h 00 min" in markdown
    assert "_What is measured and what is modelled_: run: measured energy" in markdown


def test_no_table_is_wider_than_its_short_cells() -> None:
    """Long text (reasons, settings, placement reasons) goes into lists, which wrap; table rows stay short."""
    report = placed_report()
    report["modes"][0]["settings"] = "power limit 700 W (set by gridshift, read back from the GPU); " * 4
    rows = [line for line in report_markdown(report).splitlines() if line.startswith("|")]
    assert rows and max(len(r) for r in rows) < 120, max(rows, key=len)


def test_the_placement_is_a_table() -> None:
    markdown = report_markdown(placed_report())
    assert "## Placement" in markdown
    for row in ("| site | gb |", "| nominal start | 2026-03-02 01:00:00 UTC | the cron time under a deployment |",
                "| planned start | 2026-03-02 03:30:00 UTC | placed at 2026-03-02 01:00:00 UTC |",
                "| moved up from | 2026-03-02 03:30:00 UTC |", "| queued | yes | behind runs booked on the same GPUs |",
                "| GPUs held | 2026-03-02 03:00:40 UTC | GPU(s) [0, 1] |", "| planned carbon | 310.5 g | modelled at placement |"):
        assert row in markdown, row
    assert "- gb: 18 % less carbon" in markdown


def test_the_report_comes_back_from_the_artifact_as_recorded() -> None:
    report = placed_report()
    report["decision_reason"] = "a --> b <i>not a tag</i>"  # nothing in a report can end its comment
    markdown = report_markdown(report)
    assert report_from_markdown(markdown) == report
    assert "--> b" not in markdown.split("<!-- gridshift report json: ")[1]
    old = f"# run\n\n<!-- gridshift report -->\n```json\n{json.dumps(report)}\n```"  # artifacts of earlier versions
    assert report_from_markdown(old) == report
    assert report_from_markdown("<!-- gridshift report json: [1] -->") is None
