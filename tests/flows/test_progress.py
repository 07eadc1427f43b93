"""Progress on long commands: a line on a terminal's stderr (under `script`, a real pty), nothing elsewhere;
``--json`` stays one object on stdout."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from flows.cli._progress import Progress

REPO = Path(__file__).resolve().parents[2]
GRIDSHIFT = [sys.executable, "-c", "from flows.cli import main; main()"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_is_redrawn_in_place_throttled_and_cleared() -> None:
    clock = iter([0.0, 0.1, 0.2, 0.9, 3.0, 3.1]).__next__
    stream = _Tty()
    with Progress("simulating", stream=stream, clock=clock) as progress:  # began at 0.0
        progress(0, 10)    # 0.1: the first step is always drawn
        progress(1, 10)    # 0.2: too soon after the last, skipped
        progress(5, 10)    # 0.9: drawn
        progress(10, 10)   # 3.0: the last step is always drawn
    text = stream.getvalue()
    assert text.count("\r\033[K") == 4 and text.endswith("\r\033[K")  # three lines, then cleared
    assert "simulating 0/10 jobs (0%), 0:00" in text and "5/10 jobs (50%)" in text and "1/10" not in text
    assert "10/10 jobs (100%), 0:03" in text


def test_the_time_left_and_the_stage() -> None:
    clock = iter([0.0, 30.0]).__next__
    stream = _Tty()
    Progress("simulating sites", stream=stream, clock=clock)(25, 100, "site de")
    assert "simulating sites site de: 25/100 jobs (25%), 0:30, about 1:30 left" in stream.getvalue()


def test_nothing_off_a_terminal_or_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = io.StringIO()
    with Progress("simulating", stream=piped) as progress:
        progress(1, 2)
    assert piped.getvalue() == ""
    monkeypatch.setenv("GRIDSHIFT_PROGRESS", "0")
    off = _Tty()
    Progress("simulating", stream=off)(1, 2)
    assert off.getvalue() == ""


def _trace(path: Path, days: int) -> Path:
    t0 = datetime(2021, 1, 1)
    rows = ["timestamp,g"] + [f"{t0 + timedelta(hours=h):%Y-%m-%d %H:%M},{300 + 120 * math.sin(2 * math.pi * h / 24):.1f}"
                              for h in range(24 * days)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux's script (a real terminal)")
def test_simulate_shows_progress_on_a_terminal_and_json_stays_one_object(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "trace.csv", days=40)
    out = tmp_path / "out.json"
    cmd = " ".join([*map(str, GRIDSHIFT[:2]), repr(GRIDSHIFT[2]), "simulate", str(REPO / "examples" / "nightly.yaml"),
                    "--trace", str(trace), "--json", ">", str(out)])
    typescript = tmp_path / "typescript"
    done = subprocess.run(["script", "-q", "-e", "-c", cmd, str(typescript)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, typescript.read_text(errors="replace")[-2000:]
    seen = typescript.read_text(errors="replace")
    assert "gridshift: simulating 0/39 jobs (0%)" in seen and "39/39 jobs (100%)" in seen
    assert json.loads(out.read_text())["jobs"] == 39  # stdout: the one object, nothing else
    piped = subprocess.run([*GRIDSHIFT, "simulate", str(REPO / "examples" / "nightly.yaml"), "--trace", str(trace),
                            "--json"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and json.loads(piped.stdout)["jobs"] == 39
    assert "simulating" not in piped.stderr  # no terminal, no progress


def test_the_long_loops_tell_their_progress(tmp_path: Path) -> None:
    from backends.simulated import SimulatedBackend
    from carbon.trace_file import read_trace
    from plans.zeus_trace import SHAPES, bench_traces, synthetic_trace
    from scheduler.planner.mode_figures import figures_for_policy
    from scheduler.policy.loader import load_policy
    from simulation.sim_forecast import NoisyTraceForecaster
    from simulation.simulate import simulate

    policy = load_policy(REPO / "examples" / "nightly.yaml")
    calls: list[tuple[int, int]] = []
    simulate(policy, read_trace(_trace(tmp_path / "t.csv", days=20)), figures_for_policy(policy, backend=SimulatedBackend()),
             NoisyTraceForecaster(error=0.0), workers=1, progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, calls[0][1]) and calls[-1] == (calls[0][1], calls[0][1]) and calls[0][1] > 10
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    told: list[tuple[int, int]] = []
    bench_traces([synthetic_trace(next(iter(SHAPES)), eta=0.5)], recurrences=3, seeds=[0, 1],
                 progress=lambda done, total: told.append((done, total)))
    assert told == [(1, 2), (2, 2)]
