"""GPU slots: a Prefect global concurrency limit per site, node-local device locks, and pinning.

Against the session's real Prefect API server (on SQLite and on PostgreSQL + Redis: fixture fleet_api); no waiting anywhere: a busy node is
GpusBusy at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.fleet.gpus import GpusBusy, ensure_limits, gpu_limit_name, hold_gpus, pin_environment


def test_a_node_never_hands_out_more_gpus_than_it_has(fleet_api, tmp_path: Path) -> None:
    site = f"node-{os.getpid()}"
    assert ensure_limits({gpu_limit_name(site): 2}) == [
        f"created global concurrency limit {gpu_limit_name(site)} (2 GPU slots)"]
    assert ensure_limits({gpu_limit_name(site): 2}) == []  # idempotent
    with hold_gpus(site, 1, 2, lock_dir=tmp_path) as first:
        with hold_gpus(site, 1, 2, lock_dir=tmp_path) as second:
            assert {first.devices, second.devices} == {(0,), (1,)}
            with pytest.raises(GpusBusy):
                with hold_gpus(site, 1, 2, lock_dir=tmp_path):
                    pass
        with pytest.raises(GpusBusy):  # one free, two asked
            with hold_gpus(site, 2, 2, lock_dir=tmp_path):
                pass
    with hold_gpus(site, 2, 2, lock_dir=tmp_path) as both:  # all released on exit
        assert both.devices == (0, 1)
        assert both.as_report()["gpu_limit"] == gpu_limit_name(site)


def test_a_site_without_its_limit_is_an_error_not_an_unlimited_node(fleet_api, tmp_path: Path) -> None:
    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError

    with pytest.raises(ConcurrencySlotAcquisitionError):
        with hold_gpus(f"missing-{os.getpid()}", 1, 2, lock_dir=tmp_path):
            pass


def test_a_device_held_outside_gridshift_is_busy_too(fleet_api, tmp_path: Path) -> None:
    import fcntl

    site = f"shared-{os.getpid()}"
    ensure_limits({gpu_limit_name(site): 1})
    (tmp_path / site).mkdir()
    with open(tmp_path / site / "gpu0.lock", "ab") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(GpusBusy, match="outside gridshift"):
            with hold_gpus(site, 1, 1, lock_dir=tmp_path):
                pass
    with hold_gpus(site, 1, 1, lock_dir=tmp_path) as held:  # the Prefect slot was given back
        assert held.devices == (0,)


def test_pinning_sets_and_restores_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    with pin_environment((2, 3)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pin_environment((1,)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_the_nvidia_backend_meters_exactly_the_pinned_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from backends.journal import Journal
    from backends.nvidia.backend import NvidiaBackend
    from tests.fakes.fake_nvml import FakeNvml

    fake = FakeNvml(gpus=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pin_environment((1, 3)):
        backend = NvidiaBackend(nvml=fake, journal=Journal(tmp_path / "journal"), recover=False, rapl_root=None)
        try:
            assert [d.index for d in backend.devices] == [1, 3]  # the physical GPUs pinned
            assert sorted(backend.energy_mj()) == [0, 1]  # metered as CUDA ordinals 0 and 1, nothing else
        finally:
            backend.close()


def test_a_run_waits_in_prefect_for_slots_an_overrunning_run_gives_back(fleet_api, tmp_path: Path) -> None:
    import threading

    site = f"wait-{os.getpid()}"
    ensure_limits({gpu_limit_name(site): 1})
    got: list[tuple[int, ...]] = []
    with hold_gpus(site, 1, 1, lock_dir=tmp_path):
        waiter = threading.Thread(target=lambda: got.append(_hold_once(site, tmp_path)))
        waiter.start()
        waiter.join(timeout=1.0)  # it is waiting in Prefect's limit, not failing
        assert waiter.is_alive() and not got
    waiter.join(timeout=60)
    assert got == [(0,)]
    with hold_gpus(site, 1, 1, lock_dir=tmp_path):  # and it gave the slot back
        with pytest.raises(GpusBusy, match="free for 1 s"):
            _hold_once(site, tmp_path, wait_s=1.0)


def _hold_once(site: str, lock_dir: Path, wait_s: float = 60.0) -> tuple[int, ...]:
    with hold_gpus(site, 1, 1, lock_dir=lock_dir, wait_s=wait_s) as held:
        return held.devices


def test_placements_of_one_fleet_take_turns_and_a_fleet_without_its_limits_is_told_to_redeploy(fleet_api) -> None:
    from flows.fleet.placing import placing_limit_name, placing_lock

    sites = [f"pa-{os.getpid()}", f"pb-{os.getpid()}"]
    ensure_limits({placing_limit_name(s): 1 for s in sites}, "placement at a time")
    with placing_lock(sites):
        with pytest.raises(RuntimeError, match="another placement held the sites for 1 s"):
            with placing_lock(sites[1:], wait_s=1.0):  # a fleet sharing one of the sites waits its turn
                pass
    with placing_lock(list(reversed(sites)), wait_s=5.0):  # given back; the order of the names does not matter
        pass
    with pytest.raises(RuntimeError, match="run `gridshift deploy`"):
        with placing_lock([f"never-deployed-{os.getpid()}"]):
            pass


def test_a_slot_whose_lease_the_server_lost_is_freed_but_a_running_holder_keeps_its_own(fleet_api,
                                                                                       tmp_path: Path) -> None:
    """A server restart forgets its in-memory leases, not the limit's count: that slot would stay taken for good."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
    from prefect.states import Running

    from flows.fleet.slots import free_lost_slots

    site = f"leak-{os.getpid()}"
    limit = gpu_limit_name(site)
    ensure_limits({limit: 2})
    said: list[str] = []
    with get_client(sync_client=True) as client:
        holder = client.create_flow_run(flow(name="gridshift-leak-test")(lambda: None), state=Running(), tags=["gridshift"])
        with hold_gpus(site, 1, 2, lock_dir=tmp_path, flow_run_id=str(holder.id)):
            # a second slot counted taken with no lease and no run behind it (what a restart leaves)
            client.update_global_concurrency_limit(limit, GlobalConcurrencyLimitUpdate(active_slots=2))
            assert free_lost_slots([limit], announce=said.append) == 1
            assert client.read_global_concurrency_limit_by_name(limit).active_slots == 1  # the holder's stays
            assert free_lost_slots([limit]) == 0
            # a run waiting first in line for both GPUs frees the phantom itself, then waits for the holder
            waiter = client.create_flow_run(flow(name="gridshift-leak-test")(lambda: None), state=Running())
            client.update_global_concurrency_limit(limit, GlobalConcurrencyLimitUpdate(active_slots=2))
            with pytest.raises(GpusBusy):
                with hold_gpus(site, 2, 2, lock_dir=tmp_path, wait_s=3, flow_run_id=str(waiter.id)):
                    pass
            assert client.read_global_concurrency_limit_by_name(limit).active_slots == 1
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 0
    assert said == [f"{limit}: 2 slot(s) counted taken, 1 held by running runs; freed 1 (a lease the server lost, "
                    "e.g. across a restart)"]


