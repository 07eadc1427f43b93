"""Foreign failures -> :class:`carbon.errors.CarbonError`, through two tables (httpx's boundary mapping).

An HTTP status and an httpx (or JSON) exception each become one error class here, and nowhere else;
``tests/carbon/test_http_errors.py`` fails when httpx grows an exception class these tables miss.
"""

from __future__ import annotations

import json
from typing import Mapping

import httpx

from carbon.errors import AuthFailed, BadResponse, CarbonError, NoCoverage, ProviderUnreachable, RateLimited

__all__ = ["EXCEPTION_ERRORS", "STATUS_ERRORS", "error_for_exception", "error_for_status"]

#: HTTP status -> error class. Statuses not listed fall back by class (4xx BadResponse, 5xx BadResponse).
STATUS_ERRORS: dict[int, type[CarbonError]] = {
    204: NoCoverage,  # "no data" (Carbon Aware SDK)
    400: BadResponse,  # providers that mean "unknown zone" by 400 override this
    401: AuthFailed,
    403: AuthFailed,
    404: NoCoverage,
    422: BadResponse,
    429: RateLimited,
    500: BadResponse,
    501: NoCoverage,  # Carbon Aware SDK: the data source has no forecasts
    502: ProviderUnreachable,  # a gateway in front of the provider could not reach it
    503: ProviderUnreachable,
    504: ProviderUnreachable,
}

#: httpx exception class -> error class; :func:`error_for_exception` picks the most derived match.
#: tests/carbon/test_http_errors.py fails when httpx grows an exception class that is not listed here.
EXCEPTION_ERRORS: dict[type[Exception], type[CarbonError]] = {
    httpx.HTTPError: BadResponse,
    httpx.RequestError: ProviderUnreachable,
    httpx.TransportError: ProviderUnreachable,
    httpx.TimeoutException: ProviderUnreachable,
    httpx.ConnectTimeout: ProviderUnreachable,
    httpx.ReadTimeout: ProviderUnreachable,
    httpx.WriteTimeout: ProviderUnreachable,
    httpx.PoolTimeout: ProviderUnreachable,
    httpx.NetworkError: ProviderUnreachable,
    httpx.ConnectError: ProviderUnreachable,
    httpx.ReadError: ProviderUnreachable,
    httpx.WriteError: ProviderUnreachable,
    httpx.CloseError: ProviderUnreachable,
    httpx.ProxyError: ProviderUnreachable,
    httpx.UnsupportedProtocol: ProviderUnreachable,  # a base_url without http(s)://
    httpx.ProtocolError: BadResponse,
    httpx.LocalProtocolError: BadResponse,
    httpx.RemoteProtocolError: BadResponse,  # the server hung up mid-answer
    httpx.DecodingError: BadResponse,
    httpx.TooManyRedirects: BadResponse,
    httpx.HTTPStatusError: BadResponse,
    httpx.InvalidURL: ProviderUnreachable,
    # programming errors in how a body is read; they still must not escape as tracebacks
    httpx.StreamError: BadResponse,
    httpx.StreamConsumed: BadResponse,
    httpx.StreamClosed: BadResponse,
    httpx.ResponseNotRead: BadResponse,
    httpx.RequestNotRead: BadResponse,
    httpx.CookieConflict: BadResponse,
    json.JSONDecodeError: BadResponse,
}


def error_for_status(status: int, overrides: Mapping[int, type[CarbonError]] | None = None) -> type[CarbonError]:
    """The error class for an HTTP ``status`` (provider ``overrides`` first, then the shared table)."""
    if overrides and status in overrides:
        return overrides[status]
    if status in STATUS_ERRORS:
        return STATUS_ERRORS[status]
    return BadResponse


def error_for_exception(exc: BaseException) -> type[CarbonError]:
    """The error class for a foreign exception: the entry for its most derived listed base class."""
    for cls in type(exc).__mro__:
        if cls in EXCEPTION_ERRORS:
            return EXCEPTION_ERRORS[cls]
    return BadResponse
