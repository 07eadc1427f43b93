"""Per-kernel time and energy tables versus SM clock (and memory clock where the GPU allows it).

Measured tables win where they exist; everything else comes from the calibrated analytic model of
``gpu-facts.md`` section 5. With x = f_eff / f0 and f_eff = min(f_lock, f_cap,k):

    compute-bound (GEMM, attention):  t(f) = t_fix + (t0 - t_fix) * [beta/x + (1 - beta)] / [beta/x0 + (1 - beta)]
    memory-bound (elementwise, norms): t(f) = t_fix + (t0 - t_fix) * [(r/x)^p + (m0/m)^p]^(1/p) / [(r/x0)^p + 1]^(1/p)
    power:                            P(f) = P_s + P_dram,k * (m/m0) + D_k * phi(x)
    phi(x) = a1*x + a3*x^3 (a1 + a3 = 1) above the voltage floor x_v, linear in x below it

where x0 is the effective clock the profile's durations were measured at (a GEMM measured "at
1980 MHz" on an H200 really ran at its power-capped clock), and f_cap,k solves P(f) = power limit.
Locking a capped kernel anywhere above f_cap therefore costs no time: the model sees that saving.

Priors (all from gpu-facts.md section 4, measured read-only on the lent H200, unless marked):

- P_s = 120 W: board power with a live CUDA context and no work;
- memory-bound SM kernel: D = 135 W, P_dram = 285 W (``relu_`` 542 W vs driver memcpy 405 W);
- GEMM: dynamic power such that a large bf16 GEMM caps at ~1470 MHz under 700 W (median measured);
- a1 = 0.3, x_v = 0.6, p = 3, knee ratios r and betas per kernel class: priors, not measured.

When the profile carries a measured step power, every kernel's dynamic power is scaled by one
factor so that the modelled mean power at the default clock equals the measurement.

Every cell of every table carries provenance: ``measured`` or ``modelled``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

import numpy as np

from plans.dvfs.errors import PlanInputError
from plans.dvfs.profiles.kernel_profile import KernelProfile, KernelRecord

__all__ = ["ModelParams", "KernelClass", "KernelTables", "classify_kernel", "build_tables", "H200_PRIORS"]

Provenance = Literal["measured", "modelled"]


@dataclass(frozen=True)
class KernelClass:
    """Prior behaviour of one kind of kernel."""

    name: str
    bound: Literal["compute", "memory"]
    beta: float = 0.95  # compute-bound share of time that scales with 1/f
    knee_ratio: float = 0.5  # memory-bound: clock ratio r below which compute becomes the bottleneck
    dynamic_w: float = 135.0  # SM-clock-dependent power at f0 (uncapped), W
    dram_w: float = 285.0  # clock-independent memory/IO power, W


@dataclass(frozen=True)
class ModelParams:
    """Parameters of the analytic model. Defaults are H200 priors (see the module docstring)."""

    static_power_w: float = 120.0
    power_limit_w: float = 700.0
    phi_linear: float = 0.3
    voltage_floor_frac: float = 0.6
    knee_sharpness: float = 3.0
    fixed_time_us: float = 2.0
    respect_power_cap: bool = True
    calibrate_to_step_power: bool = True
    classes: tuple[tuple[str, KernelClass], ...] = field(default_factory=lambda: _DEFAULT_CLASSES)

    def phi(self, x: np.ndarray) -> np.ndarray:
        """Relative dynamic power at clock ratio x (1 at x = 1); linear below the voltage floor."""
        a1 = self.phi_linear
        xv = self.voltage_floor_frac
        above = a1 * x + (1.0 - a1) * x**3
        at_floor = a1 * xv + (1.0 - a1) * xv**3
        return np.where(x >= xv, above, at_floor * x / xv)


def _gemm_dynamic_w(cap_mhz: float = 1470.0, f0_mhz: float = 1980.0, limit_w: float = 700.0, static_w: float = 120.0,
                    dram_w: float = 40.0, a1: float = 0.3) -> float:
    # Choose D so that P(cap) = limit: a large GEMM on the H200 settles at ~1470 MHz (measured median).
    x = cap_mhz / f0_mhz
    return (limit_w - static_w - dram_w) / (a1 * x + (1 - a1) * x**3)


_GEMM_W = _gemm_dynamic_w()
_DEFAULT_CLASSES: tuple[tuple[str, KernelClass], ...] = (
    # (regex on the lower-cased kernel name, class); first match wins
    (r"flash|fmha|attention|sdpa|attn", KernelClass("attention", "compute", beta=0.9, dynamic_w=0.8 * _GEMM_W, dram_w=40.0)),
    (r"gemm|cutlass|xmma|nvjet|cublas|wgmma|matmul|sm90_|sm80_|ampere_|hopper_", KernelClass("gemm", "compute", beta=0.95, dynamic_w=_GEMM_W, dram_w=40.0)),
    (r"norm|softmax|reduce|welford", KernelClass("reduction", "memory", knee_ratio=0.6, dynamic_w=135.0, dram_w=250.0)),
    (r"adam|multi_tensor|foreach", KernelClass("optimizer", "memory", knee_ratio=0.45, dynamic_w=135.0, dram_w=285.0)),
    (r"elementwise|vectorized|unrolled|gelu|silu|relu|dropout|copy|cat|fill|transpose|index|mul|add", KernelClass("elementwise", "memory", knee_ratio=0.4, dynamic_w=135.0, dram_w=285.0)),
)
_MEMCPY = KernelClass("memcpy", "memory", knee_ratio=0.1, dynamic_w=0.0, dram_w=285.0)  # copy engines, not SMs [U]
_OTHER = KernelClass("other", "memory", knee_ratio=0.6, dynamic_w=100.0, dram_w=150.0)

H200_PRIORS = ModelParams()


def classify_kernel(kernel: KernelRecord, params: ModelParams = H200_PRIORS) -> KernelClass:
    """The prior class of a kernel, from counters when present, else from its name."""
    if kernel.category in ("memset", "memcpy"):
        return _MEMCPY
    if kernel.sm_throughput_frac is not None and kernel.dram_throughput_frac is not None:
        r = kernel.sm_throughput_frac / max(kernel.dram_throughput_frac, 1e-3)
        if r >= 1.0:
            return KernelClass("counter-compute", "compute", beta=0.95, dynamic_w=_GEMM_W * kernel.sm_throughput_frac, dram_w=40.0)
        return KernelClass("counter-memory", "memory", knee_ratio=max(r, 0.05), dynamic_w=135.0, dram_w=285.0 * kernel.dram_throughput_frac)
    low = kernel.name.lower()
    for pattern, cls in params.classes:
        if re.search(pattern, low):
            return cls
    return _OTHER


@dataclass(frozen=True)
class KernelTables:
    """Time and energy of every planning item at every clock option. Shapes: items x options.

    An item is one kernel, or a group of kernels that overlapped on different streams (the clock is
    device-global, so overlapping kernels share one clock).
    """

    sm_clocks_mhz: np.ndarray  # (m,) option -> SM clock
    mem_clocks_mhz: np.ndarray  # (m,) option -> memory clock (the default one where not lockable)
    time_s: np.ndarray  # (n, m)
    energy_j: np.ndarray  # (n, m)
    power_w: np.ndarray  # (n, m) mean power while the item runs
    effective_clock_mhz: np.ndarray  # (n, m) min(lock, power-cap clock)
    measured: np.ndarray  # (n, m) bool: True where the cell came from a measured table
    names: tuple[str, ...]
    phases: tuple[str, ...]
    first_kernel: np.ndarray  # (n,) index (within the iteration) of each item's first kernel
    default_option: int  # index of the default clock (the profile's f0)
    gap_time_s: float  # iteration time not covered by kernels (CPU gaps), clock-independent
    idle_power_w: float
    calibration_factor: float  # the dynamic-power scale fitted to the measured step power (1.0 if none)

    @property
    def n_items(self) -> int:
        return int(self.time_s.shape[0])

    @property
    def n_options(self) -> int:
        return int(self.time_s.shape[1])

    def provenance(self) -> Provenance | Literal["mixed"]:
        """``measured`` if every cell is measured, ``modelled`` if none is, else ``mixed``."""
        if self.measured.all():
            return "measured"
        return "modelled" if not self.measured.any() else "mixed"

    def stack_layers(self, layers: int) -> "KernelTables":
        """A model of ``layers`` identical layers from a one-layer step, in training order.

        Forward items of layers 0..L-1, then backward items of layers L-1..0, then everything
        else (optimizer) once per layer. Phase labels get the layer number (``layer3.backward.mlp``).
        ``first_kernel`` indexes the synthetic stacked sequence, not the profiled one.
        """
        if layers < 1:
            raise PlanInputError("layers must be >= 1")
        fwd = [i for i, p in enumerate(self.phases) if ".forward" in p]
        bwd = [i for i, p in enumerate(self.phases) if ".backward" in p]
        rest = [i for i in range(self.n_items) if i not in set(fwd) | set(bwd)]
        idx: list[int] = []
        labels: list[str] = []

        def relabel(i: int, layer: int) -> str:
            head, _, tail = self.phases[i].partition(".")
            return f"layer{layer}.{tail}" if head.startswith("layer") else f"{self.phases[i]}"

        for layer in range(layers):
            idx += fwd
            labels += [relabel(i, layer) for i in fwd]
        for layer in reversed(range(layers)):
            idx += bwd
            labels += [relabel(i, layer) for i in bwd]
        for _ in range(layers):
            idx += rest
            labels += [self.phases[i] for i in rest]
        ix = np.asarray(idx)
        return KernelTables(
            sm_clocks_mhz=self.sm_clocks_mhz, mem_clocks_mhz=self.mem_clocks_mhz, time_s=self.time_s[ix],
            energy_j=self.energy_j[ix], power_w=self.power_w[ix], effective_clock_mhz=self.effective_clock_mhz[ix],
            measured=self.measured[ix], names=tuple(self.names[i] for i in idx), phases=tuple(labels),
            first_kernel=np.arange(len(idx)), default_option=self.default_option, gap_time_s=self.gap_time_s * layers,
            idle_power_w=self.idle_power_w, calibration_factor=self.calibration_factor,
        )

    def select(self, options: Sequence[int]) -> "KernelTables":
        """Tables restricted to some clock options (e.g. a clock floor). Keeps the default if listed."""
        idx = np.asarray(options, dtype=int)
        if idx.size == 0:
            raise PlanInputError("no clock options left to plan with")
        default = int(np.flatnonzero(idx == self.default_option)[0]) if self.default_option in idx else int(np.argmax(self.sm_clocks_mhz[idx]))
        return KernelTables(
            sm_clocks_mhz=self.sm_clocks_mhz[idx], mem_clocks_mhz=self.mem_clocks_mhz[idx],
            time_s=self.time_s[:, idx], energy_j=self.energy_j[:, idx], power_w=self.power_w[:, idx],
            effective_clock_mhz=self.effective_clock_mhz[:, idx], measured=self.measured[:, idx],
            names=self.names, phases=self.phases, first_kernel=self.first_kernel, default_option=default,
            gap_time_s=self.gap_time_s, idle_power_w=self.idle_power_w, calibration_factor=self.calibration_factor,
        )


def _overlap_groups(kernels: Sequence[KernelRecord]) -> list[list[int]]:
    """Group kernels whose execution overlaps in time (any stream), in start order."""
    order = sorted(range(len(kernels)), key=lambda i: (kernels[i].start_us, kernels[i].order))
    groups: list[list[int]] = []
    end = -np.inf
    for i in order:
        k = kernels[i]
        if groups and k.start_us < end - 1e-9:
            groups[-1].append(i)
            end = max(end, k.start_us + k.duration_us)
        else:
            groups.append([i])
            end = k.start_us + k.duration_us
    return groups


def _kernel_model(
    kernels: Sequence[KernelRecord], f_mhz: np.ndarray, m_mhz: np.ndarray, f0: float, m0: float,
    params: ModelParams, scale: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Modelled (time_s, power_w, f_eff_mhz), each (n_kernels, n_options)."""
    classes = [classify_kernel(k, params) for k in kernels]
    t0 = np.array([k.duration_us for k in kernels]) * 1e-6
    dyn = np.array([c.dynamic_w for c in classes]) * scale
    dram = np.array([c.dram_w for c in classes])
    compute = np.array([c.bound == "compute" for c in classes])
    beta = np.array([c.beta for c in classes])
    r = np.minimum(np.array([c.knee_ratio for c in classes]), 1.0)
    ps, limit, p = params.static_power_w, params.power_limit_w, params.knee_sharpness
    mratio = (m_mhz / m0)[None, :]

    def power(x: np.ndarray) -> np.ndarray:
        return ps + dram[:, None] * mratio + dyn[:, None] * params.phi(x)

    x_lock = np.broadcast_to((f_mhz / f0)[None, :], (len(kernels), len(f_mhz)))
    x_eff = x_lock.copy()
    x_cap = np.full(len(kernels), np.inf)
    if params.respect_power_cap:
        # f_cap solves P(x) = limit; bisection on the monotone phi, vectorised over kernels
        lo, hi = np.zeros(len(kernels)), np.full(len(kernels), 1.0)
        over = power(hi[:, None])[:, 0] > limit
        for _ in range(40):
            mid = (lo + hi) / 2
            too_much = power(np.broadcast_to(mid[:, None], (len(kernels), 1)))[:, 0] > limit
            hi = np.where(too_much, mid, hi)
            lo = np.where(too_much, lo, mid)
        x_cap = np.where(over, lo, np.inf)
        x_eff = np.minimum(x_lock, x_cap[:, None])
    # the durations in the profile were measured at f0, i.e. at the power-capped clock where capped
    x0 = np.minimum(1.0, x_cap) if params.respect_power_cap else np.ones(len(kernels))
    tfix = np.minimum(params.fixed_time_us * 1e-6, 0.5 * t0)
    scal_t = (t0 - tfix)[:, None]
    comp_rel = (beta[:, None] / x_eff + (1 - beta[:, None])) / (beta / x0 + (1 - beta))[:, None]
    mem_rel = ((r[:, None] / x_eff) ** p + (1.0 / mratio) ** p) ** (1 / p) / (((r / x0) ** p + 1.0) ** (1 / p))[:, None]
    rel = np.where(compute[:, None], comp_rel, mem_rel)
    time_s = tfix[:, None] + scal_t * rel
    return time_s, power(x_eff), x_eff * f0


