"""The run room: the plumbing of one ``gridshift run`` around the flow.

``preflight`` (everything checked before Prefect starts), ``prefect_server`` (the user's Prefect API
or a temporary one), ``run_ids`` and ``run_logging`` (naming a run and where its log lines go),
``signals`` (stopping on SIGINT, SIGTERM and SIGHUP) and ``artifacts`` (the RunReport as a Prefect
artifact).
"""
