"""flows: Prefect flows that wrap a training run, deployments, and the ``gridshift`` CLI (the front door).

Rooms: ``job/`` (the training job's process and files), ``run/`` (one ``gridshift run`` around the flow),
``fleet/`` (placement and a node's GPUs), ``deployments/`` and ``cli/``; the flows themselves (training,
supervise, nightly) at the top.
"""

__all__ = ["carbon_aware_training"]


def __getattr__(name: str):  # keep `import flows` light: Prefect is imported only when a flow is used
    if name == "carbon_aware_training":
        from flows.training import carbon_aware_training

        return carbon_aware_training
    raise AttributeError(name)
