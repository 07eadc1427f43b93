"""Clock plan files (round trip, clear file errors, policy link) and the runtime executor's exact call sequence."""

from __future__ import annotations

import json
import threading
from collections import deque
from pathlib import Path

import pytest

from plans.dvfs.errors import ExecutorError, PlanFileError
from plans.dvfs.executor import ClockControl, DryRunControl, PlanExecutor, attach_to_modules
from plans.dvfs.model import build_tables
from plans.dvfs.plan_file import ClockPlan, PlanParameters, PlanSegment, load_plan, plan_from_result, save_plan
from plans.dvfs.planner import plan_dvfs
from plans.dvfs.profiles.synthetic import gpt3xl_layer_profile

H200_CLOCKS = tuple(range(345, 1981, 15))


def _params(**kw) -> PlanParameters:
    base = dict(epsilon=0.05, tau_sw_s=0.0, eps_sw_j=0.0, d_min_s=0.0, clock_floor_mhz=1188.0, boundaries="phase", method="exact")
    base.update(kw)
    return PlanParameters(**base)


@pytest.fixture(scope="module")
def phase_plan() -> ClockPlan:
    prof = gpt3xl_layer_profile()
    tables = build_tables(prof)
    res = plan_dvfs(tables, epsilon=0.05, tau_sw_s=0.0, d_min_s=0.0, boundaries="phase")
    return plan_from_result(res, prof, tables, parameters=_params(method=res.method))


def _plan(segments: list[tuple[str, int]]) -> ClockPlan:
    """A hand-made plan: (phase, clock) per segment, each starting at its phase."""
    prof = gpt3xl_layer_profile()
    first = {}
    for i, k in enumerate(prof.kernels):
        first.setdefault(k.phase, i)
    segs = tuple(PlanSegment(start_kernel=first[p], start_phase=p, phase_aligned=True, sm_clock_mhz=f, duration_s=1e-3)
                 for p, f in segments)
    raw = {
        "gpu_model": "NVIDIA H200", "workload_fingerprint": prof.meta.workload_fingerprint, "profile_source": "synthetic",
        "provenance": "modelled", "n_kernels": 103, "parameters": _params().model_dump(), "segments": [s.model_dump() for s in segs],
        "prediction": {"energy_change_pct": -1.0, "time_change_pct": 1.0, "switches_per_iteration": len(segs) - 1,
                       "energy_j": 4.0, "reference_energy_j": 4.1, "time_s": 6.5e-3, "reference_time_s": 6.4e-3, "gap": 0.0},
    }
    return ClockPlan.model_validate(raw)


# -- plan files ----------------------------------------------------------------------------------
def test_plan_round_trip_and_validation_against_the_gpu(tmp_path: Path, phase_plan: ClockPlan) -> None:
    p = save_plan(phase_plan, tmp_path / "plan.json")
    loaded = load_plan(p, gpu_model="NVIDIA H200", sm_clocks_mhz=H200_CLOCKS,
                       workload_fingerprint=phase_plan.workload_fingerprint)
    assert loaded == phase_plan
    assert loaded.prediction.modelled is True and loaded.profile_source == "synthetic"
    assert all(s.phase_aligned for s in loaded.segments)
    assert set(loaded.phase_clocks()) <= set(gpt3xl_layer_profile().phases())


