"""A site's placing lock: one slot of a Prefect global concurrency limit of 1, taken and given back on one client.

Placement holds a site only for a read, a plan and a create (:func:`flows.fleet.placing.submit_placed_run`),
so what the lock itself costs decides how many placements a minute a site takes. Prefect's
``concurrency()`` context sets up a client and a lease-renewal thread for each hold, and each refused
ask logs an ERROR; here one client looks at the limit every :data:`POLL_S` (jittered) and asks only when
it is free, with two plain requests (``increment-with-lease``, ``decrement-with-lease``). The lease
is :data:`LEASE_S` (Prefect's shortest) and not renewed: a holder that finds it has held the site for
:data:`SAFE_HOLD_S` must not book (:attr:`SiteHold.safe`), and a placer that died frees the site when
the lease lapses.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

__all__ = ["LEASE_S", "POLL_MAX_S", "POLL_S", "SAFE_HOLD_S", "SiteHold", "SiteLockError", "hold_sites"]

#: Prefect's shortest lease; a placer that dies holding a site blocks it no longer than this (plus the
#: server's repossessor period, 15 s)
LEASE_S = 60.0
#: a hold older than this may not book: its lease could lapse before the booking is written
SAFE_HOLD_S = 40.0
#: a waiting placer looks at the limit after this, then each time 1.5 times later up to :data:`POLL_MAX_S`
#: (plus up to half as much jitter). Each look is one light GET; with many placers waiting, one of them
#: looks within a fraction of a second after a release, and the server is not asked dozens of times a second.
POLL_S = 0.1
POLL_MAX_S = 1.0
_JITTER = random.Random()


class SiteLockError(RuntimeError):
    """The sites could not be held: a limit is missing, or another placement held them for the whole wait."""


@dataclass
class SiteHold:
    """Sites held by this placer since ``since`` (monotonic)."""

    names: tuple[str, ...]
    since: float

    @property
    def safe(self) -> bool:
        """Whether a booking written now still falls inside the lease."""
        return time.monotonic() - self.since < SAFE_HOLD_S


def _free(client: Any, names: Sequence[str]) -> bool:
    import httpx

    limits = []
    for name in names:  # plain JSON: waiting placers look often, and a model per look costs CPU
        try:
            limits.append(client.request("GET", "/v2/concurrency_limits/{id_or_name}",
                                         path_params={"id_or_name": name}).json())
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 404:
                raise SiteLockError(f"{name}: the placing limit does not exist; run `gridshift deploy` for this "
                                    "policy again to create it") from None
            raise
    return all(limit["limit"] - limit["active_slots"] >= 1 for limit in limits)


@contextmanager
def hold_sites(names: Sequence[str], *, wait_s: float, poll_s: float = POLL_S, client: Any = None) -> Iterator[SiteHold]:
    """Hold one slot of every limit in ``names`` (one request: all or none, so no deadlock) while the block runs.

    Raises SiteLockError when they are not free within ``wait_s``. ``client``: a Prefect sync client to reuse.
    """
    import httpx
    from prefect.client.orchestration import get_client

    ordered = tuple(sorted(names))
    deadline = time.monotonic() + wait_s
    with (nullcontext(client) if client is not None else get_client(sync_client=True)) as client:
        lease = None
        looked = False  # the first ask goes without a look: most placements find their site free
        while lease is None:
            if not looked or _free(client, ordered):
                try:
                    answer = client.request("POST", "/v2/concurrency_limits/increment-with-lease",  # type: ignore[arg-type]
                                            json={"names": list(ordered), "slots": 1, "mode": "concurrency",
                                                  "lease_duration": LEASE_S})
                    body = answer.json()
                    lease = body["lease_id"]
                    if {limit["name"] for limit in body.get("limits", [])} != set(ordered):
                        # the server leases missing limits as if free: a fleet deployed before they existed
                        client.request("POST", "/v2/concurrency_limits/decrement-with-lease",  # type: ignore[arg-type]
                                       json={"lease_id": lease})
                        _free(client, ordered)  # raises, naming the missing limit
                    break
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != 423:  # 423: another placer holds it
                        raise
            looked = True
            left = deadline - time.monotonic()
            if left <= 0:
                raise SiteLockError(f"{', '.join(ordered)}: another placement held the sites for {wait_s:.0f} s")
            time.sleep(min(poll_s * (1.0 + 0.5 * _JITTER.random()), left))  # a real lock, a real clock
            poll_s = min(poll_s * 1.5, POLL_MAX_S)
        try:
            yield SiteHold(ordered, time.monotonic())
        finally:
            client.request("POST", "/v2/concurrency_limits/decrement-with-lease",  # type: ignore[arg-type]
                           json={"lease_id": lease})
