"""RunReport -> Prefect markdown artifact; every figure says measured or modelled.

Each run's artifact has a stable key, ``gridshift-run-<run id>`` (a retried record replaces its own
version, never adds a run), and ends with the whole report as a JSON block, so
:func:`report_from_markdown` (and ``gridshift runs --from prefect``) can read every node's runs back
from the Prefect API.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["report_markdown", "artifact_key", "report_from_markdown", "RUN_ARTIFACT_PREFIX"]

RUN_ARTIFACT_PREFIX = "gridshift-run-"
_JSON_OPEN = "<!-- gridshift report -->\n```json\n"


def artifact_key(run_id: str) -> str:
    """The run's artifact key (Prefect allows lowercase letters, digits and dashes only)."""
    cleaned = "".join(c if c.isalnum() else "-" for c in run_id.lower()).strip("-")
    return f"{RUN_ARTIFACT_PREFIX}{cleaned or 'unnamed'}"


def report_from_markdown(markdown: str) -> dict[str, Any] | None:
    """The report a run artifact carries, or None for an artifact without one."""
    start = markdown.rfind(_JSON_OPEN)
    if start < 0:
        return None
    body = markdown[start + len(_JSON_OPEN):]
    end = body.rfind("```")
    try:
        report = json.loads(body[:end] if end >= 0 else body)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def report_markdown(report: dict[str, Any]) -> str:
    label = report["energy_label"]
    lines = [
        f"# gridshift run `{report['run_id']}` ({report['status']})",
        "",
        f"**Job** {report['job']} · **policy** `{report['policy']}` · **backend** {report['backend']} ({label})",
        "",
        f"**Decision**: {report['decision_reason']}",
        "",
        "| figure | value | kind |",
        "|---|---|---|",
        f"| energy | {report['energy_j']:.1f} J | {label} |",
        f"| duration | {report['duration_s']:.2f} s | measured |",
        f"| carbon | {report['carbon_g']:.4f} g | {label} energy x {report['intensity_kind']} intensity |",
        f"| intensity | {report['intensity_g_per_kwh'] or 0:.0f} gCO2/kWh | from {report['intensity_source']} |",
        f"| deferred | {report['deferred_s']:.0f} s | |",
        "",
        "| mode | start (UTC) | end (UTC) | settings | energy J | carbon g | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in report["modes"]:
        lines.append(
            f"| {m['mode']} | {m['start'][11:19]} | {m['end'][11:19]} | {m['settings']} | {m['energy_j']:.1f} | "
            f"{m['carbon_g']:.4f} | {m['reason']} |"
        )
    if report.get("warnings"):
        lines += ["", "**Warnings**", *[f"- {w}" for w in report["warnings"]]]
    if report.get("error"):
        lines += ["", f"**Error**: {report['error']}"]
    extra = report.get("extra") or {}
    if "site" in extra:
        lines += ["", f"**Site** {extra['site']} · GPUs {extra.get('gpus')} (slots of `{extra.get('gpu_limit')}`)"]
    lines += ["", "Report (machine-readable):", "", _JSON_OPEN + json.dumps(report, sort_keys=True) + "\n```"]
    return "\n".join(lines)
