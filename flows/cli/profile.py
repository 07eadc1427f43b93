"""``gridshift profile``: capture kernel profiles, convert torch.profiler traces, show them, plan clocks.

    gridshift profile run --out PROFILE.json -- python train.py     # the script calls capture_from_env
    gridshift profile convert TRACE.json --out PROFILE.json --gpu-model "NVIDIA H200"
    gridshift profile show PROFILE.json
    gridshift profile plan PROFILE.json --epsilon 0.02 --tau-sw-ms 5 --out PLAN.json [--json]

Planning never touches the GPU: every figure it prints is modelled.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Annotated, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_ENV, EXIT_FAILED, EXIT_INPUT, fail

profile_app = typer.Typer(help="Kernel profiles and DVFS clock plans (modelled).", no_args_is_help=True)
app.add_typer(profile_app, name="profile")

#: the environment variable a profiled script reads to know where to save its profile
PROFILE_OUT_ENV = "GRIDSHIFT_PROFILE_OUT"
#: set only with --sweep-clocks --allow-clock-changes: the clocks the script may sweep
SWEEP_ENV = "GRIDSHIFT_SWEEP_CLOCKS"


@profile_app.command("run", context_settings={"allow_extra_args": True})
def run_cmd(
    command: Annotated[list[str], typer.Argument(help="Training command after `--`.")],
    out: Annotated[Path, typer.Option(help="Where the command must write the profile.")] = Path("profile.json"),
    sweep_clocks: Annotated[Optional[str], typer.Option(
        "--sweep-clocks", help="Comma-separated SM clocks (MHz) to sweep: CHANGES GPU CLOCKS; needs --allow-clock-changes.")] = None,
    allow_clock_changes: Annotated[bool, typer.Option(
        "--allow-clock-changes", help="Permit --sweep-clocks on hardware you own. Never on a lent or shared GPU.")] = False,
) -> None:
    """Run CMD with GRIDSHIFT_PROFILE_OUT=OUT; the script captures its step with plans.dvfs.profiles.capture.

    With --sweep-clocks (and --allow-clock-changes) the script also gets GRIDSHIFT_SWEEP_CLOCKS and is expected to call plans.dvfs.profiles.capture.sweep_clocks with its backend's clock control.
    """  # noqa: E501 - one line per paragraph: the help renderer wraps it to the terminal
    from flows.job.process import resolve_argv
    from plans.dvfs.errors import ProfileError
    from plans.dvfs.profiles.kernel_profile import load_profile

    env = dict(os.environ, **{PROFILE_OUT_ENV: str(out.resolve())})
    if sweep_clocks is not None:
        if not allow_clock_changes:
            raise fail("--sweep-clocks changes GPU clocks; add --allow-clock-changes, and only on hardware you own "
                       "(never on a lent or shared GPU)", EXIT_INPUT)
        try:
            clocks = [int(c) for c in sweep_clocks.split(",") if c.strip()]
        except ValueError:
            raise fail(f"--sweep-clocks must be comma-separated MHz values, got {sweep_clocks!r}", EXIT_INPUT) from None
        if not clocks:
            raise fail("--sweep-clocks needs at least one clock", EXIT_INPUT)
        env[SWEEP_ENV] = ",".join(str(c) for c in clocks)
    try:
        rc = subprocess.call(resolve_argv(command), env=env)
    except OSError as exc:
        raise fail(f"cannot start {command[0]!r}: {exc}", EXIT_ENV) from None
    if rc != 0:
        raise fail(f"the profiled command exited with code {rc}", EXIT_FAILED)
    try:
        prof = load_profile(out)
    except ProfileError as exc:
        raise fail(f"{exc} (the command must save a profile to ${PROFILE_OUT_ENV})", EXIT_FAILED) from None
    typer.echo(f"{out}: {len(prof.kernels)} kernels over {len(prof.iterations)} iterations ({prof.meta.source})")


@profile_app.command("convert")
def convert_cmd(
    trace: Annotated[Path, typer.Argument(help="torch.profiler Chrome trace JSON.")],
    out: Annotated[Path, typer.Option(help="Profile file to write.")],
    gpu_model: Annotated[str, typer.Option(help="GPU model name, e.g. 'NVIDIA H200'.")],
    workload: Annotated[str, typer.Option(help="Description of the profiled step.")] = "training step",
    driver: Annotated[str, typer.Option(help="NVIDIA driver version.")] = "",
    sm_clocks: Annotated[str, typer.Option(help="Supported SM clocks: 'lo:hi:step' MHz.")] = "345:1980:15",
    default_clock_mhz: Annotated[int, typer.Option(help="Clock the trace ran at (f0).")] = 1980,
) -> None:
    """Convert a torch.profiler trace (iterations wrapped in gridshift.iteration.<k>) to a profile."""
    from plans.dvfs.profiles.capture import profile_from_trace
    from plans.dvfs.errors import ProfileError
    from plans.dvfs.profiles.kernel_profile import ProfileMeta, save_profile, workload_fingerprint

    try:
        lo, hi, step = (int(x) for x in sm_clocks.split(":"))
        clocks = tuple(range(lo, hi + 1, step))
    except ValueError:
        raise fail(f"--sm-clocks must look like 345:1980:15, got {sm_clocks!r}", EXIT_INPUT) from None
    try:
        raw = json.loads(trace.read_text())
    except FileNotFoundError:
        raise fail(f"{trace}: no such trace file", EXIT_INPUT) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise fail(f"{trace}: cannot read trace: {exc}", EXIT_INPUT) from None
    try:
        meta = ProfileMeta(gpu_model=gpu_model, driver=driver, workload=workload,
                           workload_fingerprint=workload_fingerprint(workload=workload, trace=trace.name),
                           source="measured", sm_clocks_mhz=clocks, default_sm_clock_mhz=default_clock_mhz)
        prof = profile_from_trace(raw, meta=meta)
    except (ProfileError, ValueError) as exc:
        raise fail(f"{trace}: {exc}".splitlines()[0], EXIT_INPUT) from None
    save_profile(prof, out)
    typer.echo(f"{out}: {len(prof.kernels)} kernels over {len(prof.iterations)} iterations")


@profile_app.command("show")
def show_cmd(path: Annotated[Path, typer.Argument(help="Profile file.")]) -> None:
    """Summarise a profile: GPU, source, kernels, kernel time per phase."""
    from plans.dvfs.errors import ProfileError
    from plans.dvfs.profiles.kernel_profile import load_profile

    try:
        prof = load_profile(path)
    except ProfileError as exc:
        raise fail(exc, EXIT_INPUT) from None
    ks = prof.iteration_kernels()
    label = "SYNTHETIC" if prof.meta.source == "synthetic" else "measured"
    typer.echo(f"{path}: {prof.meta.gpu_model} ({label}), {len(ks)} kernels/iteration, "
               f"{sum(k.duration_us for k in ks) / 1000:.2f} ms kernel time")
    for ph in prof.phases():
        sel = [k for k in ks if k.phase == ph]
        typer.echo(f"  {ph or '(no phase)':40s} {len(sel):4d} kernels {sum(k.duration_us for k in sel) / 1000:8.3f} ms")


@profile_app.command("plan")
def plan_cmd(
    path: Annotated[Path, typer.Argument(help="Profile file.")],
    epsilon: Annotated[float, typer.Option(help="Allowed slowdown, e.g. 0.02 for 2%.")] = 0.02,
    tau_sw_ms: Annotated[float, typer.Option(help="Time lost per clock switch, ms.")] = 5.0,
    d_min_ms: Annotated[Optional[float], typer.Option(help="Minimum segment duration, ms (default 10 x tau).")] = None,
    layers: Annotated[int, typer.Option(help="Repeat the profiled layer this many times.")] = 1,
    boundaries: Annotated[str, typer.Option(help="kernel, phase or pass.")] = "phase",
    out: Annotated[Optional[Path], typer.Option(help="Write the clock plan file here.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Plan clocks for a profile (modelled) and optionally write a plan file."""
    from plans.dvfs.errors import DvfsError
    from plans.dvfs.model import build_tables
    from plans.dvfs.plan_file import PlanParameters, plan_from_result, save_plan
    from plans.dvfs.planner import plan_dvfs
    from plans.dvfs.profiles.kernel_profile import load_profile

    if layers < 1 or epsilon < 0 or tau_sw_ms < 0:
        raise fail("--layers must be >= 1, --epsilon and --tau-sw-ms >= 0", EXIT_INPUT)
    try:
        prof = load_profile(path)
        tables = build_tables(prof)
        tau = tau_sw_ms / 1000
        dmin = None if d_min_ms is None else d_min_ms / 1000
        res = plan_dvfs(tables.stack_layers(layers) if layers > 1 else tables, epsilon=epsilon, tau_sw_s=tau,
                        d_min_s=dmin, boundaries=boundaries)  # type: ignore[arg-type]
        if out is not None:
            if layers > 1:
                raise fail("--out needs --layers 1: plan files index the profiled iteration's kernels", EXIT_INPUT)
            params = PlanParameters(epsilon=epsilon, tau_sw_s=tau, eps_sw_j=tau * tables.idle_power_w,
                                    d_min_s=10 * tau if dmin is None else dmin,
                                    clock_floor_mhz=0.6 * float(tables.sm_clocks_mhz.max()), boundaries=boundaries,
                                    method=res.method)
            save_plan(plan_from_result(res, prof, tables, parameters=params), out)
    except DvfsError as exc:
        raise fail(exc, EXIT_INPUT) from None
    payload = {
        "profile": str(path), "source": prof.meta.source, "modelled": True, "epsilon": epsilon, "switch_latency_ms": tau_sw_ms,
        "energy_saving_pct": round(res.energy_saving_pct, 4), "slowdown_pct": round(res.slowdown_pct, 4),
        "switches": res.switches, "segments": len(res.segments), "static_clock_mhz": res.static_clock_mhz,
        "method": res.method, "status": res.status, "gap": res.gap, "plan": str(out) if out else None,
    }
    if json_out:
        typer.echo(json.dumps(payload))
        return
    clocks = res.static_clock_mhz or f"{len(res.segments)} segments"
    typer.echo(f"{path} ({prof.meta.source}): MODELLED {res.energy_saving_pct:.2f}% less energy, "
               f"{res.slowdown_pct:.2f}% slower, {res.switches} switches/iteration, clocks {clocks} "
               f"[{res.method}, gap <= {100 * res.gap:.3f}%]" + (f" -> {out}" if out else ""))
