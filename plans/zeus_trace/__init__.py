"""Trace-driven benchmark on the Zeus NSDI'23 traces: simulator, Zeus replica, gridshift's policy, baselines."""

from plans.zeus_trace.baselines import default_cost, expected_cost, expected_epochs, oracle
from plans.zeus_trace.bench import bench_zeus_trace, run_pair
from plans.zeus_trace.gridshift_policy import GridshiftPolicy
from plans.zeus_trace.simulator import JobInfo, RunEntry, RunObservation, SimResult, charge_run, simulate, zeus_cost
from plans.zeus_trace.trace import JOBS, JobDef, TraceJob, load_trace_job
from plans.zeus_trace.zeus_replica import ZeusReplica, jit_power_limit

__all__ = [
    "JOBS",
    "GridshiftPolicy",
    "JobDef",
    "JobInfo",
    "RunEntry",
    "RunObservation",
    "SimResult",
    "TraceJob",
    "ZeusReplica",
    "bench_zeus_trace",
    "charge_run",
    "default_cost",
    "expected_cost",
    "expected_epochs",
    "jit_power_limit",
    "load_trace_job",
    "oracle",
    "run_pair",
    "simulate",
    "zeus_cost",
]
