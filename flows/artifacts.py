"""RunReport -> Prefect markdown artifact; every figure says measured or modelled."""

from __future__ import annotations

from typing import Any

__all__ = ["report_markdown", "artifact_key"]


def artifact_key(job: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    cleaned = "".join(c if c.isalnum() else "-" for c in job.lower()).strip("-")
    return f"gridshift-{cleaned or 'run'}"


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
    return "\n".join(lines)
