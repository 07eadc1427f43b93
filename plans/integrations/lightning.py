"""Lightning follows gridshift's plan in one line: ``Trainer(callbacks=[GridshiftCallback()])``.

::

    from plans.integrations.lightning import GridshiftCallback

    gridshift = GridshiftCallback()
    trainer = L.Trainer(..., callbacks=[gridshift], reload_dataloaders_every_n_epochs=1)
    trainer.fit(model, ckpt_path=gridshift.resume_from)    # None unless gridshift resumes a pause

What it does (the protocol of :mod:`plans.integrations.core`):

- clock plans: the mode's plan runs from train start and is swapped at the next batch after a mode
  change; its phases are Lightning's own events (``forward``: ``on_train_batch_start``,
  ``backward``: ``on_before_backward``, ``optimizer``: ``on_before_optimizer_step``), which fire
  whatever ``training_step`` calls; a submodule's phases (``net.forward``) are hooks on it;
- batch size: a new mode's size is set on the module's (or datamodule's) ``batch_size`` attribute at
  the end of the epoch, the DataLoader is rebuilt with it for the next epoch when
  ``reload_dataloaders_every_n_epochs=1``, and the size the rebuilt loader has is acknowledged;
  without that attribute or that setting the size is acknowledged as kept, with the reason. Under
  DDP every rank takes rank 0's mode, so the ranks' epochs stay the same length;
- progress: ``global_step / estimated_stepping_batches``; the outcome at train end, with the logged
  ``metric`` (``reached`` when a ``target`` is given);
- pauses (``job.checkpointable``): Lightning turns SIGTERM into an exception at the end of the batch
  (agreed across ranks); this callback then saves ``step-<n>.ckpt`` in ``GRIDSHIFT_CHECKPOINT_DIR``
  and Lightning exits 0. Restarted with ``GRIDSHIFT_RESUME=1``, ``resume_from`` names it;
- rank 0 writes; ``power_limit``: a :class:`plans.integrations.power_limit.PowerLimitCallback` to
  drive in the same callback.

Any failure of gridshift's own is one warning line; training goes on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.utilities.exceptions import SIGTERMException
    from lightning.pytorch.utilities.parsing import lightning_hasattr, lightning_setattr
except ImportError:  # the standalone package
    from pytorch_lightning import Callback  # type: ignore[no-redef]
    from pytorch_lightning.utilities.exceptions import SIGTERMException  # type: ignore[no-redef]
    from pytorch_lightning.utilities.parsing import lightning_hasattr, lightning_setattr  # type: ignore[no-redef]

from plans.integrations.clock_runner import OPTIMIZER_PHASES
from plans.integrations.core import TrainingSession, resume_checkpoint
from plans.integrations.power_limit import PowerLimitCallback
from plans.integrations.protocol import ModeAnnouncement

__all__ = ["GridshiftCallback"]

_EVENTS = ("forward", "backward", *OPTIMIZER_PHASES)


def _loader_batch_size(trainer: Any) -> int | None:
    loaders = trainer.train_dataloader
    if isinstance(loaders, dict):
        loaders = next(iter(loaders.values()), None)
    elif isinstance(loaders, (list, tuple)):
        loaders = loaders[0] if loaders else None
    size = getattr(loaders, "batch_size", None)
    return size if isinstance(size, int) and size > 0 else None


class GridshiftCallback(Callback):  # type: ignore[misc]
    """A Lightning ``Callback`` for gridshift's whole job protocol (see the module docstring).

    ``metric``: the logged value (``trainer.callback_metrics``) reported as the outcome; ``target``:
    ``reached`` is ``metric <= target`` (``>=`` with ``higher_is_better``). ``session_options``:
    passed to :class:`plans.integrations.core.TrainingSession` (``poll_interval_s``, ``dry_run``, ...).
    """

    def __init__(self, *, metric: str = "train_loss", target: float | None = None, higher_is_better: bool = False,
                 power_limit: PowerLimitCallback | None = None, **session_options: Any) -> None:
        self.metric, self.target, self.higher_is_better = metric, target, higher_is_better
        self.power_limit = power_limit
        self.session_options = session_options
        self.session: TrainingSession | None = None
        self._switching: ModeAnnouncement | None = None

    @property
    def resume_from(self) -> str | None:
        """The checkpoint to pass to ``fit(ckpt_path=...)``: the newest in ``GRIDSHIFT_CHECKPOINT_DIR``
        when gridshift resumes the job after a pause, else None."""
        found = resume_checkpoint("step-*.ckpt")
        return str(found) if found is not None else None

    # -- Lightning's events ---------------------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # Lightning turns SIGTERM into an exception itself, agreed across ranks: no handler of ours
        s = self.session = TrainingSession(rank=trainer.global_rank, world_size=trainer.world_size,
                                           handle_sigterm=False, job=self.session.job if self.session else None,
                                           **self.session_options)
        total = trainer.estimated_stepping_batches
        optimizers = list(trainer.optimizers or [])
        s.start(trainer.global_step, total_steps=int(total) if total not in (None, float("inf")) else None,
                model=pl_module, optimizer=optimizers[0] if optimizers else None, events=_EVENTS,
                checkpoint=trainer.ckpt_path if trainer.global_step else None)
        ann = s.batch_size_change()
        if ann is not None:
            s.guard("follow the batch size", lambda: self._follow(trainer, pl_module, ann), drop=False)
        if self.power_limit is not None:
            self.power_limit.use_torch_distributed()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        ann, self._switching = self._switching, None
        if ann is not None and self.session is not None:  # the loader has been rebuilt: acknowledge what it has
            size = _loader_batch_size(trainer)
            if size is not None:
                why = "" if size == ann.batch_size else f"the rebuilt DataLoader has batch size {size}"
                self.session.acknowledge(ann, size, reason=why, epoch=trainer.current_epoch)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *a: Any) -> None:
        if self.session is not None:
            self.session.step_begin(trainer.global_step)
            self.session.phase("forward")
        if self.power_limit is not None:
            self.power_limit.on_step_begin()

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self.session is not None:
            self.session.phase("backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any, *a: Any) -> None:
        if self.session is not None:
            self.session.optimizer_step()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                           *a: Any) -> None:
        if self.session is not None:
            self.session.step_end(trainer.global_step)
        if self.power_limit is not None:
            self.power_limit.on_step_end()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.session is not None:
            ann = self.session.batch_size_change()  # every rank takes rank 0's: epochs stay equal
            if ann is not None:
                self.session.guard("follow the batch size", lambda: self._follow(trainer, pl_module, ann), drop=False)
        if self.power_limit is not None:
            self.power_limit.on_epoch_end()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        s = self.session
        try:
            if s is not None:
                value = trainer.callback_metrics.get(self.metric)
                value = float(value) if value is not None else None
                reached = None if self.target is None or value is None else (
                    value >= self.target if self.higher_is_better else value <= self.target)
                s.finish(trainer.global_step, reached=reached, epochs=trainer.current_epoch, metric=value,
                         metric_name=self.metric if value is not None else None)
        finally:
            self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        s = self.session
        try:
            if s is not None and isinstance(exception, SIGTERMException) and s.checkpoint_dir is not None:
                folder = s.checkpoint_dir
                written = s.guard("write the checkpoint", lambda: self._save(trainer, folder), drop=False)
                s.pause(trainer.global_step, written)
        finally:
            self._close()

    # -- internals ----------------------------------------------------------------------------
    def _close(self) -> None:
        if self.session is not None:
            self.session.close()
        if self.power_limit is not None:
            self.power_limit.on_train_end()

    def _save(self, trainer: Any, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"step-{trainer.global_step}.ckpt"
        partial = folder / f".step-{trainer.global_step}.ckpt.partial"
        trainer.save_checkpoint(partial)  # every rank calls it; rank 0 writes
        if trainer.is_global_zero:
            os.replace(partial, path)  # a pause cut short by SIGKILL leaves no half checkpoint to resume from
        return path

    def _follow(self, trainer: Any, pl_module: Any, ann: ModeAnnouncement) -> None:
        """Act on ``ann``'s batch size: set it for the next epoch's DataLoader, or say why not."""
        assert self.session is not None
        size = _loader_batch_size(trainer)
        if size is None:
            return  # nothing the job can truthfully say it runs
        want = ann.batch_size
        if want is None or want == size:
            self.session.acknowledge(ann, size, epoch=trainer.current_epoch)
            return
        owner = pl_module if lightning_hasattr(pl_module, "batch_size") else None
        if owner is None:
            why = "the LightningModule and its datamodule have no batch_size attribute for the DataLoader"
        elif not trainer.reload_dataloaders_every_n_epochs:
            why = "the DataLoader is not rebuilt: set Trainer(reload_dataloaders_every_n_epochs=1)"
        else:
            lightning_setattr(pl_module, "batch_size", want)
            self._switching = ann
            why = f"switching to {want} at the next epoch"
        self.session.acknowledge(ann, size, reason=why, epoch=trainer.current_epoch)
