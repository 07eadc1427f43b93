"""How far a reader has to follow the policy from ``gridshift run`` to the job process.

Runs ``gridshift run examples/policy.yaml --json`` in this process (the README's main job on the
embedded defaults: the packaged trace, the simulated GPU, a temporary Prefect server) under
``sys.setprofile`` (and ``threading.setprofile``, for Prefect's worker threads) and records every call
into a product function (``carbon/``, ``backends/``, ``plans/``, ``scheduler/``, ``simulation/``,
``flows/``) that receives the policy, or the run specification resolved from it, as an argument (or
as ``self`` holding one), up to the ``subprocess.Popen`` that starts the job. It prints:

- ``files``: the product files those functions live in (issue 23 asks for at most 12);
- ``returns_to_flows``: how often that chain of calls, in call order, comes back into ``flows/``
  from another package (at most 4);
- with ``--list``, the chain itself, one line per file visit.

The counts are structural (which code a reader must open), measured on a real run, not estimated.

    python benchmarks/run_path.py [--list] [--json] [--policy examples/policy.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("carbon", "backends", "plans", "scheduler", "simulation", "flows")
CARRIERS = {"Policy", "RunSpec"}  # the policy, and the run specification resolved from it


def _product_file(filename: str) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in PRODUCT else None


def _is_carrier(value: Any) -> bool:
    cls = type(value)
    return cls.__name__ in CARRIERS and cls.__module__.split(".")[0] in PRODUCT


def _carries(frame: Any) -> bool:
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    local = frame.f_locals
    for name in names:
        value = local.get(name)
        if _is_carrier(value):
            return True
        if name == "self" and any(_is_carrier(v) for v in getattr(value, "__dict__", {}).values()):
            return True
    return False


class PathRecorder:
    """The profile hook: product calls that carry the policy, until the job's Popen."""

    def __init__(self, job_marker: str) -> None:
        self.job_marker = job_marker
        self.chain: list[tuple[str, str]] = []  # (file, function) in call order
        self.done = False
        self._files: dict[str, str | None] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or self.done:
            return
        filename = frame.f_code.co_filename
        if filename.endswith("subprocess.py") and frame.f_code.co_name == "__init__":
            args = frame.f_locals.get("args")
            if args is not None and self.job_marker in " ".join(map(str, args if isinstance(args, (list, tuple)) else [args])):
                self.done = True
            return
        rel = self._files.get(filename, "") if filename in self._files else self._files.setdefault(filename, _product_file(filename))
        if rel and _carries(frame):
            self.chain.append((rel, frame.f_code.co_name))


def measure(policy: str, job_marker: str) -> dict[str, Any]:
    """Run ``gridshift run POLICY --json`` under the recorder; the chain's figures."""
    from flows.cli import app

    recorder = PathRecorder(job_marker)
    sys.setprofile(recorder)
    threading.setprofile(recorder)
    try:
        app(["run", policy, "--json"], standalone_mode=False)
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    visits: list[tuple[str, str]] = []
    for rel, fn in recorder.chain:
        if not visits or visits[-1][0] != rel:
            visits.append((rel, fn))
    returns = sum(1 for a, b in zip(visits, visits[1:]) if b[0].startswith("flows/") and not a[0].startswith("flows/"))
    files = sorted({rel for rel, _ in recorder.chain})
    return {"reached_job": recorder.done, "files": len(files), "returns_to_flows": returns, "file_list": files,
            "visits": [f"{rel}:{fn}" for rel, fn in visits]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=str(ROOT / "examples" / "policy.yaml"))
    parser.add_argument("--job-marker", default="train_tiny.py", help="a word of the job's argv (finds its Popen)")
    parser.add_argument("--list", action="store_true", help="print the chain, one line per file visit")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gridshift-run-path-") as home:
        os.environ.setdefault("GRIDSHIFT_HOME", home)  # the ledger and caches of this run only
        out = measure(args.policy, args.job_marker)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"reached the job's Popen: {out['reached_job']}")
    print(f"product files receiving the policy/run spec: {out['files']} (issue 23: at most 12)")
    print(f"returns into flows/: {out['returns_to_flows']} (issue 23: at most 4)")
    for f in out["file_list"]:
        print(f"  {f}")
    if args.list:
        print("chain (file visits in call order):")
        for v in out["visits"]:
            print(f"  {v}")


if __name__ == "__main__":
    main()
