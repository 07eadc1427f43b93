"""What gridshift's training integration costs the training thread, per step, measured on the CPU.

The real Hugging Face Trainer trains a tiny GPT-2 (built from a config, random tokens, gradient
accumulation 2: two forwards and backwards per optimizer step) in ONE process, the variants
interleaved (repeat i runs them in turn, the order reversed every other repeat):

- ``bare``: no gridshift callback, the baseline a user would have;
- ``dry run``: ``GridshiftCallback`` following a mode file whose clock plan gives forward, backward
  and the optimizer three different clocks (five switch requests a step, the phase-level worst
  case), clock calls in dry run (``GRIDSHIFT_NVML_READ_ONLY=1``, what the GPU device check runs),
  progress and the result file written every ``--poll-s``;
- ``no plan``: the callback in a mode without a clock plan (progress, the mode file, the result
  file; no hooks): what the protocol costs without the plan;
- ``worker``: the same as ``dry run`` with the clock calls made by the executor's worker thread, against
  a stand-in control whose call sleeps ``--call-ms`` with the GIL released (NVML's set-clock call
  takes 10-20 ms in-process; gpu-facts): the cost a real plan's switches put on the training thread.

For each: the median step time (wall, µs per optimizer step, steps after ``--warmup``), the
training thread's CPU time per step, and gridshift's own time on the calling threads
(``TrainingSession.busy_s``: its hooks and step calls, not the Trainer's dispatch to them). The
overhead is the median over repeats of the paired difference with the bare run of the same repeat.

A CPU step of this model is a few ms, much shorter than a GPU step, so the same µs are a larger
share here; ``--poll-s`` (default 0.05 s, every ~10 steps) keeps the file writes at about the share
per step they have on a GPU step of ~90 ms with the default 1 s. Measured, not modelled; the load
of the machine (``uptime``) is printed with the figures.

    python benchmarks/integration_overhead.py [--repeats 5] [--steps 300] [--json] [--repo PATH]

``--repo PATH`` times another checkout's integrations (an older version, from ``git archive``) with
this script; a version without ``TrainingSession.busy_s`` shows no gridshift µs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

def _repo() -> Path:
    """This checkout, or the one ``--repo`` names (read before anything of gridshift's is imported)."""
    if "--repo" in sys.argv[:-1]:
        return Path(sys.argv[sys.argv.index("--repo") + 1]).resolve()
    return Path(__file__).resolve().parents[1]


REPO = _repo()
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))
os.environ["GRIDSHIFT_NVML_READ_ONLY"] = "1"

import torch  # noqa: E402
import transformers  # noqa: E402
from train_hf import RandomTokens  # noqa: E402

from plans.dvfs.plan_file import ClockPlan, save_plan  # noqa: E402
from plans.integrations.hf import GridshiftCallback  # noqa: E402
from plans.integrations.protocol import ModeAnnouncement, write_mode_file  # noqa: E402

PHASES = ("forward", "backward", "optimizer")
VARIANTS = ("bare", "dry run", "no plan", "worker")


class SleepingControl:
    """A clock control whose calls take ``call_s`` with the GIL released, as NVML's ctypes calls do."""

    def __init__(self, call_s: float) -> None:
        self.call_s = call_s
        self.calls = 0

    def set_locked_sm_clock_mhz(self, lo_mhz: int, hi_mhz: int) -> None:
        time.sleep(self.call_s)
        self.calls += 1

    def reset_locked_sm_clock(self) -> None:
        self.calls += 1


