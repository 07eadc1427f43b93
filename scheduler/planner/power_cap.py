"""A power cap on the planner's slots: where the GPU power a run may draw is limited, and what that allows. Pure.

A :class:`PowerCap` is the run's own headroom over time: a site's cap less what the other runs there
booked, a machine's cap, a grid event's limit (``gridshift curtail``, an OpenADR capacity limit), each
a :class:`CapWindow` with the sentence that explains it. Where windows overlap the lowest holds.

The planner asks two things of it (:func:`scheduler.planner.plan_slots`): the headroom of each slot
(:meth:`PowerCap.slot_headroom`, the lowest over the slot, so a slot never exceeds the cap at any
moment of it), and from that a (slots, modes) mask of the modes whose power fits (:func:`cap_mask`),
which :func:`scheduler.planner.solve.solve_slots` keeps. Modes marked ``only_under_cap`` (a power
limit between the policy's modes, :func:`cap_limits`) are allowed only in slots where the cap
binds: without a cap the plan is the one the policy's own modes give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.planner import ModeFigures, Segment

__all__ = ["CapWindow", "PowerCap", "cap_limits", "cap_mask", "cap_mode_name", "cap_reasons", "modes_under_cap"]


@dataclass(frozen=True)
class CapWindow:
    """At most ``watts`` of GPU power for this run from ``start`` to ``end`` (None: unbounded), and why."""

    watts: float
    why: str
    start: datetime | None = None
    end: datetime | None = None

    def overlaps(self, a: datetime, b: datetime) -> bool:
        return (self.start is None or self.start < b) and (self.end is None or a < self.end)

    def span(self) -> str:
        """``from 14:00:00 to 15:00:00 UTC``, ``until ...``, ``from ... on`` or ``always``."""
        if self.start is None:
            return "always" if self.end is None else f"until {self.end:%H:%M:%S} UTC"
        if self.end is None:
            return f"from {self.start:%Y-%m-%d %H:%M:%S} UTC on"
        return f"from {self.start:%H:%M:%S} to {self.end:%H:%M:%S} UTC"

    def to_json(self) -> dict[str, Any]:
        return {"watts": self.watts, "why": self.why, "start": self.start.isoformat() if self.start else None,
                "end": self.end.isoformat() if self.end else None}


@dataclass(frozen=True)
class PowerCap:
    """The run's power headroom over time (see the module docstring); empty: no cap."""

    windows: tuple[CapWindow, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.windows)

    def at(self, t: datetime) -> float:
        """The headroom at ``t`` (inf without a cap there)."""
        return min((w.watts for w in self.windows if w.overlaps(t, t + timedelta(microseconds=1))), default=math.inf)

    def binding(self, t: datetime) -> CapWindow | None:
        """The lowest window in force at ``t``."""
        live = [w for w in self.windows if w.overlaps(t, t + timedelta(microseconds=1))]
        return min(live, key=lambda w: w.watts) if live else None

    def over(self, a: datetime, b: datetime) -> float:
        """The lowest headroom anywhere in ``[a, b)``."""
        return min((w.watts for w in self.windows if w.overlaps(a, b)), default=math.inf)

    def slot_headroom(self, now: datetime, slot_s: float, n: int) -> np.ndarray:
        """The lowest headroom of each of ``n`` slots of ``slot_s`` from ``now`` (inf where none)."""
        out = np.full(n, math.inf)
        for w in self.windows:
            lo = 0 if w.start is None else max(int(math.floor((w.start - now).total_seconds() / slot_s + 1e-9)), 0)
            hi = n if w.end is None else min(int(math.ceil((w.end - now).total_seconds() / slot_s - 1e-9)), n)
            if hi > lo:
                out[lo:hi] = np.minimum(out[lo:hi], w.watts)
        return out

    def next_change(self, t: datetime) -> datetime | None:
        """The first start or end of a window after ``t`` (the run re-plans there), or None."""
        edges = [e for w in self.windows for e in (w.start, w.end) if e is not None and e > t]
        return min(edges, default=None)

    def ends_by(self, t: datetime) -> "PowerCap":
        """The windows still in force at or after ``t`` (the past ones dropped)."""
        return PowerCap(tuple(w for w in self.windows if w.end is None or w.end > t))

    def describe(self, now: datetime | None = None) -> str:
        """One phrase per window, lowest first: ``400 W from ... (why)``."""
        live = self.ends_by(now).windows if now is not None else self.windows
        return "; ".join(f"{w.watts:.0f} W {w.span()} ({w.why})" for w in sorted(live, key=lambda w: w.watts))

    def to_json(self) -> list[dict[str, Any]]:
        return [w.to_json() for w in self.windows]

    @classmethod
    def from_json(cls, data: Sequence[dict[str, Any]]) -> "PowerCap":
        def at(v: Any) -> datetime | None:
            return datetime.fromisoformat(v) if v else None

        return cls(tuple(CapWindow(float(d["watts"]), str(d.get("why", "")), at(d.get("start")), at(d.get("end")))
                         for d in data))


