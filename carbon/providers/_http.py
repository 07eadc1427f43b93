"""HTTP plumbing shared by the web providers: one client, retries, and one error map.

Every HTTP provider builds a :class:`JsonApi` with an optional caller-owned ``httpx.Client`` (tests
pass one built on ``httpx.MockTransport`` or respx), a ``base_url`` that replaces the provider's
public scheme and host (paths stay as the provider documents them), a timeout, and a retry budget.
Answers with status 429 or 5xx are retried with exponential backoff, honouring ``Retry-After``;
the wait goes through an injected ``sleep`` so tests never wait. Everything that goes wrong leaves
this module as a :class:`carbon.errors.CarbonError`, picked from two tables:

* :data:`carbon.providers._error_map.STATUS_ERRORS`: HTTP status -> error class (a provider may
  override single statuses);
* :data:`carbon.providers._error_map.EXCEPTION_ERRORS`: httpx exception class -> error class (the
  most derived match wins).

Secrets are held as pydantic ``SecretStr`` and only unwrapped when a header is built; they never
appear in URLs, log lines or error messages.
"""

from __future__ import annotations

import email.utils
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import httpx
from pydantic import SecretStr

from carbon.errors import AuthFailed, BadResponse, CarbonError, RateLimited
from carbon.providers._error_map import error_for_exception, error_for_status
from carbon.providers.base import Provider

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "RETRY_STATUSES",
    "JsonApi",
    "RetryPolicy",
    "HttpProvider",
    "build_api",
    "number",
    "parse_retry_after_s",
    "parse_time",
    "require",
    "resolve_secret",
]

log = logging.getLogger("carbon.providers")

#: no call may wait forever (httpx's own default is 5 s; providers can be slow, so 10 s)
DEFAULT_TIMEOUT_S = 10.0

#: statuses worth another try after a pause
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

