"""The deployments room: gridshift's flows as Prefect deployments.

``deploy`` (create the nightly retraining deployment; trigger deployments by name), ``serving``
(what ``gridshift serve`` needs from Prefect, checked first), ``flow_parameters`` (JSON-native
flow parameters) and ``fleet_runs`` (every node's runs read back from the Prefect API, and the
record of a run whose node died).
"""
