"""The exact slot planner (`scheduler.planner.solve.solve_slots`) against an earlier version of itself, on real calls.

Run from the repo root:
    # record the calls a simulation makes (arguments only), e.g. 30 nights of the 12 h job:
    .venv/bin/python benchmarks/solve_slots_speed.py --record calls.pkl -- simulate examples/nightly_12h.yaml \
        --trace ger30.csv --profile ../shared/data/zeus/profiles/V100+resnet50+gpu0.csv \
        --forecast noisy --forecast-error 0 --workers 1
    # replay them with the baseline's solve.py (a git revision) and the working tree's, interleaved:
    .venv/bin/python benchmarks/solve_slots_speed.py calls.pkl [--baseline 731babe] [--repeat 3] [--limit 300]

The replay checks that both versions return the same plans to the bit (modes, feasibility, objective,
resumes, rounding) and prints each one's seconds and the ratio, with the machine's load: on a shared
machine the two are timed call by call in turn, so load hits both alike. The baseline is loaded from
``git show REV:scheduler/planner/solve.py`` as a module of its own (it imports the rest of the
working tree, which the solver's behaviour does not depend on beyond ``slot_plan``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def record(path: Path, cli_args: list[str]) -> None:
    """Run ``gridshift CLI_ARGS`` in this process, pickling the arguments of every solve_slots call."""
    import scheduler.planner as planner
    import scheduler.planner.solve as solve

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    real = solve.solve_slots

    def spy(*a: Any, **k: Any) -> Any:
        calls.append((a, k))
        return real(*a, **k)

    planner.solve_slots = spy  # type: ignore[assignment]
    solve.solve_slots = spy  # type: ignore[assignment]
    from flows.cli import main

    sys.argv = ["gridshift", *cli_args]
    try:
        main()
    except SystemExit:
        pass
    with open(path, "wb") as f:
        pickle.dump(calls, f)
    print(f"recorded {len(calls)} calls to {path}", file=sys.stderr)


def baseline(rev: str) -> Any:
    src = subprocess.run(["git", "show", f"{rev}:scheduler/planner/solve.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    f = Path(tempfile.mkdtemp()) / "solve_baseline.py"
    f.write_text(src)
    spec = importlib.util.spec_from_file_location("solve_baseline", f)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def same(a: Any, b: Any) -> bool:
    return (a.modes.dtype == b.modes.dtype and a.modes.tobytes() == b.modes.tobytes() and a.feasible == b.feasible
            and repr(a.objective) == repr(b.objective) and a.resumes == b.resumes and repr(a.rounding) == repr(b.rounding))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("calls", type=Path, nargs="?")
    ap.add_argument("--record", type=Path, help="run the gridshift command after -- and save its calls here")
    ap.add_argument("--baseline", default="731babe", help="git revision of the solver to compare with")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N calls")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    if args.record:
        record(args.record, argv[cut + 1:])
        return
    if args.calls is None:
        ap.error("give the calls file (or --record)")
    import scheduler.planner.solve as new

    old = baseline(args.baseline)
    with open(args.calls, "rb") as f:
        calls = pickle.load(f)[: args.limit]
    t_old = t_new = 0.0
    differ = 0
    for _ in range(args.repeat):
        for a, k in calls:
            s = time.perf_counter()
            ro = old.solve_slots(*a, **k)
            t_old += time.perf_counter() - s
            s = time.perf_counter()
            rn = new.solve_slots(*a, **k)
            t_new += time.perf_counter() - s
            differ += not same(ro, rn)
    n = len(calls) * args.repeat
    if not n:
        sys.exit("no calls to replay")
    print(f"{n} calls: baseline {args.baseline} {t_old:.2f} s ({1e3 * t_old / n:.2f} ms a call), "
          f"working tree {t_new:.2f} s ({1e3 * t_new / n:.2f} ms a call): {t_old / t_new:.2f}x; "
          f"results differing: {differ}; load {os.getloadavg()[0]:.2f}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
