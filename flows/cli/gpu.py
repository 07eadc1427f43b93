"""``gridshift gpu status [--json]`` and ``gridshift gpu restore``.

Both talk to NVML only (no Prefect, no pydantic), so they run on a bare GPU node. ``status`` reads
only; ``restore`` replays the journal of settings left behind by killed gridshift processes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from flows.cli import app
from flows.cli._errors import EXIT_ENV, fail

gpu_app = typer.Typer(help="Inspect NVIDIA GPUs and restore settings left by killed runs.", no_args_is_help=True)
app.add_typer(gpu_app, name="gpu")


def _clock_summary(clocks_mhz: list[int]) -> str:
    if not clocks_mhz:
        return "none listed"
    ordered = sorted(clocks_mhz)
    steps = {b - a for a, b in zip(ordered, ordered[1:])}
    step = f", {steps.pop()} MHz steps" if len(steps) == 1 else ""
    return f"{ordered[0]}-{ordered[-1]} MHz{step} ({len(ordered)} values)"


def _fmt_w(value: Any) -> str:
    return f"{value:.0f} W" if isinstance(value, (int, float)) else "n/a"


def _human(status: dict[str, Any]) -> str:
    lines = [f"NVIDIA driver {status['driver_version'] or 'unknown'}"]
    for d in status["devices"]:
        mig = f" MIG {d['mig_uuid']}" if d["mig_uuid"] else ""
        lines.append(f"GPU {d['visible_index']} (NVML {d['index']})  {d['name']}  {d['uuid']}{mig}")
        rng = d["power_limit_range_w"]
        rng_text = f"{rng[0]:.0f}-{rng[1]:.0f} W" if rng else "n/a"
        lines.append(f"  power     limit {_fmt_w(d['power_limit_w'])} (default {_fmt_w(d['default_power_limit_w'])}, "
                     f"range {rng_text}), drawing {_fmt_w(d['power_draw_w'])}")
        lines.append(f"  clocks    SM {d['sm_clock_mhz'] or 'n/a'} MHz (max {d['max_sm_clock_mhz'] or 'n/a'}), "
                     f"memory {d['mem_clock_mhz'] or 'n/a'} MHz")
        for mem, sm in d["supported_clocks_mhz"].items():
            lines.append(f"  supported memory {mem} MHz: SM {_clock_summary(sm)}")
        energy = d["energy_counter_j"]
        lines.append(f"  energy    counter {energy / 1000:.1f} kJ since driver load" if energy is not None
                     else "  energy    counter not supported")
    perms = status["permissions"]
    lines.append(f"control    {'permitted' if perms['can_control'] else 'NOT permitted (measure-only)'}: {perms['note']}")
    entries = status["journal"]["entries"]
    if not entries:
        lines.append(f"journal    empty ({status['journal']['directory']})")
    for e in entries:
        state = "owner running" if e["owner_alive"] else "owner gone: run `gridshift gpu restore`"
        lines.append(f"journal    GPU {e['index']} {e['uuid']}: prior power limit "
                     f"{e['prior']['power_limit_mw'] / 1000:.0f} W, touched {', '.join(e['touched']) or 'nothing yet'} "
                     f"(pid {e['owner']['pid']}, {state})")
    return "\n".join(lines)


@gpu_app.command("status")
def status(
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (full clock tables).")] = False,
) -> None:
    """Devices, clocks, power limits, permissions and journal state. Changes nothing."""
    from backends.errors import BackendError
    from backends.nvidia import NvidiaBackend

    backend = NvidiaBackend(recover=False, per_rank=False)
    try:
        report = backend.status()
    except BackendError as exc:
        raise fail(exc) from None
    finally:
        backend.close()
    typer.echo(json.dumps(report, sort_keys=True) if json_out else _human(report))


@gpu_app.command("restore")
def restore() -> None:
    """Put back the settings journalled by gridshift processes that died without restoring."""
    from backends.errors import BackendError
    from backends.journal import Journal
    from backends.nvidia import NvidiaBackend

    import warnings

    from backends.journal import JournalWarning

    warnings.simplefilter("ignore", JournalWarning)  # each unreadable file gets its own line below
    journal = Journal()
    try:
        entries, unreadable = journal.scan()
    except BackendError as exc:
        raise fail(exc) from None
    for path, reason in unreadable:
        # kept on disk for a person to inspect: gridshift cannot know what it would have restored
        typer.echo(f"gridshift: warning: {reason}; restore that GPU by hand (the file is kept)", err=True)
    if not entries:
        if unreadable:
            raise typer.Exit(EXIT_ENV)
        typer.echo(f"nothing to restore (journal {journal.directory} is empty)")
        return
    backend = NvidiaBackend(journal=journal, recover=False, per_rank=False, env={})
    try:
        lines = backend.recover_stale()
    except BackendError as exc:
        raise fail(exc) from None
    finally:
        backend.close()
    for line in lines:
        typer.echo(line)
    left = [e for e in journal.entries()]
    if left:
        raise fail(f"{len(left)} GPU(s) still journalled (owner still running, or restore failed: see above)", EXIT_ENV)
    if unreadable:
        raise fail(f"restored what could be read; {len(unreadable)} unreadable journal file(s) need a person (see above)",
                   EXIT_ENV)
