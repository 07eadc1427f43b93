"""scheduler: decides. Rooms: ``policy/`` (the policy file), ``planner/`` (the plan, its inputs, the
threshold decider), ``settings/`` (what a backend or job applies), ``store/`` (SQLite files), ``service/``
(``gridshift serve``, placement across sites); ``report`` (RunReport) and ``errors`` at the top.

Imports carbon, backends and plans; never flows.
"""

from scheduler.planner.thresholds import Decision, ModeState, classify, decide, percentile_rank
from scheduler.errors import LedgerError, PolicyError, SchedulerError
from scheduler.store.ledger import Ledger, gridshift_home
from scheduler.settings.resolve import resolve_settings
from scheduler.policy.types import (AbsoluteRule, BackendConfig, CarbonConfig, CarbonSource, JobSpec, Mode, Objective, PlanRule, Policy,
                              RelativeRule)
from scheduler.policy.loader import load_policy, parse_policy
from scheduler.policy.schema import policy_json_schema
from scheduler.report import ModeSpan, RunReport, joules_to_grams

__all__ = [
    "AbsoluteRule",
    "BackendConfig",
    "CarbonConfig",
    "CarbonSource",
    "Decision",
    "JobSpec",
    "Ledger",
    "LedgerError",
    "Mode",
    "ModeSpan",
    "ModeState",
    "Objective",
    "PlanRule",
    "Policy",
    "PolicyError",
    "RelativeRule",
    "RunReport",
    "SchedulerError",
    "classify",
    "decide",
    "gridshift_home",
    "joules_to_grams",
    "load_policy",
    "parse_policy",
    "percentile_rank",
    "policy_json_schema",
    "resolve_settings",
]
