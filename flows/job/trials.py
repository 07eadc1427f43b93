"""A run of a ``batch_size: auto`` job as one batch-size trial: propose, watch the cost, record it.

:func:`begin_trial` asks the ledger's history (:class:`scheduler.store.batch_size_history.BatchSizeHistory`)
for this recurrence's batch size; :class:`CostWatchedJob` wraps the running job and stops it once
its cost, Zeus's ``eta * E + (1 - eta) * MaxPower * T`` over the energy counter and the wall
clock, passes ``beta`` times the cheapest run that reached the target; :meth:`BatchSizeTrial.finish`
records the outcome from the job's result file so the next recurrence learns from it.
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from backends.types import Capabilities
from flows.job.process import JobHandle
from plans.batch_size import Proposal
from plans.integrations.protocol import JobResult
from plans.zeus_trace.simulator import zeus_cost
from scheduler.store.batch_size_history import BatchSizeHistory, batch_size_config, early_stop_cost
from scheduler.run_spec import JobRun

__all__ = ["BatchSizeTrial", "CostWatchedJob", "begin_trial", "trial_outcome"]

#: a pending trial older than this (and than 4 x the job's expected duration) is a run that died unrecorded
STALE_PENDING_S = 86400.0


def max_power_w(caps: Capabilities) -> float:
    """Zeus's MaxPower for the whole job: the largest power limit of a device times the device count."""
    per_gpu = caps.power_limit_range_w[1] if caps.power_limit_range_w else caps.default_power_limit_w
    return float(per_gpu or 0.0) * max(len(caps.devices), 1)


@dataclass
class BatchSizeTrial:
    """The pending trial of this run and what its early stop compares against."""

    ledger_path: str | None
    job: str
    fingerprint: str
    trial_id: int
    proposal: Proposal
    eta: float
    beta: float | None
    max_power_w: float
    cost_bound: float
    measured: bool

    def cost(self, energy_j: float, time_s: float) -> float:
        return zeus_cost(energy_j, time_s, eta=self.eta, max_power_w=self.max_power_w)

    def watch(self, handle: JobHandle, energy_mj: Callable[[], dict[int, float]],
              clock: Callable[[], float] = time.monotonic) -> "CostWatchedJob":
        return CostWatchedJob(handle, energy_mj=energy_mj, cost=self.cost, bound=self.cost_bound, clock=clock)

    def finish(self, watched: "CostWatchedJob | None", result: JobResult | None, exit_code: int | None,
               used: set[int]) -> dict[str, Any]:
        """Record the outcome in the history; returns the report's ``batch_size_trial`` entry."""
        energy_j, time_s = watched.totals() if watched is not None else (0.0, 0.0)
        stopped = watched.stopped if watched is not None else ""
        others = sorted(used - {self.proposal.batch_size})
        outcome, reached, note = trial_outcome(result, exit_code, stopped=stopped, mixed=bool(others))
        if others:
            note = f"the job also ran with batch size {', '.join(map(str, others))}: {note}"
        cost = self.cost(energy_j, time_s)
        with BatchSizeHistory(self.ledger_path) as history:
            history.finish(self.trial_id, cost=cost, reached=reached, outcome=outcome, energy_j=energy_j,
                           time_s=time_s, epochs=result.epochs if result else None,
                           metric=result.metric if result else None, note=note)
        return {
            "trial_id": self.trial_id, "batch_size": self.proposal.batch_size, "phase": self.proposal.phase,
            "reason": self.proposal.reason, "outcome": outcome, "note": note, "cost_j": cost,
            "cost_bound_j": None if math.isinf(self.cost_bound) else self.cost_bound, "energy_j": energy_j,
            "time_s": time_s, "eta": self.eta, "beta": self.beta, "max_power_w": self.max_power_w,
            "epochs": result.epochs if result else None, "metric": result.metric if result else None,
            "cost_label": "measured" if self.measured else "modelled (simulated energy)",
        }


