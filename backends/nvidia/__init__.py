"""The NVIDIA backend: NVML control with journalled, exact restore and energy metering.

Layout: ``_nvml.py`` (one wrapper per NVML call, error map), ``devices.py`` (CUDA_VISIBLE_DEVICES,
LOCAL_RANK, MIG), ``privilege.py`` (read-only privilege probe), ``backend.py`` (NvidiaBackend:
lifecycle, capabilities, status, recovery), ``control.py`` (its write path: journalled claims, setters,
delegation, clock locks, restore), ``meter.py`` (windows, power sampler, RAPL). Importing this package does not load NVML.
"""

from backends.nvidia._nvml import READ_ONLY_ENV
from backends.nvidia.backend import NvidiaBackend
from backends.nvidia.meter import NvidiaMeter, PowerSampler, RaplReader

__all__ = ["READ_ONLY_ENV", "NvidiaBackend", "NvidiaMeter", "PowerSampler", "RaplReader"]
