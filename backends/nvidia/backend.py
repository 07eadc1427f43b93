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
from backends.errors import BackendError, NoDevice, Unsupported
from backends.journal import Journal, JournalEntry, JournalError, JournalWarning
from backends.nvidia._nvml import READ_ONLY_ENV, Nvml, load_nvml_module
from backends.nvidia.control import DELEGATE_ENV, NvidiaControl, restore_entry
from backends.nvidia.devices import Device, discover
from backends.nvidia.meter import NvidiaMeter, PowerSampler, RaplReader
from backends.nvidia.privilege import Privilege, probe_privilege
from backends.types import Capabilities, DeviceInfo

__all__ = ["NvidiaBackend", "NvidiaClockControl"]

class NvidiaBackend(NvidiaControl, Backend):
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

    # -- clock control for the DVFS executor ------------------------------------------------------
    def clock_control(self) -> "NvidiaClockControl":
        """A ``ClockControl`` (``plans.dvfs.executor``) that switches the SM clock lock of every
        controllable GPU through this backend: privilege checked, prior settings journalled before
        the first write, refusals raised (the executor counts them) instead of skipped."""
        return NvidiaClockControl(self)

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
                done = restore_entry(lib, lib.handle_by_uuid(entry.uuid), entry)
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