def parse_retry_after_s(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    ref = now or datetime.now(timezone.utc)
    return max((when - ref).total_seconds(), 0.0)


def resolve_secret(
    value: str | SecretStr | None,
    *,
    env_var: str,
    block: str | None = None,
    what: str,
    provider: str,
) -> SecretStr:
    """A credential from (in order) the explicit value, a Prefect Secret block, or ``env_var``.

    The Prefect import happens only when a block is named, so offline use never loads Prefect.
    """
    if isinstance(value, SecretStr) and value.get_secret_value():
        return value
    if isinstance(value, str) and value:
        return SecretStr(value)
    if block:
        try:
            from prefect.blocks.system import Secret  # lazy: only when the policy names a block
        except ImportError as exc:  # pragma: no cover - prefect is a dependency
            raise AuthFailed(f"cannot load Prefect Secret block {block!r}: {exc}", provider=provider) from None
        try:
            raw = Secret.load(block).get()
        except Exception as exc:  # Prefect raises ValueError, httpx errors, ... ; say which block
            raise AuthFailed(f"cannot load Prefect Secret block {block!r}: {type(exc).__name__}", provider=provider) from None
        return SecretStr(str(raw))
    env = os.environ.get(env_var, "")
    if env:
        return SecretStr(env)
    raise AuthFailed(f"no {what}: set {env_var} (or name a Prefect Secret block)", provider=provider)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry 429/5xx answers.

    ``retries`` extra attempts; the n-th pause is ``Retry-After`` when the server sent one, else
    ``backoff_s * 2**n``; any pause is capped at ``max_pause_s`` (a longer Retry-After gives up and
    raises, so a caller with a fallback is not blocked for minutes).
    """

    retries: int = 2
    backoff_s: float = 0.5
    max_pause_s: float = 30.0

    def pause_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return retry_after_s
        return self.backoff_s * (2**attempt)


def body_text(response: httpx.Response) -> str:
    """The decoded body, lower-cased, for classifying errors by their wording."""
    try:
        return response.text.lower()
    except UnicodeDecodeError:
        return ""


def _short_body(response: httpx.Response) -> str:
    """A one-line, length-capped summary of an error body (HTML pages are named, not printed)."""
    ctype = response.headers.get("content-type", "")
    text = response.text.strip()
    if "html" in ctype or text.lower().startswith(("<!doctype", "<html")):
        return "an HTML error page"
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        # Electricity Maps/WattTime {"error","message"}, UK {"error":{"code","message"}}, CASDK ProblemDetails
        err = data.get("error")
        if isinstance(err, dict):
            text = str(err.get("message") or err.get("code") or err)
        else:
            parts = [str(v) for v in (err, data.get("message"), data.get("title"), data.get("detail")) if v]
            text = ": ".join(dict.fromkeys(parts)) or text
    text = " ".join(text.split())
    return text[:200] + ("..." if len(text) > 200 else "")


class JsonApi:
    """GET JSON from one provider: base URL, default headers, timeout, retries, error mapping.

    ``client`` is borrowed, not owned: the caller closes it. Without one, this builds (and later
    closes) its own ``httpx.Client`` with ``transport`` when given.
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        status_overrides: Mapping[int, type[CarbonError]] | None = None,
        classify: Callable[[httpx.Response], "tuple[type[CarbonError], str] | None"] | None = None,
    ) -> None:
        self.provider = provider
        self.classify = classify
        self.base_url = base_url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.retry = retry or RetryPolicy()
        self.sleep = sleep
        self.status_overrides = dict(status_overrides or {})
        self._headers = {"Accept": "application/json", **(headers or {})}
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(transport=transport)

    def __repr__(self) -> str:  # no headers: they may hold a token
        return f"JsonApi(provider={self.provider!r}, base_url={self.base_url!r}, timeout_s={self.timeout_s})"

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def url(self, path: str) -> str:
        return self.base_url + "/" + path.lstrip("/")

    def request_raw(
        self,
        path: str,
        *,
        params: Any = None,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | tuple[str, str] | None = None,
    ) -> httpx.Response:
        """GET ``path``, retrying 429/5xx; returns the last response, whatever its status.

        Transport failures (refused, timeout, broken answer) are raised as CarbonErrors here.
        """
        url = self.url(path)
        merged = {**self._headers, **(headers or {})}
        attempt = 0
        while True:
            try:
                response = self._client.get(url, params=params, headers=merged, auth=auth, timeout=self.timeout_s)
            except httpx.TimeoutException as exc:
                raise error_for_exception(exc)(
                    f"no answer from {self.base_url} within {self.timeout_s:g} s ({type(exc).__name__})", provider=self.provider
                ) from None
            except httpx.HTTPError as exc:
                raise error_for_exception(exc)(
                    f"cannot reach {self.base_url}: {type(exc).__name__}: {exc}", provider=self.provider
                ) from None
            if response.status_code not in RETRY_STATUSES or attempt >= self.retry.retries:
                return response
            pause_s = self.retry.pause_s(attempt, parse_retry_after_s(response.headers.get("Retry-After")))
            if pause_s > self.retry.max_pause_s:
                return response
            log.info("%s: GET %s -> %d; retry %d/%d in %.1f s", self.provider, path, response.status_code,
                     attempt + 1, self.retry.retries, pause_s)
            self.sleep(pause_s)
            attempt += 1

    def request(
        self,
        path: str,
        *,
        params: Any = None,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | tuple[str, str] | None = None,
    ) -> httpx.Response:
        """GET ``path`` with retries on 429/5xx; returns a 2xx (not 204) response or raises a CarbonError."""
        response = self.request_raw(path, params=params, headers=headers, auth=auth)
        if response.status_code >= 300 or response.status_code == 204:
            raise self.status_error(response, path)
        return response

    def status_error(self, response: httpx.Response, path: str) -> CarbonError:
        """The CarbonError for a non-2xx (or 204) answer."""
        status = response.status_code
        retry_after_s = parse_retry_after_s(response.headers.get("Retry-After"))
        cls = error_for_status(status, self.status_overrides)
        if status == 204:
            msg = f"no data for this request (204 from {path})"
        else:
            body = _short_body(response)
            msg = f"HTTP {status} from {path}" + (f": {body}" if body else "")
        special = self.classify(response) if self.classify is not None else None
        if special is not None:
            cls, hint = special
            msg = f"{msg} ({hint})" if hint else msg
        if cls is RateLimited:
            if retry_after_s is not None:
                msg += f" (retry after {retry_after_s:g} s)"
            return RateLimited(msg, provider=self.provider, retry_after_s=retry_after_s)
        return cls(msg, provider=self.provider)

    def get_json(
        self,
        path: str,
        *,
        params: Any = None,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | tuple[str, str] | None = None,
    ) -> Any:
        """GET ``path`` and decode its JSON body; an empty or malformed body is a BadResponse."""
        response = self.request(path, params=params, headers=headers, auth=auth)
        return self.decode(response, path)

    def decode(self, response: httpx.Response, path: str) -> Any:
        if not response.content.strip():
            raise BadResponse(f"empty body from {path} (HTTP {response.status_code})", provider=self.provider)
        try:
            return response.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise error_for_exception(exc)(
                f"malformed JSON from {path}: {_short_body(response) or type(exc).__name__}", provider=self.provider
            ) from None


