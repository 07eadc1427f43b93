"""Who applied each setting of a span, and whether it was confirmed (pure functions, no run)."""

from __future__ import annotations

from datetime import datetime, timezone

from backends.types import Applied, Settings
from flows.job.span_settings import clock_plan_settings, hardware_settings, job_settings
from plans.integrations.protocol import BatchSizeAck, ClockPlanRun, JobResult, ModeAnnouncement
from scheduler.report import ModeSpan, SpanSetting, settings_phrase


def test_a_power_limit_is_confirmed_only_by_its_read_back() -> None:
    asked = Settings(power_limit_w=420.0)
    took = Applied(requested=asked, in_force=Settings(power_limit_w=420.0))
    (s,) = hardware_settings(asked, took)
    assert (s.applied_by, s.confirmed, s.phrase()) == ("gridshift", True, "power limit 420 W (set by gridshift, read back)")
    kept = Applied(requested=asked, in_force=Settings(power_limit_w=700.0),
                   skipped=("set power limit refused: GRIDSHIFT_NVML_READ_ONLY=1 (read-only mode)",))
    (s,) = hardware_settings(asked, kept)
    assert not s.confirmed and s.value == 420.0
    assert s.phrase() == ("power limit 420 W (not applied: set power limit refused: GRIDSHIFT_NVML_READ_ONLY=1 "
                          "(read-only mode); 700 W read back)")
    (s,) = hardware_settings(asked, None, not_applied="measure-only")
    assert not s.confirmed and s.phrase() == "power limit 420 W (not applied: measure-only)"


def test_a_clock_lock_is_never_called_confirmed_because_nvml_cannot_read_it_back() -> None:
    asked = Settings(sm_clock_mhz=(1410, 1410))
    (s,) = hardware_settings(asked, Applied(requested=asked, in_force=asked))
    assert s.value == [1410, 1410] and not s.confirmed and s.phrase().startswith("SM clock 1410 MHz (locked by gridshift")


def test_clock_plans_are_confirmed_by_the_jobs_report_of_switches() -> None:
    ann = [ModeAnnouncement(0, "speed", None, "", clock_plan=None),
           ModeAnnouncement(1, "efficiency", None, "", clock_plan="/p/eff.json"),
           ModeAnnouncement(2, "speed", None, "", clock_plan=None),
           ModeAnnouncement(3, "efficiency", None, "", clock_plan="/p/eff.json")]
    runs = [ClockPlanRun(mode_seq=0, plan=None), ClockPlanRun(mode_seq=1, plan="/p/eff.json", step=40, switches=12),
            ClockPlanRun(mode_seq=2, plan=None, step=90)]
    words = [s.phrase() if s else None for s in clock_plan_settings(ann, runs)]
    assert words == ["clock plan none (the job runs no plan, its clock lock undone)",
                     "clock plan eff.json (run by the job: 12 clock switches)",
                     "clock plan none (the job runs no plan, its clock lock undone)",
                     "clock plan eff.json (handed to the job, not confirmed)"]  # the job never got to seq 3
    dry = clock_plan_settings(ann[1:2], [ClockPlanRun(mode_seq=1, plan="/p/eff.json", switches=3, dry_run=True)])
    assert dry[0] is not None and not dry[0].confirmed and "dry run: 3 clock switches counted, no clock changed" in dry[0].how


def test_a_job_that_writes_nothing_confirms_nothing() -> None:
    ann = [ModeAnnouncement(0, "speed", 256, "", clock_plan="/p/fast.json")]
    (detail,) = job_settings(ann, 256, None)
    assert settings_phrase(detail) == ("batch size 256 (handed to the job, not confirmed); "
                                       "clock plan fast.json (handed to the job, not confirmed)")
    assert all(s.applied_by == "job" and not s.confirmed for s in detail)
    result = JobResult(batch_sizes=(BatchSizeAck(mode_seq=0, batch_size=256, epoch=0),))
    (detail,) = job_settings(ann, 256, result)
    assert [(s.name, s.confirmed) for s in detail] == [("batch_size", True), ("clock_plan", False)]


def test_span_settings_survive_json() -> None:
    t = datetime(2026, 12, 2, tzinfo=timezone.utc)
    span = ModeSpan(mode="speed", start=t, end=t, settings="x",
                    settings_detail=(SpanSetting("batch_size", 64, "job", False, "handed to the job, not confirmed"),))
    d = span.to_json()
    assert d["settings_detail"] == [{"name": "batch_size", "value": 64, "applied_by": "job", "confirmed": False,
                                     "how": "handed to the job, not confirmed"}]
    assert ModeSpan.from_json(d) == span
    old = {k: v for k, v in d.items() if k != "settings_detail"}  # a span recorded before the field existed
    assert ModeSpan.from_json(old).settings_detail == ()
