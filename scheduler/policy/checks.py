"""Checks a schema cannot make: does the policy name things that exist?

Run by :func:`scheduler.policy.loader.parse_policy` after the schema, so ``gridshift policy check`` and
``gridshift run`` (before Prefect starts) stop on a misspelt provider, an option the provider does
not take, a trace file that is missing or unreadable, an unknown country, an unknown backend, a cron
expression or time zone that is not one, a job with nothing to run, a job command or working
directory that does not exist, a clock plan that cannot be loaded, or a ``job.callable`` whose
module cannot be found - instead of failing at run time, hours into a deferred night.

The checks run on every piece that can be read, whether or not the rest of the file passed the
schema, so one mistake never hides another. Each returns :class:`Problem` values with the dotted
location of the offending key or value; the loader (:mod:`scheduler.policy.loader`) turns the location into ``file:line:col``.
Relative paths have already been resolved against the policy file's folder; ``base_dir`` is that
folder, the job's default working directory. Nothing here constructs a provider or a backend, or imports
the user's code.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from carbon.errors import CarbonError
from carbon.providers.registry import provider_names, provider_option_names
from scheduler.policy.cron import cron_problem, timezone_problem  # re-exported: the cron is read in one place
from scheduler.policy.did_you_mean import did_you_mean
from scheduler.policy.types import CarbonSource, JobSpec, Mode, PriceSource, unknown_mode_message

__all__ = ["NOTHING_TO_RUN", "Problem", "section_problems", "carbon_source_problems", "price_source_problems",
           "callable_problems",
           "backend_problem", "cron_problem", "command_problem", "job_cwd"]


@dataclass(frozen=True)
class Problem:
    """One finding. ``loc`` is the path into the policy (``("carbon", "options", "colum")``);
    ``at_key`` points the line at the key itself rather than its value (unknown option names)."""

    loc: tuple[str | int, ...]
    message: str
    at_key: bool = False


def section_problems(*, sources: Sequence[tuple[tuple[str | int, ...], CarbonSource]] = (),
                     modes: Mapping[str, Mode] | None = None, job: Mapping[str, Any] | None = None,
                     backend_name: Any = None, base_dir: Path | None = None,
                     rule_modes: Mapping[str, str] | None = None, mode_names: Sequence[str] = (),
                     price_sources: Sequence[tuple[tuple[str | int, ...], PriceSource]] = ()) -> list[Problem]:
    """The problems of each piece of a policy that can be read, whether or not the rest passed the
    schema: ``sources`` are the carbon sources (primary and fallbacks) that passed it, each with its
    location; ``modes`` the modes that did; ``job`` the job section as written (each check reads its
    own keys, when they have the right type); ``backend_name`` as written. ``rule_modes``
    (``{"clean_mode": name, ...}``) are checked against ``mode_names``."""
    problems: list[Problem] = []
    for which, name in (rule_modes or {}).items():
        if message := unknown_mode_message(which, name, list(mode_names)):
            problems.append(Problem(("rules", which), message))
    for loc, source in sources:
        problems += carbon_source_problems(source, loc)
    for loc, price in price_sources:
        problems += price_source_problems(price, loc)
    for name, mode in (modes or {}).items():
        problems += _clock_plan_problems(name, mode)
    if job is not None:
        problems += _job_problems(job, base_dir)
    if isinstance(backend_name, str) and (message := backend_problem(backend_name)):
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
        problems += _trace_problems(opts, source.zone, loc)
    elif source.provider == "static" and opts.get("country") is not None:
        from carbon.providers.static import country_intensity

        try:
            country_intensity(str(opts["country"]))
        except CarbonError as exc:
            problems.append(Problem((*loc, "options", "country"), str(exc)))
    return problems


def price_source_problems(source: PriceSource, loc: tuple[str | int, ...]) -> list[Problem]:
    """A price source's name and option names; a price file is read and its market known (offline checks only)."""
    from carbon.prices.registry import price_source_names, price_source_option_names

    known = price_source_names()
    if source.provider not in known:
        return [Problem((*loc, "provider"), f"unknown price source {source.provider!r}"
                                             f"{did_you_mean(source.provider, known)} (known: {', '.join(known)})")]
    accepted = price_source_option_names(source.provider) or frozenset()
    problems = [Problem((*loc, "options", name), f"unknown option {name!r} for price source {source.provider!r}"
                                                 f"{did_you_mean(name, accepted)} (accepted: {', '.join(sorted(accepted))})",
                        at_key=True) for name in source.options if name not in accepted]
    if problems or source.provider != "trace":
        return problems
    from carbon.errors import BadTrace
    from carbon.prices.day_ahead import market_for
    from carbon.prices.trace import read_price_trace

    market = source.options.get("market")
    if market is not None and market_for(str(market)) is None:
        return [Problem((*loc, "options", "market"), f"unknown day-ahead market {market!r} (known: SDAC, ERCOT)")]
    path = source.options.get("path")
    if not isinstance(path, str):
        return [Problem((*loc, "options"), "a price trace needs options.path, the price file")]
    try:
        read_price_trace(path, column=source.options.get("column"))
    except BadTrace as exc:
        return [Problem((*loc, "options", "path"), str(exc))]
    return []


