"""Errors raised by carbon providers and the monitor.

    CarbonError                 anything that stops us reading an intensity
    ├── ProviderUnreachable     connection refused, DNS failure, timeout
    ├── AuthFailed              401/403: missing, wrong or expired credentials
    ├── RateLimited             429 (or a provider's rate-limit in disguise); may carry retry_after_s
    ├── UnknownZone             the provider does not know the zone/region/location
    ├── NoCoverage              the zone exists but the plan/provider has no data for it (or no forecast)
    ├── BadResponse             5xx, malformed or empty body, unexpected shape
    ├── BadTrace                a trace/static data file that cannot be read (an *input* error, exit 2)
    └── StaleData               the newest value is older than the staleness limit

Every error message is one line meant for a human; the CLI prints it as is.
"""

from __future__ import annotations

__all__ = [
    "CarbonError",
    "ProviderUnreachable",
    "AuthFailed",
    "RateLimited",
    "UnknownZone",
    "NoCoverage",
    "BadResponse",
    "BadTrace",
    "StaleData",
]


class CarbonError(Exception):
    """Base class: reading the grid signal failed."""

    def __init__(self, message: str, *, provider: str = "") -> None:
        super().__init__(message)
        self.provider = provider

    def __str__(self) -> str:
        msg = super().__str__()
        return f"{self.provider}: {msg}" if self.provider and not msg.startswith(self.provider) else msg


class ProviderUnreachable(CarbonError):
    """The provider could not be reached (connection error or timeout)."""


class AuthFailed(CarbonError):
    """The provider rejected our credentials, or none were given."""


class RateLimited(CarbonError):
    """The provider asked us to slow down."""

    def __init__(self, message: str, *, provider: str = "", retry_after_s: float | None = None) -> None:
        super().__init__(message, provider=provider)
        self.retry_after_s = retry_after_s


class UnknownZone(CarbonError):
    """The zone, region or location is not known to the provider."""


class NoCoverage(CarbonError):
    """The provider has no data (or no forecast) for this zone."""


class BadResponse(CarbonError):
    """The provider answered with an error status or a body we cannot use."""


class BadTrace(CarbonError):
    """A local trace or static-data file is malformed (bad input, not an outage)."""


class StaleData(CarbonError):
    """The freshest value available is older than the staleness limit."""
