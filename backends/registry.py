"""Find backends by name through the ``gridshift.backends`` entry-point group.

Lazy: nothing is imported until a backend is asked for. ``auto`` means NVIDIA when NVML sees a GPU,
otherwise ``simulated``. A plugin must subclass :class:`backends.base.Backend`.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any, Callable

from backends.base import Backend
from backends.errors import BackendError, UnknownBackend

__all__ = ["backend_names", "load_backend_class", "create_backend", "resolve_auto"]

GROUP = "gridshift.backends"

# Built-ins are known even when the distribution is not installed (running from a source tree).
_BUILTIN: dict[str, str] = {
    "simulated": "backends.simulated:SimulatedBackend",
    "nvidia": "backends.nvidia:NvidiaBackend",
}


@cache  # scanning every installed distribution's metadata takes ~0.1 s, and a run asks three times
def _entry_point_targets() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def backend_names() -> list[str]:
    return sorted(set(_BUILTIN) | set(_entry_point_targets()))


def load_backend_class(name: str) -> type[Backend]:
    eps = _entry_point_targets()
    if name in eps:
        cls = eps[name].load()
    elif name in _BUILTIN:
        import importlib

        module_name, _, attr = _BUILTIN[name].partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise UnknownBackend(f"backend {name!r} is not available in this build: {exc}") from None
    else:
        raise UnknownBackend(f"unknown backend {name!r} (known: {', '.join(backend_names())})")
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise UnknownBackend(f"backend {name!r} ({cls!r}) does not subclass backends.Backend")
    return cls


def nvml_sees_gpu() -> bool:
    """True when the NVIDIA driver answers and reports at least one GPU. Changes nothing.

    Goes through the NVIDIA backend's own loader, so ``auto`` sees the same binding the backend will
    use (``$GRIDSHIFT_NVML_MODULE``, the refusal of the unofficial ``pynvml`` package).
    """
    from backends.nvidia._nvml import Nvml, load_nvml_module

    try:
        lib = Nvml(load_nvml_module())
        lib.init()
    except BackendError:  # no binding, LibraryNotFound, DriverNotLoaded: no GPU here
        return False
    try:
        return lib.device_count() > 0
    except BackendError:
        return False
    finally:
        try:
            lib.shutdown()
        except BackendError:
            pass


def resolve_auto(name: str, *, gpu_probe: Callable[[], bool] = nvml_sees_gpu) -> str:
    """``auto`` -> ``nvidia`` or ``simulated``; other names unchanged."""
    if name != "auto":
        return name
    return "nvidia" if gpu_probe() else "simulated"


def create_backend(name: str, **options: Any) -> Backend:
    """Build backend ``name`` (``auto`` resolved) with ``options``."""
    resolved = resolve_auto(name)
    cls = load_backend_class(resolved)
    try:
        return cls(**options)
    except TypeError as exc:
        raise BackendError(f"backend {resolved!r} does not accept these options: {exc}") from None
