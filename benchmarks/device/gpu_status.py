"""Run ``gridshift gpu status`` (JSON and human) on the device, read-only; save under $OUT.

    PYTHONPATH=. OUT=/tmp/out python3 benchmarks/device/gpu_status.py

Read-only by construction: ``gpu status`` only calls NVML getters (limits, constraints, clocks,
supported clocks, energy, power, event reasons, API restriction) and does not replay the journal.
Without a GPU it records the one-line exit-3 error instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

CMD = [sys.executable, "-c", "from flows.cli import main; main()", "gpu", "status"]


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ".")}
    env.pop("GRIDSHIFT_NVML_MODULE", None)  # the real binding only
    t0 = time.perf_counter()
    js = subprocess.run(CMD + ["--json"], capture_output=True, text=True, env=env, timeout=120)
    json_s = time.perf_counter() - t0
    human = subprocess.run(CMD, capture_output=True, text=True, env=env, timeout=120)
    result = {
        "command": "PYTHONPATH=. python3 -c 'from flows.cli import main; main()' gpu status --json",
        "returncode": js.returncode,
        "wall_s": round(json_s, 3),
        "stderr": js.stderr.strip(),
        "status": json.loads(js.stdout) if js.returncode == 0 and js.stdout.strip() else None,
    }
    (out / "gpu_status.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    (out / "gpu_status.txt").write_text(human.stdout + human.stderr)
    print(human.stdout + human.stderr, end="")
    if result["status"] is None:
        print(f"no NVIDIA status (exit {js.returncode}): {js.stderr.strip()}")
        return 0
    for d in result["status"]["devices"]:
        tables = {m: f"{min(c)}-{max(c)} MHz x{len(c)}" for m, c in d["supported_clocks_mhz"].items() if c}
        print(f"GPU {d['index']}: power range {d['power_limit_range_w']} W, clocks {tables}")
    print(f"wrote {out / 'gpu_status.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
