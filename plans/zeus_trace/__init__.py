"""Trace-driven benchmark on the Zeus NSDI'23 traces: simulator, Zeus replica, gridshift's policy, baselines."""

from plans.zeus_trace.baselines import default_cost, expected_cost, expected_epochs, oracle
from plans.zeus_trace.bench import PairResult, bench_pairs, bench_traces, load_reference, run_pair, summarise, trace_workloads
from plans.zeus_trace.synthetic import SHAPES, SyntheticShape, synthetic_trace
from plans.zeus_trace.gridshift_policy import GridshiftPolicy
from plans.zeus_trace.simulator import JobInfo, RunEntry, RunObservation, SimResult, charge_run, simulate, zeus_cost
from plans.zeus_trace.job_table import JOBS, JobDef, TraceJob, load_trace_job
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
    "PairResult",
    "bench_pairs",
    "bench_traces",
    "SHAPES",
    "SyntheticShape",
    "synthetic_trace",
    "load_reference",
    "summarise",
    "trace_workloads",
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