@pytest.mark.parametrize(
    "mutate, kwargs, fragment",
    [
        (None, {}, "no such clock plan file"),
        (lambda raw: "{oops", {}, "not JSON"),
        (lambda raw: {**raw, "format": "x"}, {}, "not a gridshift clock plan"),
        (lambda raw: {**raw, "version": 7}, {}, "version 7 is newer"),
        (lambda raw: {**raw, "segments": []}, {}, "at least one segment"),
        (lambda raw: {**raw, "segments": [raw["segments"][i] for i in (0, 2, 1)]}, {}, "strictly increasing"),
        (lambda raw: {**raw, "surprise": 1}, {}, "surprise"),
        (lambda raw: raw, {"gpu_model": "NVIDIA A100"}, "this GPU is 'NVIDIA A100'"),
        (lambda raw: raw, {"sm_clocks_mhz": [1980]}, "not supported by this GPU"),
        (lambda raw: raw, {"workload_fingerprint": "other"}, "this job is other"),
    ],
)
def test_plan_file_errors_are_clear(tmp_path: Path, mutate, kwargs, fragment) -> None:
    plan = _plan([("layer0.forward.attention", 1980), ("layer0.backward.mlp", 1410), ("optimizer", 1200)])
    p = tmp_path / "plan.json"
    if mutate is not None:
        out = mutate(json.loads(plan.model_dump_json()))
        p.write_text(out if isinstance(out, str) else json.dumps(out))
    with pytest.raises(PlanFileError) as info:
        load_plan(p, **kwargs)
    assert str(info.value).startswith(str(p)) and fragment in str(info.value)


def test_a_mid_phase_segment_cannot_be_executed() -> None:
    prof = gpt3xl_layer_profile()
    tables = build_tables(prof)
    res = plan_dvfs(tables, epsilon=0.02, tau_sw_s=0.0, d_min_s=0.0, boundaries="kernel")
    plan = plan_from_result(res, prof, tables, parameters=_params(boundaries="kernel"))
    assert not all(s.phase_aligned for s in plan.segments)
    with pytest.raises(PlanFileError, match="re-plan with boundaries='phase'"):
        plan.phase_clocks()


def test_a_policy_mode_names_a_plan_that_loads(tmp_path: Path, phase_plan: ClockPlan) -> None:
    from scheduler.policy.types import Mode

    p = save_plan(phase_plan, tmp_path / "plan.json")
    mode = Mode(clock_plan=p)
    assert load_plan(mode.clock_plan) == phase_plan
    from plans.dvfs.plan_file import load_mode_plan

    policy = tmp_path / "policy.yaml"
    assert load_mode_plan(Mode(clock_plan=Path("plan.json")).clock_plan, policy_path=policy, gpu_model="NVIDIA H200") == phase_plan
    with pytest.raises(PlanFileError, match=str(tmp_path / "nope.json")):
        load_mode_plan(Path("nope.json"), policy_path=policy)


# -- executor ------------------------------------------------------------------------------------
class Recorder:
    """Records every call, in order; optionally blocks the first set call until released."""

    def __init__(self, block_first: bool = False, fail_on: int | None = None) -> None:
        self.calls: list[tuple] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not block_first:
            self.release.set()
        self.fail_on = fail_on

    def set_locked_sm_clock_mhz(self, lo_mhz: int, hi_mhz: int) -> None:
        self.entered.set()
        self.release.wait()
        if self.fail_on == lo_mhz:
            raise RuntimeError("NVML_ERROR_NO_PERMISSION")
        self.calls.append(("set_locked_sm_clock_mhz", lo_mhz, hi_mhz))

    def reset_locked_sm_clock(self) -> None:
        self.calls.append(("reset_locked_sm_clock",))


PHASES = ["layer0.forward.attention", "layer0.forward.mlp", "layer0.backward.mlp", "layer0.backward.attention", "optimizer"]


def _iteration(ex: PlanExecutor) -> None:
    for ph in PHASES:
        ex.on_phase(ph)
        ex.flush()


def test_executor_issues_exactly_the_plan_calls_and_resets_on_close() -> None:
    rec = Recorder()
    assert isinstance(rec, ClockControl)
    plan = _plan([("layer0.forward.attention", 1980), ("layer0.backward.mlp", 1410), ("optimizer", 1200)])
    with PlanExecutor(plan, rec, min_interval_s=0.0) as ex:
        _iteration(ex)
        _iteration(ex)
    assert rec.calls == [
        ("set_locked_sm_clock_mhz", 1980, 1980), ("set_locked_sm_clock_mhz", 1410, 1410), ("set_locked_sm_clock_mhz", 1200, 1200),
        ("set_locked_sm_clock_mhz", 1980, 1980), ("set_locked_sm_clock_mhz", 1410, 1410), ("set_locked_sm_clock_mhz", 1200, 1200),
        ("reset_locked_sm_clock",),
    ]
    assert ex.stats.phases == 10 and ex.stats.requested == 6 and ex.stats.issued == 7 and ex.stats.errors == 0


