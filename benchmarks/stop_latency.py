"""How fast ``gridshift run`` stops on Ctrl-C in a terminal: once, and twice (the impatient user).

A real ``gridshift run`` on a pseudo-terminal of its own (it leads the session; Ctrl-C is the byte
the keyboard sends, so the terminal sends SIGINT to the foreground group), the simulated backend, a
job that prints one line and sleeps, and a temporary Prefect server (no ``PREFECT_API_URL``), whose
shutdown is most of what a stop waits for. Once the job's line shows:

- ``one Ctrl-C``: one press; the run stops the job, restores, records, stops the server, exits 130;
- ``two Ctrl-C``: a second press as soon as the first is handled ("GPU settings restored"): it
  must keep what was measured and be faster than one, never slower (it was 6 s against 1.5 s).

Each figure is the median of ``--repeat`` stops, seconds from the first press to the exit
(measured, wall clock), with the run's energy from the ledger to show the second press kept it.

``--repo PATH`` times another checkout's ``gridshift`` (e.g. an older version) the same way.

    python benchmarks/stop_latency.py [--repeat 3] [--json] [--repo PATH]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import statistics
import sqlite3
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
JOB = "import time; print('job-started', flush=True); time.sleep(300)"


def _read_until(fd: int, text: str, timeout_s: float, seen: bytearray) -> None:
    end = time.monotonic() + timeout_s
    while text.encode() not in seen:
        if time.monotonic() > end:
            raise SystemExit(f"stop_latency: no {text!r} within {timeout_s:.0f} s: {seen.decode(errors='replace')[-2000:]}")
        if select.select([fd], [], [], 0.05)[0]:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                return


def _stop_once(env: dict[str, str], argv: list[str], presses: int, timeout_s: float) -> dict[str, Any]:
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, env=env, cwd=env["GRIDSHIFT_HOME"], stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, "job-started", timeout_s, seen)
        t0 = time.monotonic()
        os.write(master, b"\x03")
        if presses == 2:
            _read_until(master, "GPU settings restored", timeout_s, seen)
            os.write(master, b"\x03")
        proc.wait(timeout=timeout_s)
        stop_s = time.monotonic() - t0
        _read_until(master, "stopped by SIGINT", 5.0, seen)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.close(master)
    with sqlite3.connect(Path(env["GRIDSHIFT_HOME"]) / "ledger.sqlite3") as db:
        energy_j, report = db.execute("SELECT energy_j, report FROM runs ORDER BY created_at DESC LIMIT 1").fetchone()
    return {"stop_s": stop_s, "exit_code": proc.returncode, "energy_j": energy_j,
            "spans": len(json.loads(report)["modes"]),
            "restored_lines": seen.decode(errors="replace").count("GPU settings restored")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="stops per case (median reported)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="limit per wait")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose gridshift is timed")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gridshift-stop-") as tmp_name:
        tmp = Path(tmp_name)
        policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
        policy["job"]["command"] = [sys.executable, "-c", JOB]
        policy["backend"] = {"name": "simulated"}
        (tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
        (tmp / "home").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(GRIDSHIFT_HOME=str(tmp / "home"), PREFECT_HOME=str(tmp / "prefect-home"), PYTHONPATH=str(args.repo.resolve()))
        run = [sys.executable, "-c", "from flows.cli import main; main()", "run", str(tmp / "policy.yaml")]
        _stop_once(env, run, 1, args.timeout_s)  # creates the Prefect database (not counted)
        cases: dict[str, list[dict[str, Any]]] = {"one Ctrl-C": [], "two Ctrl-C": []}
        for _ in range(args.repeat):  # alternating, so a change in the machine's load hits both
            cases["one Ctrl-C"].append(_stop_once(env, run, 1, args.timeout_s))
            cases["two Ctrl-C"].append(_stop_once(env, run, 2, args.timeout_s))
    result = {"measured": True, "repeat": args.repeat, "cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0],
              "cases": {name: {"stop_s": statistics.median(s["stop_s"] for s in runs),
                               "stop_s_max": max(s["stop_s"] for s in runs),
                               "exit_codes": sorted({s["exit_code"] for s in runs}),
                               "energy_j_min": min(s["energy_j"] for s in runs),
                               "spans_min": min(s["spans"] for s in runs),
                               "restored_lines_max": max(s["restored_lines"] for s in runs)}
                        for name, runs in cases.items()}}
    one, two = (result["cases"][k]["stop_s"] for k in ("one Ctrl-C", "two Ctrl-C"))
    result["two_over_one"] = two / one
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"gridshift run stop latency in a terminal (measured, median of {args.repeat}; {os.cpu_count()} CPUs, "
          f"load average {result['load_average_1m']:.1f}; {args.repo.resolve()})")
    print(f"{'case':<12} {'stop s':>7} {'max s':>6} {'exit':>5} {'min energy J':>13} {'min spans':>10} {'restored lines':>15}")
    for name, c in result["cases"].items():
        print(f"{name:<12} {c['stop_s']:>7.2f} {c['stop_s_max']:>6.2f} {','.join(map(str, c['exit_codes'])):>5} "
              f"{c['energy_j_min']:>13.1f} {c['spans_min']:>10d} {c['restored_lines_max']:>15d}")
    print(f"two Ctrl-C / one Ctrl-C: {result['two_over_one']:.2f}x (the aim: under 1, and under 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
