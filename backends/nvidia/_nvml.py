"""The one place that talks to NVML: one wrapper per call, units in every name, errors translated.

Everything else in ``backends.nvidia`` goes through :class:`Nvml`, so unit conversions (mW, mJ, MHz
are NVML's units and stay so here) and error mapping happen exactly once.

The binding module is *injected*: :func:`load_nvml_module` imports the official ``nvidia-ml-py``
binding (import name ``pynvml``) unless the environment variable ``GRIDSHIFT_NVML_MODULE`` names
another module with the same surface. That variable is a plugin seam used by gridshift's own tests
(``tests.fakes.fake_nvml``) so that subprocesses (kill -9 recovery, ``gridshift gpu restore``) run
against a stateful fake; production never sets it.

NVML error codes map onto :mod:`backends.errors` through :data:`ERROR_MAP` (a test checks that every
``NVMLError`` subclass of the installed binding has an entry).
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Any, Callable, TypeVar

from backends.errors import BackendError, DeviceLost, NoDevice, NoPermission, Unsupported

#: set to "1" to make every NVML setter fail with NoPermission before it reaches the driver
READ_ONLY_ENV = "GRIDSHIFT_NVML_READ_ONLY"

__all__ = ["ENV_MODULE", "ERROR_MAP", "Nvml", "load_nvml_module", "translate_nvml_error"]

ENV_MODULE = "GRIDSHIFT_NVML_MODULE"

# NVML return codes (nvml.h); spelled out so the table does not need the binding at import time.
ERROR_MAP: dict[int, type[BackendError]] = {
    1: NoDevice,  # UNINITIALIZED: nvmlInit was not called or failed
    2: BackendError,  # INVALID_ARGUMENT: a gridshift bug or a bad value; not the environment's fault
    3: Unsupported,  # NOT_SUPPORTED
    4: NoPermission,  # NO_PERMISSION: not root / no CAP_SYS_ADMIN
    5: BackendError,  # ALREADY_INITIALIZED (deprecated; never returned by current drivers)
    6: NoDevice,  # NOT_FOUND: no such index/UUID
    7: BackendError,  # INSUFFICIENT_SIZE: binding bug
    8: DeviceLost,  # INSUFFICIENT_POWER: external power cables
    9: NoDevice,  # DRIVER_NOT_LOADED
    10: DeviceLost,  # TIMEOUT
    11: DeviceLost,  # IRQ_ISSUE
    12: NoDevice,  # LIBRARY_NOT_FOUND: no libnvidia-ml.so (no driver on this machine)
    13: Unsupported,  # FUNCTION_NOT_FOUND: binding newer than the driver
    14: DeviceLost,  # CORRUPTED_INFOROM
    15: DeviceLost,  # GPU_IS_LOST
    16: DeviceLost,  # RESET_REQUIRED
    17: NoPermission,  # OPERATING_SYSTEM: the OS blocked the request
    18: NoDevice,  # LIB_RM_VERSION_MISMATCH: driver half-upgraded
    19: BackendError,  # IN_USE
    20: BackendError,  # MEMORY
    21: Unsupported,  # NO_DATA
    22: Unsupported,  # VGPU_ECC_NOT_SUPPORTED
    23: BackendError,  # INSUFFICIENT_RESOURCES
    24: Unsupported,  # FREQ_NOT_SUPPORTED: clock not in the supported table
    25: Unsupported,  # ARGUMENT_VERSION_MISMATCH: binding/driver struct versions differ
    26: Unsupported,  # DEPRECATED
    27: DeviceLost,  # NOT_READY
    28: NoDevice,  # GPU_NOT_FOUND
    29: BackendError,  # INVALID_STATE
    30: Unsupported,  # RESET_TYPE_NOT_SUPPORTED
    999: BackendError,  # UNKNOWN
}


def translate_nvml_error(exc: BaseException, action: str, gpu_index: int | None = None) -> BackendError:
    """An ``NVMLError`` as the matching :class:`BackendError` (message names the action and the GPU)."""
    code = getattr(exc, "value", 999)
    cls = ERROR_MAP.get(code, BackendError)
    where = f" on GPU {gpu_index}" if gpu_index is not None else ""
    message = f"NVML {action}{where}: {exc}"
    if cls is NoPermission:
        return NoPermission(message, action=action, gpu_index=gpu_index)
    return cls(message)


def load_nvml_module(name: str | None = None) -> ModuleType:
    """Import the NVML binding (``pynvml`` from nvidia-ml-py, or ``$GRIDSHIFT_NVML_MODULE``).

    Refuses the unofficial ``pynvml`` package (<= 11.5 shadows the official module; its API drifts),
    recognised, as Zeus does, by the missing ``_nvmlGetFunctionPointer``. The deprecated ``pynvml``
    13 shim only redirects to nvidia-ml-py but warns on import; the warning is silenced here so a
    ``-W error`` run does not die on it.
    """
    module_name = name or os.environ.get(ENV_MODULE) or "pynvml"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise NoDevice(f"the NVML binding {module_name!r} is not installed ({exc}); pip install nvidia-ml-py") from None
    if not hasattr(module, "_nvmlGetFunctionPointer"):
        raise NoDevice(
            f"{module_name!r} is not the official NVML binding (unofficial 'pynvml' package?); "
            "pip uninstall pynvml && pip install nvidia-ml-py"
        )
    return module


_T = TypeVar("_T")


class Nvml:
    """Thin, typed wrappers over one NVML binding module. Units: mW, mJ, MHz (NVML's own)."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def _call(self, action: str, fn: Callable[..., _T], *args: Any, gpu_index: int | None = None) -> _T:
        if action.startswith(("set ", "reset ")) and os.environ.get(READ_ONLY_ENV) == "1":
            # An admin's (and our lent GPU's) guarantee: no write reaches the driver at all.
            raise NoPermission(f"{action} refused: {READ_ONLY_ENV}=1 (read-only mode)", action=action,
                               gpu_index=gpu_index)
        try:
            return fn(*args)
        except self.module.NVMLError as exc:
            raise translate_nvml_error(exc, action, gpu_index) from exc

    # -- library ---------------------------------------------------------------------------------
    def init(self) -> None:
        self._call("init", self.module.nvmlInit)

    def shutdown(self) -> None:
        self._call("shutdown", self.module.nvmlShutdown)

    def driver_version(self) -> str:
        return _text(self._call("get driver version", self.module.nvmlSystemGetDriverVersion))

    # -- discovery -------------------------------------------------------------------------------
    def device_count(self) -> int:
        return int(self._call("get device count", self.module.nvmlDeviceGetCount))

    def handle_by_index(self, index: int) -> Any:
        return self._call("get handle", self.module.nvmlDeviceGetHandleByIndex, index, gpu_index=index)

    def handle_by_uuid(self, uuid: str) -> Any:
        return self._call(f"get handle for {uuid}", self.module.nvmlDeviceGetHandleByUUID, uuid)

    def index(self, handle: Any) -> int:
        return int(self._call("get index", self.module.nvmlDeviceGetIndex, handle))

    def name(self, handle: Any) -> str:
        return _text(self._call("get name", self.module.nvmlDeviceGetName, handle))

    def uuid(self, handle: Any) -> str:
        return _text(self._call("get UUID", self.module.nvmlDeviceGetUUID, handle))

    def is_mig_device_handle(self, handle: Any) -> bool:
        return bool(self._call("is MIG handle", self.module.nvmlDeviceIsMigDeviceHandle, handle))

    def mig_parent_handle(self, mig_handle: Any) -> Any:
        return self._call("get MIG parent", self.module.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, mig_handle)

    def mig_mode_current(self, handle: Any) -> bool:
        """True when MIG is enabled (current mode); Unsupported on GPUs without MIG."""
        current, _pending = self._call("get MIG mode", self.module.nvmlDeviceGetMigMode, handle)
        return current == self.module.NVML_DEVICE_MIG_ENABLE

    # -- power (mW) ------------------------------------------------------------------------------
    def power_limit_mw(self, handle: Any, gpu_index: int | None = None) -> int:
        return int(self._call("get power limit", self.module.nvmlDeviceGetPowerManagementLimit, handle, gpu_index=gpu_index))

    def power_limit_default_mw(self, handle: Any, gpu_index: int | None = None) -> int:
        return int(self._call("get default power limit", self.module.nvmlDeviceGetPowerManagementDefaultLimit, handle,
                              gpu_index=gpu_index))

    def power_limit_constraints_mw(self, handle: Any, gpu_index: int | None = None) -> tuple[int, int]:
        lo, hi = self._call("get power limit constraints", self.module.nvmlDeviceGetPowerManagementLimitConstraints,
                            handle, gpu_index=gpu_index)
        return int(lo), int(hi)

    def enforced_power_limit_mw(self, handle: Any, gpu_index: int | None = None) -> int:
        return int(self._call("get enforced power limit", self.module.nvmlDeviceGetEnforcedPowerLimit, handle,
                              gpu_index=gpu_index))

    def set_power_limit_mw(self, handle: Any, limit_mw: int, gpu_index: int | None = None) -> None:
        self._call("set power limit", self.module.nvmlDeviceSetPowerManagementLimit, handle, int(limit_mw),
                   gpu_index=gpu_index)

    def power_usage_mw(self, handle: Any, gpu_index: int | None = None) -> int:
        """Board power in mW; on Ampere+ (not GA100) NVML averages this over ~1 s."""
        return int(self._call("get power usage", self.module.nvmlDeviceGetPowerUsage, handle, gpu_index=gpu_index))

    # -- energy (mJ) -----------------------------------------------------------------------------
    def total_energy_mj(self, handle: Any, gpu_index: int | None = None) -> int:
        """Energy since the driver loaded, in mJ (Volta+; updates every ~100 ms on A100/H200)."""
        return int(self._call("get total energy", self.module.nvmlDeviceGetTotalEnergyConsumption, handle,
                              gpu_index=gpu_index))

    # -- clocks (MHz) ----------------------------------------------------------------------------
    def supported_memory_clocks_mhz(self, handle: Any, gpu_index: int | None = None) -> list[int]:
        return [int(c) for c in self._call("get supported memory clocks", self.module.nvmlDeviceGetSupportedMemoryClocks,
                                           handle, gpu_index=gpu_index)]

    def supported_graphics_clocks_mhz(self, handle: Any, mem_clock_mhz: int, gpu_index: int | None = None) -> list[int]:
        return [int(c) for c in self._call("get supported graphics clocks",
                                           self.module.nvmlDeviceGetSupportedGraphicsClocks, handle, mem_clock_mhz,
                                           gpu_index=gpu_index)]

    def sm_clock_mhz(self, handle: Any, gpu_index: int | None = None) -> int:
        return int(self._call("get SM clock", self.module.nvmlDeviceGetClockInfo, handle, self.module.NVML_CLOCK_SM,
                              gpu_index=gpu_index))

    def mem_clock_mhz(self, handle: Any, gpu_index: int | None = None) -> int:
        return int(self._call("get memory clock", self.module.nvmlDeviceGetClockInfo, handle, self.module.NVML_CLOCK_MEM,
                              gpu_index=gpu_index))

    def max_sm_clock_mhz(self, handle: Any, gpu_index: int | None = None) -> int:
        return int(self._call("get max SM clock", self.module.nvmlDeviceGetMaxClockInfo, handle,
                              self.module.NVML_CLOCK_SM, gpu_index=gpu_index))

    def set_gpu_locked_clocks_mhz(self, handle: Any, min_mhz: int, max_mhz: int, gpu_index: int | None = None) -> None:
        self._call("set locked SM clocks", self.module.nvmlDeviceSetGpuLockedClocks, handle, int(min_mhz), int(max_mhz),
                   gpu_index=gpu_index)

    def reset_gpu_locked_clocks(self, handle: Any, gpu_index: int | None = None) -> None:
        self._call("reset locked SM clocks", self.module.nvmlDeviceResetGpuLockedClocks, handle, gpu_index=gpu_index)

    def set_memory_locked_clocks_mhz(self, handle: Any, min_mhz: int, max_mhz: int, gpu_index: int | None = None) -> None:
        self._call("set locked memory clocks", self.module.nvmlDeviceSetMemoryLockedClocks, handle, int(min_mhz),
                   int(max_mhz), gpu_index=gpu_index)

    def reset_memory_locked_clocks(self, handle: Any, gpu_index: int | None = None) -> None:
        self._call("reset locked memory clocks", self.module.nvmlDeviceResetMemoryLockedClocks, handle,
                   gpu_index=gpu_index)

    def clocks_event_reasons(self, handle: Any, gpu_index: int | None = None) -> int:
        return int(self._call("get clock event reasons", self.module.nvmlDeviceGetCurrentClocksEventReasons, handle,
                              gpu_index=gpu_index))

    # -- permissions -----------------------------------------------------------------------------
    def app_clocks_restricted(self, handle: Any, gpu_index: int | None = None) -> bool:
        """True when setting application clocks needs root (``nvidia-smi -acp``); Unsupported on H200."""
        value = self._call("get API restriction", self.module.nvmlDeviceGetAPIRestriction, handle,
                           self.module.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS, gpu_index=gpu_index)
        return value == self.module.NVML_FEATURE_ENABLED


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
