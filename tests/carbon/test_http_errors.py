"""The HTTP seam: every httpx exception and every status maps to a CarbonError; retries honour Retry-After."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import httpx
import pytest

import carbon.errors as errors
from carbon.errors import (
    AuthFailed,
    BadResponse,
    CarbonError,
    NoCoverage,
    ProviderUnreachable,
    RateLimited,
)
from carbon.providers._error_map import EXCEPTION_ERRORS, STATUS_ERRORS, error_for_exception, error_for_status
from carbon.providers._http import JsonApi, RetryPolicy, parse_retry_after_s


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def test_every_httpx_exception_class_has_an_explicit_mapping() -> None:
    # fails when httpx grows an exception class: decide what it means for us, then add it to the table
    public = {getattr(httpx, n) for n in dir(httpx) if isinstance(getattr(httpx, n), type)
              and issubclass(getattr(httpx, n), Exception)}
    # httpx's own classes: a library's subclass (Prefect's, once Prefect is imported) maps through its base
    own = {c for c in public | _subclasses(httpx.HTTPError) if c.__module__.split(".")[0] == "httpx"}
    missing = sorted(c.__name__ for c in own if c not in EXCEPTION_ERRORS)
    assert missing == []


def test_every_mapped_target_is_a_carbon_error_and_every_provider_error_class_is_reachable() -> None:
    targets = set(EXCEPTION_ERRORS.values()) | set(STATUS_ERRORS.values())
    assert all(issubclass(t, CarbonError) for t in targets)
    provider_classes = {c for c in _subclasses(CarbonError) if c.__module__ == errors.__name__}
    # BadTrace (local files) and StaleData (the monitor) are not HTTP outcomes; UnknownZone comes from overrides
    not_http = {errors.BadTrace, errors.StaleData, errors.UnknownZone}
    assert provider_classes - not_http <= targets


@pytest.mark.parametrize("status, expected", [
    (204, NoCoverage), (400, BadResponse), (401, AuthFailed), (403, AuthFailed), (404, NoCoverage),
    (429, RateLimited), (500, BadResponse), (501, NoCoverage), (502, ProviderUnreachable), (503, ProviderUnreachable),
    (418, BadResponse), (599, BadResponse),
])
def test_status_table(status: int, expected: type) -> None:
    assert error_for_status(status) is expected


def test_most_derived_exception_wins() -> None:
    req = httpx.Request("GET", "http://x")
    assert error_for_exception(httpx.ConnectTimeout("t", request=req)) is ProviderUnreachable
    assert error_for_exception(httpx.RemoteProtocolError("hung up", request=req)) is BadResponse
    assert error_for_exception(ValueError("json")) is BadResponse


def test_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after_s("7") == 7.0
    now = datetime(2024, 3, 6, 19, 0, tzinfo=timezone.utc)
    assert parse_retry_after_s("Wed, 06 Mar 2024 19:00:30 GMT", now=now) == 30.0
    assert parse_retry_after_s("soon") is None
    assert parse_retry_after_s(None) is None


def _api(handler, **kw) -> tuple[JsonApi, list[float]]:
    pauses: list[float] = []
    api = JsonApi(provider="t", base_url="http://fake", client=httpx.Client(transport=httpx.MockTransport(handler)),
                  sleep=pauses.append, **kw)
    return api, pauses


def test_429_then_ok_honours_retry_after_through_injected_sleep() -> None:
    answers = iter([httpx.Response(429, headers={"Retry-After": "3"}), httpx.Response(503), httpx.Response(200, json={"ok": 1})])
    api, pauses = _api(lambda req: next(answers), retry=RetryPolicy(retries=2, backoff_s=0.5))
    assert api.get_json("/x") == {"ok": 1}
    assert pauses == [3.0, 1.0]  # Retry-After, then backoff 0.5 * 2**1


def test_retries_run_out_into_rate_limited_with_retry_after() -> None:
    api, pauses = _api(lambda req: httpx.Response(429, headers={"Retry-After": "2"}), retry=RetryPolicy(retries=1))
    with pytest.raises(RateLimited) as info:
        api.get_json("/x")
    assert info.value.retry_after_s == 2.0 and pauses == [2.0]


def test_a_retry_after_beyond_the_cap_is_not_waited_for() -> None:
    api, pauses = _api(lambda req: httpx.Response(429, headers={"Retry-After": "3600"}))
    with pytest.raises(RateLimited):
        api.get_json("/x")
    assert pauses == []


def test_4xx_is_not_retried() -> None:
    calls = []
    api, pauses = _api(lambda req: calls.append(req) or httpx.Response(401, json={"error": "Invalid auth-token"}))
    with pytest.raises(AuthFailed, match="Invalid auth-token"):
        api.get_json("/x")
    assert len(calls) == 1 and pauses == []


@pytest.mark.parametrize("response, cls, words", [
    (httpx.Response(200, content=b""), BadResponse, "empty body"),
    (httpx.Response(200, content=b'{"a": '), BadResponse, "malformed JSON"),
    (httpx.Response(204), NoCoverage, "no data"),
    (httpx.Response(403, headers={"content-type": "text/html"}, content=b"<html><body>403</body></html>"), AuthFailed, "HTML error page"),
])
def test_bodies_that_cannot_be_used(response: httpx.Response, cls: type, words: str) -> None:
    api, _ = _api(lambda req: response)
    with pytest.raises(cls, match=words) as info:
        api.get_json("/x")
    assert "\n" not in str(info.value)


def test_timeouts_and_refusals_are_unreachable() -> None:
    def boom(req: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=req)

    api, _ = _api(boom)
    with pytest.raises(ProviderUnreachable, match="within"):
        api.get_json("/x")


def test_secrets_never_reach_logs_or_messages(caplog: pytest.LogCaptureFixture) -> None:
    from carbon.providers.electricitymaps import ElectricityMapsProvider

    secret = "sekret-token-value-123"
    answers = iter([httpx.Response(503), httpx.Response(401, json={"error": "Invalid auth-token"})])
    pauses: list[float] = []
    p = ElectricityMapsProvider(zone="DE", token=secret, sleep=pauses.append,
                                client=httpx.Client(transport=httpx.MockTransport(lambda r: next(answers))))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(AuthFailed) as info:
        p.current(now=datetime(2024, 3, 6, tzinfo=timezone.utc))
    assert secret not in str(info.value) and secret not in repr(p) and secret not in repr(p.api)
    assert secret not in caplog.text and "retry 1/2" in caplog.text