def build_tables(
    profile: KernelProfile,
    *,
    params: ModelParams = H200_PRIORS,
    iteration: int | None = None,
    sm_clocks_mhz: Sequence[int] | None = None,
    mem_clocks_mhz: Sequence[int] | None = None,
    measured: Mapping[int | str, Mapping[int, tuple[float, float | None]]] | None = None,
) -> KernelTables:
    """Time/energy tables for one iteration of ``profile``.

    Parameters
    ----------
    sm_clocks_mhz:
        SM clock options (default: the profile's supported list).
    mem_clocks_mhz:
        Memory clock options; used only where ``profile.meta.memory_clock_lockable`` (GeForce);
        options are then all (SM, memory) pairs. Data-centre parts keep the default memory clock.
    measured:
        ``{kernel: {sm_clock_mhz: (duration_s, power_w | None)}}`` from a clock sweep on hardware
        where sweeping is allowed (:func:`plans.dvfs.profiles.capture.sweep_clocks`); a key is the kernel's
        index within the iteration (int) or its name (str, every kernel of that name). Matching
        cells replace the model. A cell is marked measured only when its power was measured too;
        a measured duration with modelled power stays ``modelled``.
    """
    meta = profile.meta
    kernels = profile.iteration_kernels(iteration)
    f0 = float(meta.default_sm_clock_mhz)
    m0 = float(meta.default_mem_clock_mhz or (max(meta.mem_clocks_mhz) if meta.mem_clocks_mhz else 1.0))
    sm = np.asarray(sorted(set(sm_clocks_mhz if sm_clocks_mhz is not None else meta.sm_clocks_mhz)), dtype=float)
    if sm.size == 0 or not np.all(np.isfinite(sm)) or sm.min() <= 0:
        raise PlanInputError("SM clock options must be positive and finite")
    if meta.memory_clock_lockable and mem_clocks_mhz:
        mems = np.asarray(sorted(set(mem_clocks_mhz)), dtype=float)
        f_opt = np.repeat(sm, len(mems))
        m_opt = np.tile(mems, len(sm))
    else:
        f_opt, m_opt = sm, np.full(len(sm), m0)
    if f0 not in f_opt:
        raise PlanInputError(f"the default clock {f0:.0f} MHz must be among the options")
    default_option = int(np.flatnonzero((f_opt == f0) & (m_opt == m0))[0]) if np.any((f_opt == f0) & (m_opt == m0)) else int(np.flatnonzero(f_opt == f0)[-1])
    if meta.power_limit_w is not None:
        params = ModelParams(**{**params.__dict__, "power_limit_w": meta.power_limit_w})
    if meta.idle_power_w is not None:
        params = ModelParams(**{**params.__dict__, "static_power_w": meta.idle_power_w})

    t0_total = sum(k.duration_us for k in kernels) * 1e-6
    span = profile.iterations[[it.index for it in profile.iterations].index(kernels[0].iteration)]
    groups = _overlap_groups(kernels)
    busy_s = sum(max(kernels[i].start_us + kernels[i].duration_us for i in g) - min(kernels[i].start_us for i in g) for g in groups) * 1e-6
    gap_s = max(span.duration_us * 1e-6 - busy_s, 0.0)

    scale = 1.0
    if params.calibrate_to_step_power and meta.step_power_w is not None:
        # one factor on dynamic power so the modelled mean power at f0 equals the measured one
        step_s = meta.step_time_s or (busy_s + gap_s)
        target_j = meta.step_power_w * step_s - params.static_power_w * max(step_s - busy_s, 0.0)
        lo, hi = 0.2, 3.0
        for _ in range(40):
            mid = (lo + hi) / 2
            t, pw, _ = _kernel_model(kernels, np.array([f0]), np.array([m0]), f0, m0, params, mid)
            if float((t[:, 0] * pw[:, 0]).sum()) * busy_s / max(t0_total, 1e-12) > target_j:
                hi = mid
            else:
                lo = mid
        scale = (lo + hi) / 2

    kt, kp, kf = _kernel_model(kernels, f_opt, m_opt, f0, m0, params, scale)
    kmeas = np.zeros_like(kt, dtype=bool)
    if measured:
        for i, k in enumerate(kernels):
            table = measured.get(i) or measured.get(k.name)
            if not table:
                continue
            for j, f in enumerate(f_opt):
                cell = table.get(int(f))
                if cell is None or m_opt[j] != m0:
                    continue
                duration_s, power_w = cell
                if not (duration_s > 0 and np.isfinite(duration_s)) or (power_w is not None and not power_w > 0):
                    raise PlanInputError(f"measured cell for kernel {i} at {int(f)} MHz must be positive: {cell!r}")
                kt[i, j] = float(duration_s)
                kf[i, j] = f
                if power_w is not None:
                    kp[i, j] = float(power_w)
                    kmeas[i, j] = True
    ke = kt * kp

    n, m = len(groups), len(f_opt)
    time_s, energy_j = np.empty((n, m)), np.empty((n, m))
    feff, meas = np.empty((n, m)), np.empty((n, m), dtype=bool)
    for gi, g in enumerate(groups):
        if len(g) == 1:
            i = g[0]
            time_s[gi], energy_j[gi], feff[gi], meas[gi] = kt[i], ke[i], kf[i], kmeas[i]
            continue
        # overlapping kernels: the group's span stretches like its slowest member; static power once
        start = min(kernels[i].start_us for i in g)
        span0 = (max(kernels[i].start_us + kernels[i].duration_us for i in g) - start) * 1e-6
        ratio = np.max(kt[g] / (np.array([kernels[i].duration_us for i in g]) * 1e-6)[:, None], axis=0)
        time_s[gi] = span0 * ratio
        energy_j[gi] = np.maximum(ke[g].sum(axis=0) - params.static_power_w * (kt[g].sum(axis=0) - time_s[gi]), params.static_power_w * time_s[gi])
        feff[gi] = kf[g].min(axis=0)
        meas[gi] = kmeas[g].all(axis=0)
    if not (np.all(np.isfinite(time_s)) and np.all(np.isfinite(energy_j)) and np.all(time_s > 0)):
        raise PlanInputError("the model produced non-finite or non-positive times; check the profile")
    firsts = np.array([min(g) for g in groups])
    return KernelTables(
        sm_clocks_mhz=f_opt, mem_clocks_mhz=m_opt, time_s=time_s, energy_j=energy_j, power_w=energy_j / time_s,
        effective_clock_mhz=feff, measured=meas, names=tuple(kernels[min(g)].name for g in groups),
        phases=tuple(kernels[min(g)].phase for g in groups), first_kernel=firsts, default_option=default_option,
        gap_time_s=gap_s, idle_power_w=params.static_power_w, calibration_factor=scale,
    )
