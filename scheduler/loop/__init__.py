"""The run loop room: the one loop that decides, re-plans, paces and pauses, and the gate on its forecast.

``loop`` (:func:`scheduler.loop.loop.run_loop`: pure, the clock, the signal, the job and its meter are
a :class:`scheduler.loop.loop.RunDriver`'s; ``flows.supervise`` drives it with the real job,
``simulation`` with a job on a trace) and ``gate`` (do no harm: a forecast leaves the static plan only
as far as its record of past nights shows it pays).
"""
