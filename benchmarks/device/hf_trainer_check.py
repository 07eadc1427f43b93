"""A real HF Trainer run under ``gridshift run`` on the GPU, read-only (issue 30's device check). Writes JSON.

    GRIDSHIFT_NVML_READ_ONLY=1 OUT=/tmp/out PYTHONPATH=. python3 benchmarks/device/hf_trainer_check.py [--cpu-smoke]

The job is ``examples/train_hf.py``: a GPT-2-style model built from a config (GPT-2 small by default:
12 layers, width 768, 512 tokens, bf16, gradient accumulation 2), random tokens, nothing downloaded;
gridshift's one line in it is ``plans.integrations.hf.GridshiftCallback``. The carbon source is a
local server playing the UK grid API (``tests/fakes/switchable_grid.py``); one local Prefect server
serves every run. Three parts:

1. overhead: the same script bare (``--no-gridshift``, not under gridshift) and under ``gridshift
   run`` (the callback, a clock plan in dry run, progress, the mode file), interleaved A B B A ...
   ``--reps`` times each (2: A B B A, which cancels a linear drift such as the GPU warming up); the
   jobs' own mean step time after ``--warmup`` steps (start-up is not counted). Target: < 1 % (the
   median of the per-pair ratios; their spread is reported). Each gridshift run also reports the
   time the callback spent in its own code per step on the training thread (its hooks and step
   calls, ``TrainingSession.busy_s``), measured in the job: the share of the step it explains; the
   rest of a difference is the Trainer's dispatch to the callback, the supervisor, or noise.
   ``--parts overhead`` alone takes about 4 minutes on an H100 (2 x 2 runs of 300 steps, ~45 s each).
2. mode change: threshold rules, the grid turns dirty when the job passes a quarter of its steps.
   Checks: both modes in the report; the batch size confirmed by the job (the Trainer keeps its
   DataLoader, and says so); the job's progress read by the run loop; the clock plan swapped at the
   mode change, with switches asked at every phase (a dry run: no clock is set).
3. pause and resume: the planner, a checkpointable job, a grid dirty for a minute while the job has
   half its work left and a deadline that forbids doing it all afterwards. Checks: a window ended by
   the pause (exit 0 after the checkpoint) and one by the job's end; the second starts at the step
   the first ended at, and the last step is the run's (no step lost).

Never changes a GPU setting: every process runs under ``GRIDSHIFT_NVML_READ_ONLY=1`` (the clock plans
are a dry run, the power limits are not applied) and the script prints the power limit, clocks and
persistence mode before and after. The plans are built for the GPU found (its name and supported
clocks, read through the backend). ``--cpu-smoke``: a tiny model on the CPU with the simulated
backend, to exercise the path (numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
OUT = Path(os.environ.get("OUT", "out"))
PHASES = ("forward", "backward", "optimizer")
TARGET_PCT = 1.0
GRIDSHIFT = [sys.executable, "-c", "import sys; from flows.cli import main; sys.argv[0] = 'gridshift'; main()"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _settings() -> str:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    return subprocess.run(["nvidia-smi", "--query-gpu=index,name,power.limit,clocks.sm,clocks.applications.graphics,"
                           "persistence_mode", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()


def _plans(work: Path, backend_name: str) -> tuple[str, Path, Path]:
    """Two plans of three distinct supported clocks each, for the GPU found (read-only)."""
    from backends.registry import create_backend
    from plans.dvfs.plan_file import ClockPlan, save_plan

    backend = create_backend(backend_name)
    try:
        caps = backend.capabilities()
    finally:
        backend.close()
    name = caps.devices[0].name if caps.devices else "unknown"
    clocks = sorted(set(caps.sm_clocks_mhz))
    hi, mid, lo = clocks[-1], clocks[len(clocks) * 3 // 4], clocks[len(clocks) // 2]

    def plan(phase_clocks: tuple[int, int, int], fp: str) -> Any:
        segs = [{"start_kernel": 10 * i, "start_phase": p, "phase_aligned": True, "sm_clock_mhz": c, "duration_s": 1e-3}
                for i, (p, c) in enumerate(zip(PHASES, phase_clocks))]
        return ClockPlan.model_validate({
            "gpu_model": name, "workload_fingerprint": fp, "profile_source": "synthetic", "provenance": "modelled",
            "n_kernels": 30, "segments": segs,
            "parameters": {"epsilon": 0.0, "tau_sw_s": 0.0, "eps_sw_j": 0.0, "d_min_s": 0.0, "clock_floor_mhz": 0.0,
                           "boundaries": "phase", "method": "handmade"},
            "prediction": {"energy_change_pct": 0.0, "time_change_pct": 0.0, "switches_per_iteration": 3,
                           "energy_j": 1.0, "reference_energy_j": 1.0, "time_s": 1.0, "reference_time_s": 1.0, "gap": 0.0}})

    return name, save_plan(plan((hi, mid, lo), "fast"), work / "fast.json"), save_plan(plan((mid, lo, hi), "slow"),
                                                                                     work / "slow.json")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrefectServer:
    """One ``prefect server start`` on loopback for every run of the check."""

    def __init__(self, home: Path) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}/api"
        self.env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": self.url,
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore"}
        port = self.url.rsplit(":", 1)[1].split("/")[0]
        self.proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                      "--port", port, "--no-ui", "--analytics-off"], env=self.env,
                                     stdout=open(home / "server.log", "wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        import httpx

        for _ in range(480):
            try:
                if httpx.get(f"{self.url}/health", timeout=2).json() is True:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the Prefect server did not start (log: {home / 'server.log'})")

    def stop(self) -> None:
        os.killpg(self.proc.pid, 15)
        self.proc.wait(timeout=30)


def _policy(path: Path, grid_url: str, argv: list[str], rules: dict[str, Any], job: dict[str, Any],
            backend: str, fast: Path, slow: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({
        "schema_version": 1,
        "carbon": {"provider": "ukgrid", "base_url": grid_url, "forecast_horizon_s": 3600},
        "modes": {"speed": {"power_limit_fraction": 1.0, "batch_size": 8, "clock_plan": str(fast)},
                  "efficiency": {"power_limit_fraction": 0.6, "batch_size": 4, "clock_plan": str(slow),
                                 "max_slowdown": 0.5}},
        "rules": rules,
        "job": {"name": "hf-trainer-check", "command": argv, "reports_progress": True, **job},
        "backend": {"name": backend},
    }))
    return path


def _gridshift(policy: Path, env: dict[str, str], on_line: Any = None, timeout_s: float = 900) -> tuple[dict[str, Any], list[str]]:
    """``gridshift run --json POLICY``: the report, and the lines of stderr (the job's output among them)."""
    proc = subprocess.Popen([*GRIDSHIFT, "run", "--json", str(policy)], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if on_line is not None:
                on_line(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=timeout_s)
    reader.join(10)
    try:
        return json.loads(out), lines
    except json.JSONDecodeError:
        raise RuntimeError(f"gridshift run exited {proc.returncode} without a report:\n" + "\n".join(lines[-40:])) from None


def _timing(lines: list[str]) -> dict[str, Any]:
    for line in reversed(lines):
        if line.lstrip().startswith('{"timing"'):
            return json.loads(line)["timing"]
    raise RuntimeError("the job printed no timing line:\n" + "\n".join(lines[-30:]))


def main() -> int:  # noqa: C901 - one script, three parts in order
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny model on the CPU, simulated backend (numbers meaningless)")
    ap.add_argument("--reps", type=int, default=2, help="overhead runs of each kind, interleaved A B B A")
    ap.add_argument("--steps", type=int, default=300, help="steps of each overhead run")
    ap.add_argument("--warmup", type=int, default=30, help="steps left out of the step time")
    ap.add_argument("--parts", default="overhead,mode,pause")
    args = ap.parse_args()
    if os.environ.get("GRIDSHIFT_NVML_READ_ONLY") != "1":
        log("refusing to run: set GRIDSHIFT_NVML_READ_ONLY=1 (clock plans must be a dry run, no limit applied)")
        return 2
    from tests.fakes.switchable_grid import SwitchableGrid

    smoke = args.cpu_smoke
    backend = "simulated" if smoke else "auto"
    model = (["--layers", "2", "--width", "64", "--heads", "2", "--seq-len", "32", "--vocab", "256",
              "--step-overhead-s", "0.05"] if smoke else
             ["--layers", "12", "--width", "768", "--heads", "12", "--seq-len", "512", "--vocab", "50257", "--bf16"])
    steps, warmup, reps = (40, 5, min(args.reps, 2)) if smoke else (args.steps, args.warmup, args.reps)
    mode_steps = 150 if smoke else steps  # the mode change needs the job training for a while after the flip
    work = Path(tempfile.mkdtemp(prefix="hf-trainer-check-"))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "GRIDSHIFT_NVML_READ_ONLY": "1", "GRIDSHIFT_HOME": str(work / "home"), "PYTHONUNBUFFERED": "1"}
    result: dict[str, Any] = {"script": "benchmarks/device/hf_trainer_check.py", "args": vars(args),
                              "settings_before": _settings(), "python": sys.version.split()[0]}
    gpu, fast, slow = _plans(work, backend)
    result["gpu"] = gpu
    import torch
    import transformers

    result["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    (work / "prefect").mkdir()
    server = PrefectServer(work / "prefect")
    env.update({k: v for k, v in server.env.items() if k.startswith("PREFECT_")})
    job = [sys.executable, str(REPO / "examples" / "train_hf.py"), *model, "--log-every", "10"]
    parts = set(args.parts.split(","))
    try:
        with SwitchableGrid(100.0) as grid:
            if "overhead" in parts:
                result["overhead"] = overhead(job, env, work, grid.url, fast, slow, backend, steps, warmup, reps)
            if "mode" in parts:
                result["mode_change"] = mode_change(job, env, work, grid, fast, slow, backend, mode_steps)
        if "pause" in parts:
            step_s = result.get("overhead", {}).get("step_s_bare") or (0.08 if smoke else 0.1)
            startup_s = result.get("overhead", {}).get("startup_s") or 20.0
            result["pause"] = pause(job, env, work, fast, slow, backend, step_s, startup_s, smoke)
    finally:
        server.stop()
        result["settings_after"] = _settings()
    result["measured"] = not smoke
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hf_trainer_check.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


def overhead(job: list[str], env: dict[str, str], work: Path, grid_url: str, fast: Path, slow: Path, backend: str,
             steps: int, warmup: int, reps: int) -> dict[str, Any]:
    """Part 1: bare vs under gridshift run, interleaved A B B A ..."""
    argv = [*job, "--max-steps", str(steps), "--timing", "--warmup-steps", str(warmup)]
    rules = {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300, "min_dwell_s": 0,
             "interval_s": 5}
    policy = _policy(work / "overhead.yaml", grid_url, argv, rules, {"expected_duration_s": 600}, backend, fast, slow)
    bare: list[float] = []
    under: list[float] = []
    own_us: list[float] = []
    walls: list[float] = []
    order = [k for i in range(reps) for k in (("bare", "gridshift") if i % 2 == 0 else ("gridshift", "bare"))]
    for kind in order:
        t0 = time.perf_counter()
        if kind == "bare":
            proc = subprocess.run([*argv, "--no-gridshift"], env=env, cwd=REPO, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError("bare run failed:\n" + (proc.stdout + proc.stderr)[-3000:])
            timing = _timing(proc.stdout.splitlines())
            walls.append(time.perf_counter() - t0)
            bare.append(timing["step_ms"])
        else:
            report, lines = _gridshift(policy, env)
            timing = _timing(lines)
            under.append(timing["step_ms"])
            own_us.append(timing["gridshift_us_per_step"])
        log(f"overhead {kind}: {timing['step_ms']:.2f} ms/step over {timing['steps']} steps"
            + (f", the callback's own code {timing['gridshift_us_per_step']:.0f} µs/step" if kind != "bare" else ""))
    pairs = [u / b - 1 for b, u in zip(bare, under)]
    step_bare = statistics.median(bare)
    return {"what": "mean step time after warmup, the job's own clock (GPU synchronised at both ends); "
                    "bare = the script without the callback, not under gridshift",
            "steps_timed": steps - warmup, "order": order, "step_ms_bare": bare, "step_ms_gridshift": under,
            "overhead_pct_median_of_pairs": 100 * statistics.median(pairs),
            "overhead_pct_pairs": [100 * p for p in pairs],
            "overhead_pct_of_medians": 100 * (statistics.median(under) / step_bare - 1),
            "spread_pct_bare": 100 * (max(bare) - min(bare)) / step_bare,
            "callback_us_per_step": own_us,
            "callback_pct_of_step": 100 * statistics.median(own_us) / 1000 / step_bare,
            "target_pct": TARGET_PCT, "meets_target": 100 * statistics.median(pairs) < TARGET_PCT,
            "step_s_bare": step_bare / 1000, "startup_s": max(statistics.median(walls) - steps * step_bare / 1000, 0.0)}


def mode_change(job: list[str], env: dict[str, str], work: Path, grid: Any, fast: Path, slow: Path, backend: str,
                steps: int) -> dict[str, Any]:
    """Part 2: a mode change mid-run (the grid turns dirty at a quarter of the steps)."""
    argv = [*job, "--max-steps", str(steps), "--mode-poll-s", "0.5"]
    rules = {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300, "min_dwell_s": 0,
             "interval_s": 2}
    policy = _policy(work / "mode.yaml", grid.url, argv, rules, {"expected_duration_s": 600}, backend, fast, slow)
    grid.g_per_kwh = 100.0
    flip_at = f"step {max(steps // 4 // 10 * 10, 10)}/"
    flipped: list[float] = []

    def on_line(line: str) -> None:
        if flip_at in line and not flipped:
            grid.g_per_kwh = 500.0
            flipped.append(time.time())

    report, lines = _gridshift(policy, env, on_line)
    result = report.get("extra", {}).get("job_result", {})
    spans = report["modes"]
    checks = {
        "exit_ok": report["status"] == "completed",
        "both_modes": [s["mode"] for s in spans] == ["speed", "efficiency"],
        "batch_size_confirmed": all(d["confirmed"] for s in spans for d in s["settings_detail"] if d["name"] == "batch_size"),
        "progress_read": (report.get("extra", {}).get("job_progress") or {}).get("reads", 0) > 0,
        "plan_swapped": [r["mode_seq"] for r in result.get("clock_plans", [])] == [0, 1],
        "every_phase_fired": all(all(r.get("phase_switches", {}).get(p, 0) > 0 for p in PHASES)
                                 for r in result.get("clock_plans", [])),
        "dry_run": all(r.get("dry_run") for r in result.get("clock_plans", [])),
        "steps": result.get("steps") == steps,
    }
    return {"checks": checks, "ok": all(checks.values()), "settings": [s["settings"] for s in spans],
            "clock_plans": result.get("clock_plans"), "batch_sizes": result.get("batch_sizes"),
            "job_progress": report.get("extra", {}).get("job_progress"), "energy_j": report["energy_j"],
            "backend": report["backend"], "measured": report["measured"]}


def pause(job: list[str], env: dict[str, str], work: Path, fast: Path, slow: Path, backend: str, step_s: float,
          startup_s: float, smoke: bool) -> dict[str, Any]:
    """Part 3: the planner pauses the job through a dirty minute and resumes it.

    Until the job prints its first step the grid is clean throughout (the planner starts it at once);
    from then on the forecast says: clean while half the training is done, 900 g/kWh for a minute,
    150 after. The planner, re-planning every 5 s on the fresh forecast, pauses the job through the
    dirty minute (the deadline leaves room to resume) rather than run on through it.
    """
    from tests.fakes.switchable_grid import SwitchableGrid

    train_s = 40.0 if smoke else 60.0
    steps = max(int(train_s / step_s), 20)
    anchor: list[datetime] = []  # when the job began training

    def schedule(t: datetime) -> float:
        if not anchor:
            return 100.0
        s = (t - anchor[0]).total_seconds()
        return 100.0 if s < train_s / 2 else 900.0 if s < train_s / 2 + 60 else 150.0

    def on_line(line: str) -> None:
        if line.startswith("step ") and not anchor:
            anchor.append(datetime.now(timezone.utc))

    argv = [*job, "--max-steps", str(steps), "--mode-poll-s", "0.5"]
    rules = {"kind": "plan", "slot_s": 5, "interval_s": 5, "min_dwell_s": 0, "deadline_margin_s": 0}
    # the flow's own start, the job's, half the training, the dirty minute, a resume and the rest, with room
    deadline_s = 60 + 2 * startup_s + train_s + 60 + 120
    jobspec = {"expected_duration_s": round(startup_s + train_s), "deadline_s": round(deadline_s),
               "checkpointable": True, "resume_overhead_s": round(startup_s), "stop_grace_s": 120}
    with SwitchableGrid(schedule, row_s=5) as grid:
        policy = _policy(work / "pause.yaml", grid.url, argv, rules, jobspec, backend, fast, slow)
        report, lines = _gridshift(policy, env, on_line)
    windows = report.get("windows", [])
    result = report.get("extra", {}).get("job_result", {})
    checks = {
        "exit_ok": report["status"] == "completed",
        "paused_then_finished": [w["ended_by"] for w in windows] == ["pause", "exit"],
        "pause_exit_0": bool(windows) and windows[0].get("exit_code") == 0,
        "no_step_lost": len(windows) == 2 and windows[0].get("end_step") is not None
                        and windows[0]["end_step"] == windows[1].get("start_step") and windows[1].get("end_step") == steps,
        "progress_measured": all(w.get("work_measured") for w in windows),
    }
    return {"checks": checks, "ok": all(checks.values()), "steps": steps, "train_s": train_s, "deadline_s": deadline_s,
            "windows": windows, "job_windows": result.get("windows"), "first_plan": report.get("extra", {}).get("plan"),
            "replans": report.get("extra", {}).get("replans"),
            "log_tail": [line for line in lines if "paus" in line or "resum" in line or "checkpoint" in line][-10:]}


if __name__ == "__main__":
    raise SystemExit(main())
