"""The settings room: from a policy mode to what a backend or a job applies.

``resolve`` (a Mode -> backend Settings for the device at hand), ``auto_power``
(``power_limit_select``: the limit from a stored profile, or the profiler) and ``clock_plans``
(the DVFS clock plans a mode names, loaded and checked before the job starts).
"""
