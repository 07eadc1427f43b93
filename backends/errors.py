"""Errors raised by backends.

    BackendError            anything a backend cannot do
    ├── NoDevice            no usable device (no driver, no GPU, filtered out by CUDA_VISIBLE_DEVICES)
    ├── NoPermission        the device refuses a change (not root / no CAP_SYS_ADMIN); carries action, gpu_index
    ├── Unsupported         the device does not support the operation (e.g. memory locks on HBM parts)
    ├── DeviceLost          the device fell off the bus or the driver was reloaded mid-run
    └── UnknownBackend      no backend is registered under that name

The CLI maps NoDevice/NoPermission/DeviceLost to exit 3 and UnknownBackend to exit 2.
"""

from __future__ import annotations

__all__ = ["BackendError", "NoDevice", "NoPermission", "Unsupported", "DeviceLost", "UnknownBackend"]


class BackendError(Exception):
    """Base class for backend failures."""


class NoDevice(BackendError):
    """No usable device was found."""


class NoPermission(BackendError):
    """A setting could not be changed for lack of privilege."""

    def __init__(self, message: str, *, action: str = "", gpu_index: int | None = None) -> None:
        super().__init__(message)
        self.action = action
        self.gpu_index = gpu_index


class Unsupported(BackendError):
    """The device does not support this operation."""


class DeviceLost(BackendError):
    """The device stopped answering."""


class UnknownBackend(BackendError, LookupError):
    """No backend is registered under that name."""
