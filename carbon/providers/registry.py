"""Look providers up by name. Imports are lazy so offline use never imports HTTP code."""

from __future__ import annotations

import importlib
from typing import Any

from carbon.errors import CarbonError
from carbon.providers.base import Provider

__all__ = ["PROVIDERS", "get_provider", "provider_names"]

#: name -> "module:Class"
PROVIDERS: dict[str, str] = {
    "trace": "carbon.providers.trace:TraceProvider",
    "static": "carbon.providers.static:StaticProvider",
    "electricitymaps": "carbon.providers.electricitymaps:ElectricityMapsProvider",
    "watttime": "carbon.providers.watttime:WattTimeProvider",
    "ukgrid": "carbon.providers.ukgrid:UkGridProvider",
    "casdk": "carbon.providers.casdk:CarbonAwareSdkProvider",
}


class UnknownProvider(CarbonError, LookupError):
    """No provider has that name."""


def provider_names() -> list[str]:
    return sorted(PROVIDERS)


def get_provider(name: str, **options: Any) -> Provider:
    """Build provider ``name`` with ``options`` (zone, base_url, client, path, ...)."""
    target = PROVIDERS.get(name)
    if target is None:
        raise UnknownProvider(f"unknown carbon provider {name!r} (known: {', '.join(provider_names())})")
    module_name, _, cls_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls(**options)
