"""PyTorch hooks that mark a clock plan's phases where the framework has no event of its own.

A plan phase ``forward`` / ``backward`` is the model's forward / backward start; ``<module>.forward``
/ ``<module>.backward`` a named submodule's (``model.named_modules()``); ``optimizer`` (or
``optimizer.step``) the optimizer step. The framework callbacks mark what their framework has events
for (Lightning: all three; the HF Trainer: the optimizer step) and leave the rest to these hooks:

- forward: a forward pre-hook (in training mode only, so evaluation passes switch nothing);
- backward: a forward hook that puts a gradient hook on the module's output (the loss of a
  ``ModelOutput``, else its first tensor that requires grad). A full backward hook never fires on a
  module that returns a ``ModelOutput``, and the gradient of the output is the first thing its
  backward computes, whatever wraps the module (accelerate, autocast, gradient accumulation);
- optimizer: a step pre-hook on the torch optimizer inside any wrapper (accelerate's
  ``AcceleratedOptimizer`` never runs ``Optimizer.__init__``, so it has no hook table of its own;
  its ``step`` calls the inner optimizer's).

No torch import: hooks are registered through the objects handed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from plans.integrations.clock_runner import OPTIMIZER_PHASES

__all__ = ["HookError", "PhaseHooks", "inner_optimizer"]


class HookError(Exception):
    """A phase's hook could not be installed (one line, naming the phase)."""


def inner_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside accelerate's or Lightning's wrappers (``optimizer`` itself when bare)."""
    for _ in range(4):
        inner = optimizer.__dict__.get("optimizer") or optimizer.__dict__.get("_optimizer")
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def _grad_tensor(output: Any) -> Any | None:
    """The tensor of ``output`` whose gradient starts the module's backward (None: no grad here)."""
    if getattr(output, "requires_grad", False) and hasattr(output, "register_hook"):
        return output
    if isinstance(output, Mapping):  # a transformers ModelOutput: its loss first
        loss = output.get("loss")
        if getattr(loss, "requires_grad", False) and hasattr(loss, "register_hook"):
            return loss
        items = list(output.values())
    elif isinstance(output, (tuple, list)):
        items = list(output)
    else:
        return None
    for item in items:
        found = _grad_tensor(item)
        if found is not None:
            return found
    return None


class PhaseHooks:
    """Hooks on ``model`` and ``optimizer`` that call ``on_phase(label)``; :meth:`install` for a
    plan's phases, :meth:`remove` to leave the model as it was. ``events``: phases the framework
    marks itself (no hook for them)."""

    def __init__(self, on_phase: Callable[[str], None], *, model: Any = None, optimizer: Any = None,
                 events: Iterable[str] = ()) -> None:
        self.on_phase = on_phase
        self.model = model
        self.optimizer = optimizer
        self.events = frozenset(events)
        self._handles: list[Any] = []
        #: nanoseconds the hooks spent before a phase starts (finding the tensor to hook): the
        #: ``on_phase`` calls time themselves
        self.busy_ns = 0

    def install(self, phases: Iterable[str]) -> list[str]:
        """Hook ``phases`` (replacing earlier hooks); returns the phases no hook can mark (a label
        that names no module). :class:`HookError` when a hook cannot be installed."""
        self.remove()
        unhooked: list[str] = []
        modules: dict[str, Any] | None = None
        for phase in phases:
            if phase in self.events:
                continue
            if phase in OPTIMIZER_PHASES:
                self._hook_optimizer(phase)
                continue
            name, _, kind = phase.rpartition(".")
            if kind not in ("forward", "backward") or self.model is None:
                unhooked.append(phase)
                continue
            if modules is None:
                modules = dict(self.model.named_modules())
            target = self.model if not name else modules.get(name)
            if target is None:
                unhooked.append(phase)
            elif kind == "forward":
                self._add(phase, lambda: target.register_forward_pre_hook(self._forward(phase)))
            else:
                self._add(phase, lambda: target.register_forward_hook(self._backward(phase)))
        return unhooked

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- internals ----------------------------------------------------------------------------
    def _add(self, phase: str, register: Callable[[], Any]) -> None:
        try:
            self._handles.append(register())
        except Exception as exc:
            raise HookError(f"cannot hook clock plan phase {phase!r}: {type(exc).__name__}: {exc}") from None

    def _hook_optimizer(self, phase: str) -> None:
        if self.optimizer is None:
            if "optimizer" not in self.events:
                raise HookError(f"cannot hook clock plan phase {phase!r}: no optimizer was handed over")
            return
        inner = inner_optimizer(self.optimizer)
        self._add(phase, lambda: inner.register_step_pre_hook(lambda _o, _a, _k: self.on_phase(phase)))

    def _forward(self, phase: str) -> Callable[..., None]:
        def hook(module: Any, _inputs: Any) -> None:
            if module.training:
                self.on_phase(phase)
        return hook

    def _backward(self, phase: str) -> Callable[..., None]:
        def on_grad(_grad: Any) -> None:
            self.on_phase(phase)

        def hook(module: Any, _inputs: Any, output: Any) -> None:
            t0 = time.perf_counter_ns()
            if module.training and (t := _grad_tensor(output)) is not None:
                t.register_hook(on_grad)
            self.busy_ns += time.perf_counter_ns() - t0
        return hook
