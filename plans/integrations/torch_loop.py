"""A plain PyTorch (or accelerate) loop follows gridshift's plan with one object: :class:`TrainingLoop`.

::

    from plans.integrations.torch_loop import TrainingLoop

    with TrainingLoop(model, optimizer, total_steps=steps, batch_size=64) as loop:   # resumes a pause
        while loop.step < steps:
            batch_size = loop.epoch_boundary()      # where your loop may change its batch size
            for x, y in batches(batch_size):
                loss = loss_fn(model(x), y); loss.backward(); optimizer.step(); optimizer.zero_grad()
                loop.step_done()                    # progress, mode changes, pauses
        loop.finish(metric=loss.item(), metric_name="train_loss")

What it does (the protocol of :mod:`plans.integrations.core`):

- clock plans: the mode's plan runs from the ``with`` on and is swapped at the next step after a
  mode change; phases are hooks on ``model`` and ``optimizer`` (the torch optimizer inside
  accelerate's wrapper; forward and backward for every micro-batch);
- batch size: :meth:`TrainingLoop.epoch_boundary` returns the newest mode's size (gridshift's
  start size first) and acknowledges it, applied: your loop builds its batches with it. Under
  ``torch.distributed`` every rank gets rank 0's answer;
- progress ``step / total_steps``; the outcome with :meth:`TrainingLoop.finish`;
- pauses (``job.checkpointable``): SIGTERM stops the loop at the next :meth:`TrainingLoop.step_done`
  (agreed across ranks): rank 0 writes ``torch-step-<n>.pt`` in ``GRIDSHIFT_CHECKPOINT_DIR`` (the
  ``state_dict`` of each object in ``state``: the model and optimizer by default, and the RNG) and
  the process exits 0. With ``GRIDSHIFT_RESUME=1`` entering the ``with`` loads it back, and
  :attr:`TrainingLoop.step` says where to go on from;
- rank 0 writes. Outside gridshift it does nothing but count steps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from plans.integrations.core import TrainingSession, resume_checkpoint

__all__ = ["TrainingLoop"]


class TrainingLoop:
    """gridshift's whole job protocol for a loop of your own (see the module docstring).

    ``total_steps``: the optimizer steps the run takes (progress; None: no progress reports).
    ``batch_size``: the size to start with when gridshift names none. ``state``: what a pause's
    checkpoint holds, name -> object with ``state_dict``/``load_state_dict`` (default: ``model`` and
    ``optimizer``; add schedulers, grad scalers). ``session_options``: passed to
    :class:`plans.integrations.core.TrainingSession` (``poll_interval_s``, ``dry_run``, ...).
    """

    def __init__(self, model: Any, optimizer: Any, *, total_steps: int | None, batch_size: int,
                 state: Mapping[str, Any] | None = None, **session_options: Any) -> None:
        self.model, self.optimizer = model, optimizer
        self.total_steps = total_steps
        self.session = TrainingSession(**session_options)
        self.batch_size = self.session.job.start_batch_size(batch_size)
        self.state = dict(state) if state is not None else {"model": model, "optimizer": optimizer}
        self.step = 0
        self.epoch = 0
        self.resumed_from: Path | None = None

    # -- the with block ---------------------------------------------------------------------------
    def __enter__(self) -> "TrainingLoop":
        found = resume_checkpoint("torch-step-*.pt")
        if found is not None:
            self._load(found)
            found = self.resumed_from
        self.session.start(self.step, total_steps=self.total_steps, model=self.model, optimizer=self.optimizer,
                           checkpoint=found)
        self.session.step_begin(self.step)
        return self

    def __exit__(self, *exc: object) -> None:
        self.session.close()

    # -- what the loop calls ----------------------------------------------------------------------
    def epoch_boundary(self, epoch: int | None = None) -> int:
        """The batch size to build the next batches with: the newest mode's, acknowledged as applied
        (call it where your loop can change the size; on every rank)."""
        if epoch is not None:
            self.epoch = epoch
        ann = self.session.batch_size_change()
        if ann is not None:
            if ann.batch_size is not None:
                self.batch_size = ann.batch_size
            self.session.acknowledge(ann, self.batch_size, epoch=self.epoch, step=self.step)
        return self.batch_size

    def step_done(self) -> None:
        """One optimizer step done: progress, and a look at the mode; on a pause, the checkpoint and exit 0."""
        self.step += 1
        if self.session.step_end(self.step):
            checkpoint = self.session.guard("write the checkpoint", self._save, drop=False)
            self.session.pause(self.step, checkpoint)
            self.session.close()
            raise SystemExit(0)
        self.session.step_begin(self.step)

    def finish(self, *, reached: bool | None = None, metric: float | None = None, metric_name: str | None = None) -> None:
        """Training ended by itself: the outcome (``reached``: the target was met, when you know it)."""
        self.session.finish(self.step, reached=reached, epochs=self.epoch + 1, metric=metric, metric_name=metric_name)

    # -- checkpoints ------------------------------------------------------------------------------
    def _save(self) -> Path | None:
        folder = self.session.checkpoint_dir
        if folder is None or self.session.rank != 0:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"torch-step-{self.step}.pt"
        partial = folder / f".torch-step-{self.step}.pt.partial"
        torch.save({"step": self.step, "epoch": self.epoch, "batch_size": self.batch_size,
                    "state": {name: obj.state_dict() for name, obj in self.state.items()},
                    "rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}, partial)
        os.replace(partial, path)  # a pause cut short by SIGKILL leaves no half checkpoint to resume from
        return path

    def _load(self, path: Path) -> None:
        saved = self.session.guard(f"read the checkpoint {path.name} (starting from step 0)",
                                   lambda: torch.load(path, map_location="cpu", weights_only=False), drop=False)
        if saved is None:
            return
        for name, obj in self.state.items():  # a checkpoint that does not fit the model is the script's error
            obj.load_state_dict(saved["state"][name])
        self.step, self.epoch, self.batch_size = int(saved["step"]), int(saved["epoch"]), int(saved["batch_size"])
        torch.set_rng_state(saved["rng"])
        if saved.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
        self.resumed_from = path
