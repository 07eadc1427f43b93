"""What ``gridshift run`` costs on top of the job itself: time to its first output line, to the job's
first line, and overhead.

Measured in one run, on this machine, against the simplest alternative, the bare job command:

- ``bare job``: the job command alone (a Python process that prints one line and exits);
- ``gridshift run, temporary server``: no ``PREFECT_API_URL``, so gridshift starts (and stops) a
  temporary Prefect server for the run; ``PREFECT_HOME`` holds a database from a warm-up run, as it
  does for a user after the first run;
- ``gridshift run, running server``: ``PREFECT_API_URL`` names a ``prefect server start`` that is
  already up (started once before the repetitions, as a user or a service would keep it).

Each figure is the median of ``--repeat`` runs (wall clock, measured); first output = the first line
of any kind on stdout or stderr (gridshift promises one within 1 s, saying which Prefect server it
uses, so a user is never left looking at a silent terminal); overhead = the run's wall time minus the bare job's; CPU seconds say how much of it is work rather than waiting for a core. The simulated backend and the packaged trace keep it offline.
``--repo PATH`` times another checkout's ``gridshift`` (e.g. an older version) the same way.

Python's bytecode cache is on, as in an installed package (``pip install`` compiles it; Python writes
it at the first import otherwise): the runs write and read it in a folder of their own
(``PYTHONPYCACHEPREFIX``), also where the calling environment sets ``PYTHONDONTWRITEBYTECODE``
(which makes every process compile every module it imports, seconds for Prefect and its server).
``--no-bytecode-cache`` measures that case instead.

    python benchmarks/run_overhead.py [--repeat 3] [--json] [--repo PATH] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
MARKER = "gridshift-benchmark-first-line"
JOB = [sys.executable, "-c", f"print({MARKER!r}, flush=True)"]


def _timed(argv: list[str], env: dict[str, str], timeout_s: float) -> dict[str, float]:
    """Run ``argv``; seconds until its first output line, until MARKER appears (stdout or stderr), until
    the process exits, and the CPU seconds it (and the children it waited for, e.g. a temporary server) used."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    # in GRIDSHIFT_HOME's folder: `python -c` puts the working directory first on sys.path, and
    # --repo must win over a checkout the benchmark is started from
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(env["GRIDSHIFT_HOME"]).parent)
    first: list[float] = []
    any_line: list[float] = []
    tails: list[str] = []
    lock = threading.Lock()

    def watch(stream: Any) -> None:
        for line in stream:
            with lock:  # two readers: the earlier line of either stream wins
                if not any_line:
                    any_line.append(time.monotonic() - t0)
                if MARKER in line and not first:
                    first.append(time.monotonic() - t0)
            tails.append(line)

    threads = [threading.Thread(target=watch, args=(s,), daemon=True) for s in (proc.stdout, proc.stderr)]
    for t in threads:
        t.start()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"run_overhead: {argv[:4]} did not finish within {timeout_s:.0f} s")
    total = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for t in threads:
        t.join(5)
    if rc != 0 or not first:
        raise SystemExit(f"run_overhead: {argv[:4]} exited {rc}: {''.join(tails[-10:])}")
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"first_output_s": any_line[0], "first_line_s": first[0], "total_s": total, "cpu_s": cpu_s}


def _median(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_prefect_server(env: dict[str, str], log: Path, timeout_s: float) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port), "--analytics-off"], env=env, stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"run_overhead: `prefect server start` exited {proc.returncode} (log {log})")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # polling another process's readiness
    proc.kill()
    raise SystemExit(f"run_overhead: `prefect server start` not up within {timeout_s:.0f} s (log {log})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (median reported)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose gridshift is timed")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="limit per run")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module in every run (PYTHONDONTWRITEBYTECODE=1, no cached bytecode)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gridshift-overhead-") as tmp_name:
        tmp = Path(tmp_name)
        policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
        policy["job"]["command"] = JOB
        policy["backend"] = {"name": "simulated"}
        (tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(GRIDSHIFT_HOME=str(tmp / "home"), PREFECT_HOME=str(tmp / "prefect-home"),
                   PYTHONPATH=os.pathsep.join([str(args.repo.resolve()), *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "no-pycache")  # never read another cache, not even the checkout's
        else:
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")  # filled by the first run, like an install's
        gridshift = [sys.executable, "-c", "from flows.cli import main; main()", "run", str(tmp / "policy.yaml")]

        cases: dict[str, list[dict[str, float]]] = {"bare job": [], "gridshift run, temporary server": [],
                                                   "gridshift run, running server": []}
        first_ever = _timed(gridshift, env, args.timeout_s)  # creates the Prefect database (not counted)
        for _ in range(args.repeat):
            cases["bare job"].append(_timed(JOB, env, args.timeout_s))
            cases["gridshift run, temporary server"].append(_timed(gridshift, env, args.timeout_s))
        server, url = _start_prefect_server(env, tmp / "server.log", args.timeout_s)
        try:
            with_server = {**env, "PREFECT_API_URL": url}
            _timed(gridshift, with_server, args.timeout_s)  # the server's first flow run (not counted)
            for _ in range(args.repeat):
                cases["bare job"].append(_timed(JOB, env, args.timeout_s))
                cases["gridshift run, running server"].append(_timed(gridshift, with_server, args.timeout_s))
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()

    medians = {name: _median(samples) for name, samples in cases.items()}
    bare = medians["bare job"]["total_s"]
    result = {
        "measured": True, "repeat": args.repeat, "repo": str(args.repo.resolve()), "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0], "first_run_ever_s": first_ever["total_s"],
        "bytecode_cache": not args.no_bytecode_cache,
        "cases": {name: {**m, "overhead_s": m["total_s"] - bare} for name, m in medians.items()},
    }
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"gridshift run overhead (measured, median of {args.repeat}; {os.cpu_count()} CPUs, "
          f"load average {result['load_average_1m']:.1f}; bytecode cache {'on' if result['bytecode_cache'] else 'off'}; "
          f"{args.repo.resolve()})")
    print(f"{'case':<34} {'first output s':>14} {'job first line s':>16} {'total s':>8} {'overhead s':>11} {'CPU s':>6}")
    for name, m in result["cases"].items():
        print(f"{name:<34} {m['first_output_s']:>14.2f} {m['first_line_s']:>16.2f} {m['total_s']:>8.2f} "
              f"{m['overhead_s']:>11.2f} {m['cpu_s']:>6.2f}")
    print("first output s: gridshift's first line (the bare job's is its only line); the aim is under 1 s")
    print("CPU s: user+system seconds of the run and the children it waited for (a running server's own work is not in it);"
          " on a busy machine wall times grow, CPU seconds much less")
    print(f"first run with a new Prefect database{'' if args.no_bytecode_cache else ' and bytecode cache'} "
          f"(not in the medians): {first_ever['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
