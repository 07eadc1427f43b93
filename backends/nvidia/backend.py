"""NvidiaBackend: probe privilege, record what is found, apply only what differs, restore exactly.

Order of events on ``apply`` (first call): read each GPU's power limit -> write the journal ->
change settings, each kind of change journalled (``touched``) before it is made. ``restore`` puts
back the recorded power limit (not the maximum) and resets the clock locks gridshift made, then
deletes the journal. Opening the backend (first NVML use) first restores any journal left by a
dead gridshift process on this host (``recover=True``), so a SIGKILLed run is undone by the next
start. Nothing happens in the constructor: it only stores its arguments.

Power limits are per physical GPU. A MIG instance shares its GPU's limit and clocks with other
tenants, so MIG devices are measure-only.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Any, Callable, ClassVar, Mapping

from backends.base import Backend
from backends.errors import BackendError, NoDevice, NoPermission, Unsupported
from backends.journal import Journal, JournalEntry, JournalError, JournalWarning
from backends.nvidia._nvml import READ_ONLY_ENV, Nvml, load_nvml_module
from backends.nvidia.devices import Device, discover
from backends.nvidia.meter import NvidiaMeter, PowerSampler, RaplReader
from backends.nvidia.privilege import Privilege, probe_privilege
from backends.types import Applied, Capabilities, DeviceInfo, Settings

__all__ = ["DELEGATE_ENV", "NvidiaBackend", "NvidiaClockControl"]

#: set by a gridshift process that holds the GPUs for the job it starts: the job's own backend may
#: then change what that process's journal already covers (see ``delegate_control``)
DELEGATE_ENV = "GRIDSHIFT_GPU_DELEGATED_BY"

POWER = "power_limit"
SM_LOCK = "sm_locked_clocks"
MEM_LOCK = "mem_locked_clocks"


class NvidiaBackend(Backend):
    """NVIDIA GPUs through NVML (nvidia-ml-py).

    Parameters are injectable for tests and embedding: ``nvml`` a binding module (default: the
    official ``pynvml``, or ``$GRIDSHIFT_NVML_MODULE``), ``journal`` where prior settings are kept,
    ``clock`` seconds for meter windows, ``env`` for CUDA_VISIBLE_DEVICES / LOCAL_RANK,
    ``privilege`` the read-only privilege probe. ``control: false`` forces measure-only.
    """

    name: ClassVar[str] = "nvidia"
    measured: ClassVar[bool] = True

    def __init__(
        self,
        *,
        nvml: Any = None,
        journal: Journal | None = None,
        clock: Callable[[], float] = time.monotonic,
        env: Mapping[str, str] | None = None,
        privilege: Callable[[], Privilege] = probe_privilege,
        per_rank: bool = True,
        recover: bool = True,
        control: bool = True,
        min_window_s: float = 1.0,
        rapl_root: str | None = "/sys/class/powercap",
    ) -> None:
        super().__init__()
        self._module = nvml
        self._journal = journal
        self._clock = clock
        self._env = env
        self._privilege_probe = privilege
        self._per_rank = per_rank
        self._recover = recover
        self._control = control
        self._min_window_s = min_window_s
        self._rapl_root = rapl_root
        self._lib: Nvml | None = None
        self._devices: list[Device] = []
        self._prior: dict[str, JournalEntry] = {}
        self._locked_sm: dict[str, tuple[int, int]] = {}
        self._locked_mem: dict[str, int] = {}
        # GPU key -> the power limit (mW) this backend found before its own first change to it, for
        # a later mode that leaves the limit unset ("as found"); only limits this backend set itself
        self._power_set_from_mw: dict[str, int] = {}
        self.recovered: list[str] = []
        # apply/restore (training thread, signal handler) and clock switches (executor worker thread)
        # share the journal entries and the lock bookkeeping; re-entrant for restore inside a handler
        self._clock_lock = threading.RLock()
        self._delegated: dict[str, tuple[str, ...]] = {}  # GPU key -> kinds the delegating journal covers
        self._delegated_out: dict[str, set[str]] = {}  # GPU key -> kinds we handed to a job (delegate_control)

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def journal(self) -> Journal:
        if self._journal is None:
            self._journal = Journal()
        return self._journal

    def _open(self) -> Nvml:
        if self._lib is None:
            lib = Nvml(self._module if self._module is not None else load_nvml_module())
            try:
                lib.init()
            except NoDevice as exc:
                raise NoDevice(f"no NVIDIA driver on this machine ({exc}); use backend: simulated") from exc
            try:
                self._devices = discover(lib, self._env if self._env is not None else os.environ,
                                         per_rank=self._per_rank)
            except BaseException:
                lib.shutdown()
                raise
            self._lib = lib
            if self._recover:
                self.recovered = self.recover_stale()
        return self._lib

    @property
    def devices(self) -> list[Device]:
        self._open()
        return list(self._devices)

    def close(self) -> None:
        if self._lib is not None:
            try:
                self._lib.shutdown()
            finally:
                self._lib = None

    # -- read-only -------------------------------------------------------------------------------
    def privilege(self) -> Privilege:
        if not self._control:
            return Privilege(False, "control disabled by backend option control: false")
        return self._privilege_probe()

    def _delegate_pid(self) -> int | None:
        env = self._env if self._env is not None else os.environ
        try:
            return int(env.get(DELEGATE_ENV, "")) or None
        except ValueError:
            return None

    def _foreign_owner(self, device: Device) -> JournalEntry | None:
        try:
            entry = self.journal.read(device.key)
        except JournalError:
            return None  # reported (and control refused) by _unreadable_journal
        if entry is None or entry.owner.pid == os.getpid():
            return None
        if entry.owner.pid == self._delegate_pid() and entry.touched:
            return None  # our parent holds the GPU and handed us what its journal covers
        return entry if entry.owner.is_alive() else None

    def _unreadable_journal(self, device: Device) -> str | None:
        """Why this GPU's journal file cannot be read, or None. Such a GPU stays measure-only: the file
        may hold the only record of settings a dead process left, so it is kept, never overwritten."""
        try:
            self.journal.read(device.key)
        except JournalError as exc:
            return str(exc)
        return None

    def capabilities(self) -> Capabilities:
        lib = self._open()
        first = next((d for d in self._devices if not d.is_mig), self._devices[0])
        h, i = first.handle, first.index
        power_range_w = default_w = None
        sm_clocks: tuple[int, ...] = ()
        mem_clocks: tuple[int, ...] = ()
        try:
            lo_mw, hi_mw = lib.power_limit_constraints_mw(h, i)
            power_range_w = (lo_mw / 1000.0, hi_mw / 1000.0)
            default_w = lib.power_limit_default_mw(h, i) / 1000.0
        except Unsupported:
            pass
        try:
            mem_clocks = tuple(sorted(lib.supported_memory_clocks_mhz(h, i), reverse=True))
            if mem_clocks:
                sm_clocks = tuple(sorted(lib.supported_graphics_clocks_mhz(h, mem_clocks[0], i), reverse=True))
        except (Unsupported, NoDevice):
            pass
        energy = True
        for d in self._devices:
            try:
                lib.total_energy_mj(d.handle, d.index)
            except Unsupported:
                energy = False
        priv = self.privilege()
        notes = [priv.note]
        allowed = priv.allowed
        if any(d.is_mig for d in self._devices):
            allowed = False
            notes.append("MIG instances share their GPU's power limit and clocks: measure-only")
        for d in self._devices:
            owner = self._foreign_owner(d)
            if owner is not None:
                allowed = False
                notes.append(f"GPU {d.index} is controlled by gridshift pid {owner.owner.pid}")
            problem = self._unreadable_journal(d)
            if problem is not None:
                allowed = False
                notes.append(f"GPU {d.index} measure-only: {problem} (kept; fix or remove it, then "
                             "`gridshift gpu restore`)")
        ours = {self.journal.path_for(d.key) for d in self._devices}
        for path, problem in self.journal.unreadable():
            if path not in ours:
                notes.append(f"ignored: {problem} (not a GPU here; kept)")
        if os.environ.get(READ_ONLY_ENV) == "1":
            # every setter is refused in this mode, so say so up front: the run is measure-only from
            # the probe on, and no report shows a limit as applied that was never written
            allowed = False
            notes.append(f"{READ_ONLY_ENV}=1 (read-only mode)")
        names = {d.name for d in self._devices}
        if len(names) > 1:
            notes.append("mixed GPU models: ranges shown are GPU " + str(first.index) + "'s")
        return Capabilities(
            backend=self.name,
            devices=tuple(DeviceInfo(index=d.visible_index, name=d.name, uuid=d.mig_uuid or d.uuid)
                          for d in self._devices),
            power_limit_range_w=power_range_w,
            default_power_limit_w=default_w,
            sm_clocks_mhz=sm_clocks,
            mem_clocks_mhz=mem_clocks,
            energy_counter=energy,
            can_control=allowed,
            control_note="; ".join(notes),
            measured=True,
        )

    def energy_mj(self) -> dict[int, float]:
        """Cumulative mJ per visible device (a MIG instance reads its whole GPU's counter)."""
        lib = self._open()
        return {d.visible_index: float(lib.total_energy_mj(d.handle, d.index)) for d in self._devices}

    def power_w(self) -> dict[int, float]:
        lib = self._open()
        return {d.visible_index: lib.power_usage_mw(d.handle, d.index) / 1000.0 for d in self._devices}

    def meter(self, *, sampler: PowerSampler | None = None) -> NvidiaMeter:
        self._open()
        rapl = RaplReader(self._rapl_root) if self._rapl_root else None
        return NvidiaMeter(self.energy_mj, self.power_w, clock=self._clock, min_window_s=self._min_window_s,
                           sampler=sampler, rapl=rapl if rapl is not None and rapl.readable() else None)

    def sampler(self, *, interval_s: float = 0.1) -> PowerSampler:
        """A background power-timeline sampler over this backend's devices (start/stop it yourself)."""
        self._open()
        return PowerSampler(self.power_w, clock=self._clock, interval_s=interval_s)

    def status(self) -> dict[str, Any]:
        """Everything ``gridshift gpu status`` shows. Reads only."""
        lib = self._open()
        caps = self.capabilities()
        rows = []
        for d in self._devices:
            row: dict[str, Any] = {"visible_index": d.visible_index, "index": d.index, "uuid": d.uuid,
                                   "mig_uuid": d.mig_uuid or None, "name": d.name}
            for key, read in (
                ("power_limit_w", lambda: lib.power_limit_mw(d.handle, d.index) / 1000.0),
                ("default_power_limit_w", lambda: lib.power_limit_default_mw(d.handle, d.index) / 1000.0),
                ("power_limit_range_w", lambda: [v / 1000.0 for v in lib.power_limit_constraints_mw(d.handle, d.index)]),
                ("power_draw_w", lambda: lib.power_usage_mw(d.handle, d.index) / 1000.0),
                ("energy_counter_j", lambda: lib.total_energy_mj(d.handle, d.index) / 1000.0),
                ("sm_clock_mhz", lambda: lib.sm_clock_mhz(d.handle, d.index)),
                ("mem_clock_mhz", lambda: lib.mem_clock_mhz(d.handle, d.index)),
                ("max_sm_clock_mhz", lambda: lib.max_sm_clock_mhz(d.handle, d.index)),
                ("clocks_event_reasons", lambda: lib.clocks_event_reasons(d.handle, d.index)),
                ("app_clocks_restricted", lambda: lib.app_clocks_restricted(d.handle, d.index)),
            ):
                try:
                    row[key] = read()
                except BackendError as exc:
                    row[key] = None
                    row.setdefault("unavailable", {})[key] = str(exc)
            clocks: dict[str, list[int]] = {}
            try:
                for mem in lib.supported_memory_clocks_mhz(d.handle, d.index):
                    clocks[str(mem)] = lib.supported_graphics_clocks_mhz(d.handle, mem, d.index)
            except BackendError as exc:
                row.setdefault("unavailable", {})["supported_clocks_mhz"] = str(exc)
            row["supported_clocks_mhz"] = clocks
            rows.append(row)
        priv = self.privilege()
        journal = []
        good, bad = self.journal.scan()
        for e in good:
            journal.append({**e.to_json(), "owner_alive": e.owner.is_alive()})
        try:
            driver = lib.driver_version()
        except BackendError:
            driver = None
        return {
            "backend": self.name,
            "driver_version": driver,
            "devices": rows,
            "capabilities": caps.to_json(),
            "permissions": {"can_control": caps.can_control, "privileged": priv.allowed, "note": caps.control_note},
            "journal": {"directory": str(self.journal.directory), "entries": journal,
                        "unreadable": [{"path": str(path), "error": problem} for path, problem in bad]},
        }

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

    # -- clock control for the DVFS executor ------------------------------------------------------
    def clock_control(self) -> "NvidiaClockControl":
        """A ``ClockControl`` (``plans.dvfs.executor``) that switches the SM clock lock of every
        controllable GPU through this backend: privilege checked, prior settings journalled before
        the first write, refusals raised (the executor counts them) instead of skipped."""
        return NvidiaClockControl(self)

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
                _restore_entry(lib, d.handle, entry)
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

    def recover_stale(self) -> list[str]:
        """Replay journals left by dead gridshift processes on this host; one line per GPU."""
        lib = self._lib if self._lib is not None else self._open()
        lines: list[str] = []
        entries, unreadable = self.journal.scan()
        for path, problem in unreadable:  # skipped, kept on disk; the other GPUs still recover
            lines.append(f"skipped {path}: {problem}; file kept, its GPU stays measure-only")
            warnings.warn(f"skipping GPU settings journal file {path} (kept on disk): {problem}", JournalWarning,
                          stacklevel=2)
        for entry in entries:
            if entry.owner.pid == os.getpid() and entry.owner.is_alive():
                continue
            if entry.owner.is_alive():
                lines.append(f"GPU {entry.index} ({entry.uuid}): left alone, gridshift pid {entry.owner.pid} still runs")
                continue
            if not entry.owner.same_boot():
                self.journal.remove(entry.uuid)
                lines.append(f"GPU {entry.index} ({entry.uuid}): journal from before a reboot discarded "
                             "(the driver reset those settings)")
                continue
            try:
                done = _restore_entry(lib, lib.handle_by_uuid(entry.uuid), entry)
            except BackendError as exc:  # keep the journal; report, and let the other GPUs recover
                lines.append(f"GPU {entry.index} ({entry.uuid}): could not restore ({exc}); journal kept")
                continue
            self.journal.remove(entry.uuid)
            lines.append(f"GPU {entry.index} ({entry.uuid}): restored {done or 'nothing to change'} "
                         f"(left by pid {entry.owner.pid})")
        return lines


class NvidiaClockControl:
    """The two-method clock control the DVFS executor drives (``plans.dvfs.executor.ClockControl``,
    satisfied structurally: backends do not import plans). Every call goes through the backend's
    journalled, read-before-write, privilege-checked path, so ``restore`` still puts back exactly
    what was found."""

    def __init__(self, backend: NvidiaBackend) -> None:
        self.backend = backend

    def set_locked_sm_clock_mhz(self, lo_mhz: int, hi_mhz: int) -> None:
        self.backend.lock_sm_clock_mhz(lo_mhz, hi_mhz)

    def reset_locked_sm_clock(self) -> None:
        self.backend.unlock_sm_clock()


def _restore_entry(lib: Nvml, handle: Any, entry: JournalEntry) -> str:
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