def require(data: Any, *keys: str | int, provider: str, what: str) -> Any:
    """``data[k0][k1]...`` or a BadResponse that names the missing piece (for unexpected shapes)."""
    cur = data
    for k in keys:
        try:
            cur = cur[k]
        except (KeyError, IndexError, TypeError):
            raise BadResponse(f"unexpected {what} body: missing {'.'.join(str(x) for x in keys)}", provider=provider) from None
    return cur


def parse_time(text: Any, *, provider: str) -> datetime:
    """A provider timestamp (ISO-8601 with Z, +00:00 or UK's minute precision ``...T12:00Z``) as UTC."""
    if not isinstance(text, str):
        raise BadResponse(f"expected a timestamp, got {text!r}", provider=provider)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadResponse(f"cannot parse timestamp {text!r}", provider=provider) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def number(value: Any, *, provider: str, what: str) -> float:
    """A finite, non-negative number from a body, or a BadResponse."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadResponse(f"{what} is not a number: {value!r}", provider=provider)
    if not (value >= 0) or value == float("inf"):
        raise BadResponse(f"{what} must be a non-negative number, got {value!r}", provider=provider)
    return float(value)


def _as_float(value: Any, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def build_api(
    provider: str,
    *,
    base_url: str,
    client: httpx.Client | None = None,
    transport: httpx.BaseTransport | None = None,
    timeout_s: float | str = DEFAULT_TIMEOUT_S,
    retries: int | str = 2,
    backoff_s: float | str = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    headers: Mapping[str, str] | None = None,
    status_overrides: Mapping[int, type[CarbonError]] | None = None,
    classify: Callable[[httpx.Response], "tuple[type[CarbonError], str] | None"] | None = None,
) -> JsonApi:
    """The :class:`JsonApi` of a web source from its options (numbers may arrive as strings, from the command line)."""
    timeout = _as_float(timeout_s, "timeout_s")
    if timeout <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    retry = RetryPolicy(retries=int(_as_float(retries, "retries")), backoff_s=_as_float(backoff_s, "backoff_s"))
    return JsonApi(provider=provider, base_url=base_url, timeout_s=timeout, client=client, transport=transport,
                   headers=headers, retry=retry, sleep=sleep, status_overrides=status_overrides, classify=classify)


class HttpProvider(Provider):
    """Shared constructor for web providers: the options every HTTP provider accepts.

    Numeric options may arrive as strings (``gridshift intensity -o timeout_s=2``) and are coerced here.
    """

    #: the provider's public scheme and host; ``base_url`` replaces it
    default_base_url: str = ""
    #: per-provider status meanings that differ from :data:`STATUS_ERRORS`
    status_overrides: dict[int, type[CarbonError]] = {}

    def __init__(
        self,
        *,
        zone: str = "",
        base_url: str | None = None,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float | str = DEFAULT_TIMEOUT_S,
        retries: int | str = 2,
        backoff_s: float | str = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        headers: Mapping[str, str] | None = None,
        classify: Callable[[httpx.Response], "tuple[type[CarbonError], str] | None"] | None = None,
    ) -> None:
        self.zone = str(zone or "")
        self.api = build_api(self.name, base_url=base_url or self.default_base_url, client=client, transport=transport,
                             timeout_s=timeout_s, retries=retries, backoff_s=backoff_s, sleep=sleep, headers=headers,
                             status_overrides=self.status_overrides, classify=classify)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(zone={self.zone!r}, base_url={self.api.base_url!r})"

    def close(self) -> None:
        self.api.close()
