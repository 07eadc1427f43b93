"""The Hugging Face Trainer follows gridshift's plan in one line: ``Trainer(callbacks=[GridshiftCallback()])``.

::

    from plans.integrations.hf import GridshiftCallback

    gridshift = GridshiftCallback()
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[gridshift])
    trainer.train(resume_from_checkpoint=gridshift.resume_from)   # None unless gridshift resumes a pause

What it does (the protocol of :mod:`plans.integrations.core`):

- clock plans: the mode's plan runs from train start and is swapped at the next step after a mode
  change; the optimizer phase is the Trainer's ``on_pre_optimizer_step`` event (accelerate's wrapped
  optimizer included), forward and backward are hooks on the model (every micro-batch under
  gradient accumulation; the backward hook sits on the loss, so a ``ModelOutput`` is no obstacle);
- batch size: the Trainer builds its DataLoader once per ``train()`` call, so a new mode's batch size
  is acknowledged as kept, with that reason (the next ``train()`` may start with it:
  ``GRIDSHIFT_BATCH_SIZE`` is the mode's);
- progress: ``state.global_step / state.max_steps``; the outcome (``finish``) at train end, with the
  last logged ``metric`` (and ``reached`` when a ``target`` is given);
- pauses (``job.checkpointable``): on SIGTERM the Trainer saves a checkpoint at the end of the step
  in flight into ``GRIDSHIFT_CHECKPOINT_DIR`` (``checkpoint-<step>``, whatever ``save_strategy``
  says) and the process exits 0; restarted with ``GRIDSHIFT_RESUME=1``, ``resume_from`` names it;
- rank 0 writes; ``power_limit``: a :class:`plans.integrations.power_limit.PowerLimitCallback` to
  drive in the same callback (in-process power-limit profiling).

Any failure of gridshift's own is one warning line; training goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from plans.integrations.clock_runner import OPTIMIZER_PHASES
from plans.integrations.core import TrainingSession, resume_checkpoint
from plans.integrations.power_limit import PowerLimitCallback

__all__ = ["GridshiftCallback", "KEPT_BATCH_SIZE"]

#: why a Trainer keeps its batch size through a mode change
KEPT_BATCH_SIZE = "the HF Trainer builds its DataLoader once per train() call"


def _complete(path: Path) -> bool:
    return (path / "trainer_state.json").is_file()  # written last: a checkpoint cut short has none


class GridshiftCallback(TrainerCallback):  # type: ignore[misc]
    """A ``transformers.TrainerCallback`` for gridshift's whole job protocol (see the module docstring).

    ``metric``: the logged value reported as the outcome (``loss``: the training loss); ``target``:
    ``reached`` is ``metric <= target`` (``>=`` with ``higher_is_better``). ``exit_on_pause``: end
    the process (exit 0) once the pause's checkpoint is written, so the rest of the script does not
    run as if training had finished. ``session_options``: passed to
    :class:`plans.integrations.core.TrainingSession` (``poll_interval_s``, ``dry_run``, ...).
    """

    def __init__(self, *, metric: str = "loss", target: float | None = None, higher_is_better: bool = False,
                 power_limit: PowerLimitCallback | None = None, exit_on_pause: bool = True,
                 **session_options: Any) -> None:
        self.metric, self.target, self.higher_is_better = metric, target, higher_is_better
        self.power_limit = power_limit
        self.exit_on_pause = exit_on_pause
        self.session_options = session_options
        self.session: TrainingSession | None = None
        self._output_dir: str | None = None

    @property
    def resume_from(self) -> str | None:
        """The checkpoint to pass to ``train(resume_from_checkpoint=...)``: the newest in
        ``GRIDSHIFT_CHECKPOINT_DIR`` when gridshift resumes the job after a pause, else None."""
        found = resume_checkpoint("checkpoint-*", complete=_complete)
        return str(found) if found is not None else None

    # -- the Trainer's events ----------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kw: Any) -> None:
        s = self.session = TrainingSession(rank=args.process_index, world_size=args.world_size,
                                           job=self.session.job if self.session else None,
                                           **self.session_options)
        s.start(state.global_step, total_steps=state.max_steps or None, model=model, optimizer=optimizer,
                events=OPTIMIZER_PHASES, checkpoint=self.resume_from if state.global_step else None)
        self._acknowledge(args, state)
        if self.power_limit is not None:
            self.power_limit.use_torch_distributed()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.session is not None:
            self.session.step_begin(state.global_step)
            self._acknowledge(args, state)
        if self.power_limit is not None:
            self.power_limit.on_step_begin()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.session is not None:
            self.session.optimizer_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.power_limit is not None:
            self.power_limit.on_step_end()
        s = self.session
        if s is None or self._output_dir is not None or not s.step_end(state.global_step):
            return
        # a planned pause: the Trainer saves right after this event, here, and then stops
        assert s.checkpoint_dir is not None
        self._output_dir, args.output_dir = args.output_dir, str(s.checkpoint_dir)
        control.should_save = True
        control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.session is None or self._output_dir is None:
            return
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        args.output_dir = self._output_dir  # the user's folder again, for whatever the script saves later
        self.session.pause(state.global_step, checkpoint)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.power_limit is not None:
            self.power_limit.on_epoch_end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        s = self.session
        try:
            if s is not None and not s.paused:
                value = self._last_metric(state)
                reached = None if self.target is None or value is None else (
                    value >= self.target if self.higher_is_better else value <= self.target)
                s.finish(state.global_step, reached=reached, epochs=state.epoch, metric=value,
                         metric_name=self.metric if value is not None else None)
        finally:
            if s is not None:
                s.close()
            if self.power_limit is not None:
                self.power_limit.on_train_end()
        if s is not None and s.paused and self.exit_on_pause:
            raise SystemExit(0)

    # -- internals ----------------------------------------------------------------------------
    def _acknowledge(self, args: Any, state: Any) -> None:
        ann = self.session.take_announcement() if self.session is not None else None
        if ann is None:
            return
        size = int(args.per_device_train_batch_size)
        kept = ann.batch_size is not None and ann.batch_size != size
        self.session.acknowledge(ann, size, reason=KEPT_BATCH_SIZE if kept else "", step=state.global_step,
                                 epoch=state.epoch or 0.0)

    def _last_metric(self, state: Any) -> float | None:
        for entry in reversed(state.log_history or []):
            for key in (self.metric, f"train_{self.metric}"):
                if isinstance(entry.get(key), (int, float)):
                    return float(entry[key])
        return None
