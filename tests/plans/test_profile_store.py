"""Profiles persist by GPU model and workload fingerprint; newer versions are refused."""

from __future__ import annotations

import json

import pytest

from plans.errors import BadProfile
from plans.power_limit import LimitMeasurement
from plans.profile_store import PROFILE_VERSION, PowerProfile, ProfileStore, workload_fingerprint

MS = (LimitMeasurement(300, 1.0, 250.0), LimitMeasurement(200, 1.3, 230.0))


def test_round_trip_and_keys(tmp_path):
    store = ProfileStore(tmp_path)
    fp = workload_fingerprint(model="gpt", batch_size=8, precision="bf16")
    assert fp == workload_fingerprint(precision="bf16", batch_size=8, model="gpt")
    assert fp != workload_fingerprint(model="gpt", batch_size=16, precision="bf16")
    path = store.save(PowerProfile("NVIDIA H200", fp, MS, world_size=2))
    assert path.exists()
    got = store.load("NVIDIA H200", fp)
    assert got == PowerProfile("NVIDIA H200", fp, MS, world_size=2)
    assert store.load("NVIDIA A100", fp) is None
    assert store.load("NVIDIA H200", "other") is None


def test_newer_version_and_garbage_are_refused(tmp_path):
    store = ProfileStore(tmp_path)
    p = store.path_for("gpu", "fp")
    p.parent.mkdir(parents=True)
    data = PowerProfile("gpu", "fp", MS).to_json()
    data["version"] = PROFILE_VERSION + 1
    p.write_text(json.dumps(data))
    with pytest.raises(BadProfile, match="newer"):
        store.load("gpu", "fp")
    p.write_text("{not json")
    with pytest.raises(BadProfile):
        store.load("gpu", "fp")
    with pytest.raises(BadProfile):
        PowerProfile("gpu", "fp", ())
