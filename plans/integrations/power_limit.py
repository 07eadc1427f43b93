"""Drive power-limit profiling and limit changes from a training loop (in-process profiling).

Plain PyTorch (or any loop)::

    cb = PowerLimitCallback(backend, PowerLimitProfiler(limits_w, ZeusCost(0.5)), meter=backend.meter(),
                            store=ProfileStore(dir), gpu_model="NVIDIA H200", fingerprint=fp)
    for epoch in range(n):
        for batch in loader:
            cb.on_step_begin(); train_step(batch); cb.on_step_end()
        cb.on_epoch_end()

    cb.on_train_end()  # restores the limit found before training

Limits are applied through :class:`backends.Backend` (which records and restores what it found);
energy windows come from the injected :class:`backends.meter.EnergyMeter`, which must count this
rank's own GPU only (``NvidiaBackend(per_rank=True)`` picks it from ``LOCAL_RANK``).

The HF Trainer and Lightning callbacks drive it in the same object as the rest of the protocol::

    Trainer(..., callbacks=[plans.integrations.hf.GridshiftCallback(power_limit=cb)])
    L.Trainer(..., callbacks=[plans.integrations.lightning.GridshiftCallback(power_limit=cb)])

Distributed training: every rank runs the callback (steps and epochs are in lockstep, so the windows
close at the same step everywhere). :meth:`PowerLimitCallback.use_torch_distributed` (called by the
HF and Lightning callbacks at train start) all-reduces each closed window when ``torch.distributed``
is initialised: energy summed over ranks, time the slowest rank's (the arithmetic of
:func:`plans.power_limit.combine_ranks`); the stored profile then says ``world_size`` = the number
of ranks, and only rank 0 writes it. Or pass ``combine=`` yourself.

This module imports neither torch nor a framework.
"""

from __future__ import annotations

from typing import Callable

from backends.base import Backend
from backends.meter import EnergyMeter
from backends.types import Settings
from plans.errors import BadProfile
from plans.power_limit import (
    BeginWindow,
    CancelWindow,
    Done,
    EndWindow,
    EpochEnd,
    LimitMeasurement,
    Measured,
    PowerLimitProfiler,
    Profiling,
    ProfilerState,
    SetLimit,
    StepBegin,
)
from plans.profile_store import PowerProfile, ProfileStore

__all__ = ["PowerLimitCallback", "torch_distributed_combine"]


def torch_distributed_combine() -> tuple[Callable[[Measured], Measured], int, int] | None:
    """``(combine, world_size, rank)`` when ``torch.distributed`` is initialised, else None.

    ``combine`` all-reduces one closed window: time MAX, energy SUM, and the step counts must agree.
    It is a collective: every rank must call it for the same window (they do, in lockstep).
    """
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")

    def combine(m: Measured) -> Measured:
        most = torch.tensor([m.time_s, float(m.steps), -float(m.steps)], dtype=torch.float64, device=device)
        total = torch.tensor([m.energy_j], dtype=torch.float64, device=device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        hi, lo = int(most[1].item()), int(-most[2].item())
        if hi != lo:
            raise BadProfile(f"ranks measured different step counts: {lo} to {hi}")
        return Measured(time_s=float(most[0].item()), energy_j=float(total[0].item()), steps=hi)

    return combine, dist.get_world_size(), dist.get_rank()


class PowerLimitCallback:
    """Profiles power limits in-process, then holds the selected one; a later selection may replace it."""

    def __init__(
        self,
        backend: Backend,
        profiler: PowerLimitProfiler,
        *,
        meter: EnergyMeter,
        store: ProfileStore | None = None,
        gpu_model: str = "",
        fingerprint: str = "",
        combine: Callable[[Measured], Measured] | None = None,
        world_size: int = 1,
    ) -> None:
        self.backend = backend
        self.profiler = profiler
        self.meter = meter
        self.store = store
        self.gpu_model = gpu_model
        self.fingerprint = fingerprint
        self.combine = combine or (lambda m: m)
        self._combine_given = combine is not None
        self.world_size = world_size
        self.saves_profile = True
        self._pending_limit_w: float | None = None
        stored = store.load(gpu_model, fingerprint) if store is not None else None
        self.reused = stored is not None
        self.state: ProfilerState = profiler.resume(stored.measurements) if stored else profiler.initial()
        if isinstance(self.state, Done):
            self._pending_limit_w = self.state.selected_w  # applied at the first step boundary

    # -- what the loop calls -------------------------------------------------------------------
    def on_step_begin(self) -> None:
        if self._pending_limit_w is not None:
            self._set(self._pending_limit_w)
            self._pending_limit_w = None
        self._advance(StepBegin())

    def on_step_end(self) -> None:
        """Nothing to do: limits change only at step begins (kept for the loop's symmetry)."""

    def on_epoch_end(self) -> None:
        self._advance(EpochEnd())

    def on_train_end(self) -> None:
        """Drop an unfinished profiling window and put back the limit found before training.

        An unfinished profile is not saved (the next run profiles again).
        """
        try:
            if isinstance(self.state, Profiling):
                self.meter.end(self.profiler.window_name(self.state.index))
        finally:
            self.backend.restore()

    def use_torch_distributed(self) -> bool:
        """Combine windows across ranks with ``torch.distributed`` when it is initialised.

        Keeps a ``combine`` passed to the constructor. Returns True when ranks are combined.
        """
        if self._combine_given:
            return self.world_size > 1
        found = torch_distributed_combine()
        if found is None:
            return False
        self.combine, self.world_size, rank = found
        self.saves_profile = rank == 0  # one writer; every rank computes the same combined profile
        return True

    # -- selection -----------------------------------------------------------------------------
    @property
    def profile(self) -> tuple[LimitMeasurement, ...]:
        return self.state.measurements

    @property
    def done(self) -> bool:
        return isinstance(self.state, Done)

    def request_limit(self, power_limit_w: float) -> None:
        """Apply ``power_limit_w`` at the next step boundary (e.g. a carbon-aware re-selection).

        Ignored while profiling is still under way: the profile must finish under its own limits.
        """
        if self.done:
            self._pending_limit_w = power_limit_w

    # -- internals -----------------------------------------------------------------------------
    def _set(self, power_limit_w: float) -> None:
        self.backend.apply(Settings(power_limit_w=power_limit_w))

    def _advance(self, event: StepBegin | EpochEnd | Measured) -> None:
        self.state, actions = self.profiler.step(self.state, event)
        for act in actions:
            if isinstance(act, SetLimit):
                self._set(act.power_limit_w)
            elif isinstance(act, BeginWindow):
                self.meter.begin(act.name)
            elif isinstance(act, CancelWindow):
                self.meter.end(act.name)  # discarded: the window was cut by an epoch boundary
            elif isinstance(act, EndWindow):
                w = self.meter.end(act.name)
                measured = self.combine(Measured(time_s=w.duration_s, energy_j=w.energy_j, steps=self.profiler.profile_steps))
                self._advance(measured)
                return
        if (isinstance(self.state, Done) and not self.reused and self.store is not None and self.saves_profile
                and event.__class__ is Measured):
            self.store.save(
                PowerProfile(
                    gpu_model=self.gpu_model,
                    fingerprint=self.fingerprint,
                    measurements=self.state.measurements,
                    world_size=self.world_size,
                    measured=getattr(self.backend, "measured", True),
                )
            )
