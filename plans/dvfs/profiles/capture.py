"""Capture a kernel timeline of real training steps with torch.profiler and save it as a profile.

Two layers:

- :func:`profile_from_trace` is pure: it turns a torch.profiler Chrome trace (a dict) into a
  :class:`KernelProfile`. GPU activities (``cat`` kernel / gpu_memset / gpu_memcpy) are linked to
  the CPU-side launch through ``args.correlation``; the launch's time decides the innermost
  ``record_function`` range (``cat`` user_annotation) it belongs to, which becomes the phase.
  Ranges named ``gridshift.iteration.<k>`` mark iteration boundaries.
- :func:`capture_steps` imports torch lazily, runs ``step()`` for warm-up and then under the
  profiler, wrapping each step in ``gridshift.iteration.<k>``; label phases inside your step with
  :func:`phase` (``torch.profiler.record_function``).

No NVML here: GPU identity, clocks and power are passed in (``meta_fields``) by the caller, which
may read them read-only (see ``benchmarks/device/capture_layer_profile.py``).
"""

from __future__ import annotations

import bisect
import json
import os
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

if TYPE_CHECKING:
    from plans.dvfs.executor import ClockControl

from plans.dvfs.errors import PlanInputError, ProfileError
from plans.dvfs.profiles.kernel_profile import IterationSpan, KernelProfile, KernelRecord, ProfileMeta

__all__ = ["ITERATION_PREFIX", "profile_from_trace", "phase", "capture_steps", "sweep_clocks"]

ITERATION_PREFIX = "gridshift.iteration."
_GPU_CATS = {"kernel": "kernel", "gpu_memset": "memset", "gpu_memcpy": "memcpy"}


def profile_from_trace(trace: Mapping[str, Any], *, meta: ProfileMeta, phase_filter: Callable[[str], bool] | None = None) -> KernelProfile:
    """Build a profile from a torch.profiler Chrome trace dict.

    ``phase_filter`` chooses which user annotations count as phases (default: all except the
    iteration markers and ``ProfilerStep#``); the innermost matching range wins.
    """
    events = trace.get("traceEvents") if isinstance(trace, Mapping) else None
    if not isinstance(events, list):
        raise ProfileError("not a Chrome trace: no traceEvents list")
    keep_phase = phase_filter or (lambda n: not n.startswith(ITERATION_PREFIX) and not n.startswith("ProfilerStep"))
    launches: dict[Any, float] = {}
    iters: list[tuple[float, float, int]] = []
    ranges: list[tuple[float, float, str]] = []
    gpu: list[dict[str, Any]] = []
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat, name = ev.get("cat", ""), str(ev.get("name", ""))
        ts, dur = float(ev.get("ts", 0.0)), float(ev.get("dur", 0.0))
        args = ev.get("args") or {}
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = ts
        elif cat == "user_annotation":
            if name.startswith(ITERATION_PREFIX):
                try:
                    iters.append((ts, ts + dur, int(name[len(ITERATION_PREFIX):])))
                except ValueError:
                    pass
            elif keep_phase(name):
                ranges.append((ts, ts + dur, name))
        elif cat in _GPU_CATS and dur > 0:
            gpu.append(ev)
    if not gpu:
        raise ProfileError("the trace has no GPU kernels (was CUDA activity profiled?)")
    if not iters:
        raise ProfileError(f"the trace has no {ITERATION_PREFIX}<k> ranges; wrap each step (capture_steps does)")
    iters.sort()
    ranges.sort()
    gpu.sort(key=lambda ev: float(ev["ts"]))

    def innermost(t: float) -> str:
        best, best_len = "", float("inf")
        hi = bisect.bisect_right(ranges, (t, float("inf"), ""))
        for s, e, n in ranges[:hi]:
            if s <= t <= e and e - s < best_len:
                best, best_len = n, e - s
        return best

    def iteration_of(t: float) -> tuple[int, float] | None:
        for s, e, k in iters:
            if s <= t <= e:
                return k, s
        return None

    # GPU kernels run after their iteration's CPU range may have ended: map by launch time
    first_gpu: dict[int, float] = {}
    last_gpu: dict[int, float] = {}
    rows: list[tuple[int, dict[str, Any], float]] = []
    for ev in gpu:
        args = ev.get("args") or {}
        t_launch = launches.get(args.get("correlation"), float(ev["ts"]))
        it = iteration_of(t_launch)
        if it is None:
            continue
        k = it[0]
        start, end = float(ev["ts"]), float(ev["ts"]) + float(ev["dur"])
        first_gpu[k] = min(first_gpu.get(k, start), start)
        last_gpu[k] = max(last_gpu.get(k, end), end)
        rows.append((k, ev, t_launch))
    if not rows:
        raise ProfileError("no GPU kernel was launched inside a gridshift.iteration range")
    kernels = []
    for order, (k, ev, t_launch) in enumerate(rows):
        args = ev.get("args") or {}
        kernels.append(KernelRecord(
            name=str(ev.get("name", "")), order=order, iteration=k, start_us=float(ev["ts"]) - first_gpu[k],
            duration_us=float(ev["dur"]), stream=int(args.get("stream", 0) or 0), phase=innermost(t_launch),
            category=_GPU_CATS[ev["cat"]],  # type: ignore[arg-type]
        ))
    spans = tuple(IterationSpan(index=k, start_us=0.0, end_us=last_gpu[k] - first_gpu[k]) for k in sorted(first_gpu))
    # start_us are relative to each iteration's first GPU activity, so spans start at 0
    return KernelProfile(meta=meta, iterations=spans, kernels=tuple(kernels))


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Label a phase of the step (``layer0.forward``...) for the profiler; imports torch lazily."""
    import torch

    with torch.profiler.record_function(name):
        yield


def capture_steps(step: Callable[[], Any], *, meta: ProfileMeta, warmup: int = 3, iterations: int = 2,
                  trace_path: str | os.PathLike[str] | None = None) -> KernelProfile:
    """Run ``step`` ``warmup`` times, then ``iterations`` times under torch.profiler; return the profile.

    The Chrome trace is written to ``trace_path`` (a temporary file when None) and parsed with
    :func:`profile_from_trace`. Needs torch with CUDA.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    if not torch.cuda.is_available():
        raise ProfileError("capture needs a CUDA GPU (torch.cuda.is_available() is False)")
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False) as prof:
        for k in range(iterations):
            with record_function(f"{ITERATION_PREFIX}{k}"):
                step()
            torch.cuda.synchronize()
    path = Path(trace_path) if trace_path else Path(tempfile.mkstemp(suffix=".json")[1])
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    if trace_path is None:
        path.unlink(missing_ok=True)
    meta = meta.model_copy(update={"captured_at": meta.captured_at or datetime.now(timezone.utc).isoformat(),
                                   "torch_version": meta.torch_version or torch.__version__})
    return profile_from_trace(trace, meta=meta)


