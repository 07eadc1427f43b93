"""backends: apply a mode's settings to hardware and meter energy. Plugins via entry points.

Knows nothing of carbon, plans, scheduler or flows.
"""

from backends.base import Backend
from backends.errors import BackendError, DeviceLost, NoDevice, NoPermission, UnknownBackend, Unsupported
from backends.meter import EnergyMeter
from backends.registry import backend_names, create_backend, load_backend_class, resolve_auto
from backends.types import Applied, Capabilities, DeviceInfo, EnergyWindow, Settings

__all__ = [
    "Applied",
    "Backend",
    "BackendError",
    "Capabilities",
    "DeviceInfo",
    "DeviceLost",
    "EnergyMeter",
    "EnergyWindow",
    "NoDevice",
    "NoPermission",
    "Settings",
    "UnknownBackend",
    "Unsupported",
    "backend_names",
    "create_backend",
    "load_backend_class",
    "resolve_auto",
]
