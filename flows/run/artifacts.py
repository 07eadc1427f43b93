"""RunReport -> Prefect markdown artifact; every figure says measured or modelled.

Each run's artifact has a stable key, ``gridshift-run-<run id>`` (a retried record replaces its own
version, never adds a run), and carries the whole report as JSON in an HTML comment at its end, so
:func:`report_from_markdown` (and ``gridshift runs --from prefect``) can read every node's runs back
from the Prefect API. A comment, not a code block: the UI shows nothing of it (its lines, wider than
the page, were cut off), and the artifact's raw markdown still has it for a person who wants it.
"""

from __future__ import annotations

import json
from typing import Any

from flows.report.human import cost_text, start_words
from scheduler.saving import with_saving

__all__ = ["report_markdown", "artifact_key", "report_from_markdown", "RUN_ARTIFACT_PREFIX"]

RUN_ARTIFACT_PREFIX = "gridshift-run-"
_JSON_OPEN = "<!-- gridshift report -->\n```json\n"  # artifacts written before the report moved into a comment
_JSON_COMMENT = "<!-- gridshift report json: "
_COMMENT_END = " -->"


def artifact_key(run_id: str) -> str:
    """The run's artifact key (Prefect allows lowercase letters, digits and dashes only)."""
    cleaned = "".join(c if c.isalnum() else "-" for c in run_id.lower()).strip("-")
    return f"{RUN_ARTIFACT_PREFIX}{cleaned or 'unnamed'}"


