"""NvidiaBackend against the stateful fake NVML: read before write, journal first, exact restore."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from backends.errors import BackendError, NoPermission
from backends.journal import JOURNAL_VERSION, Journal, JournalEntry, JournalError, JournalWarning, Owner
from backends.types import Settings
from tests.backends.nvidia_helpers import FakeClock, dead_pid, make_backend
from tests.fakes.fake_nvml import FakeNvml, default_state, h200


def _gpu(fake: FakeNvml, i: int = 0) -> dict:
    return fake.state()["gpus"][i]


def test_capabilities_change_nothing(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    caps = backend.capabilities()
    assert caps.power_limit_range_w == (200.0, 700.0)
    assert caps.default_power_limit_w == 700.0
    assert len(caps.sm_clocks_mhz) == 110 and caps.sm_clocks_mhz[0] == 1980 and caps.sm_clocks_mhz[-1] == 345
    assert caps.mem_clocks_mhz == (3201, 2201)
    assert caps.energy_counter and caps.can_control
    assert fake.state()["calls"] == []
    assert not (tmp_path / "journal").exists()


def test_restore_puts_back_the_prior_limit_not_the_max(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    fake.update(lambda s: s["gpus"][0].__setitem__("power_limit_mw", 450_000))  # an admin's choice
    applied = backend.apply(Settings(power_limit_w=300, sm_clock_mhz=(1200, 1500)))
    assert applied.changed == ("power_limit_w", "sm_clock_mhz")
    assert applied.in_force.power_limit_w == 300.0
    assert _gpu(fake)["power_limit_mw"] == 300_000 and _gpu(fake)["locked_sm_mhz"] == [1200, 1500]
    backend.restore()
    assert _gpu(fake)["power_limit_mw"] == 450_000
    assert _gpu(fake)["locked_sm_mhz"] is None
    assert Journal(tmp_path / "journal").entries() == []


def test_reads_before_writing_and_skips_no_op_writes(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    backend.apply(Settings(power_limit_w=700))  # already 700 W
    assert fake.state()["calls"] == []
    backend.apply(Settings(power_limit_w=500, sm_clock_mhz=(1400, 1400)))
    backend.apply(Settings(power_limit_w=500, sm_clock_mhz=(1400, 1400)))
    assert [c[0] for c in fake.state()["calls"]] == ["nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetGpuLockedClocks"]
    backend.restore()
    backend.restore()  # idempotent
    assert len(fake.state()["calls"]) == 4


def test_journal_is_durable_before_each_change(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    journal = Journal(tmp_path / "journal")
    seen: list[tuple[str, tuple[str, ...]]] = []
    real_set_pl, real_lock = fake.nvmlDeviceSetPowerManagementLimit, fake.nvmlDeviceSetGpuLockedClocks

    def set_pl(handle, limit):  # the fake is an instance: wrap its method, no module patching
        entry = journal.read(_gpu(fake)["uuid"])
        seen.append(("power", entry.touched))
        assert entry.prior == {"power_limit_mw": 700_000}
        return real_set_pl(handle, limit)

    def lock(handle, lo, hi):
        seen.append(("lock", journal.read(_gpu(fake)["uuid"]).touched))
        return real_lock(handle, lo, hi)

    fake.nvmlDeviceSetPowerManagementLimit = set_pl
    fake.nvmlDeviceSetGpuLockedClocks = lock
    backend.apply(Settings(power_limit_w=250, sm_clock_mhz=(990, 990)))
    assert seen == [("power", ("power_limit",)), ("lock", ("power_limit", "sm_locked_clocks"))]
    on_disk = json.loads(journal.path_for(_gpu(fake)["uuid"]).read_text())
    assert on_disk["version"] == JOURNAL_VERSION and on_disk["owner"]["pid"] == os.getpid()


def test_out_of_range_and_unsupported_are_skipped_with_reasons(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    applied = backend.apply(Settings(power_limit_w=900, sm_clock_mhz=(100, 5000), mem_clock_mhz=2201))
    assert applied.changed == ()
    text = " | ".join(applied.skipped)
    assert "900 W outside 200-700 W" in text and "SM clock range" in text and "memory clock locks" in text
    backend.restore()
    assert _gpu(fake)["power_limit_mw"] == 700_000


def test_memory_lock_where_supported_is_applied_and_reset(tmp_path: Path) -> None:
    state = default_state()
    state["gpus"][0]["mem_lock_supported"] = True
    backend, fake, _ = make_backend(tmp_path, fake=FakeNvml(state=state))
    assert backend.apply(Settings(mem_clock_mhz=2201)).changed == ("mem_clock_mhz",)
    assert _gpu(fake)["locked_mem_mhz"] == [2201, 2201]
    backend.restore()
    assert _gpu(fake)["locked_mem_mhz"] is None


def test_unprivileged_is_reported_before_any_write_and_refusals_do_not_crash(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeNvml(clock=clock, privileged=False)
    backend, _, _ = make_backend(tmp_path, fake=fake, clock=clock, allowed=False)
    caps = backend.capabilities()
    assert not caps.can_control and "CAP_SYS_ADMIN" in caps.control_note
    applied = backend.apply(Settings(power_limit_w=300))  # NVML itself refuses: skipped, not raised
    assert applied.changed == () and "Insufficient Permissions" in applied.skipped[0]
    backend.restore()
    assert _gpu(fake)["power_limit_mw"] == 700_000


def test_control_option_false_forces_measure_only(tmp_path: Path) -> None:
    backend, _, _ = make_backend(tmp_path, control=False)
    caps = backend.capabilities()
    assert not caps.can_control and "control: false" in caps.control_note


def test_multi_gpu_apply_and_restore_each(tmp_path: Path) -> None:
    state = default_state(gpus=3)
    state["gpus"][1]["power_limit_mw"] = 600_000
    backend, fake, _ = make_backend(tmp_path, fake=FakeNvml(state=state), env={"CUDA_VISIBLE_DEVICES": "1,2"})
    backend.apply(Settings(power_limit_w=350))
    assert [g["power_limit_mw"] for g in fake.state()["gpus"]] == [700_000, 350_000, 350_000]
    assert len(Journal(tmp_path / "journal").entries()) == 2
    backend.restore()
    assert [g["power_limit_mw"] for g in fake.state()["gpus"]] == [700_000, 600_000, 700_000]


def test_mig_devices_are_measure_only(tmp_path: Path) -> None:
    state = default_state(gpus=1)
    state["gpus"][0] = h200(0, mig=2)
    backend, fake, _ = make_backend(tmp_path, fake=FakeNvml(state=state),
                                    env={"CUDA_VISIBLE_DEVICES": "MIG-00000000-fake-0000"})
    caps = backend.capabilities()
    assert not caps.can_control and "MIG" in caps.control_note
    assert caps.devices[0].uuid.startswith("MIG-")
    backend.apply(Settings(power_limit_w=300))
    assert fake.state()["calls"] == []


def test_next_start_replays_a_dead_process_journal(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeNvml(clock=clock)
    pid = dead_pid()
    ghost = Journal(tmp_path / "journal", owner=lambda: Owner(pid, None, *_here()))
    crashed, _, _ = make_backend(tmp_path, fake=fake, clock=clock, journal=ghost, recover=False)
    crashed.apply(Settings(power_limit_w=222, sm_clock_mhz=(600, 600)))  # then "SIGKILL": no restore
    assert _gpu(fake)["power_limit_mw"] == 222_000
    fresh, _, _ = make_backend(tmp_path, fake=fake, clock=clock)
    fresh.capabilities()  # first NVML use replays the journal
    assert _gpu(fake)["power_limit_mw"] == 700_000 and _gpu(fake)["locked_sm_mhz"] is None
    assert "222 W -> 700 W" in fresh.recovered[0] and f"pid {pid}" in fresh.recovered[0]
    assert Journal(tmp_path / "journal").entries() == []


def test_live_foreign_owner_blocks_control(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    other = Journal(tmp_path / "journal", owner=lambda: Owner(os.getppid(), None, *_here()))
    other.write(other.new_entry(uuid=_gpu(fake)["uuid"], index=0, name="x", prior={"power_limit_mw": 700_000}))
    caps = backend.capabilities()
    assert not caps.can_control and f"pid {os.getppid()}" in caps.control_note
    with pytest.raises(NoPermission):
        backend.apply(Settings(power_limit_w=300))
    assert Journal(tmp_path / "journal").entries()[0].owner.pid == os.getppid()  # left alone


def test_newer_journal_version_is_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.directory.mkdir()
    (journal.directory / "GPU-x.json").write_text(json.dumps({"version": JOURNAL_VERSION + 1}))
    with pytest.raises(JournalError, match=f"version {JOURNAL_VERSION + 1}.*\\({JOURNAL_VERSION}\\)"):
        journal.read("GPU-x")
    with pytest.warns(JournalWarning, match="kept on disk"):
        assert journal.entries() == []  # skipped, not fatal
    ((path, reason),) = journal.unreadable()
    assert path.name == "GPU-x.json" and f"version {JOURNAL_VERSION + 1}" in reason


def test_journal_error_is_a_backend_error() -> None:
    assert issubclass(JournalError, BackendError)


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 1}', f'{{"version": {JOURNAL_VERSION + 1}}}'])
def test_a_bad_journal_file_for_another_gpu_stops_nothing(tmp_path: Path, text: str) -> None:
    """Review repro: ``{`` in gpu-journal/GPU-other.json made every run and restore fail."""
    bad = tmp_path / "journal" / "GPU-other.json"
    bad.parent.mkdir()
    bad.write_text(text)
    state = default_state(gpus=2)
    ghost = Journal(tmp_path / "journal", owner=lambda: Owner(dead_pid(), None, *_here()))
    entry = ghost.new_entry(uuid=state["gpus"][1]["uuid"], index=1, name="x", prior={"power_limit_mw": 500_000})
    ghost.write(JournalEntry(uuid=entry.uuid, index=1, name="x", owner=entry.owner, prior=entry.prior,
                             touched=("power_limit",)))
    backend, fake, _ = make_backend(tmp_path, fake=FakeNvml(state=state))
    with pytest.warns(JournalWarning):
        caps = backend.capabilities()  # opening replays the dead process's journal for GPU 1
    assert caps.can_control and "GPU-other.json" in caps.control_note
    assert any("restored" in line for line in backend.recovered)
    assert any("skipped" in line and "GPU-other.json" in line for line in backend.recovered)
    assert _gpu(fake, 1)["power_limit_mw"] == 500_000
    backend.apply(Settings(power_limit_w=300))
    backend.restore()
    assert bad.read_text() == text  # kept on disk, untouched
    status = backend.status()
    assert [u["path"] for u in status["journal"]["unreadable"]] == [str(bad)]


def test_a_bad_journal_file_for_our_gpu_makes_only_that_gpu_measure_only(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    bad = backend.journal.path_for(_gpu(fake)["uuid"])
    bad.parent.mkdir()
    bad.write_text("{")
    with pytest.warns(JournalWarning):
        caps = backend.capabilities()
    assert not caps.can_control and "GPU 0 measure-only" in caps.control_note
    assert backend.energy_mj()  # measuring still works
    with pytest.raises(NoPermission, match="unreadable journal"):
        backend.apply(Settings(power_limit_w=300))
    assert fake.state()["calls"] == [] and bad.read_text() == "{"


def test_status_is_read_only_and_complete(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    status = backend.status()
    d = status["devices"][0]
    assert d["power_limit_w"] == 700.0 and d["power_limit_range_w"] == [200.0, 700.0]
    assert sorted(d["supported_clocks_mhz"]) == ["2201", "3201"] and len(d["supported_clocks_mhz"]["3201"]) == 110
    assert d["app_clocks_restricted"] is None and "app_clocks_restricted" in d["unavailable"]
    assert status["permissions"]["can_control"] is True
    assert status["journal"]["entries"] == []
    assert fake.state()["calls"] == []


def _here() -> tuple[str, str]:
    own = Owner.current()
    return own.host, own.boot_id


def test_recovery_of_a_vanished_gpu_keeps_its_journal(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path, recover=False)
    ghost = Journal(tmp_path / "journal", owner=lambda: Owner(dead_pid(), None, *_here()))
    entry = ghost.new_entry(uuid="GPU-gone", index=7, name="x", prior={"power_limit_mw": 500_000})
    ghost.write(JournalEntry(uuid=entry.uuid, index=7, name="x", owner=entry.owner, prior=entry.prior,
                             touched=("power_limit",)))
    lines = backend.recover_stale()
    assert "could not restore" in lines[0] and "journal kept" in lines[0]
    assert [e.uuid for e in Journal(tmp_path / "journal").entries()] == ["GPU-gone"]


def test_two_processes_cannot_both_claim_a_gpu(tmp_path: Path) -> None:
    state = default_state(gpus=2)
    backend, fake, _ = make_backend(tmp_path, fake=FakeNvml(state=state))
    backend.capabilities()  # opened; now another process claims GPU 1 in the race window
    other = Journal(tmp_path / "journal", owner=lambda: Owner(os.getppid(), None, *_here()))
    other.write(other.new_entry(uuid=state["gpus"][1]["uuid"], index=1, name="x", prior={"power_limit_mw": 1}),
                exclusive=True)
    backend._foreign_owner = lambda d: None  # simulate losing the race after the liveness check
    with pytest.raises(NoPermission, match="just claimed"):
        backend.apply(Settings(power_limit_w=300))
    assert [e.index for e in Journal(tmp_path / "journal").entries()] == [1]  # our claim on GPU 0 released
    assert fake.state()["calls"] == []


def test_a_failed_restore_keeps_the_true_prior_for_the_next_apply(tmp_path: Path) -> None:
    backend, fake, _ = make_backend(tmp_path)
    backend.apply(Settings(power_limit_w=300))
    fake.update(lambda s: s.__setitem__("privileged", False))  # e.g. capability dropped mid-run
    with pytest.raises(NoPermission):
        backend.restore()
    assert Journal(tmp_path / "journal").entries()[0].prior == {"power_limit_mw": 700_000}
    fake.update(lambda s: s.__setitem__("privileged", True))
    backend.apply(Settings(power_limit_w=250))
    backend.restore()
    assert _gpu(fake)["power_limit_mw"] == 700_000


def test_read_only_env_blocks_every_write_before_the_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GRIDSHIFT_NVML_READ_ONLY=1 (used on the lent H200): setters never reach NVML."""
    monkeypatch.setenv("GRIDSHIFT_NVML_READ_ONLY", "1")
    backend, fake, _ = make_backend(tmp_path)
    applied = backend.apply(Settings(power_limit_w=300, sm_clock_mhz=(1200, 1200)))
    assert fake.state()["calls"] == []
    assert applied.changed == ()
    assert applied.skipped
    assert _gpu(fake)["power_limit_mw"] == 700_000


def test_read_only_env_makes_the_probe_say_measure_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flow decides measure-only from the probe, so a read-only run never reports a limit as applied."""
    monkeypatch.setenv("GRIDSHIFT_NVML_READ_ONLY", "1")
    backend, _, _ = make_backend(tmp_path)
    caps = backend.capabilities()
    assert not caps.can_control and "GRIDSHIFT_NVML_READ_ONLY=1" in caps.control_note
