"""plans: compute settings (power limits, batch sizes, DVFS clock plans) from profiles and models.

Pure: no NVML, no clock, no HTTP. Imports carbon and backends only.
"""

__all__: list[str] = []
