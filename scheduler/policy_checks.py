"""Checks a schema cannot make: does the policy name things that exist?

Run by :func:`scheduler.policy_io.parse_policy` after the schema passed, so ``gridshift policy
check`` and ``gridshift run`` stop on a misspelt provider, an option the provider does not take, a
trace file that is missing or unreadable, an unknown country, or a ``job.callable`` whose module
cannot be found - instead of failing over silently at run time to a source the user did not choose.

Each check returns :class:`Problem` values with the dotted location of the offending key or value;
``policy_io`` turns the location into ``file:line:col``. Nothing here constructs a provider or
imports the user's code.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

from carbon.errors import CarbonError
from carbon.providers.registry import provider_names, provider_option_names
from scheduler.policy import CarbonSource, Policy

__all__ = ["Problem", "policy_problems", "carbon_source_problems", "callable_problems"]


@dataclass(frozen=True)
class Problem:
    """One finding. ``loc`` is the path into the policy (``("carbon", "options", "colum")``);
    ``at_key`` points the line at the key itself rather than its value (unknown option names)."""

    loc: tuple[str | int, ...]
    message: str
    at_key: bool = False


def policy_problems(policy: Policy) -> list[Problem]:
    """Every problem of the carbon chain (primary, then fallbacks in order) and of ``job.callable``."""
    problems = carbon_source_problems(policy.carbon, ("carbon",))
    for i, source in enumerate(policy.carbon.fallbacks):
        problems += carbon_source_problems(source, ("carbon", "fallbacks", i))
    problems += callable_problems(policy.job.callable, ("job", "callable"))
    return problems


def carbon_source_problems(source: CarbonSource, loc: tuple[str | int, ...]) -> list[Problem]:
    """Provider name, option names, and the provider-specific values that can be checked offline."""
    known = provider_names()
    if source.provider not in known:
        return [Problem((*loc, "provider"), f"unknown carbon provider {source.provider!r} (known: {', '.join(known)})")]
    accepted = provider_option_names(source.provider)
    problems = []
    if accepted is not None:
        for name in source.options:
            if name not in accepted:
                problems.append(Problem(
                    (*loc, "options", name),
                    f"unknown option {name!r} for provider {source.provider!r} (accepted: {', '.join(sorted(accepted))})",
                    at_key=True,
                ))
    if problems:  # values of misspelt options would only add noise
        return problems
    opts = source.options
    if source.provider == "trace":
        problems += _trace_problems(opts, (*loc, "options"))
    elif source.provider == "static" and opts.get("country") is not None:
        from carbon.providers.static import country_intensity

        try:
            country_intensity(str(opts["country"]))
        except CarbonError as exc:
            problems.append(Problem((*loc, "options", "country"), str(exc)))
    return problems


def _trace_problems(opts: dict[str, Any], loc: tuple[str | int, ...]) -> list[Problem]:
    from carbon.errors import BadTrace
    from carbon.providers.trace import load_sample_trace
    from carbon.trace_file import read_trace

    column = opts.get("column")
    if column is not None and not isinstance(column, str):
        return [Problem((*loc, "column"), f"column must be a column name, got {column!r}")]
    path = opts.get("path")
    if path is not None and not isinstance(path, str):
        return [Problem((*loc, "path"), f"path must be a file path, got {path!r}")]
    try:
        # a relative path is read against the current directory, exactly as the run will read it
        if path is not None:
            read_trace(path, column=column)
        elif column is not None:
            load_sample_trace(column)
    except BadTrace as exc:
        # "no column named ..." is the column's fault; anything else (missing file, bad rows) the path's
        at = "column" if column is not None and (path is None or "no column named" in str(exc)) else "path"
        return [Problem((*loc, at), str(exc))]
    return []


def callable_problems(target: str | None, loc: tuple[str | int, ...]) -> list[Problem]:
    """``module:function`` must name a module that can be found (the module is not imported)."""
    if target is None:
        return []
    module_name = target.partition(":")[0].strip()
    if not _module_exists(module_name):
        return [Problem(loc, f"module {module_name!r} not found (is it installed, or on PYTHONPATH?)")]
    return []


def _module_exists(name: str) -> bool:
    """Find ``name`` without running it: a dotted name is walked package by package through the
    path finder, so no parent package's ``__init__`` runs either (``importlib.util.find_spec``
    would import the parents)."""
    if name in sys.modules:
        return True
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for i in range(1, len(parts)):
            if spec is None or spec.submodule_search_locations is None:
                return False
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return False
    return spec is not None
