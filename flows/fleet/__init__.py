"""A fleet of GPU nodes behind Prefect: where a run goes, and how runs share a node's GPUs.

- :mod:`flows.fleet.placing`: place a run (site and start together) from the fleet's bookings in Prefect.
- :mod:`flows.fleet.gpus`: a node's GPU slots (a Prefect global concurrency limit) and the devices a run pins.
- :mod:`flows.fleet.gpu_line`: the runs waiting for a node's GPUs take them in booked order.
- :mod:`flows.fleet.early_start`: GPUs freed early go to the run queued next on their site.
"""
