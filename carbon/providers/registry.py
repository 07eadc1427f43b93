"""Look providers up by name. Imports are lazy so offline use never imports HTTP code."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Mapping

from carbon.errors import CarbonError
from carbon.providers.base import Provider

__all__ = ["PROVIDERS", "get_provider", "option_names", "provider_class", "provider_names", "provider_option_names",
           "registered_class"]

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


#: constructor parameters that are code seams (test doubles, injected clocks) or set by the provider
#: class itself when it calls its base: a policy file cannot give them, so they are not options
_NOT_OPTIONS = frozenset({"self", "client", "transport", "sleep", "clock", "classify", "series"})


def registered_class(table: Mapping[str, str], name: str, unknown: type[CarbonError], what: str) -> Any:
    """The class ``table`` ("module:Class" by name) registers as ``name``, imported now (nothing is constructed);
    a name it lacks is ``unknown``, with the nearest known name."""
    target = table.get(name)
    if target is None:
        import difflib

        known = sorted(table)
        near = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise unknown(f"unknown {what} {name!r}{hint} (known: {', '.join(known)})")
    module_name, _, cls_name = target.partition(":")
    return getattr(importlib.import_module(module_name), cls_name)


def provider_class(name: str) -> type[Provider]:
    """The class registered as ``name``, imported now (nothing is constructed)."""
    return registered_class(PROVIDERS, name, UnknownProvider, "carbon provider")  # type: ignore[no-any-return]


def provider_option_names(name: str) -> frozenset[str] | None:
    """The option names provider ``name`` accepts (``zone`` and ``base_url`` included): :func:`option_names`."""
    return option_names(provider_class(name))


def option_names(cls: type) -> frozenset[str] | None:
    """The option names a source class accepts, read from its constructor's signature and, while a
    constructor passes ``**kwargs`` on, its base classes'. ``None`` when the chain ends in
    ``**kwargs`` nobody names (anything goes)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            return frozenset(names - _NOT_OPTIONS)
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return frozenset(names - _NOT_OPTIONS)
    return None


def get_provider(name: str, **options: Any) -> Provider:
    """Build provider ``name`` with ``options`` (zone, base_url, client, path, ...)."""
    return provider_class(name)(**options)