def test_the_slot_check_frees_nothing_of_a_run_that_takes_its_slot_while_the_count_is_read(fleet_api,
                                                                                         tmp_path: Path) -> None:
    """CI, 2026-12-07: a run gave its GPU back and checked the limit; the run first in line took that
    slot between the check's read of the holders and its read of the count, the check freed it as
    lost, and a third run got a slot while both GPUs trained (GpusBusy)."""
    from contextlib import ExitStack

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    from flows.fleet import slots
    from flows.fleet.gpu_line import waiting_line
    from flows.fleet.gpus import GPU_LEASE_S, take_slots

    site = f"race-{os.getpid()}"
    limit = gpu_limit_name(site)
    ensure_limits({limit: 2})
    with get_client(sync_client=True) as client, ExitStack() as stack:
        trainer, waiter = (client.create_flow_run(flow(name="gridshift-race-test")(lambda: None), state=Running())
                           for _ in range(2))
        stack.enter_context(hold_gpus(site, 1, 2, lock_dir=tmp_path, flow_run_id=str(trainer.id)))
        line = stack.enter_context(waiting_line(limit, str(waiter.id)))

        class WaiterAsksAsTheCountIsRead:
            """The real client; the waiter takes the free slot the way a run does, just before the count is read."""

            def __getattr__(self, name: str):
                return getattr(client, name)

            def read_global_concurrency_limit_by_name(self, name: str):
                assert take_slots([limit], 1, wait_s=0, lease_s=GPU_LEASE_S, stack=stack, line=line)
                return client.read_global_concurrency_limit_by_name(name)

        said: list[str] = []
        assert slots._check_limit(WaiterAsksAsTheCountIsRead(), limit, said.append) == 0
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 2 and said == []
        assert slots.free_lost_slots([limit]) == 0  # looked at again, quietly: both are held
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 0


def test_one_check_of_a_limit_at_a_time_and_a_dead_checkers_mark_is_taken_over(fleet_api, monkeypatch) -> None:
    """Two checks that found the same lost slot would free it twice (each decrements the count)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate, VariableCreate

    from flows.fleet import slots

    limit = gpu_limit_name(f"checks-{os.getpid()}")
    ensure_limits({limit: 2})
    with get_client(sync_client=True) as client:
        client.update_global_concurrency_limit(limit, GlobalConcurrencyLimitUpdate(active_slots=1))  # a lost lease
        client.create_variable(VariableCreate(name=f"{slots.CHECK_PREFIX}{limit}", value={"checking": True}))
        assert slots.free_lost_slots([limit]) == 0  # another check is under way
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 1
        monkeypatch.setattr(slots, "CHECK_STALE_S", -60.0)  # any age: that checker died
        assert slots.free_lost_slots([limit]) == 1
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 0
        assert client.read_variable_by_name(f"{slots.CHECK_PREFIX}{limit}") is None
