"""Multi-GPU check, read-only: a torchrun DDP job under ``gridshift run`` against an independent NVML reader.

    OUT=/tmp/out python3 benchmarks/device/multigpu_check.py [--nproc N] [--seconds 20]

1. Agreement. An independent reader (another process, plain ``pynvml``) samples every GPU's
   total-energy counter every 50 ms. ``gridshift run examples/policy.yaml --json -- torchrun
   --nproc-per-node N benchmarks/device/ddp_job.py`` runs measure-only; for each mode span of the
   report (windows of 1 s or more) the reader's energy over the same wall-clock window is
   interpolated from its samples and compared, per GPU where the report gives per-GPU figures, and in
   total.
2. Overhead. The same job bare (``torchrun`` alone) and under ``gridshift run``, interleaved
   ``--reps`` times; the ratio of the jobs' own median step times (slowest rank), so start-up is
   not counted.
3. Profiling pass. ``ddp_job.py --profile-dir`` runs the power-limit callback on every rank, its
   windows combined across ranks with ``torch.distributed``; on a read-only GPU the limits are not
   applied. The stored profile (with its ``world_size``) is copied into the result.

Never changes a GPU setting: it sets ``GRIDSHIFT_NVML_READ_ONLY=1`` for everything it starts and
prints the power limit, application clock and persistence mode before and after. Without a GPU it
runs the same path on CPU (gloo ranks; set ``GRIDSHIFT_NVML_MODULE=tests.fakes.fake_nvml`` for a
fake meter) as a smoke test whose numbers mean nothing. Writes ``$OUT/multigpu_check.json``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT", "."))


def _nvml():  # noqa: ANN202 - the pynvml module (or the fake, for the CPU smoke test)
    import importlib

    return importlib.import_module(os.environ.get("GRIDSHIFT_NVML_MODULE", "pynvml"))


def reader(path: str, interval_s: float) -> int:
    """The independent reader: ``t_wall e0_mJ e1_mJ ...`` lines until SIGTERM."""
    nvml = _nvml()
    nvml.nvmlInit()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    with open(path, "w", encoding="utf-8") as f:
        while not stop:
            values = [nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles]
            f.write(f"{time.time():.4f} " + " ".join(str(v) for v in values) + "\n")
            f.flush()
            time.sleep(interval_s)
    return 0


def _load_samples(path: Path) -> tuple[list[float], list[list[float]]]:
    times: list[float] = []
    energy: list[list[float]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        times.append(float(parts[0]))
        energy.append([float(v) / 1000.0 for v in parts[1:]])
    return times, energy


def _at(times: list[float], energy: list[list[float]], t: float, gpu: int) -> float:
    i = bisect.bisect_left(times, t)
    if i <= 0:
        return energy[0][gpu]
    if i >= len(times):
        return energy[-1][gpu]
    t0, t1 = times[i - 1], times[i]
    e0, e1 = energy[i - 1][gpu], energy[i][gpu]
    return e0 + (e1 - e0) * (t - t0) / (t1 - t0) if t1 > t0 else e1


def _settings() -> str:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    return subprocess.run(["nvidia-smi", "--query-gpu=index,power.limit,clocks.applications.graphics,persistence_mode",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()


def _job(nproc: int, seconds: float, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            str(REPO / "benchmarks/device/ddp_job.py"), "--seconds", str(seconds), *extra]


def _stepstats(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        if "STEPSTATS " in line:
            return json.loads(line.split("STEPSTATS ", 1)[1])
    raise RuntimeError("the job printed no STEPSTATS line:\n" + text[-2000:])


def _gridshift(cmd: list[str], env: dict[str, str]) -> tuple[dict[str, Any], str]:
    # the console script as a user runs it (``python -c`` keeps this interpreter and its path)
    launcher = [sys.executable, "-c", "import sys; from flows.cli import main; sys.argv[0] = 'gridshift'; main()"]
    proc = subprocess.run([*launcher, "run", str(REPO / "examples/policy.yaml"), "--json", "--", *cmd],
                          capture_output=True, text=True, env=env, cwd=REPO)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"gridshift run exit {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-3000:]}") from None
    return report, proc.stdout + proc.stderr


def _agreement(report: dict[str, Any], samples: tuple[list[float], list[list[float]]], n_gpus: int) -> list[dict[str, Any]]:
    times, energy = samples
    rows = []
    for span in report.get("modes", []):
        t0 = datetime.fromisoformat(span["start"]).timestamp()
        t1 = datetime.fromisoformat(span["end"]).timestamp()
        if t1 - t0 < 1.0:
            continue
        ref = [_at(times, energy, t1, g) - _at(times, energy, t0, g) for g in range(n_gpus)]
        row: dict[str, Any] = {"mode": span["mode"], "window_s": t1 - t0, "gridshift_j": span["energy_j"],
                               "reader_j": sum(ref), "reader_per_gpu_j": ref}
        row["diff_pct"] = 100.0 * (span["energy_j"] - sum(ref)) / sum(ref) if sum(ref) else None
        per = span.get("per_device_j") or span.get("per_gpu_j")
        if per:
            per_list = [float(per[str(g)] if isinstance(per, dict) and str(g) in per else
                              per.get(g, 0.0) if isinstance(per, dict) else per[g]) for g in range(n_gpus)]
            row["gridshift_per_gpu_j"] = per_list
            row["per_gpu_diff_pct"] = [100.0 * (a - b) / b if b else None for a, b in zip(per_list, ref)]
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=0, help="ranks (default: every visible GPU, 2 on CPU)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--reader", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader:
        return reader(args.reader, 0.05)
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GRIDSHIFT_NVML_READ_ONLY": "1", "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0",
           "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "GRIDSHIFT_HOME": os.environ.get("GRIDSHIFT_HOME") or tempfile.mkdtemp(prefix="gridshift-home-")}
    os.environ.update(env)
    import torch

    n_gpus = torch.cuda.device_count()
    nproc = args.nproc or n_gpus or 2
    result: dict[str, Any] = {"gpus_visible": n_gpus, "nproc": nproc, "settings_before": _settings(),
                              "torch": torch.__version__, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"multigpu_check: {n_gpus} GPU(s) visible, {nproc} rank(s)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="gridshift-mgpu-"))
    samples_path = work / "reader.txt"
    rd = subprocess.Popen([sys.executable, __file__, "--reader", str(samples_path)], env=env)
    try:
        time.sleep(1.0)
        report, log = _gridshift(_job(nproc, args.seconds, []), env)
        time.sleep(0.5)
    finally:
        rd.terminate()
        rd.wait(timeout=10)
    (OUT / "multigpu_run.log").write_text(log[-200_000:])
    samples = _load_samples(samples_path)
    result["report"] = report
    result["agreement"] = _agreement(report, samples, max(len(samples[1][0]) if samples[1] else 0, 1))
    result["reader_samples"] = len(samples[0])

    bare: list[float] = []
    under: list[float] = []
    for rep in range(args.reps):
        proc = subprocess.run(_job(nproc, args.seconds / 2, []), capture_output=True, text=True, env=env, cwd=REPO)
        bare.append(_stepstats(proc.stdout + proc.stderr)["median_step_s"])
        rep_report, rep_log = _gridshift(_job(nproc, args.seconds / 2, []), env)
        under.append(_stepstats(rep_log)["median_step_s"])
        print(f"rep {rep}: bare {bare[-1] * 1e3:.3f} ms/step, under gridshift {under[-1] * 1e3:.3f} ms/step", flush=True)
    result["overhead"] = {"bare_median_step_s": bare, "gridshift_median_step_s": under,
                          "ratio": statistics.median(under) / statistics.median(bare) if bare else None}

    profile_dir = work / "profiles"
    proc = subprocess.run(_job(nproc, args.seconds, ["--profile-dir", str(profile_dir)]), capture_output=True,
                          text=True, env=env, cwd=REPO)
    (OUT / "multigpu_profile.log").write_text((proc.stdout + proc.stderr)[-200_000:])
    try:
        result["profiling"] = {"stepstats": _stepstats(proc.stdout + proc.stderr),
                               "stored": [json.loads(p.read_text()) for p in sorted(profile_dir.rglob("*.json"))]}
    except RuntimeError as exc:
        result["profiling"] = {"error": str(exc)[-2000:]}
    result["settings_after"] = _settings()
    (OUT / "multigpu_check.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    print(json.dumps({k: result[k] for k in ("agreement", "overhead", "settings_before", "settings_after")},
                     indent=1, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
