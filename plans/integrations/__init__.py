"""integrations: the training job's side of gridshift, one module per framework on a shared core.

- ``protocol.py``: the files gridshift and the job share (mode file, result file, environment), ``GridshiftJob``.
- ``core.py``: ``TrainingSession``, the whole protocol for one training process, under any framework.
- ``background_writes.py``: the session's periodic file writes, on a thread of their own.
- ``hf.py``, ``lightning.py``, ``torch_loop.py``: the one object for the HF Trainer, Lightning, and a
  PyTorch (or accelerate) loop of your own. They import their framework; this package does not.
- ``clock_runner.py``: runs the mode's clock plan in the training process and swaps it on a mode change.
- ``phase_hooks.py``: PyTorch hooks for the plan phases a framework has no event for.
- ``ranks.py``: the process's rank, and the two agreements ranks need (a pause, a batch size).
- ``power_limit.py``: ``PowerLimitCallback``, in-process power-limit profiling.
"""

from plans.integrations.protocol import GridshiftJob, JobResult, ModeAnnouncement

__all__ = ["GridshiftJob", "JobResult", "ModeAnnouncement"]
