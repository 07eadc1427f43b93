"""Power and speed of each mode from the best data there is, each figure saying where it came from.

In order of preference:

1. a **measured power-limit profile**: what ``PowerLimitCallback`` stores (``plans.profile_store``
   JSON), a Zeus-format CSV (``start_time, window_name, elapsed_time, gpu<i>_energy``; one row per
   limit ``__GlobalPowerLimitOptimizer_<W>``, every row the same work). Every measured limit may
   be a candidate mode (``limit_<W>w``), besides the policy's own modes; or a
   ``{"modes": {name: {"power_w", "slowdown"}}}`` file: *modelled* when gridshift wrote it
   (``"modelled": true``), else *declared* (typed by hand), never measured;
2. a mode's **DVFS plan** (``clock_plan``): its predicted energy and time against the default clocks;
3. the **backend's model** (``operating_point``/``slowdown``), the last resort.

Speeds are relative to the policy's reference mode (``rules.clean_mode``): 1.0 there.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plans.errors import BadProfile
from plans.power_limit import MAX_POWER_W, MAX_SLOWDOWN, figure_problem
from plans.profile_store import PowerProfile
from scheduler.errors import PolicyError
from scheduler.planner import ModeFigures
from scheduler.policy.types import Mode, Policy

__all__ = ["DECLARED", "LimitPoint", "figures_for_modes", "figures_for_policy", "limit_modes", "read_limit_profile", "read_zeus_csv"]

#: how figures typed by hand (a ``{"modes": ...}`` file) are labelled: neither measured nor modelled
DECLARED = "declared"

_ZEUS_WINDOW = re.compile(r"__GlobalPowerLimitOptimizer_(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class LimitPoint:
    """One measured power limit: mean power of the job (all GPUs) and time for the same work."""

    power_limit_w: float
    power_w: float
    time_s: float


def read_zeus_csv(path: str | Path) -> tuple[list[LimitPoint], int]:
    """(points, GPU count) of a Zeus JIT power-limit profile CSV."""
    where = str(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise PolicyError(f"{where}: cannot read profile: {exc}") from None
    if not rows:
        raise PolicyError(f"{where}: the profile has no rows")
    energy_cols = [k for k in rows[0] if k and re.fullmatch(r"gpu\d+_energy", k)]
    if "window_name" not in rows[0] or "elapsed_time" not in rows[0] or not energy_cols:
        raise PolicyError(f"{where}:1: a Zeus profile needs window_name, elapsed_time and gpu<i>_energy columns")
    out: list[LimitPoint] = []
    for line, row in enumerate(rows, start=2):
        m = _ZEUS_WINDOW.match(row["window_name"] or "")
        if m is None:
            continue
        try:
            t = float(row["elapsed_time"])
            e = sum(float(row[k]) for k in energy_cols)
        except (TypeError, ValueError):
            raise PolicyError(f"{where}:{line}: elapsed_time and gpu energies must be numbers") from None
        if not (math.isfinite(t) and math.isfinite(e) and t > 0 and e > 0):  # float() reads 'nan' and 'inf'
            raise PolicyError(f"{where}:{line}: elapsed_time and energy must be positive finite numbers")
        out.append(LimitPoint(float(m.group(1)), e / t, t))
    if not out:
        raise PolicyError(f"{where}: no __GlobalPowerLimitOptimizer_<W> rows")
    return sorted(out, key=lambda p: -p.power_limit_w), len(energy_cols)


def _from_power_profile(profile: PowerProfile) -> list[LimitPoint]:
    return sorted((LimitPoint(m.power_limit_w, m.avg_power_w * profile.world_size, m.time_per_step_s)
                   for m in profile.measurements), key=lambda p: -p.power_limit_w)


def read_limit_profile(profile: str | Path | dict[str, Any]) -> tuple[list[LimitPoint] | None, dict[str, Any] | None, str]:
    """(measured limits, or the simulator's per-mode figures, and a label naming the file).

    Accepts a Zeus CSV path, a ``plans.profile_store`` JSON (path or dict), or a
    ``{"modes": {...}}`` JSON of power_w/slowdown per mode.
    """
    label = Path(profile).name if isinstance(profile, (str, Path)) else "profile"
    if isinstance(profile, (str, Path)) and str(profile).lower().endswith(".csv"):
        return read_zeus_csv(profile)[0], None, label
    text = ""
    if isinstance(profile, dict):
        data = profile
    else:
        try:
            text = Path(profile).read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, ValueError) as exc:
            raise PolicyError(f"{profile}: cannot read profile: {exc}") from None
    where = str(profile) if text else label
    if isinstance(data, dict) and "measurements" in data:
        try:
            return _from_power_profile(PowerProfile.from_json(data)), None, label
        except BadProfile as exc:
            raise PolicyError(f"{where}: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("modes"), dict):
        _check_mode_table(data["modes"], where, text)
        return None, data, label
    raise PolicyError(f"{label}: not a profile: expected a Zeus CSV, a stored power-limit profile (measurements) "
                      "or {'modes': {name: {power_w, slowdown}}}")


def _check_mode_table(modes: dict[str, Any], where: str, text: str) -> None:
    """Every mode of a ``{"modes": ...}`` table has a usable ``power_w`` and ``slowdown``; else a
    PolicyError at ``file:line`` (the line found in ``text``, the file as read; none for a dict)."""
    for name, fig in modes.items():
        if not isinstance(fig, dict):
            raise PolicyError(f"{_at(where, text, (name,))}: modes.{name}: needs power_w and slowdown")
        for key, most in (("power_w", MAX_POWER_W), ("slowdown", MAX_SLOWDOWN)):
            if message := figure_problem(fig.get(key), name=key, most=most):
                raise PolicyError(f"{_at(where, text, (name, key))}: modes.{name}.{key}: {message}")


def _at(where: str, text: str, loc: tuple[str, ...]) -> str:
    """``where:line`` of ``modes.<loc>`` in the JSON ``text`` (JSON is YAML, so PyYAML's node
    positions give the line; NaN and Infinity are plain scalars there), or ``where`` alone."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader) if text else None
    except yaml.YAMLError:
        node = None
    for key in ("modes", *loc):
        if not isinstance(node, yaml.MappingNode):
            return where
        node = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    return f"{where}:{node.start_mark.line + 1}" if node is not None else where


def _interp(points: list[LimitPoint], limit_w: float) -> tuple[float, float, bool]:
    """(power, time) at ``limit_w``, linear between measured limits, clamped at the ends; exact?"""
    pts = sorted(points, key=lambda p: p.power_limit_w)
    if limit_w <= pts[0].power_limit_w:
        return pts[0].power_w, pts[0].time_s, abs(limit_w - pts[0].power_limit_w) < 0.5
    if limit_w >= pts[-1].power_limit_w:
        return pts[-1].power_w, pts[-1].time_s, abs(limit_w - pts[-1].power_limit_w) < 0.5
    for a, b in zip(pts, pts[1:]):
        if a.power_limit_w <= limit_w <= b.power_limit_w:
            if abs(limit_w - a.power_limit_w) < 0.5:
                return a.power_w, a.time_s, True
            if abs(limit_w - b.power_limit_w) < 0.5:
                return b.power_w, b.time_s, True
            f = (limit_w - a.power_limit_w) / (b.power_limit_w - a.power_limit_w)
            # interpolate energy for the work, not power: energy is what the profile measures
            e = a.power_w * a.time_s + f * (b.power_w * b.time_s - a.power_w * a.time_s)
            t = a.time_s + f * (b.time_s - a.time_s)
            return e / t, t, False
    raise AssertionError("unreachable")


def _useful(points: list[LimitPoint]) -> list[LimitPoint]:
    """The limits worth offering: drop one when another is at least as fast and needs no more energy per unit of work."""
    keep = []
    for p in points:
        e = p.power_w * p.time_s
        if not any(q is not p and q.time_s <= p.time_s and q.power_w * q.time_s <= e and
                   (q.time_s < p.time_s or q.power_w * q.time_s < e) for q in points):
            keep.append(p)
    return keep


def _limit_of(mode: Mode, max_limit_w: float) -> float | None:
    if mode.power_limit_w is not None:
        return float(mode.power_limit_w)
    if mode.power_limit_fraction is not None:
        return float(mode.power_limit_fraction) * max_limit_w
    if mode.sm_clock_mhz is None and mode.clock_plan is None and mode.power_limit_select is None:
        return max_limit_w  # leaves the hardware as found: the default (maximum) limit
    return None


def limit_modes(figures: list[ModeFigures]) -> dict[str, Mode]:
    """Policy modes for the candidate limits a profile added (``limit_<W>w``) and the power limits a cap
    may use (``cap_<W>w``, :func:`scheduler.planner.power_cap.cap_mode_name`), so a flow can apply them."""
    out: dict[str, Mode] = {}
    for f in figures:
        m = re.fullmatch(r"(?:limit|cap)_(\d+(?:\.\d+)?)w", f.name)
        if m:
            out[f.name] = Mode(power_limit_w=float(m.group(1)))
    return out


def figures_for_policy(policy: Policy, *, caps: Any = None, backend: Any = None,
                       profile: str | Path | dict[str, Any] | None = None, policy_path: str | Path | None = None,
                       all_limits: bool = True) -> list[ModeFigures]:
    """Figures for every policy mode (and, from a power-limit profile, every measured limit):
    :func:`figures_for_modes` with the policy's modes and reference mode."""
    return figures_for_modes(dict(policy.modes), policy.rules.clean_mode, caps=caps, backend=backend, profile=profile,
                             policy_path=policy_path, all_limits=all_limits)


def figures_for_modes(modes: dict[str, Mode], ref_name: str, *, caps: Any = None, backend: Any = None,
                      profile: str | Path | dict[str, Any] | None = None, policy_path: str | Path | None = None,
                      all_limits: bool = True) -> list[ModeFigures]:
    """Figures for every mode of ``modes`` (and, from a power-limit profile, every measured limit),
    speeds relative to the reference mode ``ref_name``.

    ``backend`` (with ``capabilities()``, ``operating_point()``, ``slowdown()``) is the last resort
    and the reference for a DVFS plan's relative prediction. Raises PolicyError when a mode has no
    figures from any source.
    """
    points, mode_table, label = (None, None, "")
    if profile is not None:
        points, mode_table, label = read_limit_profile(profile)
    if caps is None and backend is not None:
        caps = backend.capabilities()
    n_dev = max(len(caps.devices), 1) if caps is not None else 1

    # raw (power W, time factor, source, measured) per mode; time factors normalised at the end
    raw: dict[str, tuple[float, float, str, bool]] = {}
    if mode_table is not None:
        # a table is gridshift's own model output ("modelled": true, with its source) or typed by hand:
        # never a measurement, whatever it claims
        modelled = mode_table.get("modelled") is True
        source = str(mode_table.get("source", f"model {label}")) if modelled else f"{DECLARED} in {label}"
        for name, fig in mode_table["modes"].items():
            raw[name] = (float(fig["power_w"]), float(fig["slowdown"]), source, False)
    if points is not None:
        max_limit = max(p.power_limit_w for p in points)
        if caps is not None and caps.power_limit_range_w:
            max_limit = float(caps.power_limit_range_w[1])
        for name, mode in modes.items():
            limit = _limit_of(mode, max_limit)
            if limit is None:
                continue
            p, t, exact = _interp(points, limit)
            raw[name] = (p, t, f"measured profile {label}" + ("" if exact else f" (interpolated at {limit:.0f} W)"), exact)
        if all_limits:
            taken = {round(_limit_of(m, max_limit) or -1) for m in modes.values()}
            for pt in _useful(points):
                if round(pt.power_limit_w) not in taken:
                    raw[f"limit_{pt.power_limit_w:g}w"] = (pt.power_w, pt.time_s, f"measured profile {label}", True)
    for name, mode in modes.items():
        if name in raw or mode.clock_plan is None:
            continue
        from plans.dvfs.plan_file import load_mode_plan

        try:
            plan = load_mode_plan(mode.clock_plan, policy_path=policy_path)
        except Exception as exc:  # the plan reader's own errors name the file
            raise PolicyError(f"modes.{name}.clock_plan: {exc}") from None
        pred = plan.prediction
        base = raw.get(ref_name) or (_backend_figures(modes[ref_name], backend, caps, n_dev) if backend else None)
        if base is None:
            continue
        raw[name] = (base[0] * (pred.energy_j / pred.reference_energy_j) * (pred.reference_time_s / pred.time_s),
                     base[1] * pred.time_s / pred.reference_time_s,
                     f"DVFS plan {Path(mode.clock_plan).name} (predicted)", False)
    if backend is not None:
        for name, mode in modes.items():
            if name not in raw:
                raw[name] = _backend_figures(mode, backend, caps, n_dev)
    missing = [n for n in modes if n not in raw]
    if missing:
        raise PolicyError(f"modes.{missing[0]}: no power/speed figures (give a profile, a clock_plan or a backend model)")
    if ref_name not in raw:
        raise PolicyError(f"rules.clean_mode: no figures for the reference mode {ref_name!r}")
    ref_t = raw[ref_name][1]
    return [ModeFigures(name=n, power_w=p, speed=ref_t / t, source=src, measured=meas) for n, (p, t, src, meas) in raw.items()]


def _backend_figures(mode: Mode, backend: Any, caps: Any, n_dev: int) -> tuple[float, float, str, bool]:
    from scheduler.settings.resolve import resolve_settings

    settings = resolve_settings(mode, caps)
    gpu = caps.devices[0].name if caps is not None and caps.devices else "GPU"
    return (float(backend.operating_point(settings).power_w) * n_dev, float(backend.slowdown(settings)),
            f"{backend.name} {gpu} model", bool(getattr(backend, "measured", False)))


