"""A Prefect flow whose JSON-native parameters are stored without importing FastAPI.

Prefect stores a flow run's parameters through FastAPI's ``jsonable_encoder``, imported when the
first flow run is created: about half a second of CPU in every ``gridshift run``, for parameters
that are strings, numbers, lists and dicts already (a policy path, a run id, a resume state).
:class:`JsonParametersFlow` passes those through unchanged (a copy, as the encoder returns) and
leaves anything else (dataclasses, datetimes, paths, ...) to Prefect.
"""

from __future__ import annotations

from typing import Any

from prefect import Flow

__all__ = ["JsonParametersFlow", "json_native_copy"]

_SCALARS = (str, int, float, bool, type(None))


class _NotNative(Exception):
    pass


def _copy(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return value
    if type(value) is list:
        return [_copy(v) for v in value]
    if type(value) is dict and all(isinstance(k, str) for k in value):
        return {k: _copy(v) for k, v in value.items()}
    raise _NotNative


def json_native_copy(value: Any) -> tuple[bool, Any]:
    """``(True, copy)`` when ``value`` is JSON as it is (str/int/float/bool/None, lists, dicts with
    string keys, nested), else ``(False, None)``."""
    try:
        return True, _copy(value)
    except _NotNative:
        return False, None


class JsonParametersFlow(Flow):  # type: ignore[type-arg]
    """A :class:`prefect.Flow` that serializes JSON-native parameters itself (see the module docstring)."""

    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        copies: dict[str, Any] = {}
        for key, value in parameters.items():
            native, copy = json_native_copy(value)
            if not native:
                return super().serialize_parameters(parameters)
            copies[key] = copy
        return copies
