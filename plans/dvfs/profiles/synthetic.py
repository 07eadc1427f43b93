"""A synthetic kernel profile of one GPT-3-XL-sized transformer layer step (SYNTHETIC, not measured).

Shape: d_model 2048, 16 heads, sequence 2048, batch 4, bf16 autocast, forward + backward + AdamW.
The kernel list imitates what torch 2.x emits for such a layer (layer norms, fused QKV, flash
attention, MLP GEMMs, GELU, residual adds, casts, multi-tensor AdamW, memsets): about 103 kernels
and 6.4 ms of kernel time, the two figures measured on the lent H200 (gpu-facts.md). Individual
durations are estimates from FLOPs at ~600 TFLOP/s and bytes at ~4 TB/s, scaled to 6.4 ms.
It exists so planners and benchmarks run before a real profile is captured; the file it produces
says ``source: synthetic`` and must never be reported as a measurement.
"""

from __future__ import annotations

from plans.dvfs.profiles.kernel_profile import IterationSpan, KernelProfile, KernelRecord, ProfileMeta, workload_fingerprint

__all__ = ["gpt3xl_layer_profile"]

_GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT"
_EW = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
_COPY = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>"
_CAST = "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda>"
_LN = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
_LNB = "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, float>"
_LNG = "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>"
_GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
_GELUB = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl>"
_RED = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, sum>>>"
_FA_F = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>"
_FA_B = "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>>"
_FA_D = "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8>>"
_FA_C = "void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>>"
_ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor<float, 4>>"
_FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
_MEMSET = "Memset (Device)"


def _layer_kernels() -> list[tuple[str, str, float, str]]:
    """(phase, name, relative duration µs, category) in launch order for one step."""
    fa, fm, bm, ba, opt = ("layer0.forward.attention", "layer0.forward.mlp", "layer0.backward.mlp",
                           "layer0.backward.attention", "optimizer")
    k: list[tuple[str, str, float, str]] = []
    add = lambda ph, name, us, cat="kernel": k.append((ph, name, us, cat))  # noqa: E731
    # forward, attention block
    add(fa, _CAST, 8); add(fa, _CAST, 4)  # weight casts fp32->bf16 under autocast
    add(fa, _LN, 22); add(fa, _CAST, 16)
    add(fa, _GEMM, 340)  # QKV projection 8192x2048x6144
    for _ in range(3):
        add(fa, _COPY, 24)  # head split / transpose
    add(fa, _FA_F, 230)
    add(fa, _COPY, 24)
    add(fa, _CAST, 3); add(fa, _GEMM, 115)  # output projection
    add(fa, _EW, 26)  # residual
    # forward, MLP block
    add(fm, _CAST, 12); add(fm, _CAST, 12)
    add(fm, _LN, 22); add(fm, _CAST, 16)
    add(fm, _GEMM, 455); add(fm, _GELU, 68); add(fm, _GEMM, 455); add(fm, _EW, 26)
    add(fm, _RED, 18)  # loss-ish reduction at the end of forward
    add(fm, _FILL, 3)
    # backward, MLP block
    add(bm, _FILL, 3); add(bm, _EW, 26)
    add(bm, _GEMM, 455); add(bm, _GEMM, 455)  # down proj dgrad/wgrad
    add(bm, _RED, 14); add(bm, _CAST, 6)
    add(bm, _GELUB, 95)
    add(bm, _GEMM, 455); add(bm, _GEMM, 455)  # up proj dgrad/wgrad
    add(bm, _RED, 30); add(bm, _CAST, 12); add(bm, _CAST, 12)
    add(bm, _LNB, 34); add(bm, _LNG, 26); add(bm, _RED, 6); add(bm, _EW, 26)
    add(bm, _EW, 26); add(bm, _COPY, 8)
    # backward, attention block
    add(ba, _GEMM, 115); add(ba, _GEMM, 115)
    add(ba, _RED, 8); add(ba, _CAST, 4); add(ba, _COPY, 24)
    add(ba, _FA_D, 22); add(ba, _MEMSET, 5, "memset"); add(ba, _FA_B, 610); add(ba, _FA_C, 20)
    for _ in range(3):
        add(ba, _COPY, 24)
    add(ba, _GEMM, 340); add(ba, _GEMM, 340)
    add(ba, _RED, 20); add(ba, _CAST, 8); add(ba, _CAST, 8)
    add(ba, _LNB, 34); add(ba, _LNG, 26); add(ba, _RED, 6); add(ba, _EW, 26)
    add(ba, _EW, 26); add(ba, _COPY, 8)
    # gradient accumulation into fp32 .grad and AdamW (foreach/fused) plus zero_grad memsets
    for _ in range(12):
        add(opt, _EW, 9)
    for _ in range(8):
        add(opt, _ADAM, 22)
    for _ in range(12):
        add(opt, _MEMSET, 3, "memset")
    for _ in range(6):
        add(opt, _FILL, 2)
    add(opt, _RED, 4)
    return k


def gpt3xl_layer_profile(*, iterations: int = 1, kernel_time_s: float = 6.4e-3, launch_gap_us: float = 1.5) -> KernelProfile:
    """A synthetic profile of ``iterations`` identical steps of one GPT-3-XL-sized layer on an H200."""
    rows = _layer_kernels()
    scale = kernel_time_s * 1e6 / sum(us for _, _, us, _ in rows)
    kernels: list[KernelRecord] = []
    spans: list[IterationSpan] = []
    t_abs = 0.0
    order = 0
    for it in range(iterations):
        it_start = t_abs
        for phase, name, us, cat in rows:
            d = us * scale
            kernels.append(KernelRecord(name=name, order=order, iteration=it, start_us=round(t_abs - it_start, 3),
                                        duration_us=round(d, 3), stream=7, phase=phase, category=cat))
            order += 1
            t_abs += d + launch_gap_us
        spans.append(IterationSpan(index=it, start_us=round(it_start, 3), end_us=round(t_abs, 3)))
    shape = dict(model="gpt3-xl-layer", d_model=2048, heads=16, seq=2048, batch=4, dtype="bf16-autocast",
                 optimizer="AdamW", layers=1, synthetic=True)
    meta = ProfileMeta(
        gpu_model="NVIDIA H200", driver="580.159.04 (lent H200; clocks table measured, timeline synthetic)",
        workload="SYNTHETIC GPT-3-XL-sized layer step (d=2048, 16 heads, seq 2048, batch 4, bf16, fwd+bwd+AdamW)",
        workload_fingerprint=workload_fingerprint(**shape), source="synthetic",
        sm_clocks_mhz=tuple(range(345, 1981, 15)), mem_clocks_mhz=(3201, 2201), default_sm_clock_mhz=1980,
        default_mem_clock_mhz=3201, power_limit_w=700.0, idle_power_w=120.0,
        note=("SYNTHETIC: kernel names and durations are estimates scaled to the measured 103 kernels / 6.4 ms; "
              "no step power is given, so the model uses its priors uncalibrated."),
    )
    return KernelProfile(meta=meta, iterations=tuple(spans), kernels=tuple(kernels))
