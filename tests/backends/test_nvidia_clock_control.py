"""The DVFS executor driving the NVIDIA backend on the stateful fake NVML: exact NVML calls, journal
first, exact restore, and clean failures when writes are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backends.nvidia.control import SM_LOCK
from backends.types import Settings
from plans.dvfs.executor import ClockControl, PlanExecutor
from plans.dvfs.plan_file import ClockPlan
from tests.backends.nvidia_helpers import make_backend
from tests.fakes.clock_plans import PHASES as _PHASES
from tests.fakes.clock_plans import make_plan
from tests.fakes.fake_nvml import FakeNvml

PHASES = list(_PHASES)


def _plan(clocks_mhz: list[int]) -> ClockPlan:
    return make_plan(clocks_mhz)


def _iteration(ex: PlanExecutor) -> None:
    for ph in PHASES:
        ex.on_phase(ph)
        ex.flush()  # the worker acts before the next phase, so the call order is deterministic


def _gpu_settings(fake: FakeNvml) -> list[dict[str, Any]]:
    """The controllable state of each fake GPU (not the energy counter, which runs on)."""
    keep = ("power_limit_mw", "locked_sm_mhz", "locked_mem_mhz")
    return [{k: g[k] for k in keep} for g in fake.state()["gpus"]]


def _calls(fake: FakeNvml) -> list[list[Any]]:
    return fake.state()["calls"]


class JournalCheckingNvml(FakeNvml):
    """Asserts that the journal records the SM lock before each lock reaches the driver."""

    journal: Any = None

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, minGpuClockMHz: int, maxGpuClockMHz: int) -> None:
        mine = [e for e in self.journal.entries() if e.index == handle.index]
        assert mine and SM_LOCK in mine[0].touched, "clock lock not journalled before the write"
        super().nvmlDeviceSetGpuLockedClocks(handle, minGpuClockMHz, maxGpuClockMHz)


def test_executor_drives_nvml_at_segment_boundaries_and_restore_leaves_gpu_as_found(tmp_path: Path) -> None:
    fake = JournalCheckingNvml(gpus=2)
    backend, fake, _ = make_backend(tmp_path, fake=fake)
    fake.journal = backend.journal
    found = _gpu_settings(fake)
    control = backend.clock_control()
    assert isinstance(control, ClockControl)
    with backend:
        with PlanExecutor(_plan([1980, 1410, 1200]), control, min_interval_s=0.0) as ex:
            _iteration(ex)
            _iteration(ex)
            assert _gpu_settings(fake)[1]["locked_sm_mhz"] == [1200, 1200]
        assert ex.stats.errors == 0 and ex.stats.issued == 7
        assert backend.journal.entries() and not any(SM_LOCK in e.touched for e in backend.journal.entries())
    sets = [["nvmlDeviceSetGpuLockedClocks", gpu, f, f] for f in (1980, 1410, 1200) for gpu in (0, 1)]
    assert _calls(fake) == sets + sets + [["nvmlDeviceResetGpuLockedClocks", 0], ["nvmlDeviceResetGpuLockedClocks", 1]]
    assert _gpu_settings(fake) == found
    assert backend.journal.entries() == []


def test_restore_resets_the_lock_when_the_executor_was_not_closed(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    found = _gpu_settings(fake)
    backend.apply(Settings(power_limit_w=500.0))
    ex = PlanExecutor(_plan([1980, 1410, 1200]), backend.clock_control(), min_interval_s=0.0).start()
    _iteration(ex)
    backend.restore()  # e.g. the SIGTERM path runs before the training code closes its executor
    ex.close()  # the backend has nothing locked any more, so close adds no call
    assert _calls(fake) == [
        ["nvmlDeviceSetPowerManagementLimit", 0, 500_000],
        ["nvmlDeviceSetGpuLockedClocks", 0, 1980, 1980],
        ["nvmlDeviceSetGpuLockedClocks", 0, 1410, 1410],
        ["nvmlDeviceSetGpuLockedClocks", 0, 1200, 1200],
        ["nvmlDeviceSetPowerManagementLimit", 0, 700_000],
        ["nvmlDeviceResetGpuLockedClocks", 0],
    ]
    assert _gpu_settings(fake) == found and ex.stats.errors == 0


def test_read_only_env_makes_every_switch_fail_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDSHIFT_NVML_READ_ONLY", "1")
    backend, fake, _ = make_backend(tmp_path)
    found = _gpu_settings(fake)
    with backend:
        with PlanExecutor(_plan([1980, 1410, 1200]), backend.clock_control(), min_interval_s=0.0) as ex:
            _iteration(ex)
    assert ex.stats.errors == 3 and ex.stats.issued == 0
    assert "GRIDSHIFT_NVML_READ_ONLY=1" in ex.stats.last_error
    assert _calls(fake) == [] and _gpu_settings(fake) == found
    assert backend.journal.entries() == []  # nothing was locked, so restore had nothing to undo


def test_without_privilege_switches_are_refused_before_nvml(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path, allowed=False)
    with backend:
        with PlanExecutor(_plan([1980, 1410, 1200]), backend.clock_control(), min_interval_s=0.0) as ex:
            _iteration(ex)
    assert ex.stats.errors == 3 and "NoPermission" in ex.stats.last_error
    assert _calls(fake) == [] and backend.journal.entries() == []


def test_unsupported_clock_is_an_error_not_a_silent_skip(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    with backend:
        with PlanExecutor(_plan([1980, 2500, 1200]), backend.clock_control(), min_interval_s=0.0) as ex:
            _iteration(ex)
    assert ex.stats.errors == 1 and "2500" in ex.stats.last_error
    assert [c[0] for c in _calls(fake)] == ["nvmlDeviceSetGpuLockedClocks"] * 2 + ["nvmlDeviceResetGpuLockedClocks"]


# -- a job's own backend under a gridshift process that holds the GPU ---------------------------
def _parent_and_child(tmp_path: Path, *, delegate: bool = True) -> tuple[Any, Any, FakeNvml]:
    """The flow's backend (journal owned by a live process: our parent) and the job's backend on one fake GPU."""
    import os
    import socket

    from backends.journal import Journal, Owner, _boot_id
    from backends.nvidia.control import DELEGATE_ENV

    flow_journal = Journal(tmp_path / "journal", owner=lambda: Owner(os.getppid(), None, socket.gethostname(), _boot_id()))
    parent, fake, clock = make_backend(tmp_path, journal=flow_journal)
    env = {DELEGATE_ENV: str(os.getppid())} if delegate else {}
    child, _, _ = make_backend(tmp_path, fake=fake, clock=clock, env=env, journal=Journal(tmp_path / "journal"))
    return parent, child, fake


def test_a_held_gpu_is_measure_only_for_the_job_without_delegation(tmp_path: Path) -> None:
    parent, child, fake = _parent_and_child(tmp_path, delegate=False)
    parent.apply(Settings(power_limit_w=600.0))
    assert not child.capabilities().can_control
    with PlanExecutor(_plan([1980, 1410, 1200]), child.clock_control(), min_interval_s=0.0) as ex:
        _iteration(ex)
    assert ex.stats.errors == 3 and "under the control of gridshift pid" in ex.stats.last_error
    parent.restore()


def test_delegated_job_changes_are_covered_by_the_flow_journal_and_undone(tmp_path: Path) -> None:
    parent, child, fake = _parent_and_child(tmp_path)
    found = _gpu_settings(fake)
    parent.apply(Settings(power_limit_w=600.0))
    env = parent.delegate_control(power=True, sm_clock=True)
    assert list(env) == ["GRIDSHIFT_GPU_DELEGATED_BY"]
    (entry,) = parent.journal.entries()
    assert set(entry.touched) == {"power_limit", SM_LOCK} and entry.prior == {"power_limit_mw": 700_000}
    journal_file = parent.journal.path_for(entry.uuid).read_text()

    assert child.capabilities().can_control
    with PlanExecutor(_plan([1980, 1410]), child.clock_control(), min_interval_s=0.0) as ex:
        _iteration(ex)
        child.apply(Settings(power_limit_w=500.0))  # e.g. a PowerLimitCallback profiling step
    assert ex.stats.errors == 0
    assert parent.journal.path_for(entry.uuid).read_text() == journal_file  # the child never rewrites it
    child.restore()  # back to what the job found: the flow's 600 W; the flow's journal stays
    assert _gpu_settings(fake)[0]["power_limit_mw"] == 600_000 and parent.journal.entries()
    parent.restore()
    assert _calls(fake) == [
        ["nvmlDeviceSetPowerManagementLimit", 0, 600_000],
        ["nvmlDeviceSetGpuLockedClocks", 0, 1980, 1980],
        ["nvmlDeviceSetGpuLockedClocks", 0, 1410, 1410],
        ["nvmlDeviceSetPowerManagementLimit", 0, 500_000],
        ["nvmlDeviceResetGpuLockedClocks", 0],
        ["nvmlDeviceSetPowerManagementLimit", 0, 600_000],
        ["nvmlDeviceSetPowerManagementLimit", 0, 700_000],
        ["nvmlDeviceResetGpuLockedClocks", 0],
    ]
    assert _gpu_settings(fake) == found and parent.journal.entries() == []


def test_a_killed_job_lock_is_reset_by_the_flow_restore(tmp_path: Path) -> None:
    parent, child, fake = _parent_and_child(tmp_path)
    found = _gpu_settings(fake)
    parent.delegate_control(sm_clock=True)
    child.clock_control().set_locked_sm_clock_mhz(1410, 1410)  # then the job dies: no close, no restore
    parent.restore()
    assert _calls(fake)[-1] == ["nvmlDeviceResetGpuLockedClocks", 0] and _gpu_settings(fake) == found


def test_delegation_covers_only_the_kinds_journalled(tmp_path: Path) -> None:
    parent, child, fake = _parent_and_child(tmp_path)
    parent.delegate_control(power=True)
    with pytest.raises(Exception, match="journalled power_limit only"):
        child.clock_control().set_locked_sm_clock_mhz(1410, 1410)
    assert _calls(fake) == []
    parent.restore()
    assert parent.journal.entries() == []


def test_no_delegation_in_read_only_mode_or_without_privilege(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, fake, _ = make_backend(tmp_path, allowed=False)
    assert backend.delegate_control(sm_clock=True) == {}
    backend, fake, _ = make_backend(tmp_path)
    monkeypatch.setenv("GRIDSHIFT_NVML_READ_ONLY", "1")
    assert backend.delegate_control(sm_clock=True) == {} and backend.journal.entries() == []


# -- a mode that leaves a setting unset means "as found" -----------------------------------------
def test_switching_to_a_mode_without_a_clock_lock_resets_ours_and_unjournals_it(tmp_path: Path) -> None:
    """Review repro: apply(400 W, SM 900) then apply(700 W) kept in_force.sm_clock_mhz == (900, 900)."""
    backend, fake, _ = make_backend(tmp_path)
    backend.apply(Settings(power_limit_w=400.0, sm_clock_mhz=(900, 900)))
    applied = backend.apply(Settings(power_limit_w=700.0))
    assert applied.in_force.sm_clock_mhz is None and _gpu_settings(fake)[0]["locked_sm_mhz"] is None
    (entry,) = backend.journal.entries()
    assert SM_LOCK not in entry.touched  # nothing of ours left locked for a crash recovery to undo
    backend.restore()
    assert [c[0] for c in _calls(fake)].count("nvmlDeviceResetGpuLockedClocks") == 1  # none again on restore


def test_a_mode_without_a_power_limit_puts_back_the_limit_found(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    backend.apply(Settings(power_limit_w=400.0))
    backend.apply(Settings(power_limit_w=300.0))
    applied = backend.apply(Settings(sm_clock_mhz=(1410, 1410)))
    assert applied.in_force.power_limit_w == 700.0 and "power_limit_w" in applied.changed
    assert _gpu_settings(fake)[0] == {"power_limit_mw": 700_000, "locked_sm_mhz": [1410, 1410], "locked_mem_mhz": None}
    backend.restore()


def test_a_mode_switch_leaves_the_lock_of_a_job_we_delegated_to_alone(tmp_path: Path) -> None:
    parent, child, fake = _parent_and_child(tmp_path)
    parent.apply(Settings(power_limit_w=600.0))
    parent.delegate_control(sm_clock=True)
    child.clock_control().set_locked_sm_clock_mhz(1410, 1410)
    parent.apply(Settings(power_limit_w=500.0))  # the flow switches mode; the job's executor owns the lock
    assert _gpu_settings(fake)[0]["locked_sm_mhz"] == [1410, 1410]
    parent.apply(Settings(power_limit_w=600.0, sm_clock_mhz=(1200, 1200)))
    parent.apply(Settings(power_limit_w=600.0))  # undoes the flow's own lock, keeps the delegation journalled
    (entry,) = parent.journal.entries()
    assert SM_LOCK in entry.touched
    child.clock_control().set_locked_sm_clock_mhz(1410, 1410)
    parent.restore()
    assert _gpu_settings(fake)[0] == {"power_limit_mw": 700_000, "locked_sm_mhz": None, "locked_mem_mhz": None}


# -- the delegating process restores (SIGTERM) while the job still runs ---------------------------
def test_signal_restore_while_delegated_job_still_locks_clocks(tmp_path: Path) -> None:
    """Review repro: after the flow's signal handler restored and deleted its journal, the job's
    executor locked the SM clock again (its changes were "covered" by a journal now gone): clocks
    locked at 1200 MHz with an empty journal directory."""
    from backends.journal import Journal
    from backends.nvidia import NvidiaBackend
    from tests.backends.nvidia_helpers import privileged

    parent, fake, clock = make_backend(tmp_path)
    parent.apply(Settings(power_limit_w=700.0))
    env = parent.delegate_control(sm_clock=True)
    assert env
    child = NvidiaBackend(nvml=fake, clock=clock, env=env, privilege=privileged, rapl_root=None,
                          journal=Journal(tmp_path / "journal"))
    child.lock_sm_clock_mhz(900, 900)
    parent.restore()  # the flow's SIGTERM handler, while the job still runs
    with pytest.raises(Exception, match="released it"):
        child.lock_sm_clock_mhz(1200, 1200)  # the executor's next phase switch before the kill lands
    assert _gpu_settings(fake)[0]["locked_sm_mhz"] is None
    assert list((tmp_path / "journal").glob("*.json")) == []


def test_a_released_delegation_stops_the_executor_counting_errors(tmp_path: Path) -> None:
    parent, child, fake = _parent_and_child(tmp_path)
    found = _gpu_settings(fake)
    parent.delegate_control(power=True, sm_clock=True)
    with PlanExecutor(_plan([1980, 1410, 1200]), child.clock_control(), min_interval_s=0.0) as ex:
        ex.on_phase(PHASES[0])
        ex.flush()
        parent.restore()
        for ph in PHASES[1:]:
            ex.on_phase(ph)
            ex.flush()
        applied = child.apply(Settings(power_limit_w=500.0))  # a PowerLimitCallback step: refused, not crashed
    assert ex.stats.errors == 2 and "released it" in ex.stats.last_error
    assert any("released it" in s for s in applied.skipped)
    assert _gpu_settings(fake) == found and parent.journal.entries() == []


class ReleasingNvml(FakeNvml):
    """The delegating process restores and deletes its journal while the job's lock is on its way."""

    release: Any = None

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, minGpuClockMHz: int, maxGpuClockMHz: int) -> None:
        if self.release is not None:
            self.release()
        super().nvmlDeviceSetGpuLockedClocks(handle, minGpuClockMHz, maxGpuClockMHz)