def test_static_plan_locks_once() -> None:
    rec = Recorder()
    with PlanExecutor(_plan([("layer0.forward.attention", 1485)]), rec, min_interval_s=0.0) as ex:
        for _ in range(5):
            _iteration(ex)
    assert rec.calls == [("set_locked_sm_clock_mhz", 1485, 1485), ("reset_locked_sm_clock",)]


def test_worker_coalesces_a_burst_to_the_newest_target() -> None:
    rec = Recorder(block_first=True)
    plan = _plan([("layer0.forward.attention", 1980), ("layer0.backward.mlp", 1410), ("optimizer", 1200)])
    ex = PlanExecutor(plan, rec, min_interval_s=0.0).start()
    ex.on_phase("layer0.forward.attention")
    assert rec.entered.wait(10)
    ex.on_phase("layer0.backward.mlp")
    ex.on_phase("optimizer")  # both queued while the worker is busy in the first call
    rec.release.set()
    ex.flush()
    ex.close()
    assert rec.calls == [("set_locked_sm_clock_mhz", 1980, 1980), ("set_locked_sm_clock_mhz", 1200, 1200), ("reset_locked_sm_clock",)]
    assert ex.stats.coalesced == 1


def test_rate_limit_waits_on_the_injected_clock_and_coalesces() -> None:
    now = [100.0]
    waits: list[float] = []

    def fake_wait(seconds: float) -> None:  # advances virtual time instead of sleeping
        waits.append(seconds)
        now[0] += seconds

    rec = Recorder()
    plan = _plan([("layer0.forward.attention", 1980), ("layer0.backward.mlp", 1410)])
    with PlanExecutor(plan, rec, min_interval_s=0.5, clock=lambda: now[0], wait=fake_wait) as ex:
        ex.on_phase("layer0.forward.attention")
        ex.flush()
        now[0] += 0.2
        ex.on_phase("layer0.backward.mlp")
        ex.flush()
    assert waits == [pytest.approx(0.3)]
    assert [c[1] for c in rec.calls[:2]] == [1980, 1410]


def test_dry_run_counts_logs_each_call_once_and_starts_no_thread(caplog: pytest.LogCaptureFixture) -> None:
    plan = _plan([("layer0.forward.attention", 1980), ("optimizer", 1200)])
    threads = threading.active_count()
    with caplog.at_level("INFO", logger="gridshift.dvfs.executor"):
        with PlanExecutor(plan, dry_run=True, min_interval_s=0.0) as ex:
            assert threading.active_count() == threads  # nothing to hand a no-op call to
            _iteration(ex)
            _iteration(ex)
    assert isinstance(ex.control, DryRunControl)
    assert list(ex.control.calls) == [("set_locked_sm_clock_mhz", (1980, 1980)), ("set_locked_sm_clock_mhz", (1200, 1200))] * 2 + [
        ("reset_locked_sm_clock", ())]
    assert ex.control.n_calls == ex.stats.issued == 5
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and "would call set_locked_sm_clock_mhz(1980, 1980)" in said[0]  # each distinct call once


def test_dry_run_keeps_only_the_newest_calls() -> None:
    plan = _plan([("layer0.forward.attention", 1980), ("optimizer", 1200)])
    with PlanExecutor(plan, dry_run=True, min_interval_s=0.0) as ex:
        ex.control.calls = deque(maxlen=3)  # type: ignore[attr-defined]
        for _ in range(100):
            _iteration(ex)
    assert ex.control.n_calls == 201 and len(ex.control.calls) == 3  # type: ignore[attr-defined]