class StepClock(transformers.TrainerCallback):  # type: ignore[misc]
    """Wall and thread CPU time at every step start (the first callback after the Trainer's own)."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.thread_time())


def _plan(work: Path) -> Path:
    segs = [{"start_kernel": 10 * i, "start_phase": p, "phase_aligned": True, "sm_clock_mhz": c, "duration_s": 1e-3}
            for i, (p, c) in enumerate(zip(PHASES, (1980, 1410, 1005)))]
    plan = ClockPlan.model_validate({
        "gpu_model": "cpu benchmark", "workload_fingerprint": "tiny-gpt2", "profile_source": "synthetic",
        "provenance": "modelled", "n_kernels": 30, "segments": segs,
        "parameters": {"epsilon": 0.0, "tau_sw_s": 0.0, "eps_sw_j": 0.0, "d_min_s": 0.0, "clock_floor_mhz": 0.0,
                       "boundaries": "phase", "method": "handmade"},
        "prediction": {"energy_change_pct": 0.0, "time_change_pct": 0.0, "switches_per_iteration": 3,
                       "energy_j": 1.0, "reference_energy_j": 1.0, "time_s": 1.0, "reference_time_s": 1.0, "gap": 0.0}})
    return save_plan(plan, work / "plan.json")


def _environ(work: Path, *, with_plan: bool) -> None:
    """gridshift's variables, as ``gridshift run`` sets them, for a job started in a mode with the plan
    (or without one)."""
    plan = _plan(work) if with_plan else None
    write_mode_file(work / "mode.json", ModeAnnouncement(seq=0, mode="speed", batch_size=2, since="2025-01-01T00:00:00Z",
                                                         clock_plan=str(plan) if plan else None))
    os.environ.update(GRIDSHIFT_MODE_FILE=str(work / "mode.json"), GRIDSHIFT_RESULT_FILE=str(work / "result.json"),
                      GRIDSHIFT_PROGRESS_FILE=str(work / "progress"), GRIDSHIFT_BATCH_SIZE="2")
    os.environ.pop("GRIDSHIFT_CLOCK_PLAN", None)
    if plan is not None:
        os.environ["GRIDSHIFT_CLOCK_PLAN"] = str(plan)


def run_once(variant: str, args: argparse.Namespace, work: Path) -> dict[str, float | None]:
    """One training of ``args.steps`` steps; medians per step after the warm-up, in µs."""
    transformers.set_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                     bos_token_id=255, eos_token_id=255)
    model = transformers.GPT2LMHeadModel(config)
    data = RandomTokens(args.steps * 2 * 2, 16, 256)
    targs = transformers.TrainingArguments(
        output_dir=str(work / "out"), max_steps=args.steps, per_device_train_batch_size=2, gradient_accumulation_steps=2,
        learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=10**9, disable_tqdm=True,
        dataloader_num_workers=0, use_cpu=True, seed=0)
    clock = StepClock()
    gridshift = None
    _environ(work, with_plan=variant != "no plan")
    if variant in ("dry run", "no plan"):
        gridshift = GridshiftCallback(poll_interval_s=args.poll_s)
    elif variant == "worker":
        gridshift = GridshiftCallback(poll_interval_s=args.poll_s, dry_run=False,
                                      control=SleepingControl(args.call_ms / 1000))
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=data,
                                   callbacks=[clock] + ([gridshift] if gridshift else []))
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # the end-of-training dict on stdout
    trainer.train()
    w, c = clock.wall[args.warmup:], clock.cpu[args.warmup:]
    busy = None
    if gridshift is not None and hasattr(gridshift.session, "busy_s"):  # an older --repo has no counter
        busy = 1e6 * gridshift.session.busy_s / max(trainer.state.global_step, 1)
    return {"wall_us": 1e6 * statistics.median(b - a for a, b in zip(w, w[1:])),
            "cpu_us": 1e6 * statistics.median(b - a for a, b in zip(c, c[1:])), "gridshift_us": busy}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--poll-s", type=float, default=0.05, help="the callback's poll/write interval")
    ap.add_argument("--call-ms", type=float, default=10.0, help="the worker variant's stand-in clock call")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--repo", default=None, help="time another checkout's integrations (default: this one)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    variants = [v.strip() for v in args.variants.split(",")]
    torch.set_num_threads(1)  # one core's worth: the step is the Python and launch path, as on a GPU host
    transformers.logging.set_verbosity_error()
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, float | None]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="integration-overhead-") as tmp:
        for i in range(args.repeats):
            for v in (variants if i % 2 == 0 else variants[::-1]):
                runs[v].append(run_once(v, args, Path(tmp)))
    load_after = os.getloadavg()
    out: dict[str, Any] = {"what": "µs per optimizer step, medians (see the docstring); measured on this CPU",
                           "repo": str(REPO),
                           "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats, "poll_s": args.poll_s,
                           "call_ms": args.call_ms, "loadavg_before": load_before, "loadavg_after": load_after,
                           "variants": {}}
    bare = runs.get("bare")
    for v, rs in runs.items():
        row: dict[str, Any] = {k: statistics.median(r[k] for r in rs) if rs[0][k] is not None else None  # type: ignore[type-var]
                               for k in ("wall_us", "cpu_us", "gridshift_us")}
        if bare is not None and v != "bare":
            row["overhead_us"] = statistics.median(r["wall_us"] - b["wall_us"] for r, b in zip(rs, bare))  # type: ignore[operator]
            row["overhead_cpu_us"] = statistics.median(r["cpu_us"] - b["cpu_us"] for r, b in zip(rs, bare))  # type: ignore[operator]
            row["overhead_pct"] = 100 * row["overhead_us"] / row_bare_wall(bare)
        row["wall_us_each"] = [round(r["wall_us"], 1) for r in rs]  # type: ignore[arg-type]
        out["variants"][v] = row
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{REPO}: load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} CPUs); "
          f"{args.repeats} repeats x {args.steps} steps, poll every {args.poll_s} s")
    print(f"{'variant':10s} {'wall µs/step':>13s} {'cpu µs/step':>12s} {'gridshift µs':>13s} {'overhead µs':>12s} "
          f"{'overhead cpu':>13s} {'overhead %':>11s}")
    for v, row in out["variants"].items():
        def f(key: str, fmt: str = "13.1f") -> str:
            return format(row[key], fmt) if row.get(key) is not None else format("-", fmt[:-2].rstrip(".") + "s")
        print(f"{v:10s} {f('wall_us')} {f('cpu_us', '12.1f')} {f('gridshift_us')} {f('overhead_us', '12.1f')} "
              f"{f('overhead_cpu_us')} {f('overhead_pct', '11.2f')}")
    return 0


def row_bare_wall(bare: list[dict[str, float | None]]) -> float:
    return statistics.median(r["wall_us"] for r in bare)  # type: ignore[type-var]


if __name__ == "__main__":
    raise SystemExit(main())
