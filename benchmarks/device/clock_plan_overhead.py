"""Step time of a real training loop with vs without a phase-level clock plan run through
``TrainingLoop`` in DRY RUN, and a mid-run mode change that swaps the plan. Prints JSON.

    GRIDSHIFT_NVML_READ_ONLY=1 OUT=/tmp/out PYTHONPATH=. python3 benchmarks/device/clock_plan_overhead.py [--cpu-smoke]

Refuses to run unless ``GRIDSHIFT_NVML_READ_ONLY=1``: the helper then uses the executor's dry-run
control (every clock call logged and recorded, none sent to the GPU), and every NVML setter would be
refused before the driver anyway. No clock, power limit or other setting is changed.

The job's side is the real one: plan files, a mode file and a result file as gridshift writes and
reads them (``plans.integrations.protocol``), and ``plans.integrations.torch_loop.TrainingLoop``, which
hooks the plan's phases (``forward``, ``backward``, ``optimizer``: three switch requests per step, the
phase-level worst case; the planner's H200 plan was one static clock) and polls the mode file at
``step_done()``.

1. Overhead: blocks of steps alternate without / with the helper (A B A B ...) to cancel drift. A
   block is timed as a whole, the GPU synchronised only at its ends, as a training loop runs (the
   CPU may run ahead); a second pass times single steps, synchronised each, which exposes every
   microsecond the CPU adds. Target: < 1 % of step time.
2. Mode change: with the helper running, the mode file announces the efficiency mode (another
   plan); the report gives the steps and seconds until the helper swapped, the dry-run calls before
   and after, and the result file the job wrote (what gridshift's report would confirm).

Writes ``$OUT/clock_plan_overhead.json``. ``--cpu-smoke`` runs a tiny model on the CPU to exercise
the code path (numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("OUT", "out"))
PHASES = ("forward", "backward", "optimizer")
FAST = (1980, 1350, 1980)  # SM MHz per phase; all in the H200's 15 MHz table (345-1980)
SLOW = (1350, 1200, 1350)
TARGET_PCT = 1.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def finish(result: dict[str, Any]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "clock_plan_overhead.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


def _plan(clocks: tuple[int, ...], name: str) -> Any:
    from plans.dvfs.plan_file import ClockPlan

    segs = [{"start_kernel": 10 * i, "start_phase": p, "phase_aligned": True, "sm_clock_mhz": c, "duration_s": 1e-3}
            for i, (p, c) in enumerate(zip(PHASES, clocks))]
    return ClockPlan.model_validate({
        "gpu_model": "any", "workload_fingerprint": name, "profile_source": "synthetic", "provenance": "modelled",
        "n_kernels": 10 * len(segs),
        "parameters": {"epsilon": 0.0, "tau_sw_s": 0.0, "eps_sw_j": 0.0, "d_min_s": 0.0, "clock_floor_mhz": 0.0,
                       "boundaries": "phase", "method": "handmade"},
        "segments": segs,
        "prediction": {"energy_change_pct": 0.0, "time_change_pct": 0.0, "switches_per_iteration": len(segs),
                       "energy_j": 1.0, "reference_energy_j": 1.0, "time_s": 1.0, "reference_time_s": 1.0, "gap": 0.0},
    })


def _model(torch: Any, *, d_model: int, heads: int, seq: int, batch: int, layers: int, device: str) -> tuple[Any, Any, Any]:
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.up, self.down = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d_model, dim=-1)
            q, k, v = (t.view(b, s, heads, d_model // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(y.transpose(1, 2).reshape(b, s, d_model))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    model = nn.Sequential(*[Block() for _ in range(layers)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d_model, device=device)
    return model, opt, x


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model on the CPU (numbers meaningless)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps-per-block", type=int, default=60)
    parser.add_argument("--blocks", type=int, default=4, help="pairs of blocks without / with the helper")
    parser.add_argument("--poll-s", type=float, default=0.5, help="the helper's mode-file poll interval")
    args = parser.parse_args()
    if os.environ.get("GRIDSHIFT_NVML_READ_ONLY") != "1":
        log("refusing to run: set GRIDSHIFT_NVML_READ_ONLY=1 (the clock plan must be a dry run)")
        return 2
    try:
        import torch
    except ImportError:
        return finish({"skipped": "torch not installed"})
    if not torch.cuda.is_available() and not args.cpu_smoke:
        return finish({"skipped": "no CUDA GPU (use --cpu-smoke to exercise the code path)"})

    from plans.dvfs.plan_file import save_plan
    from plans.integrations.protocol import GridshiftJob, ModeAnnouncement, read_result_file, write_mode_file
    from plans.integrations.torch_loop import TrainingLoop

    device = "cpu" if args.cpu_smoke else "cuda"
    dims = (dict(d_model=64, heads=4, seq=32, batch=2, layers=1) if args.cpu_smoke
            else dict(d_model=2048, heads=16, seq=2048, batch=4, layers=args.layers))
    steps_per_block, blocks = (5, 2) if args.cpu_smoke else (args.steps_per_block, args.blocks)
    model, opt, x = _model(torch, device=device, **dims)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    active: list[Any] = []  # the TrainingLoop in force, if any

    def step() -> None:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if active:
            active[0].step_done()

    def helper() -> Any:
        loop = TrainingLoop(model, opt, total_steps=None, batch_size=1, poll_interval_s=args.poll_s)
        active[:] = [loop]
        return loop

    work = Path(tempfile.mkdtemp(prefix="gridshift-clock-plan-"))
    fast = save_plan(_plan(FAST, "fast"), work / "fast.json")
    slow = save_plan(_plan(SLOW, "slow"), work / "slow.json")
    job = GridshiftJob(batch_size=None, mode_file=work / "mode.json", result_file=work / "result.json", clock_plan=fast)
    os.environ.update(GRIDSHIFT_MODE_FILE=str(job.mode_file), GRIDSHIFT_RESULT_FILE=str(job.result_file),
                      GRIDSHIFT_CLOCK_PLAN=str(fast))  # what gridshift hands the job
    now = datetime.now(timezone.utc).isoformat()
    write_mode_file(job.mode_file, ModeAnnouncement(seq=0, mode="speed", batch_size=None, since=now,  # type: ignore[arg-type]
                                                    clock_plan=str(fast)))
    for _ in range(5):
        step()
    sync()

    def block(n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        return (time.perf_counter() - t0) / n

    def synced(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            sync()
            out.append(time.perf_counter() - t0)
        return out

    # 1. overhead, pipelined blocks then synced steps
    without, with_plan, synced_without, synced_with = [], [], [], []
    dry_calls = 0
    for _ in range(blocks):
        without.append(block(steps_per_block))
        synced_without += synced(steps_per_block)
        with helper() as loop:
            runner = loop.session.runner
            if not runner.dry_run:  # belt and braces: nothing in this script may reach the GPU's clocks
                raise SystemExit("the helper is not in dry run; refusing")
            with_plan.append(block(steps_per_block))
            synced_with += synced(steps_per_block)
            runner.flush()
            dry_calls += runner.executor.control.n_calls  # type: ignore[union-attr]
        active.clear()
    a, b = statistics.median(without), statistics.median(with_plan)
    sa, sb = statistics.median(synced_without), statistics.median(synced_with)
    log(f"step {1000 * a:.3f} ms without, {1000 * b:.3f} ms with the helper ({100 * (b / a - 1):+.2f} %); "
        f"synced {1000 * sa:.3f} / {1000 * sb:.3f} ms ({100 * (sb / sa - 1):+.2f} %)")

    # 2. a mid-run mode change: the helper swaps to the efficiency plan at a step boundary
    change: dict[str, Any] = {}
    with helper() as loop:
        runner = loop.session.runner
        announce_at = steps_per_block
        limit = announce_at + max(200, int(10 * args.poll_s / a) + 1)  # steps enough to pass several polls
        announced_s = 0.0
        for i in range(limit):
            if i == announce_at:
                runner.flush()
                before = list(runner.executor.control.calls)  # type: ignore[union-attr]
                write_mode_file(job.mode_file, ModeAnnouncement(  # type: ignore[arg-type]
                    seq=1, mode="efficiency", batch_size=None, since=datetime.now(timezone.utc).isoformat(),
                    clock_plan=str(slow)))
                announced_s = time.perf_counter()
            step()
            if i >= announce_at and runner.plan_path == str(slow):
                change = {"announced_at_step": announce_at, "swapped_at_step": i,
                          "swap_after_s": time.perf_counter() - announced_s, "poll_interval_s": args.poll_s}
                for _ in range(3):
                    step()
                break
        sync()
        runner.flush()
        after = list(runner.executor.control.calls) if runner.executor is not None else []  # type: ignore[union-attr]
        plan_after = Path(runner.plan_path).name if runner.plan_path else None
    active.clear()
    result = read_result_file(job.result_file)  # type: ignore[arg-type]
    change.update({
        "swapped": bool(change), "plan_before": fast.name, "plan_after": plan_after,
        "dry_run_calls_before_change_last3": [c[1][0] for c in before[-3:]],
        "dry_run_calls_after_swap_last3": [c[1][0] for c in after[-3:]],
        "result_file_clock_plans": [r.model_dump(mode="json") for r in result.clock_plans] if result else None,
    })
    log(f"mode change: {'swapped' if change['swapped'] else 'NOT swapped'} "
        f"after {change.get('swap_after_s', float('nan')):.3f} s")

    return finish({
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke test, numbers meaningless)",
        "torch": torch.__version__,
        "shape": {**dims, "dtype": "bf16-autocast", "optimizer": "AdamW"},
        "plan": {"phases": list(PHASES), "fast_mhz": list(FAST), "slow_mhz": list(SLOW),
                 "switch_requests_per_step": len(PHASES), "control": "dry run (GRIDSHIFT_NVML_READ_ONLY=1)"},
        "steps_per_block": steps_per_block, "blocks_each": blocks,
        "pipelined": {"median_step_s_without": a, "median_step_s_with": b, "overhead_pct": 100 * (b / a - 1),
                      "block_step_s_without": without, "block_step_s_with": with_plan},
        "synced": {"median_step_s_without": sa, "median_step_s_with": sb, "overhead_pct": 100 * (sb / sa - 1)},
        "target_pct": TARGET_PCT,
        "meets_target": 100 * (b / a - 1) < TARGET_PCT,
        "dry_run_calls_recorded": dry_calls,
        "mode_change": change,
        "clock_changed": False,
        "measured": device == "cuda",
    })


if __name__ == "__main__":
    raise SystemExit(main())