def test_a_delegation_released_during_the_write_is_undone(tmp_path: Path) -> None:
    from backends.journal import Journal
    from backends.nvidia.control import DELEGATE_ENV

    fake = ReleasingNvml()
    parent, _, clock = make_backend(tmp_path, fake=fake)
    env = parent.delegate_control(sm_clock=True)
    assert env == {DELEGATE_ENV: str(__import__("os").getpid())}
    child, _, _ = make_backend(tmp_path, fake=fake, clock=clock, env=env, journal=Journal(tmp_path / "journal"))
    child.capabilities()
    fake.release = parent.restore
    with pytest.raises(Exception, match="released it"):
        child.lock_sm_clock_mhz(1410, 1410)
    assert _gpu_settings(fake)[0]["locked_sm_mhz"] is None
    assert list((tmp_path / "journal").glob("*.json")) == []


def test_a_job_does_not_undo_the_delegating_restore_with_its_own_prior(tmp_path: Path) -> None:
    """The job found the flow's 600 W; once the flow has put back the true 700 W and released the
    GPU, the job's restore (or a mode without a limit) must not write 600 W with no journal."""
    parent, child, fake = _parent_and_child(tmp_path)
    parent.apply(Settings(power_limit_w=600.0))
    parent.delegate_control(power=True, sm_clock=True)
    child.apply(Settings(power_limit_w=500.0, sm_clock_mhz=(1410, 1410)))
    parent.restore()
    assert _gpu_settings(fake)[0]["power_limit_mw"] == 700_000
    child.apply(Settings())
    child.restore()
    assert _gpu_settings(fake)[0] == {"power_limit_mw": 700_000, "locked_sm_mhz": None, "locked_mem_mhz": None}
    assert parent.journal.entries() == []