def _trace_problems(opts: dict[str, Any], zone: str | None, source_loc: tuple[str | int, ...]) -> list[Problem]:
    from carbon.errors import BadTrace, UnknownZone
    from carbon.providers.trace import find_zone_trace, load_sample_trace, read_zone_trace
    from carbon.trace_file import read_trace

    loc = (*source_loc, "options")
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
        elif zone:
            read_zone_trace(find_zone_trace(zone, opts.get("trace_dir")), column)
        elif column is not None:
            load_sample_trace(column)
    except UnknownZone as exc:
        return [Problem((*source_loc, "zone"), str(exc))]
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


_PYTHON = ("python", "python3")  # the job runs these as this interpreter (flows.job.process.resolve_argv)


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


#: a job section that names nothing to run
NOTHING_TO_RUN = "nothing to run: give job.command (the training command) or job.callable ('package.module:function')"


def _argv(command: Any) -> tuple[str, ...] | None:
    """``job.command`` as written (a string split like a shell would, or a list of strings), or None."""
    if isinstance(command, str):
        try:
            return tuple(shlex.split(command))
        except ValueError:  # an unbalanced quote: the schema reports it
            return None
    if isinstance(command, list) and all(isinstance(a, str) for a in command):
        return tuple(command)
    return None


def _job_problems(job: Mapping[str, Any], base_dir: Path | None) -> list[Problem]:
    """The job's checks, each reading its own keys as written (workdir already resolved) and skipped
    when a value has the wrong type (the schema says so): a mistake in one key hides none of them."""
    command, target, workdir, cron, tz = (job.get(k) for k in ("command", "callable", "workdir", "cron", "timezone"))
    problems: list[Problem] = []
    if command is None and target is None:
        problems.append(Problem(("job",), NOTHING_TO_RUN, at_key=True))
    if isinstance(target, str) and ":" in target:
        problems += callable_problems(target, ("job", "callable"))
    if isinstance(cron, str) and (message := cron_problem(cron)):
        problems.append(Problem(("job", "cron"), message))
    if isinstance(tz, str) and (message := timezone_problem(tz)):
        problems.append(Problem(("job", "timezone"), message))
    env = job.get("env")
    env = env if isinstance(env, dict) and all(isinstance(v, str) for v in env.values()) else {}
    if isinstance(workdir, str) and not Path(workdir).is_dir():
        problems.append(Problem(("job", "workdir"), f"working directory {workdir} does not exist"))
    elif (argv := _argv(command)) and (workdir is None or isinstance(workdir, str)):
        cwd = Path(workdir) if workdir is not None else (base_dir or Path.cwd())
        if message := command_problem(argv, cwd, {**os.environ, **env}):
            problems.append(Problem(("job", "command", 0), message))
    return problems


def _clock_plan_problems(name: str, mode: Mode) -> list[Problem]:
    if mode.clock_plan is None:
        return []
    from scheduler.settings.clock_plans import load_mode_clock_plan
    from scheduler.errors import PolicyError

    try:
        load_mode_clock_plan(name, Path(mode.clock_plan))
    except PolicyError as exc:
        return [Problem(("modes", name, "clock_plan"), str(exc))]
    return []


def policy_warnings(policy: Any) -> list[str]:
    """What is valid but will not do what the policy means: one sentence each (``gridshift policy check`` prints them).

    - ``rules.slot_s`` coarser than the job's window (earliest start to deadline): the planner lays its
      slots on that grid, so no start fits inside the window, and every run is planned as one that
      cannot meet its deadline.
    - ``objective.carbon_price`` without a ``price:`` source: runs have no prices to plan on.
    """
    out: list[str] = []
    if policy.objective.carbon_price is not None and policy.price is None:
        out.append("objective.carbon_price is set but the policy has no price: source: runs plan on carbon alone "
                   "(and say so); add price: {provider: energycharts, zone: DE-LU} or another source, or simulate "
                   "with --price-trace FILE")
    job, rules = policy.job, policy.rules
    slot_s = getattr(rules, "slot_s", None)  # the planner's grid (threshold rules have none)
    if job.deadline_s is not None and slot_s is not None:
        window = job.deadline_s - job.earliest_start_s
        if slot_s > window:
            fit = max(window - job.expected_duration_s, 0.0) or window
            out.append(f"rules.slot_s ({slot_s:g} s) is coarser than the job's window ({window:g} s from its "
                       f"earliest start to its deadline): no planned start fits inside it, so every run is planned "
                       f"as one that cannot meet its deadline; set rules.slot_s to {min(fit, window):g} s or less")
    return out