def _rate_limited(ex: PlanExecutor, now: list[float]) -> None:
    for t, phase in [(0.0, "layer0.forward.attention"), (0.1, "layer0.backward.mlp"), (0.2, "optimizer"),
                     (0.3, "layer0.forward.attention"), (0.6, "layer0.backward.mlp")]:
        now[0] = 100.0 + t
        ex.on_phase(phase)


def test_dry_run_coalesces_and_rate_limits_as_the_worker_does() -> None:
    """Within min_interval_s of a call the newest request waits; one asking for the clock already set
    makes no call. The dry run on the calling thread counts what the worker makes."""
    plan = _plan([("layer0.forward.attention", 1980), ("layer0.backward.mlp", 1410), ("optimizer", 1200)])
    now = [100.0]
    with PlanExecutor(plan, dry_run=True, min_interval_s=0.5, clock=lambda: now[0]) as dry:
        _rate_limited(dry, now)
    assert [c[1][0] for c in list(dry.control.calls)[:-1]] == [1980, 1410]  # type: ignore[attr-defined]
    assert (dry.stats.requested, dry.stats.issued, dry.stats.coalesced) == (5, 3, 2)

    rec = Recorder(block_first=False)
    gate = threading.Event()

    def wait(seconds: float) -> None:  # the worker waits out the limit while the rest of the burst comes
        gate.wait(10)
        now[0] = max(now[0], 100.5)

    with PlanExecutor(plan, rec, min_interval_s=0.5, clock=lambda: now[0], wait=wait) as real:
        now[0] = 100.0
        real.on_phase("layer0.forward.attention")
        real.flush()
        for t, phase in [(0.1, "layer0.backward.mlp"), (0.2, "optimizer"), (0.3, "layer0.forward.attention")]:
            now[0] = 100.0 + t
            real.on_phase(phase)
        gate.set()
        real.flush()
        now[0] = 100.6
        real.on_phase("layer0.backward.mlp")
        real.flush()
    assert [c[1] for c in rec.calls[:-1]] == [1980, 1410]
    assert (real.stats.requested, real.stats.issued) == (dry.stats.requested, dry.stats.issued)


def test_control_errors_are_counted_not_raised_into_training() -> None:
    rec = Recorder(fail_on=1410)
    plan = _plan([("layer0.forward.attention", 1980), ("layer0.backward.mlp", 1410)])
    with PlanExecutor(plan, rec, min_interval_s=0.0) as ex:
        _iteration(ex)
    assert ex.stats.errors == 1 and "NO_PERMISSION" in ex.stats.last_error
    assert rec.calls == [("set_locked_sm_clock_mhz", 1980, 1980), ("reset_locked_sm_clock",)]


def test_executor_misuse() -> None:
    plan = _plan([("layer0.forward.attention", 1980), ("optimizer", 1200)])
    with pytest.raises(ExecutorError, match="ClockControl"):
        PlanExecutor(plan)
    ex = PlanExecutor(plan, Recorder()).start()
    with pytest.raises(ExecutorError, match="once"):
        ex.start()
    ex.close()
    ex.close()  # idempotent
    with pytest.raises(ExecutorError, match="closed"):
        ex.on_phase("optimizer")


def test_attach_to_modules_registers_forward_and_backward_hooks() -> None:
    class FakeModule:
        def __init__(self) -> None:
            self.fwd, self.bwd = [], []

        def register_forward_pre_hook(self, fn):
            self.fwd.append(fn)
            return ("fwd", fn)

        def register_full_backward_pre_hook(self, fn):
            self.bwd.append(fn)
            return ("bwd", fn)

    seen: list[str] = []

    class Probe:
        def on_phase(self, name: str) -> None:
            seen.append(name)

    m = FakeModule()
    handles = attach_to_modules(Probe(), {"layer0": m})  # type: ignore[arg-type]
    m.fwd[0](m, ())
    m.bwd[0](m, ())
    assert seen == ["layer0.forward", "layer0.backward"] and len(handles) == 2
