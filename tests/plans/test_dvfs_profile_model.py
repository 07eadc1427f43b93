"""Profiles (file format, errors, capture parser) and the per-kernel model (cap clipping, provenance)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from plans.dvfs.profiles.capture import profile_from_trace
from plans.dvfs.errors import PlanInputError, ProfileError
from plans.dvfs.model import build_tables, classify_kernel
from plans.dvfs.profiles.kernel_profile import KernelProfile, ProfileMeta, load_profile, save_profile
from plans.dvfs.profiles.synthetic import gpt3xl_layer_profile

DATA = Path(__file__).resolve().parent.parent / "data"
SYNTH = DATA / "SYNTHETIC_gpt3xl_layer_h200_profile.json"


def test_committed_synthetic_profile_is_labelled_and_matches_the_generator() -> None:
    prof = load_profile(SYNTH)
    assert prof.meta.source == "synthetic" and "SYNTHETIC" in prof.meta.workload
    assert prof == gpt3xl_layer_profile()
    ks = prof.iteration_kernels()
    assert len(ks) == 103
    assert sum(k.duration_us for k in ks) == pytest.approx(6400, rel=1e-3)
    assert len(prof.meta.sm_clocks_mhz) == 110


def test_round_trip(tmp_path: Path) -> None:
    prof = gpt3xl_layer_profile(iterations=2)
    assert load_profile(save_profile(prof, tmp_path / "p.json")) == prof
    assert prof.phases()[0] == "layer0.forward.attention"


@pytest.mark.parametrize(
    "text, fragment",
    [
        (None, "no such kernel profile file"),
        ("{not json", "not JSON"),
        ('{"format": "other"}', "not a gridshift kernel profile"),
        ('{"format": "gridshift.kernel_profile", "version": 99}', "version 99 is newer"),
        ('{"format": "gridshift.kernel_profile", "version": 1, "meta": {}}', "meta"),
    ],
)
def test_profile_file_errors_name_the_file(tmp_path: Path, text: str | None, fragment: str) -> None:
    p = tmp_path / "bad.json"
    if text is not None:
        p.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(p)
    assert str(info.value).startswith(str(p)) and fragment in str(info.value)


def test_profile_rejects_unsorted_kernels() -> None:
    raw = json.loads(gpt3xl_layer_profile().model_dump_json())
    raw["kernels"][0]["order"], raw["kernels"][1]["order"] = 1, 0
    with pytest.raises(ValueError, match="sorted"):
        KernelProfile.model_validate(raw)


def _meta(**kw: object) -> ProfileMeta:
    base = dict(gpu_model="NVIDIA H200", workload="tiny", workload_fingerprint="x", source="measured",
                sm_clocks_mhz=tuple(range(345, 1981, 15)), default_sm_clock_mhz=1980)
    base.update(kw)
    return ProfileMeta(**base)  # type: ignore[arg-type]


def test_chrome_trace_parser_assigns_phases_iterations_and_streams() -> None:
    prof = profile_from_trace(json.loads((DATA / "torch_trace_tiny.json").read_text()), meta=_meta())
    names = [(k.iteration, k.name, k.phase, k.stream, k.category) for k in prof.kernels]
    assert names == [
        (0, "nvjet_gemm_a", "layer0.forward", 7, "kernel"),
        (0, "vectorized_elementwise_kernel_gelu", "layer0.forward.mlp", 7, "kernel"),  # innermost range wins
        (0, "Memset (Device)", "layer0.backward", 7, "memset"),
        (0, "nvjet_gemm_b", "layer0.backward", 9, "kernel"),
        (1, "nvjet_gemm_a", "layer0.forward", 7, "kernel"),
    ]  # the stray kernel launched outside any iteration is dropped
    assert [k.start_us for k in prof.iteration_kernels(0)] == [0, 52, 63, 66]
    assert prof.iterations[0].duration_us == 106


def test_chrome_trace_parser_errors() -> None:
    with pytest.raises(ProfileError, match="traceEvents"):
        profile_from_trace({}, meta=_meta())
    with pytest.raises(ProfileError, match="no GPU kernels"):
        profile_from_trace({"traceEvents": []}, meta=_meta())
    ev = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {}}
    with pytest.raises(ProfileError, match="gridshift.iteration"):
        profile_from_trace({"traceEvents": [ev]}, meta=_meta())


# -- model ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tables():
    return build_tables(gpt3xl_layer_profile())


def test_tables_shape_default_and_provenance(tables) -> None:
    assert tables.time_s.shape == (103, 110)
    assert tables.sm_clocks_mhz[tables.default_option] == 1980
    assert tables.provenance() == "modelled"
    assert tables.time_s[:, tables.default_option].sum() == pytest.approx(6.4e-3, rel=1e-6)


def test_power_cap_clips_gemms_so_locking_above_the_cap_costs_no_time(tables) -> None:
    gemm = tables.names.index(next(n for n in tables.names if n.startswith("nvjet")))
    d = tables.default_option
    f_eff = tables.effective_clock_mhz[gemm, d]
    assert 1200 <= f_eff <= 1500  # the H200's 700 W cap (gpu-facts 4.4)
    assert tables.power_w[gemm, d] == pytest.approx(700.0, rel=1e-6)
    above = tables.sm_clocks_mhz >= f_eff + 15
    assert np.allclose(tables.time_s[gemm, above], tables.time_s[gemm, d])
    j = int(np.flatnonzero(tables.sm_clocks_mhz == 1200)[0])
    assert tables.time_s[gemm, j] > tables.time_s[gemm, d]  # below the cap it slows down


def test_memory_bound_kernels_are_nearly_flat_then_slow_down(tables) -> None:
    ew = tables.names.index(next(n for n in tables.names if "GeluCUDAKernelImpl" in n))
    d = tables.default_option
    j1200 = int(np.flatnonzero(tables.sm_clocks_mhz == 1200)[0])
    j600 = int(np.flatnonzero(tables.sm_clocks_mhz == 600)[0])
    assert tables.time_s[ew, j1200] / tables.time_s[ew, d] < 1.08
    assert tables.energy_j[ew, j1200] < tables.energy_j[ew, d]
    assert tables.time_s[ew, j600] / tables.time_s[ew, d] > 1.2


def test_measured_cells_replace_the_model_and_change_provenance() -> None:
    prof = gpt3xl_layer_profile()
    name = prof.kernels[0].name
    t = build_tables(prof, measured={name: {1980: (1e-5, 300.0), 1500: (2e-5, 200.0)}})
    with pytest.raises(PlanInputError, match="positive"):
        build_tables(prof, measured={0: {1500: (-1.0, None)}})
    assert t.provenance() == "mixed"
    first = 0
    j = int(np.flatnonzero(t.sm_clocks_mhz == 1500)[0])
    assert t.measured[first, j] and t.time_s[first, j] == 2e-5 and t.energy_j[first, j] == pytest.approx(4e-3)


def test_calibration_matches_measured_step_power() -> None:
    prof = gpt3xl_layer_profile()
    busy = sum(k.duration_us for k in prof.kernels) * 1e-6
    span = prof.iterations[0].duration_us * 1e-6
    meta = prof.meta.model_copy(update={"step_power_w": 600.0, "step_time_s": span})
    t = build_tables(prof.model_copy(update={"meta": meta}))
    d = t.default_option
    modelled = (t.energy_j[:, d].sum() + t.idle_power_w * (span - busy)) / span
    assert modelled == pytest.approx(600.0, rel=0.02)
    assert t.calibration_factor < 1.0


def test_memory_clock_options_only_where_lockable() -> None:
    prof = gpt3xl_layer_profile()
    t = build_tables(prof, sm_clocks_mhz=[1500, 1980], mem_clocks_mhz=[5001, 9501])
    assert t.n_options == 2  # HBM part: memory clock stays
    meta = prof.meta.model_copy(update={"memory_clock_lockable": True, "default_mem_clock_mhz": 9501, "mem_clocks_mhz": (5001, 9501)})
    g = build_tables(prof.model_copy(update={"meta": meta}), sm_clocks_mhz=[1500, 1980], mem_clocks_mhz=[5001, 9501])
    assert g.n_options == 4
    ew = g.names.index(next(n for n in g.names if "GeluCUDAKernelImpl" in n))
    slow_mem = int(np.flatnonzero((g.sm_clocks_mhz == 1980) & (g.mem_clocks_mhz == 5001))[0])
    assert g.time_s[ew, slow_mem] > 1.5 * g.time_s[ew, g.default_option]


def test_overlapping_kernels_share_one_item() -> None:
    prof = gpt3xl_layer_profile()
    ks = list(prof.kernels)
    ks[5] = ks[5].model_copy(update={"start_us": ks[4].start_us + 1.0, "stream": 9})
    t = build_tables(prof.model_copy(update={"kernels": tuple(ks)}))
    assert t.n_items == 102
    assert t.first_kernel[4] == 4 and t.first_kernel[5] == 6


def test_classification_uses_counters_when_present() -> None:
    k = gpt3xl_layer_profile().kernels[4].model_copy(update={"sm_throughput_frac": 0.2, "dram_throughput_frac": 0.9})
    assert classify_kernel(k).bound == "memory"


def test_model_input_errors() -> None:
    with pytest.raises(PlanInputError, match="default clock"):
        build_tables(gpt3xl_layer_profile(), sm_clocks_mhz=[1000, 1500])


def test_stack_layers_orders_forward_then_backward_reversed_then_optimizer(tables) -> None:
    big = tables.stack_layers(3)
    assert big.n_items == 3 * tables.n_items
    order = []
    for p in big.phases:
        key = p if p == "optimizer" else ".".join(p.split(".")[:2])
        if not order or order[-1] != key:
            order.append(key)
    assert order == ["layer0.forward", "layer1.forward", "layer2.forward", "layer2.backward", "layer1.backward",
                     "layer0.backward", "optimizer"]
    d = tables.default_option
    assert big.time_s[:, d].sum() == pytest.approx(3 * tables.time_s[:, d].sum())


def test_clock_sweep_is_refused_unless_allowed_and_always_resets() -> None:
    from plans.dvfs.profiles.capture import sweep_clocks

    calls: list[tuple] = []

    class Control:
        def set_locked_sm_clock_mhz(self, lo: int, hi: int) -> None:
            calls.append(("set", lo, hi))

        def reset_locked_sm_clock(self) -> None:
            calls.append(("reset",))

    prof = gpt3xl_layer_profile()
    with pytest.raises(PlanInputError, match="never on a lent"):
        sweep_clocks(lambda: prof, Control(), [1500])
    assert calls == []
    table = sweep_clocks(lambda: prof, Control(), [1500, 1980], allow_clock_changes=True)
    assert calls == [("set", 1500, 1500), ("set", 1980, 1980), ("reset",)]
    assert table[0][1500] == (prof.kernels[0].duration_us * 1e-6, None)
    t = build_tables(prof, measured=table)
    assert t.provenance() == "modelled"  # durations measured, power modelled: the energy stays modelled
    j = int(np.flatnonzero(t.sm_clocks_mhz == 1500)[0])
    assert t.time_s[0, j] == pytest.approx(prof.kernels[0].duration_us * 1e-6)

    def flaky() -> object:
        raise RuntimeError("step crashed")

    calls.clear()
    with pytest.raises(RuntimeError):
        sweep_clocks(flaky, Control(), [1500], allow_clock_changes=True)  # type: ignore[arg-type]
    assert calls[-1] == ("reset",)
