"""Acceptance 5 of issue 12: a fault-injection soak of `gridshift serve` on an injected clock.

A simulated week of nightly runs through serve's own plan (``flows.cli.deploy.serve_plan``: the
policy, a carbon chain, the planner) and loop (``PlanningService.run_forever`` with an injected
sleep that moves the clock): the carbon provider fails at random (the chain fails over to static),
the Prefect API fails at random (sometimes after creating the flow run, so the answer is lost),
Prefect is down for one whole night, and serve is restarted twice (once cleanly, once killed in
the middle of a trigger). Every planned run must be fired exactly once or recorded as missed with a
reason; no flow run is created twice. Seeded; prints the counts.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from carbon.errors import ProviderUnreachable
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.static import StaticProvider
from carbon.providers.trace import TraceProvider
from carbon.series import IntensityPoint
from scheduler.service.serve import Backoff, PlanningService, ServeStore
from tests.fakes.fake_prefect import FakeDeployments

START = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
END = START + timedelta(days=7)
POLICY = """
schema_version: 1
carbon: {provider: static, options: {g_per_kwh: 300}}
modes:
  speed: {power_limit_fraction: 1.0}
  efficiency: {power_limit_fraction: 0.7, max_slowdown: 0.3}
rules: {kind: relative, horizon_s: 43200, clean_below_percentile: 40, dirty_above_percentile: 60}
job:
  name: soak
  command: [python, -c, "pass"]
  expected_duration_s: 10800
  cron: "0 1 * * *"
  earliest_start_s: -14400
  deadline_s: 25200
backend: {name: simulated}
"""
OUTAGE = (datetime(2026, 6, 5, 20, 0, tzinfo=timezone.utc), datetime(2026, 6, 6, 10, 0, tzinfo=timezone.utc))
CLEAN_RESTART = datetime(2026, 6, 3, 1, 30, tzinfo=timezone.utc)  # down 40 min, across a possible start
KILL_MID_TRIGGER_AFTER = datetime(2026, 6, 4, 0, 0, tzinfo=timezone.utc)


class FlakyTrace(TraceProvider):
    """The packaged trace, failing at random like a free tier in a bad week."""

    def __init__(self, rng: random.Random, rate: float) -> None:
        super().__init__(replay="loop")
        self.rng, self.rate, self.failures = rng, rate, 0

    def current(self, *, now: datetime) -> IntensityPoint:
        if self.rng.random() < self.rate:
            self.failures += 1
            raise ProviderUnreachable("connection refused", provider="trace")
        return super().current(now=now)


class Killed(BaseException):
    """The service process dies (not an Exception: nothing in serve may catch it)."""


def test_a_week_of_faults_fires_every_run_once_or_records_why_not(tmp_path: Path) -> None:
    from flows.cli.deploy import serve_plan
    from scheduler.policy.loader import load_policy

    rng = random.Random(20261201)
    policy_path = tmp_path / "soak.yaml"
    policy_path.write_text(POLICY)
    policy = load_policy(policy_path)
    provider = FlakyTrace(rng, rate=0.3)
    monitor = CarbonMonitor([SourceSpec("trace", lambda: provider), SourceSpec("static", lambda: StaticProvider(g_per_kwh=300))],
                            cache_dir=None, forecaster=None)
    plan = serve_plan([(policy_path, policy)], ["gridshift-nightly/soak"], monitors=[monitor])
    prefect = FakeDeployments(rng=rng, failure_rate=0.25, lose_answer_rate=0.1)
    clock = {"now": START}
    log: list[str] = []
    db = tmp_path / "serve.sqlite"
    events = Counter()
    kill = {"armed": True}

    def trigger(**kwargs):
        if kill["armed"] and clock["now"] >= KILL_MID_TRIGGER_AFTER:
            kill["armed"] = False
            prefect.trigger(**kwargs)  # the flow run is created, then the process dies before recording it
            raise Killed()
        return prefect.trigger(**kwargs)

    def sleep(seconds: float) -> None:
        before = clock["now"]
        clock["now"] += timedelta(seconds=max(seconds, 1.0))
        prefect.down = OUTAGE[0] <= clock["now"] < OUTAGE[1]
        if before < CLEAN_RESTART <= clock["now"]:
            events["clean restarts"] += 1
            service.stop()
        elif clock["now"] >= END:
            service.stop()

    while clock["now"] < END:
        service = PlanningService(db_path=db, plan=plan, trigger=trigger, now=lambda: clock["now"], sleep=sleep,
                                  poll_interval_s=1800, backoff=Backoff(base_s=60, max_s=900), log=log.append)
        events["serve starts"] += 1
        try:
            service.run_forever()
        except Killed:
            events["killed mid-trigger"] += 1
        if events["clean restarts"] and clock["now"] < CLEAN_RESTART + timedelta(minutes=40):
            clock["now"] = CLEAN_RESTART + timedelta(minutes=40)  # serve is down for a while

    rows = ServeStore(db).runs()
    nominal = [datetime(2026, 6, d, 1, 0, tzinfo=timezone.utc) for d in range(2, 9)]
    expected = {f"soak@{n:%Y%m%dT%H%MZ}" for n in nominal if n + timedelta(hours=4) <= END}  # latest start in the week
    by_state = Counter(r.state for r in rows)
    fired = [r for r in rows if r.state == "fired"]
    missed = [r for r in rows if r.state == "missed"]
    print(f"\nsoak, a simulated week ({START:%Y-%m-%d} .. {END:%Y-%m-%d}), seed 20261201:")
    print(f"  planned runs {len(rows)} (nightly occurrences due in the week: {len(expected)}); states {dict(by_state)}")
    print(f"  fired once {len(fired)}, missed with a reason {len(missed)}, doubled {sum(n > 1 for n in prefect.created.values())}")
    for r in missed:
        print(f"  missed {r.key}: {r.outcome}")
    print(f"  trigger calls {sum(prefect.calls.values())}, failed {prefect.failures} "
          f"(repeats absorbed by the idempotency key: {sum(prefect.calls.values()) - prefect.failures - len(prefect.created)})")
    print(f"  carbon provider failures {provider.failures} (failed over to static); serve starts {events['serve starts']}, "
          f"clean restarts {events['clean restarts']}, killed mid-trigger {events['killed mid-trigger']}; "
          f"released claims {sum(m.startswith('released ') for m in log)}")

    assert expected <= {r.key for r in rows}
    assert all(r.state in ("fired", "missed") for r in rows if r.key in expected)
    assert all(prefect.created[r.key] == 1 for r in fired)
    assert all(n == 1 for n in prefect.created.values())  # nothing doubled
    assert all(r.key not in prefect.runs and r.outcome.startswith("not triggered by its latest start") for r in missed)
    assert {r.key for r in missed} == {"soak@20260606T0100Z"}  # the night Prefect was down
    assert provider.failures > 10 and prefect.failures > 5
    assert events["clean restarts"] == 1 and events["killed mid-trigger"] == 1 and events["serve starts"] == 3
    assert sum(m.startswith("released ") for m in log) == 1
