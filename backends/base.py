"""The backend contract: apply a mode's settings to hardware, meter energy, restore what was found.

Shape (after APScheduler's executors): the public methods hold the invariants, subclasses fill in
the underscored hooks.

- ``capabilities()`` never changes anything.
- ``apply(settings)`` records the settings found *before the first change* and only then calls
  ``_apply``; applying the same settings twice changes nothing.
- ``apply(settings)`` sets the hardware to "as found, overridden by ``settings``": a ``None`` field
  means *as found before the first apply*, not "leave whatever the last apply set". Switching from
  a mode that locked clocks or capped power to one that leaves them ``None`` undoes that lock (and
  drops it from the journal) or puts the found power limit back, so a switch to a faster mode
  really speeds the GPU up. Changes made by someone else (e.g. a job this backend delegated control
  to) are not this backend's to undo on ``apply``; ``restore`` still does.
- ``restore()`` puts back exactly what was recorded (not "max"), and is idempotent.
- ``meter()`` returns an :class:`EnergyMeter` over the backend's energy counter.
- Used as a context manager, a backend restores on exit, whatever happened inside.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from backends.meter import EnergyMeter
from backends.types import Applied, Capabilities, Settings

__all__ = ["Backend"]


class Backend(ABC):
    """Base class for hardware backends (entry-point group ``gridshift.backends``)."""

    #: registry name
    name: ClassVar[str] = ""
    #: False when every figure this backend gives is modelled rather than measured
    measured: ClassVar[bool] = True

    def __init__(self) -> None:
        self._applied: Applied | None = None
        self._restored = True

    # -- the contract --------------------------------------------------------------------------
    @abstractmethod
    def capabilities(self) -> Capabilities:
        """Describe devices, ranges and permissions without changing any setting."""

    def apply(self, settings: Settings) -> Applied:
        """Apply ``settings``; the first call records what was in force so ``restore`` can undo it."""
        if self._restored:
            self._record_prior()
            self._restored = False
        applied = self._apply(settings)
        self._applied = applied
        return applied

    def restore(self) -> None:
        """Put back the settings found before the first ``apply``. Safe to call more than once."""
        if self._restored:
            return
        self._restore()
        self._restored = True
        self._applied = None

    @abstractmethod
    def energy_mj(self) -> dict[int, float]:
        """Cumulative energy per device index, in mJ (monotonic within one process)."""

    def meter(self) -> EnergyMeter:
        """Energy windows over this backend's counter."""
        return EnergyMeter(self.energy_mj, measured=self.measured)

    @property
    def current(self) -> Applied | None:
        """The last ``apply`` result, or None when nothing is applied."""
        return self._applied

    def close(self) -> None:
        """Release the device library. Does not restore: use ``restore`` or the context manager."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.restore()
        finally:
            self.close()

    # -- hooks for implementations -------------------------------------------------------------
    @abstractmethod
    def _record_prior(self) -> None:
        """Read and remember the settings in force now (and journal them, for real hardware)."""

    @abstractmethod
    def _apply(self, settings: Settings) -> Applied:
        """Change what differs from ``settings``; report what was done and skipped."""

    @abstractmethod
    def _restore(self) -> None:
        """Put back what ``_record_prior`` remembered."""
