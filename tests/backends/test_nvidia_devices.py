"""CUDA_VISIBLE_DEVICES (indices, GPU- and MIG- UUIDs) and LOCAL_RANK select the devices."""

from __future__ import annotations

import pytest

from backends.errors import NoDevice
from backends.nvidia._nvml import Nvml
from backends.nvidia.devices import discover, parse_visible
from tests.fakes.fake_nvml import FakeNvml, default_state, h200


def _nvml(gpus: int = 4, mig_on: int | None = None) -> Nvml:
    state = default_state(gpus=gpus)
    if mig_on is not None:
        state["gpus"][mig_on] = h200(mig_on, mig=2)
    fake = FakeNvml(state=state)
    lib = Nvml(fake)
    lib.init()
    return lib


def test_parse_visible() -> None:
    assert parse_visible(None) is None
    assert parse_visible("") == []
    assert parse_visible(" 1, 0 ,") == ["1", "0"]


def test_unset_means_all_in_order() -> None:
    assert [d.index for d in discover(_nvml(), {})] == [0, 1, 2, 3]


def test_indices_reorder_and_visible_index_follows_cuda() -> None:
    devices = discover(_nvml(), {"CUDA_VISIBLE_DEVICES": "2,0"})
    assert [(d.visible_index, d.index) for d in devices] == [(0, 2), (1, 0)]


def test_uuid_prefix_selects() -> None:
    lib = _nvml()
    uuid = lib.uuid(lib.handle_by_index(3))
    assert [d.index for d in discover(lib, {"CUDA_VISIBLE_DEVICES": uuid[:18]})] == [3]


def test_list_stops_at_first_invalid_entry() -> None:
    assert [d.index for d in discover(_nvml(), {"CUDA_VISIBLE_DEVICES": "1,7,0"})] == [1]


def test_ambiguous_uuid_prefix_stops_the_list() -> None:
    with pytest.raises(NoDevice):
        discover(_nvml(), {"CUDA_VISIBLE_DEVICES": "GPU-"})


def test_duplicates_hide_everything() -> None:
    with pytest.raises(NoDevice, match="no NVIDIA GPU visible"):
        discover(_nvml(), {"CUDA_VISIBLE_DEVICES": "0,0"})


def test_empty_hides_everything() -> None:
    with pytest.raises(NoDevice):
        discover(_nvml(), {"CUDA_VISIBLE_DEVICES": ""})


def test_mig_uuid_maps_to_its_parent_gpu() -> None:
    lib = _nvml(gpus=2, mig_on=1)
    devices = discover(lib, {"CUDA_VISIBLE_DEVICES": "MIG-00000001-fake-0001"})
    assert len(devices) == 1 and devices[0].index == 1 and devices[0].is_mig
    assert devices[0].key == lib.uuid(lib.handle_by_index(1))


def test_local_rank_picks_one_visible_device() -> None:
    devices = discover(_nvml(), {"CUDA_VISIBLE_DEVICES": "3,2,1", "LOCAL_RANK": "1"})
    assert [(d.visible_index, d.index) for d in devices] == [(1, 2)]
    assert len(discover(_nvml(), {"LOCAL_RANK": "1"}, per_rank=False)) == 4


def test_local_rank_beyond_visible_is_no_device() -> None:
    with pytest.raises(NoDevice, match="LOCAL_RANK=5"):
        discover(_nvml(gpus=2), {"LOCAL_RANK": "5"})
