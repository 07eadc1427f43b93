"""A whole gridshift run on a real GPU, measure-only: decide, meter, report — without Prefect.

    OUT=/tmp/out PYTHONPATH=. python3 benchmarks/device/measured_run.py

The device image has no Prefect, so this drives the same pieces the flow wires together
(carbon monitor -> decide -> NvidiaBackend -> supervise -> RunReport) directly. The backend runs
measure-only (``control=False``; the device batch also sets GRIDSHIFT_NVML_READ_ONLY=1), so no GPU
setting is changed: the report says which settings *would* have been applied. As a check, the NVML
energy counter is also read directly around the whole run.

Writes ``$OUT/measured_run.json`` (the RunReport, ``measured: true``, plus the direct reading).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path


def main() -> int:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    from backends.registry import create_backend
    from flows.job import start_command
    from flows.sources import monitor_for
    from flows.supervise import SupervisedRun, supervise
    from scheduler.decide import decide
    from scheduler.policy_io import load_policy
    from scheduler.report import RunReport

    def now() -> datetime:
        return datetime.now(timezone.utc)

    policy = load_policy(Path("examples/policy.yaml"))
    try:
        backend = create_backend("nvidia")
        caps = backend.capabilities()
    except Exception as exc:  # no GPU here: say so and stop
        print(f"measured_run: skipped, no NVIDIA GPU ({exc})")
        (out_dir / "measured_run.json").write_text(json.dumps({"skipped": str(exc)}))
        return 0
    import importlib

    # the same binding the backend uses (tests point GRIDSHIFT_NVML_MODULE at the fake)
    pynvml = importlib.import_module(os.environ.get("GRIDSHIFT_NVML_MODULE", "pynvml"))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    monitor = monitor_for(policy)
    nominal = now()
    reading = monitor.read(nominal)
    decision = decide(policy, reading.series, now=nominal, start_at=nominal,
                      remaining_work_s=policy.job.expected_duration_s)
    print(f"decision: {decision.mode} — {decision.reason}")
    cmd = [sys.executable, "benchmarks/device/gpu_train_job.py", "--seconds", "20"]
    run = SupervisedRun()
    direct_start_mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    started = now()
    try:
        supervise(policy=policy, backend=backend, caps=caps, control=False, monitor=monitor, first=decision,
                  first_reading=reading, start_job=lambda env: start_command(cmd, on_line=print, env=env), now=now,
                  log=print, out=run)
    finally:
        backend.restore()
        backend.close()
    direct_j = (pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - direct_start_mj) / 1000.0
    ended = now()
    report = RunReport(
        run_id=f"h200-{started:%Y%m%dT%H%M%S}", policy="examples/policy.yaml", job="gpu-mlp", status="completed"
        if run.exit_code == 0 else "failed", backend=backend.name, measured=backend.measured, nominal_start=nominal,
        started_at=started, ended_at=ended, deferred_s=0.0, duration_s=(ended - started).total_seconds(),
        energy_j=run.energy_j, carbon_g=run.carbon_g, intensity_g_per_kwh=reading.current.g_per_kwh,
        intensity_kind=reading.current.kind, intensity_source=reading.current.source, modes=tuple(run.spans),
        decision_reason=decision.reason, exit_code=run.exit_code, warnings=tuple(run.warnings),
        carbon_sources=tuple(run.sources),
    ).to_json()
    report["direct_nvml_j_around_run"] = direct_j
    report["note"] = "measure-only on the lent H200: no setting changed; direct reading brackets job start-up too"
    (out_dir / "measured_run.json").write_text(json.dumps(report, indent=1))
    print(f"energy {run.energy_j:.1f} J (measured) vs direct NVML around the run {direct_j:.1f} J; "
          f"carbon {run.carbon_g:.3f} g at {reading.current.g_per_kwh:.0f} g/kWh; {report['duration_s']:.1f} s")
    return 0 if run.exit_code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
