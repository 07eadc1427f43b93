"""Kernel profiles: per-kernel time (and counters) of one training iteration, the planner's input.

``kernel_profile`` (the versioned file, ``gridshift.kernel_profile`` v1: load, check, save),
``capture`` (record one with torch.profiler on a real GPU, imported lazily) and ``synthetic`` (a
labelled SYNTHETIC GPT-3-XL layer, so planners and benchmarks run before a profile is captured).
"""
