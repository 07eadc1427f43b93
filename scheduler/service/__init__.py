"""The service room: ``gridshift serve`` and placement across sites.

``serve`` (a durable table of planned runs, fired exactly once, on an injected clock) and
``placement`` (the planner run once per site; the best plan wins). Neither imports flows: runs are
started through callables the front door passes in.
"""
