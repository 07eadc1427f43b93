"""The job room: the training job's process and gridshift's side of it.

``process`` (a subprocess or an in-process callable; output streamed, the child killed in finally),
``mode_file`` (the job files of :mod:`plans.integrations.protocol` and truthful job settings),
``span_settings`` (who applied each setting of a mode span), ``progress`` (work done in reference
seconds), ``trials`` (a ``batch_size: auto`` run as one trial) and ``windows`` (a pausable job's
state carried from one flow run to the next).
"""
