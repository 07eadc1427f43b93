"""A faithful, stateful fake of the nvidia-ml-py (``pynvml``) surface gridshift uses.

Faithful means: the same function names and argument order, NVML's units (mW, mJ, MHz), and the
binding's real exceptions (``pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)`` builds
``NVMLError_NoPermission``), raised where the driver raises them: every call before ``nvmlInit`` is
UNINITIALIZED, setters without privilege are NO_PERMISSION, memory locks on HBM parts are
NOT_SUPPORTED, out-of-range limits are INVALID_ARGUMENT, power and energy on MIG handles are
NOT_SUPPORTED. Like the real NVML it has *no getter for locked clocks*; tests read ``state()``.

Two ways to use it:

* in-process: ``FakeNvml(clock=fake_clock, privileged=False)`` is a module-like object to pass as
  ``nvml=`` (each test gets its own, nothing global);
* across processes: import this *module* (``GRIDSHIFT_NVML_MODULE=tests.fakes.fake_nvml``) with
  ``GRIDSHIFT_FAKE_NVML_STATE=/path/state.json``; module attribute access delegates to a FakeNvml
  whose state is re-read from and written to that JSON file on every call, so a SIGKILLed process's
  settings are still there for ``gridshift gpu restore`` in the next process. Time is wall time.

The energy counter integrates min(draw, power limit) over the injected clock and, like the H200,
only moves on ``update_period_s`` (100 ms) ticks.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pynvml as _real

ENV_STATE = "GRIDSHIFT_FAKE_NVML_STATE"

H200_SM_CLOCKS_MHZ = list(range(1980, 344, -15))  # 110 values, as measured
H200_MEM_CLOCKS_MHZ = [3201, 2201]


def h200(index: int = 0, *, draw_w: float = 400.0, mig: int = 0) -> dict[str, Any]:
    """State of one H200 as found on the lent machine (defaults, nothing locked)."""
    return {
        "index": index,
        "uuid": f"GPU-{index:08d}-fake-h200-0000-{index:012d}",
        "name": "NVIDIA H200",
        "power_limit_mw": 700_000,
        "default_limit_mw": 700_000,
        "min_limit_mw": 200_000,
        "max_limit_mw": 700_000,
        "sm_clocks_mhz": list(H200_SM_CLOCKS_MHZ),
        "mem_clocks_mhz": list(H200_MEM_CLOCKS_MHZ),
        "locked_sm_mhz": None,
        "locked_mem_mhz": None,
        "mem_lock_supported": False,
        "draw_mw": int(draw_w * 1000),
        "energy_mj": 1_000_000.0,  # the counter starts at driver load, not at 0
        "last_s": None,
        "mig": [f"MIG-{index:08d}-fake-{k:04d}" for k in range(mig)],
    }


def default_state(*, gpus: int = 1, privileged: bool = True, driver: bool = True) -> dict[str, Any]:
    return {
        "version": 1,
        "privileged": privileged,
        "driver_loaded": driver,
        "update_period_s": 0.1,
        "gpus": [h200(i) for i in range(gpus)],
        "calls": [],
    }


def write_state(path: Path | str, state: dict[str, Any]) -> None:
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


@dataclass(frozen=True)
class _Handle:
    index: int
    mig: int | None = None


def _err(code: int) -> Exception:
    return _real.NVMLError(code)


class FakeNvml:
    """A module-like fake NVML. Test knobs: ``state()`` (a copy), ``update(fn)``, ``set_draw_w``."""

    NVMLError = _real.NVMLError

    def __init__(
        self,
        *,
        state: dict[str, Any] | None = None,
        state_path: Path | str | None = None,
        clock: Callable[[], float] = time.monotonic,
        gpus: int = 1,
        privileged: bool = True,
        driver: bool = True,
    ) -> None:
        self._path = Path(state_path) if state_path else None
        if self._path is not None and self._path.exists():
            self._state = json.loads(self._path.read_text())
        else:
            self._state = state or default_state(gpus=gpus, privileged=privileged, driver=driver)
            if self._path is not None:
                write_state(self._path, self._state)
        self._clock = clock
        self._initialized = 0
        for name in dir(_real):
            if name.startswith("NVML_") or name.startswith("NVMLError_"):
                setattr(self, name, getattr(_real, name))

    # -- test knobs ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        self._load()
        self._advance()
        return copy.deepcopy(self._state)

    def update(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self._load()
        self._advance()
        fn(self._state)
        self._save()

    def set_draw_w(self, index: int, draw_w: float) -> None:
        self.update(lambda s: s["gpus"][index].__setitem__("draw_mw", int(draw_w * 1000)))

    # -- persistence and physics -----------------------------------------------------------------
    def _load(self) -> None:
        if self._path is not None:
            self._state = json.loads(self._path.read_text())

    def _save(self) -> None:
        if self._path is not None:
            write_state(self._path, self._state)

    def _advance(self) -> None:
        now = self._clock()
        for gpu in self._state["gpus"]:
            if gpu["last_s"] is not None:
                dt = max(now - gpu["last_s"], 0.0)
                gpu["energy_mj"] += min(gpu["draw_mw"], gpu["power_limit_mw"]) * dt
            gpu["last_s"] = now

    def _gpu(self, handle: Any, *, mig_ok: bool = False) -> dict[str, Any]:
        if not self._initialized:
            raise _err(_real.NVML_ERROR_UNINITIALIZED)
        if not isinstance(handle, _Handle):
            raise _err(_real.NVML_ERROR_INVALID_ARGUMENT)
        if handle.mig is not None and not mig_ok:
            raise _err(_real.NVML_ERROR_NOT_SUPPORTED)
        return self._state["gpus"][handle.index]

    def _setter(self, handle: Any, call: str, *args: Any) -> dict[str, Any]:
        self._load()
        self._advance()
        gpu = self._gpu(handle)
        if not self._state["privileged"]:
            raise _err(_real.NVML_ERROR_NO_PERMISSION)
        self._state["calls"].append([call, gpu["index"], *args])
        return gpu

    def _read(self, handle: Any, *, mig_ok: bool = False) -> dict[str, Any]:
        self._load()
        return self._gpu(handle, mig_ok=mig_ok)

    # -- binding surface: library ----------------------------------------------------------------
    def _nvmlGetFunctionPointer(self, name: str) -> Any:  # present in the official binding only
        raise _err(_real.NVML_ERROR_FUNCTION_NOT_FOUND)

    def nvmlInit(self) -> None:
        self._load()
        if not self._state["driver_loaded"]:
            raise _err(_real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self._initialized += 1

    def nvmlShutdown(self) -> None:
        if not self._initialized:
            raise _err(_real.NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        if not self._initialized:
            raise _err(_real.NVML_ERROR_UNINITIALIZED)
        return "580.159.04-fake"

    # -- discovery -------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._load()
        if not self._initialized:
            raise _err(_real.NVML_ERROR_UNINITIALIZED)
        return len(self._state["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._load()
        if not self._initialized:
            raise _err(_real.NVML_ERROR_UNINITIALIZED)
        if not 0 <= index < len(self._state["gpus"]):
            raise _err(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        self._load()
        if not self._initialized:
            raise _err(_real.NVML_ERROR_UNINITIALIZED)
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self._state["gpus"]:
            if gpu["uuid"] == text:
                return _Handle(gpu["index"])
            if text in gpu["mig"]:
                return _Handle(gpu["index"], gpu["mig"].index(text))
        raise _err(_real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._read(handle)["index"]

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu = self._read(handle, mig_ok=True)
        return gpu["name"] if handle.mig is None else f"{gpu['name']} MIG 1g.18gb"

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu = self._read(handle, mig_ok=True)
        return gpu["uuid"] if handle.mig is None else gpu["mig"][handle.mig]

    def nvmlDeviceIsMigDeviceHandle(self, handle: Any) -> int:
        self._read(handle, mig_ok=True)
        return int(handle.mig is not None)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any) -> _Handle:
        self._read(handle, mig_ok=True)
        if handle.mig is None:
            raise _err(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(handle.index)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._read(handle)
        mode = _real.NVML_DEVICE_MIG_ENABLE if gpu["mig"] else _real.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    # -- power -----------------------------------------------------------------------------------
    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return self._read(handle)["power_limit_mw"]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._read(handle)["power_limit_mw"]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        return self._read(handle)["default_limit_mw"]

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        gpu = self._read(handle)
        return [gpu["min_limit_mw"], gpu["max_limit_mw"]]

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None:
        gpu = self._setter(handle, "nvmlDeviceSetPowerManagementLimit", int(limit))
        if not gpu["min_limit_mw"] <= limit <= gpu["max_limit_mw"]:
            self._state["calls"].pop()
            raise _err(_real.NVML_ERROR_INVALID_ARGUMENT)
        gpu["power_limit_mw"] = int(limit)
        self._save()

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._read(handle)
        return int(min(gpu["draw_mw"], gpu["power_limit_mw"]))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        self._load()
        self._advance()
        gpu = self._gpu(handle)
        self._save()
        period = self._state["update_period_s"]
        now = gpu["last_s"]
        since_tick_s = now - math.floor(now / period) * period if period > 0 else 0.0
        power_mw = min(gpu["draw_mw"], gpu["power_limit_mw"])
        return int(gpu["energy_mj"] - power_mw * since_tick_s)

    # -- clocks ----------------------------------------------------------------------------------
    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> list[int]:
        return list(self._read(handle)["mem_clocks_mhz"])

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Any, memoryClockMHz: int) -> list[int]:
        gpu = self._read(handle)
        if memoryClockMHz not in gpu["mem_clocks_mhz"]:
            raise _err(_real.NVML_ERROR_NOT_FOUND)
        return list(gpu["sm_clocks_mhz"])

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._read(handle)
        if type in (_real.NVML_CLOCK_SM, _real.NVML_CLOCK_GRAPHICS):
            return gpu["locked_sm_mhz"][1] if gpu["locked_sm_mhz"] else max(gpu["sm_clocks_mhz"])
        if type == _real.NVML_CLOCK_MEM:
            return gpu["locked_mem_mhz"][1] if gpu["locked_mem_mhz"] else max(gpu["mem_clocks_mhz"])
        raise _err(_real.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._read(handle)
        if type in (_real.NVML_CLOCK_SM, _real.NVML_CLOCK_GRAPHICS):
            return max(gpu["sm_clocks_mhz"])
        if type == _real.NVML_CLOCK_MEM:
            return max(gpu["mem_clocks_mhz"])
        raise _err(_real.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, minGpuClockMHz: int, maxGpuClockMHz: int) -> None:
        gpu = self._setter(handle, "nvmlDeviceSetGpuLockedClocks", int(minGpuClockMHz), int(maxGpuClockMHz))
        if minGpuClockMHz > maxGpuClockMHz:
            self._state["calls"].pop()
            raise _err(_real.NVML_ERROR_INVALID_ARGUMENT)
        gpu["locked_sm_mhz"] = [int(minGpuClockMHz), int(maxGpuClockMHz)]
        self._save()

    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None:
        gpu = self._setter(handle, "nvmlDeviceResetGpuLockedClocks")
        gpu["locked_sm_mhz"] = None
        self._save()

    def nvmlDeviceSetMemoryLockedClocks(self, handle: Any, minMemClockMHz: int, maxMemClockMHz: int) -> None:
        gpu = self._setter(handle, "nvmlDeviceSetMemoryLockedClocks", int(minMemClockMHz), int(maxMemClockMHz))
        if not gpu["mem_lock_supported"]:
            self._state["calls"].pop()
            raise _err(_real.NVML_ERROR_NOT_SUPPORTED)
        gpu["locked_mem_mhz"] = [int(minMemClockMHz), int(maxMemClockMHz)]
        self._save()

    def nvmlDeviceResetMemoryLockedClocks(self, handle: Any) -> None:
        gpu = self._setter(handle, "nvmlDeviceResetMemoryLockedClocks")
        if not gpu["mem_lock_supported"]:
            self._state["calls"].pop()
            raise _err(_real.NVML_ERROR_NOT_SUPPORTED)
        gpu["locked_mem_mhz"] = None
        self._save()

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self._read(handle)
        return 1  # GpuIdle, as read on the idle H200

    def nvmlDeviceGetAPIRestriction(self, device: Any, apiType: int) -> int:
        self._read(device)
        raise _err(_real.NVML_ERROR_NOT_SUPPORTED)  # what the H200 answers


_default: dict[str | None, FakeNvml] = {}


def _module_fake() -> FakeNvml:
    # one fake per state file, so in-process CLI tests with different files do not share state
    path = os.environ.get(ENV_STATE)
    if path not in _default:
        _default[path] = FakeNvml(state_path=path, clock=time.time)
    return _default[path]


def __getattr__(name: str) -> Any:
    # Module-level access (GRIDSHIFT_NVML_MODULE=tests.fakes.fake_nvml) goes to the file-backed fake.
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_module_fake(), name)
