"""Grid event -> new plan at a running job, on a real GPU: how long from `gridshift curtail` to the job's mode file.

Read-only: the run uses the NVIDIA backend with ``GRIDSHIFT_NVML_READ_ONLY=1`` (set here if unset), so it
reads NVML (devices, limits, power) and applies nothing; its settings are handed to the job through
the mode file, which is what this measures reaching the job. Never sets clocks, limits, persistence or MIG.

    GRIDSHIFT_NVML_READ_ONLY=1 PYTHONPATH=$PWD python3 benchmarks/device/curtail_latency.py [--events 5] [--json]

One ``gridshift run`` (its temporary Prefect server) runs a small job that keeps the GPU busy (torch, if
installed) and polls its mode file every 2 ms, logging when each new announcement arrives. The plan runs
flat out (speed). Then ``--events`` times: ``gridshift curtail --cap-w W --for Ns`` (W: 80 % of the GPU's
largest power limit, read from NVML, so the speed mode no longer fits), wait for the job to hear the
new mode, wait for the event to end and the job to hear the plan back. Printed per event and as medians:

- event written -> job: from the event file's write (the moment the event exists on the machine) to the
  job reading the new mode (the run's poll of the event file, re-plan, mode file write, the job's read);
- command -> job: the same from the moment ``gridshift curtail`` was started (its Python start-up included);
- end -> job: from the event's end to the job reading the plan back.

All three are measured wall-clock times on this machine. ``--backend simulated`` runs it without a GPU
(to check the script; not a measurement of anything on a GPU). About 1.5-2.5 min in all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

JOB = r'''
import json, os, sys, time
log, done = sys.argv[1], sys.argv[2]
try:
    import torch
    gpu = torch.cuda.is_available()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) if gpu else None
except Exception:
    gpu = False
print("job-started gpu=%s" % gpu, flush=True)
path, seen = os.environ.get("GRIDSHIFT_MODE_FILE"), -1
with open(log, "a") as out:
    while not os.path.exists(done):
        if gpu:
            for _ in range(4):
                a @ a
            torch.cuda.synchronize()
        try:
            ann = json.loads(open(path).read()) if path else None
        except (OSError, ValueError):
            ann = None
        if ann is not None and ann.get("seq", -1) != seen:
            seen = ann["seq"]
            out.write(json.dumps({"t": time.time(), "seq": seen, "mode": ann.get("mode")}) + "\n")
            out.flush()
        time.sleep(0.002)
'''


def _gridshift(*args: str) -> list[str]:
    return [sys.executable, "-c", "from flows.cli import main; main()", *args]


def _max_limit_w(backend: str) -> float:
    if backend != "nvidia":
        return 700.0  # the simulated H200
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)[1] / 1000.0
    finally:
        pynvml.nvmlShutdown()


def _policy(folder: Path, backend: str, job: Path, log: Path, done: Path) -> Path:
    import yaml

    policy = {
        "schema_version": 1,
        "carbon": {"provider": "static", "options": {"country": "DEU"}},
        "modes": {"speed": {"power_limit_fraction": 1.0},
                  "efficiency": {"power_limit_fraction": 0.7, "max_slowdown": 0.5}},
        "rules": {"kind": "plan", "min_dwell_s": 60, "interval_s": 600, "slot_s": 300, "deadline_margin_s": 0},
        "objective": {"time_value_g_per_h": 100000},   # flat out whenever the cap lets it
        "job": {"name": "curtail-latency", "command": [sys.executable, str(job), str(log), str(done)],
                "expected_duration_s": 600, "deadline_s": 3600},
        "backend": {"name": backend},
    }
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def _wait_seq(log: Path, after_t: float, timeout_s: float, *, not_mode: str | None = None,
              mode: str | None = None) -> dict | None:  # type: ignore[type-arg]
    end = time.time() + timeout_s
    while time.time() < end:
        for line in log.read_text().splitlines() if log.exists() else []:
            rec = json.loads(line)
            if rec["t"] >= after_t and (not_mode is None or rec["mode"] != not_mode) and (mode is None or rec["mode"] == mode):
                return rec
        time.sleep(0.01)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=5)
    ap.add_argument("--event-s", type=float, default=5.0)
    ap.add_argument("--backend", default="nvidia", choices=["nvidia", "simulated"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("GRIDSHIFT_NVML_READ_ONLY", "1")
    if args.backend == "nvidia" and os.environ["GRIDSHIFT_NVML_READ_ONLY"] != "1":
        print("refusing: GRIDSHIFT_NVML_READ_ONLY must be 1 (this script only measures)", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="curtail-latency-"))
    job, log, done = folder / "job.py", folder / "modes.jsonl", folder / "done"
    job.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               GRIDSHIFT_HOME=str(folder / "home"), PREFECT_HOME=str(folder / "prefect"),
               GRIDSHIFT_EVENTS_FILE=str(folder / "grid-events.json"))
    cap_w = round(0.8 * _max_limit_w(args.backend))
    began = time.time()
    proc = subprocess.Popen(_gridshift("run", str(_policy(folder, args.backend, job, log, done)), "--json"),
                            env=env, cwd=folder, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    rows: list[dict[str, float | str | None]] = []
    try:
        first = _wait_seq(log, 0.0, 150.0)
        if first is None:
            proc.kill()
            print(f"the job did not start within 150 s: {proc.communicate()[1][-3000:]}", file=sys.stderr)
            return 1
        started_s = time.time() - began
        time.sleep(2.0)
        for k in range(args.events):
            t_cmd = time.time()
            c = subprocess.run(_gridshift("curtail", "--cap-w", str(cap_w), "--for", f"{args.event_s:g}s", "--json"),
                               env=env, cwd=folder, text=True, capture_output=True, timeout=60)
            if c.returncode != 0:
                print(c.stderr, file=sys.stderr)
                return 1
            t_written = os.stat(folder / "grid-events.json").st_mtime
            ev = json.loads(c.stdout)["event"]
            heard = _wait_seq(log, t_cmd, 30.0, not_mode="speed")
            t_end = time.time() if ev.get("end") is None else \
                __import__("datetime").datetime.fromisoformat(ev["end"]).timestamp()
            back = _wait_seq(log, t_end, 40.0, mode="speed")
            rows.append({"event": k + 1, "mode": heard["mode"] if heard else None,
                         "written_to_job_ms": (heard["t"] - t_written) * 1000 if heard else None,
                         "command_to_job_ms": (heard["t"] - t_cmd) * 1000 if heard else None,
                         "end_to_job_ms": (back["t"] - t_end) * 1000 if back else None})
            if not args.json:
                print(f"event {k + 1}: cap {cap_w} W -> job heard {rows[-1]['mode']}: "
                      + ", ".join(f"{n} {rows[-1][n]:.0f} ms" if rows[-1][n] is not None else f"{n} -"
                                  for n in ("written_to_job_ms", "command_to_job_ms", "end_to_job_ms")), flush=True)
            time.sleep(1.0)
        done.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        done.touch()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    report = json.loads(out) if proc.returncode == 0 and out.strip() else {}
    med = {n: statistics.median([r[n] for r in rows if r[n] is not None]) if any(r[n] is not None for r in rows)
           else None for n in ("written_to_job_ms", "command_to_job_ms", "end_to_job_ms")}
    summary = {"backend": args.backend, "read_only": os.environ.get("GRIDSHIFT_NVML_READ_ONLY") == "1",
               "cap_w": cap_w, "events": rows, "median_ms": med, "missed": sum(r["mode"] is None for r in rows),
               "run_start_s": round(started_s, 1), "total_s": round(time.time() - began, 1),
               "run_status": report.get("status"), "cap_held": (report.get("extra") or {}).get("power_cap", {}).get("held"),
               "measured": "wall-clock times on this machine; nothing was applied to the GPU (read-only)"}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(f"median over {len(rows)} events: " + ", ".join(f"{k} {v:.0f}" if v is not None else f"{k} -"
                                                           for k, v in med.items()))
        print(f"run status {summary['run_status']}, cap held {summary['cap_held']}; run start {started_s:.1f} s, "
              f"total {summary['total_s']} s; {summary['measured']}")
    return 0 if summary["missed"] == 0 and rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
