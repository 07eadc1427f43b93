"""Persist power-limit profiles and reuse them on later runs instead of profiling every night.

A profile is keyed by the GPU model and a workload fingerprint (a hash of whatever determines step
time and power: model, batch size, sequence length, precision, world size...). Profiles are
versioned JSON files under a directory the caller passes in; a newer version is refused with both
numbers in the message. A stored profile from another GPU model is never returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plans.errors import BadProfile
from plans.power_limit import LimitMeasurement

__all__ = ["PROFILE_VERSION", "PowerProfile", "ProfileStore", "workload_fingerprint"]

PROFILE_VERSION = 1


def workload_fingerprint(**fields: Any) -> str:
    """A stable 16-hex-digit hash of the fields that shape a step (order-independent)."""
    # json's default separators: the committed kernel profiles (tests/data) carry hashes made this way
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class PowerProfile:
    """Time and energy per step at each power limit, for one GPU model and workload.

    With ``world_size`` > 1 the energy is the sum over that many ranks (one GPU each) and the time
    the slowest rank's (:func:`plans.power_limit.combine_ranks`); :meth:`per_gpu` divides it out.
    """

    gpu_model: str
    fingerprint: str
    measurements: tuple[LimitMeasurement, ...]
    world_size: int = 1
    measured: bool = True

    def __post_init__(self) -> None:
        if not self.measurements:
            raise BadProfile("a profile needs at least one measurement")
        if self.world_size < 1:
            raise BadProfile(f"world_size must be >= 1, got {self.world_size}")

    def per_gpu(self) -> tuple[LimitMeasurement, ...]:
        """The measurements with energy per GPU (time per step is unchanged)."""
        w = self.world_size
        return tuple(LimitMeasurement(m.power_limit_w, m.time_per_step_s, m.energy_per_step_j / w) for m in self.measurements)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": PROFILE_VERSION,
            "gpu_model": self.gpu_model,
            "fingerprint": self.fingerprint,
            "world_size": self.world_size,
            "measured": self.measured,
            "measurements": [
                {"power_limit_w": m.power_limit_w, "time_per_step_s": m.time_per_step_s, "energy_per_step_j": m.energy_per_step_j}
                for m in sorted(self.measurements, key=lambda m: -m.power_limit_w)
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "PowerProfile":
        version = int(data.get("version", 0))
        if version > PROFILE_VERSION:
            raise BadProfile(f"profile version {version} is newer than this gridshift understands ({PROFILE_VERSION})")
        try:
            return cls(
                gpu_model=str(data["gpu_model"]),
                fingerprint=str(data["fingerprint"]),
                world_size=int(data.get("world_size", 1)),
                measured=bool(data.get("measured", True)),
                measurements=tuple(
                    LimitMeasurement(float(m["power_limit_w"]), float(m["time_per_step_s"]), float(m["energy_per_step_j"]))
                    for m in data["measurements"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadProfile(f"malformed profile: {exc}") from exc


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "gpu"


class ProfileStore:
    """Profiles as ``<directory>/<gpu model>/<fingerprint>.json``; writes are atomic (rename)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path_for(self, gpu_model: str, fingerprint: str) -> Path:
        return self.directory / _slug(gpu_model) / f"{_slug(fingerprint)}.json"

    def load(self, gpu_model: str, fingerprint: str) -> PowerProfile | None:
        """The stored profile, or None when there is none for this GPU model and workload."""
        path = self.path_for(gpu_model, fingerprint)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            profile = PowerProfile.from_json(json.loads(text))
        except json.JSONDecodeError as exc:
            raise BadProfile(f"{path}: not JSON: {exc}") from exc
        if profile.gpu_model != gpu_model or profile.fingerprint != fingerprint:
            return None
        return profile

    def save(self, profile: PowerProfile) -> Path:
        path = self.path_for(profile.gpu_model, profile.fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(profile.to_json(), fh, indent=1)
        os.replace(tmp, path)
        return path
