"""A fleet of GPU nodes behind Prefect: where a run goes, and how runs share a node's GPUs.

- :mod:`flows.fleet.placing`: place a run (site and start together) from the fleet's bookings in Prefect.
- :mod:`flows.fleet.gpus`: a node's GPU slots (a Prefect global concurrency limit) and the devices a run pins.
- :mod:`flows.fleet.gpu_line`: the runs waiting for a node's GPUs take them in booked order.
- :mod:`flows.fleet.slots`: a node's GPU slots checked against the runs that hold them (no slot leaks).
- :mod:`flows.fleet.names`: the names and times the fleet and the deployments share.
"""