def trial_outcome(result: JobResult | None, exit_code: int | None, *, stopped: str,
                  mixed: bool) -> tuple[str, bool, str]:
    """(outcome, reached, note) of a trial. Pure. Only ``reached``/``missed``/``stopped`` are learnt from."""
    if stopped:
        return "stopped", False, stopped
    if mixed:
        return "mixed", False, "not a trial of the proposed size alone"
    if result is None or result.reached is None:
        if exit_code == 0:
            return "no_result", False, "the job did not say whether it reached its target (GRIDSHIFT_RESULT_FILE)"
        return "failed", False, f"the job failed (exit code {exit_code}) without a result"
    if result.reached:
        if exit_code != 0:
            return "failed", False, f"the job reported its target reached but exited {exit_code}"
        return "reached", True, ""
    return "missed", False, "the job ended without reaching its target"


def begin_trial(job: JobRun, caps: Capabilities, *, auto_batch_size: bool, ledger_path: str | None, run_id: str,
                measured: bool) -> BatchSizeTrial | None:
    """The trial of this run when a mode says ``batch_size: auto`` (else None), recorded as pending."""
    search = job.batch_size_search
    if search is None or not auto_batch_size:
        return None
    fingerprint = job.fingerprint
    stale_after_s = max(STALE_PENDING_S, 4 * job.expected_duration_s)
    with BatchSizeHistory(ledger_path) as history:
        seen = len(history.rows(job.name, fingerprint))
        # reproducible per (job, recurrence), different across recurrences
        rng = np.random.default_rng([zlib.crc32(f"{job.name}|{fingerprint}".encode()), seen])
        trial_id, proposal = history.begin(job.name, batch_size_config(search), rng, fingerprint=fingerprint,
                                           run_id=run_id, stale_after_s=stale_after_s)
        bound = early_stop_cost(history.history(job.name, fingerprint), search.beta)
    return BatchSizeTrial(ledger_path=ledger_path, job=job.name, fingerprint=fingerprint, trial_id=trial_id,
                          proposal=proposal, eta=search.eta, beta=search.beta, max_power_w=max_power_w(caps),
                          cost_bound=bound, measured=measured)


class CostWatchedJob:
    """A :class:`flows.job.process.JobHandle` whose ``wait`` also stops the job once its cost passes ``bound``.

    The check runs in the caller's thread, between short waits (at most ``poll_s``, sooner when the
    cost rate says the bound is near), so the supervisor's loop is unchanged and nothing else reads
    the energy counter concurrently.
    """

    def __init__(self, handle: JobHandle, *, energy_mj: Callable[[], dict[int, float]],
                 cost: Callable[[float, float], float], bound: float, clock: Callable[[], float] = time.monotonic,
                 poll_s: float = 1.0) -> None:
        self._handle = handle
        self._energy_mj = energy_mj
        self._cost = cost
        self.bound = bound
        self._clock = clock
        self._poll_s = poll_s
        self._t0 = clock()
        self._e0 = sum(energy_mj().values())
        self._final: tuple[float, float] | None = None
        self.stopped = ""

    def _sample(self) -> tuple[float, float]:
        return (sum(self._energy_mj().values()) - self._e0) / 1000.0, self._clock() - self._t0

    def totals(self) -> tuple[float, float]:
        """Energy (J) and wall time (s) of the job, from its start to its end (or now)."""
        return self._final if self._final is not None else self._sample()

    def _ended(self, rc: int) -> int:
        if self._final is None:
            self._final = self._sample()
        return rc

    def wait(self, timeout_s: float | None = None) -> int | None:
        end = self._clock() + timeout_s if timeout_s is not None else math.inf
        while True:
            step = self._poll_s
            if not math.isinf(self.bound):
                energy_j, elapsed = self._sample()
                cost = self._cost(energy_j, elapsed)
                if cost >= self.bound:
                    self._final = (energy_j, elapsed)
                    self.stopped = (f"batch-size trial stopped: its cost {cost:.0f} J passed the early-stop bound "
                                    f"{self.bound:.0f} J (beta x the best run's cost)")
                    self._handle.kill()
                    rc = self._handle.wait(0)
                    return rc if rc is not None else 1
                if cost > 0 and elapsed > 0:  # wake near the predicted crossing, not a whole poll later
                    step = min(step, max((self.bound - cost) / (cost / elapsed), 0.02))
            left = end - self._clock()
            if left <= 0:
                return None
            rc = self._handle.wait(min(step, left))
            if rc is not None:
                return self._ended(rc)

    @property
    def tail(self) -> list[str]:
        return self._handle.tail

    def kill(self) -> None:
        self._handle.kill()
        self._ended(0)
