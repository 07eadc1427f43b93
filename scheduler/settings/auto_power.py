"""``power_limit_select`` in a mode: choose the limit from a stored profile, or build the profiler.

A mode with ``power_limit_select`` leaves ``Settings.power_limit_w`` unset (see
:func:`scheduler.settings.resolve.resolve_settings`). Two halves:

- the flow, before it applies the mode, looks up a stored profile for (GPU model, job fingerprint)
  and calls :func:`choose_power_limit` (pure): with a profile, the selector picks the limit; without
  one, the device default, and a warning that says how to produce the profile;
- the training process runs a :class:`plans.integrations.power_limit.PowerLimitCallback` with the profiler built
  by :func:`auto_power_limit_profiler` over the device's power limit range, walked in ``step_w``
  steps from the maximum down, and saves the profile where the flow looks next time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backends.types import Capabilities
from plans.power_limit import PowerLimitProfiler
from plans.profile_store import PowerProfile, workload_fingerprint
from plans.selectors import CarbonAware, make_selector
from scheduler.store.ledger import gridshift_home
from scheduler.policy.types import Mode

__all__ = ["PROFILE_DIR_ENV", "FINGERPRINT_ENV", "GPU_MODEL_ENV", "PowerChoice", "auto_power_limit_profiler",
           "choose_power_limit", "job_fingerprint", "profiles_dir"]

#: environment variables that tell the training process where its PowerLimitCallback saves the profile
PROFILE_DIR_ENV = "GRIDSHIFT_PROFILE_DIR"
FINGERPRINT_ENV = "GRIDSHIFT_WORKLOAD_FINGERPRINT"
GPU_MODEL_ENV = "GRIDSHIFT_GPU_MODEL"


def profiles_dir() -> Path:
    """Where power-limit profiles are stored: ``$GRIDSHIFT_HOME/profiles``."""
    return gridshift_home() / "profiles"


def job_fingerprint(job_name: str, command: list[str] | str | None) -> str:
    """The workload fingerprint the flow and the training process agree on: job name + command."""
    return workload_fingerprint(job=job_name, command=command)


@dataclass(frozen=True)
class PowerChoice:
    """The limit for a ``power_limit_select`` mode (None: leave as found), why, and any warning."""

    power_limit_w: float | None
    reason: str
    warning: str = ""


def choose_power_limit(
    mode: Mode,
    caps: Capabilities,
    profile: PowerProfile | None,
    intensity_g_per_kwh: float | None,
    *,
    max_ci_g_per_kwh: float | None = None,
    fingerprint: str = "",
) -> PowerChoice:
    """Pick the power limit for ``mode`` on ``caps`` from a stored ``profile``. Pure.

    The ``carbon`` selector weighs carbon at ``intensity_g_per_kwh`` (normalised by
    ``max_ci_g_per_kwh``, default the larger of the intensity and 1000 g/kWh). Profile limits outside
    the device's range are ignored. Without a usable profile: the device default, with a warning.
    """
    if mode.power_limit_select is None:
        raise ValueError("choose_power_limit is for modes with power_limit_select")
    sel = mode.power_limit_select
    measurements = list(profile.measurements) if profile is not None else []
    if measurements and caps.power_limit_range_w is not None:
        lo, hi = caps.power_limit_range_w
        measurements = [m for m in measurements if lo - 1e-6 <= m.power_limit_w <= hi + 1e-6]
    if not measurements:
        model = caps.devices[0].name if caps.devices else "this GPU"
        default = caps.default_power_limit_w
        at = f"the device default ({default:g} W)" if default is not None else "the limit found"
        why = "no stored power-limit profile" if profile is None else "the stored profile has no limit in the device range"
        warning = (f"power_limit_select {sel!r}: {why} for {model} / workload {fingerprint or '?'}, running at {at}; "
                   f"produce one in-process with plans.integrations.power_limit.PowerLimitCallback(backend, "
                   f"scheduler.settings.auto_power.auto_power_limit_profiler(mode, caps), store=ProfileStore(${PROFILE_DIR_ENV}), "
                   f"gpu_model=${GPU_MODEL_ENV}, fingerprint=${FINGERPRINT_ENV}) in the training loop")
        return PowerChoice(default, f"power limit auto ({sel}): {why}, device default", warning)
    # the profile's energy sums its own world_size ranks; the node's GPU count does not enter (issue 11)
    world_size = profile.world_size if profile is not None else 1
    if sel == "carbon":
        ci = intensity_g_per_kwh if intensity_g_per_kwh is not None else (max_ci_g_per_kwh or 1000.0)
        max_ci = max(max_ci_g_per_kwh or 1000.0, ci)
        selector = CarbonAware(mode.eta, max_ci_g_per_kwh=max_ci, world_size=world_size,
                               max_slowdown=1.0 + mode.max_slowdown if mode.max_slowdown is not None else None)
        limit_w = selector.select_for(measurements, ci)
        basis = f"carbon selector at {ci:.0f} g/kWh (eta {mode.eta:g})"
    else:
        selector = make_selector(sel, eta=mode.eta, max_slowdown=mode.max_slowdown, world_size=world_size)
        limit_w = selector.select(measurements)
        basis = f"{sel} selector"
    kind = "measured" if profile is not None and profile.measured else "modelled"
    ranks = f" ({world_size} GPUs, per-GPU maximum power)" if world_size > 1 else ""
    return PowerChoice(limit_w, f"power limit auto: {limit_w:g} W by the {basis} over a stored {kind} profile "
                                f"of {len(measurements)} limits{ranks}")


def auto_power_limit_profiler(
    mode: Mode,
    caps: Capabilities,
    *,
    step_w: float = 25.0,
    max_ci_g_per_kwh: float | None = None,
    warmup_steps: int = 10,
    profile_steps: int = 40,
    world_size: int = 1,
) -> PowerLimitProfiler | None:
    """The profiler for ``mode``, or None when the mode fixes its limit (or the device has no range).

    ``world_size``: the ranks whose windows the callback combines (energy summed), i.e. the
    ``torch.distributed`` world size when the callback all-reduces, else 1. Not the node's GPU count.
    """
    if mode.power_limit_select is None or caps.power_limit_range_w is None:
        return None
    if step_w <= 0:
        raise ValueError("step_w must be positive")
    lo, hi = caps.power_limit_range_w
    limits = []
    p = hi
    while p >= lo - 1e-9:
        limits.append(p)
        p -= step_w
    selector = make_selector(
        mode.power_limit_select,
        eta=mode.eta,
        max_slowdown=mode.max_slowdown,
        max_ci_g_per_kwh=max_ci_g_per_kwh,
        world_size=world_size,
    )
    return PowerLimitProfiler(limits, selector, warmup_steps=warmup_steps, profile_steps=profile_steps)
