"""Checks a schema cannot make: does the policy name things that exist?

Run by :func:`scheduler.policy_io.parse_policy` after the schema, so ``gridshift policy check`` and
``gridshift run`` (before Prefect starts) stop on a misspelt provider, an option the provider does
not take, a trace file that is missing or unreadable, an unknown country, an unknown backend, a cron
expression that is not one, a job command or working directory that does not exist, a clock plan
that cannot be loaded, or a ``job.callable`` whose module cannot be found - instead of failing at
run time, hours into a deferred night.

Each check returns :class:`Problem` values with the dotted location of the offending key or value;
``policy_io`` turns the location into ``file:line:col``. Relative paths have already been resolved
against the policy file's folder (``policy_io.resolve_policy_paths``); ``base_dir`` is that folder,
the job's default working directory. Nothing here constructs a provider or a backend, or imports
the user's code.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from carbon.errors import CarbonError
from carbon.providers.registry import provider_names, provider_option_names
from scheduler.cron import cron_problem, timezone_problem  # re-exported: the cron is read in one place
from scheduler.did_you_mean import did_you_mean
from scheduler.policy import BackendConfig, CarbonConfig, CarbonSource, JobSpec, Mode, Policy, unknown_mode_message

__all__ = ["Problem", "policy_problems", "section_problems", "carbon_source_problems", "callable_problems",
           "backend_problem", "cron_problem", "command_problem", "job_cwd"]


@dataclass(frozen=True)
class Problem:
    """One finding. ``loc`` is the path into the policy (``("carbon", "options", "colum")``);
    ``at_key`` points the line at the key itself rather than its value (unknown option names)."""

    loc: tuple[str | int, ...]
    message: str
    at_key: bool = False


def policy_problems(policy: Policy, base_dir: Path | None = None) -> list[Problem]:
    """Every problem of a policy that passed the schema."""
    return section_problems(carbon=policy.carbon, modes=policy.modes, job=policy.job, backend=policy.backend,
                            base_dir=base_dir)


def section_problems(*, carbon: CarbonConfig | None = None, modes: Mapping[str, Mode] | None = None,
                     job: JobSpec | None = None, backend: BackendConfig | None = None,
                     base_dir: Path | None = None, rule_modes: Mapping[str, str] | None = None,
                     mode_names: Sequence[str] = ()) -> list[Problem]:
    """The problems of whichever sections are given (a section that failed the schema is left out,
    so a file with a schema error still gets its other sections checked). ``rule_modes`` (``{"clean_mode":
    name, ...}``) are checked against ``mode_names`` only when given: a valid policy's schema checked them."""
    problems: list[Problem] = []
    for which, name in (rule_modes or {}).items():
        if message := unknown_mode_message(which, name, list(mode_names)):
            problems.append(Problem(("rules", which), message))
    if carbon is not None:
        problems += carbon_source_problems(carbon, ("carbon",))
        for i, source in enumerate(carbon.fallbacks):
            problems += carbon_source_problems(source, ("carbon", "fallbacks", i))
    for name, mode in (modes or {}).items():
        problems += _clock_plan_problems(name, mode)
    if job is not None:
        problems += _job_problems(job, base_dir)
    if backend is not None and (message := backend_problem(backend.name)):
        problems.append(Problem(("backend", "name"), message))
    return problems


def carbon_source_problems(source: CarbonSource, loc: tuple[str | int, ...]) -> list[Problem]:
    """Provider name, option names, and the provider-specific values that can be checked offline."""
    known = provider_names()
    if source.provider not in known:
        return [Problem((*loc, "provider"), f"unknown carbon provider {source.provider!r}"
                                             f"{did_you_mean(source.provider, known)} (known: {', '.join(known)})")]
    accepted = provider_option_names(source.provider)
    problems = []
    if accepted is not None:
        for name in source.options:
            if name not in accepted:
                problems.append(Problem(
                    (*loc, "options", name),
                    f"unknown option {name!r} for provider {source.provider!r}{did_you_mean(name, accepted)} "
                    f"(accepted: {', '.join(sorted(accepted))})",
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
        # a relative path left here is read against the current directory, exactly as the run will read it
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


def backend_problem(name: str) -> str | None:
    """Why ``name`` is not a backend (built-ins and the ``gridshift.backends`` entry points), or None."""
    from backends.registry import backend_names

    known = ["auto", *backend_names()]
    if name in known:
        return None
    return f"unknown backend {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})"


def job_cwd(job: JobSpec, base_dir: Path | None) -> Path:
    """Where the policy's own command runs: ``job.workdir``, else the policy file's folder."""
    return Path(job.workdir) if job.workdir is not None else (base_dir or Path.cwd())


_PYTHON = ("python", "python3")  # the job runs these as this interpreter (flows.job.resolve_argv)


def command_problem(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> str | None:
    """Why ``argv`` cannot start in ``cwd``: the program is not found (a name is looked up on PATH,
    a path is read from ``cwd``), or, for ``python script.py``, the script is missing. None if fine."""
    if not argv:
        return "command is empty"
    program = argv[0]
    if program in _PYTHON:
        script = argv[1] if len(argv) > 1 else ""
        if script.endswith(".py") and not script.startswith("-") and not (cwd / script).is_file():
            return f"script {script!r} not found in {cwd}"
        return None
    if "/" in program:
        path = cwd / program
        if not path.is_file():
            return f"program {program!r} not found in {cwd}"
        if not os.access(path, os.X_OK):
            return f"program {program!r} is not executable (chmod +x {path})"
        return None
    search = (env or {}).get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(program, path=search) is None:
        return f"program {program!r} not found on PATH"
    return None


def _job_problems(job: JobSpec, base_dir: Path | None) -> list[Problem]:
    problems = callable_problems(job.callable, ("job", "callable"))
    if job.cron is not None and (message := cron_problem(job.cron)):
        problems.append(Problem(("job", "cron"), message))
    if message := timezone_problem(job.timezone):
        problems.append(Problem(("job", "timezone"), message))
    if job.workdir is not None and not Path(job.workdir).is_dir():
        problems.append(Problem(("job", "workdir"), f"working directory {job.workdir} does not exist"))
    elif job.command is not None:
        env = {**os.environ, **job.env}
        if message := command_problem(job.command, job_cwd(job, base_dir), env):
            problems.append(Problem(("job", "command", 0), message))
    return problems


def _clock_plan_problems(name: str, mode: Mode) -> list[Problem]:
    if mode.clock_plan is None:
        return []
    from scheduler.clock_plans import load_mode_clock_plan
    from scheduler.errors import PolicyError

    try:
        load_mode_clock_plan(name, Path(mode.clock_plan))
    except PolicyError as exc:
        return [Problem(("modes", name, "clock_plan"), str(exc))]
    return []
