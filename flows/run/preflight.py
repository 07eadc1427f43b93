"""Pre-flight checks for ``gridshift run``: everything that can be checked before Prefect starts.

A run that is going to fail on bad input or an unusable machine should fail in a second, with one
line and the right exit code, not after the temporary Prefect server has started, and never after
the job has run (its measurements would have nowhere to go). Checked here, in this order:

1. the policy file, with every check of :mod:`scheduler.policy.checks` (exit 2);
2. the ``-- CMD`` override's program and the ``--backend`` override's name (exit 2);
3. ``backend: nvidia`` (or ``--backend nvidia``): the driver answers and sees a GPU, in the words
   of ``gridshift gpu status`` (exit 3);
4. ``$GRIDSHIFT_HOME`` (the ledger) and the carbon cache below it can be written (exit 3);
5. a Prefect server named by ``PREFECT_API_URL`` answers (exit 3).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

from flows.sources import carbon_cache_dir
from scheduler.store.ledger import gridshift_home, private_dir
from scheduler.policy.types import Policy
from scheduler.policy.checks import backend_problem, command_problem
from scheduler.policy.loader import load_policy

__all__ = ["PreflightError", "BadRunInput", "EnvironmentNotReady", "preflight_run", "writable_dir_problem",
           "prefect_api_problem", "nvidia_problem"]


class PreflightError(Exception):
    """A run cannot start; the message is one line for the user."""


class BadRunInput(PreflightError):
    """A command-line argument of ``gridshift run`` is wrong (exit 2)."""


class EnvironmentNotReady(PreflightError):
    """The machine cannot take the run: a folder that cannot be written, a Prefect server that does
    not answer (exit 3)."""


def writable_dir_problem(path: Path) -> str | None:
    """Why files cannot be created in ``path`` (created when missing), or None. Tries for real:
    permission bits say nothing for root or on read-only mounts."""
    try:
        private_dir(path)  # the ledger's home, and the cache below it: the user's own (scheduler.store.ledger)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".gridshift-write-check-"):
            pass
    except OSError as exc:
        return f"{path} is not writable ({exc.strerror or exc})"
    return None


def prefect_api_problem(url: str, timeout_s: float = 3.0) -> str | None:
    """Why the Prefect server at ``url`` cannot be used, or None when its health check answers."""
    import httpx

    try:
        response = httpx.get(url.rstrip("/") + "/health", timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"the Prefect server at PREFECT_API_URL={url} is unreachable ({type(exc).__name__}: {exc or 'no answer'})"
    if response.status_code >= 400:
        return f"the Prefect server at PREFECT_API_URL={url} answered HTTP {response.status_code} to its health check"
    return None


def nvidia_problem() -> str | None:
    """Why the NVIDIA backend cannot open (no driver, no GPU visible), in ``gridshift gpu status``'s
    words, or None. Reads only: no journal is replayed and nothing is changed (the run does that)."""
    from backends.errors import BackendError
    from backends.nvidia import NvidiaBackend

    backend = NvidiaBackend(recover=False, per_rank=False)
    try:
        backend.devices
    except BackendError as exc:
        return str(exc)
    finally:
        backend.close()
    return None


def preflight_run(policy_path: str | Path, *, command: Sequence[str] | None = None,
                  backend: str | None = None) -> Policy:
    """Check everything a run needs before Prefect starts; return the loaded policy.

    Raises :class:`scheduler.errors.PolicyError` or :class:`BadRunInput` (exit 2), or
    :class:`EnvironmentNotReady` (exit 3).
    """
    policy = load_policy(policy_path)
    if command:
        cwd = Path(policy.job.workdir) if policy.job.workdir is not None else Path.cwd()
        if message := command_problem(command, cwd, {**os.environ, **policy.job.env}):
            raise BadRunInput(f"command after '--': {message}")
    if backend is not None and (message := backend_problem(backend)):
        raise BadRunInput(f"--backend: {message}")
    if (backend or policy.backend.name) == "nvidia" and (message := nvidia_problem()):
        raise EnvironmentNotReady(message)
    for folder, what in ((gridshift_home(), "the run ledger"), (carbon_cache_dir(), "the carbon cache")):
        if message := writable_dir_problem(folder):
            raise EnvironmentNotReady(f"{message}: {what} lives there; set GRIDSHIFT_HOME to a writable folder")
    url = os.environ.get("PREFECT_API_URL")
    if url and (message := prefect_api_problem(url)):
        raise EnvironmentNotReady(f"{message}; start it (`prefect server start`) or unset PREFECT_API_URL "
                                  "to let gridshift start a temporary one")
    return policy
