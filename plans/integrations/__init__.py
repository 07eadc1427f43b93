"""integrations: the training job's side of gridshift, one module per framework on a shared core.

- ``protocol.py``: the files gridshift and the job share (mode file, result file, environment).
- ``clock_runner.py``: runs the mode's clock plan in the training process and swaps it on a mode change.
- ``power_limit.py``: ``PowerLimitCallback``, in-process power-limit profiling.
"""

from plans.integrations.protocol import GridshiftJob, JobResult, ModeAnnouncement

__all__ = ["GridshiftJob", "JobResult", "ModeAnnouncement"]
