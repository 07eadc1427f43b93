"""Multi-GPU power-limit choice: per-GPU energy against per-GPU maximum power (issue 11).

The profile is the real V100 cifar100 b=1024 shape of the Zeus traces (spec section 13): per GPU,
Zeus's cost picks 175 W. Before the fix, the node's GPU count multiplied the maximum power while the
energy stayed per rank, so the same profile chose 250 W on an 8-GPU node."""

from __future__ import annotations

import pytest

from backends.types import Capabilities, DeviceInfo
from plans.power_limit import LimitMeasurement, Measured, combine_ranks
from plans.profile_store import PowerProfile
from plans.selectors import CarbonAware, ZeusCost
from scheduler.settings.auto_power import auto_power_limit_profiler, choose_power_limit
from scheduler.policy.types import Mode

T_S = [11.276667, 9.216667, 8.493333, 8.213333, 7.843333, 7.670000, 7.613333]
E_J = [979.535, 1007.345, 1112.38, 1132.9189, 1249.05, 1368.46, 1428.95]
PER_RANK = tuple(LimitMeasurement(p, t, e) for p, t, e in zip(range(100, 251, 25), T_S, E_J))


def _node(n: int) -> Capabilities:
    return Capabilities(backend="nvidia", devices=tuple(DeviceInfo(i, "Tesla V100") for i in range(n)),
                        power_limit_range_w=(100.0, 250.0), default_power_limit_w=250.0)


def _combined(world_size: int) -> tuple[LimitMeasurement, ...]:
    """What PowerLimitCallback stores after combining ``world_size`` identical ranks."""
    out = []
    for m in PER_RANK:
        c = combine_ranks([Measured(m.time_per_step_s * 40, m.energy_per_step_j * 40, 40)] * world_size)
        out.append(LimitMeasurement(m.power_limit_w, c.time_s / c.steps, c.energy_j / c.steps))
    return tuple(out)


@pytest.mark.parametrize("select", ["zeus_cost", "carbon"])
def test_a_per_rank_profile_selects_the_same_limit_on_any_node(select):
    profile = PowerProfile(gpu_model="Tesla V100", fingerprint="w", measurements=PER_RANK, world_size=1)
    mode = Mode(power_limit_select=select, eta=0.5)
    picks = {n: choose_power_limit(mode, _node(n), profile, 600.0, max_ci_g_per_kwh=600.0).power_limit_w for n in (1, 8)}
    assert picks[1] == picks[8]
    if select == "zeus_cost":
        assert picks[1] == 175.0  # the spec's JIT choice


def test_a_combined_profile_respects_its_world_size():
    per_rank = choose_power_limit(Mode(power_limit_select="zeus_cost"), _node(8),
                                  PowerProfile(gpu_model="Tesla V100", fingerprint="w", measurements=PER_RANK), None)
    for w in (2, 8):
        prof = PowerProfile(gpu_model="Tesla V100", fingerprint="w", measurements=_combined(w), world_size=w)
        for n in (1, w):
            choice = choose_power_limit(Mode(power_limit_select="zeus_cost"), _node(n), prof, None)
            assert choice.power_limit_w == per_rank.power_limit_w == 175.0
            assert f"{w} GPUs, per-GPU maximum power" in choice.reason
        assert [m.energy_per_step_j for m in prof.per_gpu()] == pytest.approx(E_J)
    # ignoring world_size (energy of w GPUs against one GPU's maximum power) would pick a lower limit
    assert ZeusCost(0.5, world_size=1).select(_combined(8)) < 175.0
    assert CarbonAware(0.5, max_ci_g_per_kwh=600.0, world_size=8).select_for(_combined(8), 600.0) == \
        CarbonAware(0.5, max_ci_g_per_kwh=600.0).select_for(PER_RANK, 600.0)


def test_the_in_process_profiler_uses_the_ranks_it_combines_not_the_node():
    caps = _node(8)
    mode = Mode(power_limit_select="zeus_cost")
    alone = auto_power_limit_profiler(mode, caps)
    ddp = auto_power_limit_profiler(mode, caps, world_size=8)
    assert alone is not None and ddp is not None
    assert alone.select(PER_RANK) == ddp.select(_combined(8)) == 175.0


def test_world_size_must_be_positive():
    from plans.errors import BadProfile

    with pytest.raises(BadProfile):
        PowerProfile(gpu_model="g", fingerprint="w", measurements=PER_RANK, world_size=0)
