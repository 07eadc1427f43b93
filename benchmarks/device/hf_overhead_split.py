"""Where a gridshift run's extra step time comes from on the GPU: the job bare, the job without the
callback under ``gridshift run`` (the supervisor alone), the job with the callback under it, and the
bare job beside a ``gridshift run`` of an idle job (``beside``: the supervisor's metering of the GPU,
with no tie to the job at all).

    GRIDSHIFT_NVML_READ_ONLY=1 OUT=/tmp/out PYTHONPATH=. python3 benchmarks/device/hf_overhead_split.py [--steps 200]

Same job, policy, grid and clock plans as ``hf_trainer_check.py``'s overhead part (whose helpers it
uses); read-only. Prints each run's mean step time after the warm-up and the modes the report shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_trainer_check as check  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--order", default="bare,supervisor,gridshift,gridshift,supervisor,bare")
    ap.add_argument("--smoke", action="store_true", help="a tiny model (a check of this script on a CPU; numbers meaningless)")
    args = ap.parse_args()
    from tests.fakes.switchable_grid import SwitchableGrid

    work = Path(tempfile.mkdtemp(prefix="hf-split-"))
    env = {**os.environ, "PYTHONPATH": f"{check.REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "GRIDSHIFT_NVML_READ_ONLY": "1", "GRIDSHIFT_HOME": str(work / "home"), "PYTHONUNBUFFERED": "1"}
    _, fast, slow = check._plans(work, "auto")
    (work / "prefect").mkdir()
    server = check.PrefectServer(work / "prefect")
    env.update({k: v for k, v in server.env.items() if k.startswith("PREFECT_")})
    model = (["--layers", "2", "--width", "64", "--heads", "2", "--seq-len", "32", "--vocab", "256"] if args.smoke else
             ["--layers", "12", "--width", "768", "--heads", "12", "--seq-len", "512", "--vocab", "50257", "--bf16"])
    job = [sys.executable, str(check.REPO / "examples" / "train_hf.py"), *model, "--log-every", "10",
           "--max-steps", str(args.steps), "--timing", "--warmup-steps", str(args.warmup)]
    rules = {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300, "min_dwell_s": 0,
             "interval_s": 5}
    out: list[dict] = []
    try:
        with SwitchableGrid(100.0) as grid:
            for kind in args.order.split(","):
                if kind == "beside":
                    idle = check._policy(work / "idle.yaml", grid.url, [sys.executable, "-c", "import time; time.sleep(900)"],
                                         rules, {"expected_duration_s": 900}, "auto", fast, slow)
                    sup = subprocess.Popen([*check.GRIDSHIFT, "run", "--json", str(idle)], env=env, cwd=check.REPO,
                                           stdout=subprocess.DEVNULL, stderr=open(work / "beside.log", "w"))
                    time.sleep(15)  # its server, backend and meter up before the job starts
                    proc = subprocess.run([*job, "--no-gridshift"], env=env, cwd=check.REPO, capture_output=True, text=True)
                    sup.terminate()
                    sup.wait(timeout=60)
                    timing, modes = check._timing(proc.stdout.splitlines()), None
                elif kind == "bare":
                    proc = subprocess.run([*job, "--no-gridshift"], env=env, cwd=check.REPO, capture_output=True, text=True)
                    timing, modes = check._timing(proc.stdout.splitlines()), None
                else:
                    argv = job + (["--no-gridshift"] if kind == "supervisor" else [])
                    policy = check._policy(work / f"{kind}.yaml", grid.url, argv, rules, {"expected_duration_s": 600},
                                           "auto", fast, slow)
                    report, lines = check._gridshift(policy, env)
                    timing = check._timing(lines)
                    modes = [(m.get("mode"), m.get("settings")) for m in report.get("modes", [])]
                row = {"kind": kind, "step_ms": timing["step_ms"], "median_step_ms": timing.get("median_step_ms"),
                       "own_us": timing.get("gridshift_us_per_step"),
                       "modes": modes}
                print(json.dumps(row), flush=True)
                out.append(row)
    finally:
        server.stop()
    dest = Path(os.environ.get("OUT", "out"))
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "hf_overhead_split.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