def report_from_markdown(markdown: str) -> dict[str, Any] | None:
    """The report a run artifact carries, or None for an artifact without one."""
    start = markdown.rfind(_JSON_COMMENT)
    if start >= 0:
        body = markdown[start + len(_JSON_COMMENT):]
        return _json_object(body[:body.find(_COMMENT_END)] if _COMMENT_END in body else body)
    start = markdown.rfind(_JSON_OPEN)
    if start < 0:
        return None
    body = markdown[start + len(_JSON_OPEN):]
    end = body.rfind("```")
    return _json_object(body[:end] if end >= 0 else body)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        report = json.loads(text)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def report_markdown(report: dict[str, Any]) -> str:
    """The run as markdown for the Prefect UI: the decision, the saving, the chart (an SVG image), short
    tables (nothing wider than the page at 1400 px), the placement, and the report as JSON for machines."""
    recorded, report = report, with_saving(report)  # the JSON below is the report as recorded
    label = report["energy_label"]
    saving = report["saving"]
    lines = [
        f"# gridshift run `{report['run_id']}` ({report['status']})",
        "",
        f"**Job** {report['job']} · **policy** `{report['policy']}` · **backend** {report['backend']} ({label})",
        "",
        f"**Decision**: {report['decision_reason']}",
        "",
        f"**Saving**: {_saving_sentence(saving)}",
        "",
        *_chart(report),
        "| figure | value | kind |",
        "|---|---|---|",
        f"| energy | {report['energy_j']:.1f} J | {label} |",
        f"| carbon | {report['carbon_g']:.4f} g | energy x {report['intensity_kind']} intensity |",
    ]
    if saving.get("saved_g") is not None:
        lines += [f"| baseline | {saving['baseline_g']:.4f} g | modelled: the same work from the nominal start, "
                  f"{(report.get('extra') or {}).get('reference_mode', 'reference')} mode |",
                  f"| saving | {saving['saved_g']:.4f} g ({saving['saved_pct']:.1f} %) | against the baseline |"]
        lines += [f"| {name} part | {p['saving_g']:.4f} g ({p['pct']:.1f} %) | {_PART_WORDS[name]} |"
                  for name, p in (saving.get("parts") or {}).items() if p.get("pct") is not None]
    cost = (report.get("extra") or {}).get("cost")
    if cost:  # a policy with a price source: what the energy cost at the published prices of its hours
        lines.append(f"| cost | {cost_text(cost)} | {cost.get('label') or cost.get('error', '')} |")
    lines += [
        f"| duration | {report['duration_s']:.2f} s | measured |",
        f"| intensity | {report['intensity_g_per_kwh'] or 0:.0f} gCO2/kWh | {report['intensity_source']} |",
        *([] if (report.get("extra") or {}).get("placement") else  # a placed run's table has it, beside its planned start
          [f"| nominal start | {_when(report.get('nominal_start'))} | the cron time under a deployment |"]),
        f"| start | {str(report.get('started_at', ''))[:19].replace('T', ' ')} UTC | {start_words(report)} |",
        "",
        "## Modes",
        "",
        "| mode | start (UTC) | end (UTC) | energy J | carbon g | g/kWh |",
        "|---|---|---|---|---|---|",
    ]
    for m in report["modes"]:
        g = m.get("g_per_kwh")
        lines.append(f"| {m['mode']} | {m['start'][11:19]} | {m['end'][11:19]} | {m['energy_j']:.1f} | "
                     f"{m['carbon_g']:.4f} | {'-' if g is None else f'{g:.0f}'} |")
    lines.append("")
    # long text goes in lists, which wrap, not in table cells, which widen the table past the page
    lines += [f"- **{m['mode']}** from {m['start'][11:19]}: {(m['reason'] or 'no reason recorded').rstrip('.')}."
              + (f" Settings: {m['settings']}." if m.get("settings") else "") for m in report["modes"]]
    lines += _placement(report)
    if report.get("warnings"):
        lines += ["", "**Warnings**", *[f"- {w}" for w in report["warnings"]]]
    if report.get("error"):
        lines += ["", f"**Error**: {report['error']}"]
    if saving.get("label"):
        lines += ["", f"_What is measured and what is modelled_: {saving['label']}."]
    # "<" and ">" escaped: nothing in the report can end the comment ("-->") or open a tag
    machine = json.dumps(recorded, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")
    lines += ["", "_The whole report as JSON is in this artifact's raw markdown; `gridshift runs --from prefect --json` "
              "reads it._", "", _JSON_COMMENT + machine + _COMMENT_END]
    return "\n".join(lines)


_PART_WORDS = {"mode": "modelled: the baseline against these modes from the nominal start",
               "timing": "modelled: these modes from the nominal start against the run"}


def _saving_sentence(saving: dict[str, Any]) -> str:
    if saving.get("saved_g") is None:
        return f"unknown against {saving.get('baseline', 'the baseline')}: {saving.get('why', '')}"
    verb = "saved" if saving["saved_g"] >= 0 else "cost"
    return (f"{verb} **{abs(saving['saved_g']):.4g} g CO2 ({abs(saving['saved_pct']):.1f} %)** against the baseline, "
            f"{saving['baseline']} (modelled: {saving['baseline_g']:.4g} g)")


def _chart(report: dict[str, Any]) -> list[str]:
    """The chart as an image line (the UI shows a data: URI image; it drops inline SVG), or nothing."""
    from flows.report.chart import run_chart
    from flows.report.svg import chart_svg, svg_data_uri

    try:
        chart = run_chart(report)
    except (KeyError, TypeError, ValueError, ArithmeticError):  # a report without the times a chart needs (a crashed run's)
        return []
    return [f"![chart of run {report['run_id']}: intensity as planned and as measured, start, modes, deadline]"
            f"({svg_data_uri(chart_svg(chart))})", ""]


def _placement(report: dict[str, Any]) -> list[str]:
    """Where and when a fleet run was placed, whether it queued, and when it got its GPUs: a table, reasons as a list."""
    extra = report.get("extra") or {}
    placement = extra.get("placement") or {}
    if "site" not in extra and not placement:
        return []
    rows = [("site", f"{extra.get('site', placement.get('site', '-'))}", ""),
            ("nominal start", _when(report.get("nominal_start")), "the cron time under a deployment"),
            ("planned start", _when(placement.get("start")), f"placed at {_when(placement.get('placed_at'))}"
             if placement.get("placed_at") else ""),
            ("started", _when(report.get("started_at")), start_words(report))]
    if placement.get("moved_up_from"):
        rows.append(("moved up from", _when(placement["moved_up_from"]), "GPUs freed early by the run before"))
    rows.append(("queued", "yes" if placement.get("queued") else "no",
                 "behind runs booked on the same GPUs" if placement.get("queued") else ""))
    if extra.get("gpus_asked_at"):
        rows.append(("GPUs asked for", _when(extra["gpus_asked_at"]), f"slots of `{extra.get('gpu_limit', '')}`"))
    if extra.get("gpus_acquired_at"):
        rows.append(("GPUs held", _when(extra["gpus_acquired_at"]), f"GPU(s) {extra.get('gpus')}"))
    if placement.get("carbon_g") is not None:
        rows.append(("planned carbon", f"{placement['carbon_g']} g", "modelled at placement"))
    out = ["", "## Placement", "", "| | when / what | note |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    if placement.get("reasons"):
        out += ["", *[f"- {r}" for r in placement["reasons"]]]
    return out


def _when(iso: Any) -> str:
    return str(iso)[:19].replace("T", " ") + " UTC" if iso else "-"
