"""carbon: the grid signal. Providers, normalised series, forecasts, monitor.

Knows nothing of backends, plans, scheduler or flows.
"""

from carbon.errors import (
    AuthFailed,
    BadResponse,
    BadTrace,
    CarbonError,
    NoCoverage,
    ProviderUnreachable,
    RateLimited,
    StaleData,
    UnknownZone,
)
from carbon.providers import Provider, get_provider, provider_names
from carbon.series import IntensityKind, IntensityPoint, IntensitySeries, as_utc
from carbon.trace_file import parse_trace_text, read_trace

__all__ = [
    "AuthFailed",
    "BadResponse",
    "BadTrace",
    "CarbonError",
    "IntensityKind",
    "IntensityPoint",
    "IntensitySeries",
    "NoCoverage",
    "Provider",
    "ProviderUnreachable",
    "RateLimited",
    "StaleData",
    "UnknownZone",
    "as_utc",
    "get_provider",
    "parse_trace_text",
    "provider_names",
    "read_trace",
]