def cap_mode_name(limit_w: float) -> str:
    """The name of the mode that is a per-GPU power limit used under a cap (``cap_350w``)."""
    return f"cap_{limit_w:.0f}w"


def cap_limits(limit_range_w: tuple[float, float] | None, policy_limits_w: Sequence[float], *,
               steps: int = 8) -> list[float]:
    """Per-GPU power limits the planner may use under a cap, between the device's minimum and maximum:
    ``steps`` evenly spaced from the minimum, without those a policy mode already sets (within 1 %)."""
    if not limit_range_w:
        return []
    lo, hi = float(limit_range_w[0]), float(limit_range_w[1])
    if not 0 < lo < hi:
        return []
    out = []
    for x in np.linspace(lo, hi, steps + 1)[:-1]:
        limit = float(round(x))
        if all(abs(limit - p) > 0.01 * hi for p in policy_limits_w):
            out.append(limit)
    return out


def cap_mask(headroom: np.ndarray, figures: "Sequence[ModeFigures]") -> np.ndarray | None:
    """(slots, modes): True where a mode's power fits the slot's ``headroom``; modes only for a cap
    (``ModeFigures.only_under_cap``) only where the cap binds (below the policy's hungriest mode).
    None when the cap refuses nothing (then the cap modes are not needed either)."""
    power = np.array([f.power_w for f in figures], dtype=float)
    extra = np.array([f.only_under_cap for f in figures], dtype=bool)
    policy_max = float(power[~extra].max()) if (~extra).any() else float(power.max())
    binds = headroom < policy_max - 1e-6
    if not binds.any():
        return None
    allowed = power[None, :] <= headroom[:, None] + 1e-6
    allowed &= ~extra[None, :] | binds[:, None]
    return allowed


def cap_reasons(reasons: list[str], seg_reasons: list[str], segments: "Sequence[Segment]",
                figures: "Sequence[ModeFigures]", cap: PowerCap, *, now: datetime, feasible: bool,
                deadline: datetime | None, over_cap: bool = False) -> tuple[list[str], list[str]]:
    """The plan's sentences with the cap's: what it is, each segment it shapes, and, when the deadline
    cannot be met under it, that the cap is why (in place of the planner's "even the fastest mode")."""
    by_name = {f.name: f for f in figures}
    hungriest = max((f.power_w for f in figures if not f.only_under_cap), default=math.inf)
    out = [f"power cap: {cap.describe(now)}; " + ("the job cannot pause and draws more than the cap at its least "
                                                   "power: it runs at its least, over the cap" if over_cap
                                                   else "no slot of the plan draws more")]
    if not feasible and segments and not over_cap:
        late = (segments[-1].end - deadline).total_seconds() / 60 if deadline is not None else 0.0
        out.append(f"the deadline cannot be met under the power cap: the fastest plan it allows finishes at "
                   f"{segments[-1].end:%H:%M} UTC, {late:.0f} min late")
        reasons = [r for r in reasons if not r.startswith("the deadline cannot be met")]
    segs = list(seg_reasons)
    for k, s in enumerate(segments):
        room = cap.over(s.start, s.end)
        if room >= hungriest - 1e-6:
            continue
        fig = by_name.get(s.mode)
        draws = f"{fig.power_w:.0f} W" if fig is not None else "its power"
        limit = ", a power limit below the policy's modes" if fig is not None and fig.only_under_cap else ""
        window = cap.binding(s.start) or next((w for w in cap.windows if w.overlaps(s.start, s.end)), None)
        why = f" ({window.why})" if window is not None else ""
        text = (f"{s.mode} {s.start:%H:%M}-{s.end:%H:%M} UTC under the power cap of {room:.0f} W{why}: "
                f"it draws {draws}{limit}")
        if k < len(segs) and segs[k] in reasons:
            reasons = [text if r == segs[k] else r for r in reasons]
        if k < len(segs):
            segs[k] = text
    return out + reasons, segs


def modes_under_cap(modes: list[ModeFigures], cap: PowerCap | None, running: str | None, now: datetime,
                    slot_s: float, n: int) -> tuple[list[ModeFigures], np.ndarray | None]:
    """The modes to plan with and the cap's (slots, modes) mask (None: the cap refuses nothing).

    Modes only for a cap are dropped where no cap binds, but for the one running now: it stays, refused
    in every slot, so the run leaves it at once (the cap that called for it has ended)."""
    mask = cap_mask(cap.slot_headroom(now, slot_s, n), modes) if cap else None
    if mask is not None or not any(m.only_under_cap for m in modes):
        return modes, mask
    kept = [m for m in modes if not m.only_under_cap or m.name == running]
    if len(kept) == len([m for m in modes if not m.only_under_cap]):
        return kept, None
    mask = np.ones((n, len(kept)), dtype=bool)
    mask[:, [m.name for m in kept].index(str(running))] = False
    return kept, mask
