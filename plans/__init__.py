"""plans: compute settings (power limits, batch sizes, DVFS clock plans) from profiles and models.

Pure: no NVML, no clock, no HTTP. Imports carbon and backends only.
"""

from plans.batch_size import BatchSizeConfig, BatchSizeOptimizer, Proposal, Trial
from plans.integrations.power_limit import PowerLimitCallback
from plans.errors import BadJobFile, BadProfile, BadTraceFile, PlanError, SimulationAborted
from plans.integrations.protocol import GridshiftJob, JobResult, ModeAnnouncement
from plans.power_limit import LimitMeasurement, PowerLimitProfiler, combine_ranks, local_limit_search
from plans.profile_store import PowerProfile, ProfileStore, workload_fingerprint
from plans.selectors import (
    CarbonAware,
    Energy,
    MaxSlowdown,
    Selector,
    Time,
    ZeusCost,
    make_selector,
    switch_point_g_per_kwh,
)

__all__ = [
    "BadJobFile",
    "BadProfile",
    "BadTraceFile",
    "BatchSizeConfig",
    "BatchSizeOptimizer",
    "CarbonAware",
    "Energy",
    "GridshiftJob",
    "JobResult",
    "LimitMeasurement",
    "MaxSlowdown",
    "ModeAnnouncement",
    "PlanError",
    "PowerLimitCallback",
    "PowerLimitProfiler",
    "PowerProfile",
    "ProfileStore",
    "Proposal",
    "Selector",
    "SimulationAborted",
    "Time",
    "Trial",
    "ZeusCost",
    "combine_ranks",
    "local_limit_search",
    "make_selector",
    "switch_point_g_per_kwh",
    "workload_fingerprint",
]
