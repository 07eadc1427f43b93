"""NvidiaBackend's write path: journalled claims on GPUs, read-before-write setters, delegation, clock locks, restore.

:class:`NvidiaControl` is the half of :class:`backends.nvidia.backend.NvidiaBackend` that changes a
GPU; the other half (lifecycle, privilege, capabilities, meters, status, recovery) sits in
``backend.py`` and sets up the state both use in its ``__init__``. Every change is journalled
(``touched``) before it is made, and ``_restore`` puts back exactly what was found
(:func:`restore_entry`, which also replays journals a dead process left).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from backends.errors import BackendError, NoPermission, Unsupported
from backends.journal import Journal, JournalEntry, JournalError
from backends.nvidia._nvml import READ_ONLY_ENV, Nvml
from backends.nvidia.devices import Device
from backends.types import Applied, Settings

__all__ = ["DELEGATE_ENV", "MEM_LOCK", "NvidiaControl", "POWER", "SM_LOCK", "restore_entry"]

#: set by a gridshift process that holds the GPUs for the job it starts: the job's own backend may
#: then change what that process's journal already covers (see ``delegate_control``)
DELEGATE_ENV = "GRIDSHIFT_GPU_DELEGATED_BY"

#: the kinds of change a journal entry records as ``touched``
POWER = "power_limit"
SM_LOCK = "sm_locked_clocks"
MEM_LOCK = "mem_locked_clocks"


class NvidiaControl:
    """The write path of :class:`backends.nvidia.backend.NvidiaBackend`; a mixin, never used alone.

    It uses the backend's ``_open()``, ``privilege()``, ``_foreign_owner()``,
    ``_unreadable_journal()``, ``_delegate_pid()`` and the state annotated below.
    """

    _env: Any
    _restored: bool
    _devices: list[Device]
    _prior: dict[str, JournalEntry]
    _delegated: dict[str, tuple[str, ...]]  # GPU key -> kinds the delegating journal covers
    _delegated_out: dict[str, set[str]]  # GPU key -> kinds we handed to a job (delegate_control)
    _locked_sm: dict[str, tuple[int, int]]
    _locked_mem: dict[str, int]
    _power_set_from_mw: dict[str, int]
    _clock_lock: threading.RLock
    journal: Journal

    # -- write path ------------------------------------------------------------------------------
    def apply(self, settings: Settings) -> Applied:
        with self._clock_lock:
            return super().apply(settings)

    def restore(self) -> None:
        with self._clock_lock:
            super().restore()

    def _controllable(self) -> list[Device]:
        return [d for d in self._devices if not d.is_mig]

    def _record_prior(self) -> None:
        lib = self._open()  # replays stale journals first, so what is read below is the true prior
        for d in self._controllable():
            owner = self._foreign_owner(d)
            if owner is not None:
                raise NoPermission(f"GPU {d.index} ({d.uuid}) is under the control of gridshift pid {owner.owner.pid}",
                                   action="record prior settings", gpu_index=d.index)
            problem = self._unreadable_journal(d)
            if problem is not None:
                raise NoPermission(f"GPU {d.index} ({d.uuid}): {problem}; measure-only until it is fixed or removed",
                                   action="record prior settings", gpu_index=d.index)
        self._prior = {}
        self._delegated = {}
        self._delegated_out = {}
        self._power_set_from_mw = {}
        delegate = self._delegate_pid()
        for d in self._controllable():
            prior = {"power_limit_mw": lib.power_limit_mw(d.handle, d.index)}
            entry = self.journal.new_entry(uuid=d.uuid, index=d.index, name=d.name, prior=prior)
            held = self.journal.read(d.key) if delegate else None
            if held is not None and held.owner.pid == delegate:
                # The delegating process's journal already protects the true prior (and survives our
                # SIGKILL); we remember only what *we* found, in memory, to put back on our restore.
                self._delegated[d.key] = held.touched
                self._prior[d.key] = entry
                continue
            try:
                self.journal.write(entry, exclusive=True)
            except FileExistsError:
                held = self.journal.read(d.key)
                if held is not None and held.owner.pid != os.getpid():
                    self._release_claims()
                    raise NoPermission(f"GPU {d.index} ({d.uuid}) was just claimed by gridshift pid {held.owner.pid}",
                                       action="record prior settings", gpu_index=d.index) from None
                if held is not None:  # our own leftover (an earlier restore failed): its prior is the true one
                    entry = held
                else:
                    self.journal.write(entry)
            self._prior[d.key] = entry

    def _release_claims(self) -> None:
        for key in self._prior:
            if key not in self._delegated:
                self.journal.remove(key)
        self._prior = {}

    def _delegation_released(self, device: Device) -> bool:
        """True when this job's GPU was delegated but the delegating process has since restored it
        (its journal entry is gone or no longer its own): a change now would have no journal."""
        if device.key not in self._delegated:
            return False
        try:
            held = self.journal.read(device.key)
        except JournalError:
            return True
        return held is None or held.owner.pid != self._delegate_pid()

    def _released_error(self, device: Device, what: str) -> NoPermission:
        return NoPermission(f"GPU {device.index}: gridshift pid {self._delegate_pid()}, which delegated control to "
                            f"this job, has restored the GPU and released it; not changing {what}",
                            action=f"change {what}", gpu_index=device.index)

    def _touch(self, device: Device, what: str) -> None:
        entry = self._prior[device.key]
        covered = self._delegated.get(device.key)
        if covered is not None and what not in covered:
            raise NoPermission(f"GPU {device.index}: the gridshift process that started this job journalled "
                               f"{', '.join(covered)} only, not {what}", action=f"change {what}", gpu_index=device.index)
        if covered is not None and self._delegation_released(device):
            # e.g. the flow restored on SIGTERM while this job still runs: its journal, which covered
            # our changes, is gone, so a change now could outlive both processes unrecorded
            raise self._released_error(device, what)
        if what not in entry.touched:
            entry = JournalEntry(uuid=entry.uuid, index=entry.index, name=entry.name, owner=entry.owner,
                                 prior=entry.prior, touched=entry.touched + (what,), written_at=entry.written_at)
            if covered is None:
                self.journal.write(entry)  # durable before the change it protects
            self._prior[device.key] = entry

    def _untouch(self, device: Device, what: str) -> None:
        entry = self._prior[device.key]
        if what in self._delegated_out.get(device.key, ()):
            return  # the job we delegated it to may have changed it too: our restore must still undo it
        if what in entry.touched:
            entry = JournalEntry(uuid=entry.uuid, index=entry.index, name=entry.name, owner=entry.owner,
                                 prior=entry.prior, touched=tuple(t for t in entry.touched if t != what),
                                 written_at=entry.written_at)
            if device.key not in self._delegated:
                self.journal.write(entry)  # only after the change it recorded is undone (or never happened)
            self._prior[device.key] = entry

    def _apply(self, settings: Settings) -> Applied:
        lib = self._open()
        changed: list[str] = []
        skipped: list[str] = []
        devices = self._controllable()
        for d in devices:
            try:
                self._apply_power(lib, d, settings, changed, skipped)
                self._apply_sm(lib, d, settings, changed, skipped)
                self._apply_mem(lib, d, settings, changed, skipped)
            except (NoPermission, Unsupported) as exc:  # never crash a run over a refused setting
                skipped.append(str(exc))
        first = devices[0] if devices else None
        in_force = Settings(
            power_limit_w=(lib.power_limit_mw(first.handle, first.index) / 1000.0) if first else None,
            sm_clock_mhz=self._locked_sm.get(first.key) if first else None,
            mem_clock_mhz=self._locked_mem.get(first.key) if first else None,
            batch_size=settings.batch_size,
            clock_plan=settings.clock_plan,
        )
        return Applied(requested=settings, in_force=in_force, changed=tuple(dict.fromkeys(changed)),
                       skipped=tuple(dict.fromkeys(skipped)))

    def _apply_power(self, lib: Nvml, d: Device, s: Settings, changed: list[str], skipped: list[str]) -> None:
        if s.power_limit_w is None:
            # "as found": put back the limit found before this backend changed it (a limit set by a
            # job we delegated to is the job's, and a later mode's explicit limit overrides it)
            found_mw = self._power_set_from_mw.get(d.key)
            if found_mw is not None:
                if self._delegation_released(d):  # the delegating process restored the true prior already
                    del self._power_set_from_mw[d.key]
                    return
                if lib.power_limit_mw(d.handle, d.index) != found_mw:
                    lib.set_power_limit_mw(d.handle, found_mw, d.index)
                    changed.append("power_limit_w")
                del self._power_set_from_mw[d.key]
            return
        target_mw = int(round(s.power_limit_w * 1000))
        lo_mw, hi_mw = lib.power_limit_constraints_mw(d.handle, d.index)
        if not lo_mw <= target_mw <= hi_mw:
            skipped.append(f"power limit {s.power_limit_w:.0f} W outside {lo_mw / 1000:.0f}-{hi_mw / 1000:.0f} W")
            return
        current_mw = lib.power_limit_mw(d.handle, d.index)
        if current_mw == target_mw:  # read before writing; no-op writes skipped
            return
        self._touch(d, POWER)
        lib.set_power_limit_mw(d.handle, target_mw, d.index)
        if self._delegation_released(d):  # released between the check in _touch and the write: undo it
            lib.set_power_limit_mw(d.handle, current_mw, d.index)
            raise self._released_error(d, POWER)
        self._power_set_from_mw.setdefault(d.key, current_mw)
        changed.append("power_limit_w")

    def _apply_sm(self, lib: Nvml, d: Device, s: Settings, changed: list[str], skipped: list[str]) -> None:
        if s.sm_clock_mhz is None:
            # "as found": undo our own lock; a lock made by a job we delegated to is left to the job
            if d.key in self._locked_sm:
                lib.reset_gpu_locked_clocks(d.handle, d.index)
                del self._locked_sm[d.key]
                self._untouch(d, SM_LOCK)
                changed.append("sm_clock_mhz")
            return
        lo, hi = s.sm_clock_mhz
        mem = max(lib.supported_memory_clocks_mhz(d.handle, d.index))
        supported = lib.supported_graphics_clocks_mhz(d.handle, mem, d.index)
        if lo > hi or lo < min(supported) or hi > max(supported):
            skipped.append(f"SM clock range {lo}-{hi} MHz outside {min(supported)}-{max(supported)} MHz")
            return
        if self._locked_sm.get(d.key) == (lo, hi):
            return
        first_lock = SM_LOCK not in self._prior[d.key].touched
        self._touch(d, SM_LOCK)
        try:
            lib.set_gpu_locked_clocks_mhz(d.handle, lo, hi, d.index)
        except BackendError:
            if first_lock:  # refused, so nothing is locked: a restore must not try (and fail) to unlock
                self._untouch(d, SM_LOCK)
            raise
        if self._delegation_released(d):  # released between the check in _touch and the write: undo it
            lib.reset_gpu_locked_clocks(d.handle, d.index)
            self._locked_sm.pop(d.key, None)
            raise self._released_error(d, SM_LOCK)
        self._locked_sm[d.key] = (lo, hi)
        changed.append("sm_clock_mhz")

    def _apply_mem(self, lib: Nvml, d: Device, s: Settings, changed: list[str], skipped: list[str]) -> None:
        if s.mem_clock_mhz is None:
            if d.key in self._locked_mem:  # "as found": undo our own lock
                lib.reset_memory_locked_clocks(d.handle, d.index)
                del self._locked_mem[d.key]
                self._untouch(d, MEM_LOCK)
                changed.append("mem_clock_mhz")
            return
        m = s.mem_clock_mhz
        supported = lib.supported_memory_clocks_mhz(d.handle, d.index)
        if m not in supported:
            skipped.append(f"memory clock {m} MHz not in {supported}")
            return
        if self._locked_mem.get(d.key) == m:
            return
        self._touch(d, MEM_LOCK)
        try:
            lib.set_memory_locked_clocks_mhz(d.handle, m, m, d.index)
        except Unsupported:
            skipped.append(f"memory clock locks are not supported on GPU {d.index} ({d.name})")
            return
        self._locked_mem[d.key] = m
        changed.append("mem_clock_mhz")

    def delegate_control(self, *, power: bool = False, sm_clock: bool = False) -> dict[str, str]:
        """Let a job this process starts change power limits and/or SM clock locks with its own backend.

        Journals the kinds of change first (so this process's restore, its signal handlers, and the
        next start after a SIGKILL undo them whoever made them), then returns the environment for
        the job (``GRIDSHIFT_GPU_DELEGATED_BY``). Without that, the job would see the GPU held by a
        live gridshift process and stay measure-only. Returns ``{}`` when control is not possible.
        """
        kinds = ([POWER] if power else []) + ([SM_LOCK] if sm_clock else [])
        if not kinds or not self.privilege().allowed or os.environ.get(READ_ONLY_ENV) == "1":
            return {}
        self._open()
        devices = self._controllable()
        if not devices:
            return {}
        if self._restored:  # the same bookkeeping as Backend.apply: record and journal the prior first
            self._record_prior()
            self._restored = False
        for d in devices:
            for what in kinds:
                self._touch(d, what)
                self._delegated_out.setdefault(d.key, set()).add(what)
        return {DELEGATE_ENV: str(os.getpid())}

    # -- clock locks for the DVFS executor (NvidiaBackend.clock_control) ---------------------------
    def lock_sm_clock_mhz(self, lo_mhz: int, hi_mhz: int) -> None:
        """Lock the SM clock of every controllable GPU to ``[lo_mhz, hi_mhz]``.

        Unlike ``apply`` (which reports a refused setting as skipped so a run goes on), this raises
        :class:`NoPermission` / :class:`Unsupported` / :class:`BackendError`: the caller switches
        clocks many times per step and must know each switch that did not happen.
        """
        with self._clock_lock:
            priv = self.privilege()
            if not priv.allowed:
                raise NoPermission(f"cannot lock SM clocks: {priv.note}", action="set locked SM clocks")
            self._open()
            devices = self._controllable()
            if not devices:
                raise Unsupported("no GPU here may have its clocks locked (MIG instances are measure-only)")
            if self._restored:  # the same bookkeeping as Backend.apply: record and journal the prior first
                self._record_prior()
                self._restored = False
            lib = self._open()
            for d in devices:
                changed: list[str] = []
                skipped: list[str] = []
                self._apply_sm(lib, d, Settings(sm_clock_mhz=(int(lo_mhz), int(hi_mhz))), changed, skipped)
                if skipped:
                    raise Unsupported(f"GPU {d.index}: {skipped[0]}")

    def unlock_sm_clock(self) -> None:
        """Undo the SM clock locks this backend made (``nvmlDeviceResetGpuLockedClocks``); others untouched."""
        with self._clock_lock:
            if self._restored or not self._locked_sm:
                return
            lib = self._open()
            for d in self._controllable():
                if d.key not in self._locked_sm:
                    continue
                lib.reset_gpu_locked_clocks(d.handle, d.index)
                del self._locked_sm[d.key]
                self._untouch(d, SM_LOCK)

    # -- restore ---------------------------------------------------------------------------------
    def _restore(self) -> None:
        lib = self._open()
        errors: list[BackendError] = []
        for d in self._controllable():
            entry = self._prior.get(d.key)
            if entry is None:
                continue
            if POWER in entry.touched and self._delegation_released(d):
                # the delegating process already put back the true prior; "our" prior (its mode's
                # limit) would now be an unjournalled change. Lock resets are always safe.
                entry = JournalEntry(uuid=entry.uuid, index=entry.index, name=entry.name, owner=entry.owner,
                                     prior=entry.prior, touched=tuple(t for t in entry.touched if t != POWER),
                                     written_at=entry.written_at)
            try:
                restore_entry(lib, d.handle, entry)
            except BackendError as exc:
                errors.append(exc)
                continue
            if self._delegated.pop(d.key, None) is None:
                self.journal.remove(d.key)  # a delegating process's journal stays: it restores the true prior
            self._locked_sm.pop(d.key, None)
            self._locked_mem.pop(d.key, None)
            self._power_set_from_mw.pop(d.key, None)
            self._delegated_out.pop(d.key, None)
            del self._prior[d.key]  # failed GPUs stay recorded (and journalled) for the next attempt
        if errors:
            raise errors[0]


def restore_entry(lib: Nvml, handle: Any, entry: JournalEntry) -> str:
    """Put back one GPU's journalled state; returns what was done, in words."""
    done: list[str] = []
    i = entry.index
    if POWER in entry.touched:
        prior_mw = int(entry.prior["power_limit_mw"])
        current_mw = lib.power_limit_mw(handle, i)
        if current_mw != prior_mw:
            lib.set_power_limit_mw(handle, prior_mw, i)
            done.append(f"power limit {current_mw / 1000:.0f} W -> {prior_mw / 1000:.0f} W")
    if SM_LOCK in entry.touched:
        lib.reset_gpu_locked_clocks(handle, i)
        done.append("SM clock lock reset")
    if MEM_LOCK in entry.touched:
        try:
            lib.reset_memory_locked_clocks(handle, i)
            done.append("memory clock lock reset")
        except Unsupported:
            pass  # the lock was refused too, so there is nothing to undo
    return ", ".join(done)