def sweep_clocks(
    capture: Callable[[], KernelProfile],
    control: "ClockControl",
    clocks_mhz: Sequence[int],
    *,
    allow_clock_changes: bool = False,
) -> dict[int, dict[int, tuple[float, None]]]:
    """Measure every kernel's duration at several locked SM clocks (``--sweep-clocks``).

    For each clock: lock it through ``control``, call ``capture()`` (e.g. a ``capture_steps``
    closure), and record each kernel's duration (last iteration, by index). The lock is always
    reset afterwards. Power per kernel cannot be metered at kernel scale (NVML updates every
    ~100 ms), so the power slot is None and :func:`build_tables` keeps those cells ``modelled``.

    Refused unless ``allow_clock_changes=True``: this changes GPU clocks. Use it only on hardware
    you own and may reconfigure, never on a lent or shared GPU.
    """
    if not allow_clock_changes:
        raise PlanInputError("a clock sweep changes GPU clocks; pass allow_clock_changes=True only on hardware "
                             "you own (never on a lent or shared GPU)")
    if not clocks_mhz:
        raise PlanInputError("give at least one clock to sweep")
    out: dict[int, dict[int, tuple[float, None]]] = {}
    n_kernels: int | None = None
    try:
        for f in clocks_mhz:
            control.set_locked_sm_clock_mhz(int(f), int(f))
            kernels = capture().iteration_kernels()
            if n_kernels is not None and len(kernels) != n_kernels:
                raise ProfileError(f"the step launched {len(kernels)} kernels at {f} MHz but {n_kernels} before; "
                                   "a sweep needs a deterministic step")
            n_kernels = len(kernels)
            for i, k in enumerate(kernels):
                out.setdefault(i, {})[int(f)] = (k.duration_us * 1e-6, None)
    finally:
        control.reset_locked_sm_clock()
    return out
