"""``gridshift curtail``: a grid event (a power cap for this machine or a site) that every running run answers at once."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Annotated, Any, Callable, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_ENV, EXIT_INPUT, echo, fail


def _now() -> datetime:
    return datetime.now(timezone.utc)


class _Sink:
    """Where events go: this machine's event file, or a site's Prefect variable."""

    def __init__(self, site: str | None) -> None:
        self.site = site
        if site is not None:
            from flows.run.prefect_server import configured_api_url

            if not configured_api_url():
                raise fail(f"site {site}: a site's events go through the fleet's Prefect server; set PREFECT_API_URL "
                           "(or run `gridshift curtail` without --site on the node itself)", EXIT_ENV)

    def add(self, event: Any) -> None:
        if self.site is None:
            from carbon.events import default_store

            default_store().add(event)
        else:
            from flows.fleet.site_events import add_site_event

            add_site_event(self.site, event)

    def cancel(self, event_id: str, now: datetime) -> Any:
        if self.site is None:
            from carbon.events import default_store

            return default_store().cancel(event_id, now=now)
        from flows.fleet.site_events import cancel_site_event

        return cancel_site_event(self.site, event_id, now)

    def events(self) -> list[Any]:
        if self.site is None:
            from carbon.events import default_store

            return default_store().load()
        from flows.fleet.site_events import read_site_events

        return read_site_events(self.site)


def forward_openadr(source: str, sink: Any, *, scope: str, program: str | None, poll_s: float, rounds: int | None,
                    now: Callable[[], datetime] = _now, sleep: Callable[[float], None] = time.sleep,
                    say: Callable[[str], None] = lambda line: echo(line, err=True)) -> list[Any]:
    """Read the capacity limits of ``source`` (an OpenADR 3 file or VTN ``/events`` URL) into ``sink``;
    ``rounds`` times (None: until stopped), ``poll_s`` apart. An event the VTN no longer lists is
    ended (cancelled events disappear from ``GET /events``). Returns the events last read."""
    from carbon.events import read_openadr

    known: dict[str, Any] = {}
    done = 0
    while True:
        at = now()
        try:
            events = read_openadr(source, now=at, scope=scope, program=program)
        except Exception as exc:
            if rounds is not None and done == 0:
                raise
            say(f"gridshift curtail: {source}: {exc} (the events already forwarded stay in force)")
        else:
            for e in events:
                if known.get(e.id) != e:
                    sink.add(e)
                    say(f"gridshift curtail: {e.describe()}")
            for gone in set(known) - {e.id for e in events}:
                if sink.cancel(gone, at) is not None:
                    say(f"gridshift curtail: {gone} ended: no longer listed by {source}")
            known = {e.id: e for e in events}
        done += 1
        if rounds is not None and done >= rounds:
            return list(known.values())
        sleep(poll_s)


@app.command()
def curtail(
    cap_w: Annotated[Optional[float], typer.Option("--cap-w", help="At most this many W of GPU power where it applies.")] = None,
    reduce_pct: Annotated[Optional[float], typer.Option("--reduce-pct", help="This many % less GPU power than each run draws when it hears of it.")] = None,
    duration: Annotated[Optional[str], typer.Option("--for", help="How long: 60s, 15m, 2h, PT1H (default: until cancelled).")] = None,
    start: Annotated[str, typer.Option(help="When it starts: now, or an ISO-8601 time (UTC when naive).")] = "now",
    site: Annotated[Optional[str], typer.Option(help="A site of the fleet (its Prefect variable); default: this machine.")] = None,
    reason: Annotated[str, typer.Option(help="Why, for the runs' reports.")] = "",
    openadr: Annotated[Optional[str], typer.Option(help="Read OpenADR 3 events (IMPORT_CAPACITY_LIMIT) from a file or a VTN's /events URL.")] = None,
    program: Annotated[Optional[str], typer.Option(help="With --openadr: only this programID's events.")] = None,
    watch: Annotated[bool, typer.Option("--watch", help="With --openadr: keep polling the VTN and forward every change.")] = False,
    poll_s: Annotated[float, typer.Option(help="With --watch: seconds between polls.")] = 30.0,
    cancel: Annotated[Optional[str], typer.Option(help="End the event with this id now (the runs return to their plans).")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the events (this machine's, or --site's).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Cap the GPU power of every gridshift run on this machine (or a --site) now: they re-plan within seconds.

    The runs switch modes and lower power limits (pausing a pausable job last) to stay under the cap,
    keep their deadlines where the cap allows, and return to their plans when it ends. Examples:
    `gridshift curtail --cap-w 400 --for 60s`, `gridshift curtail --reduce-pct 30 --for 1h --site de`,
    `gridshift curtail --openadr https://vtn.example/openadr3/3.0.1/events --watch`.
    """
    from carbon.errors import BadTrace, CarbonError
    from carbon.events import MACHINE, GridEvent, parse_duration, site_scope
    from carbon.series import as_utc

    scope = site_scope(site) if site else MACHINE
    given = [v for v in (cap_w, reduce_pct, openadr, cancel, list_ or None) if v is not None]
    if len(given) != 1:
        raise fail("give one of --cap-w, --reduce-pct, --openadr, --cancel or --list", EXIT_INPUT)
    sink = _Sink(site)
    at = _now()
    try:
        if list_:
            events = sink.events()
            if json_out:
                echo(json.dumps({"events": [e.to_json() for e in events]}))
            else:
                echo("\n".join(("* " if e.in_force(at) else "  ") + e.describe() for e in events) or "no grid events")
            return
        if cancel is not None:
            ended = sink.cancel(cancel, at)
            if ended is None:
                raise fail(f"no event {cancel!r} in force (gridshift curtail --list shows them)", EXIT_INPUT)
            echo(json.dumps({"cancelled": ended.to_json()}) if json_out else f"gridshift curtail: {cancel} ended now")
            return
        if openadr is not None:
            got = forward_openadr(openadr, sink, scope=scope, program=program, poll_s=poll_s,
                                  rounds=None if watch else 1)
            if json_out:
                echo(json.dumps({"events": [e.to_json() for e in got]}))
            elif not got:
                echo(f"gridshift curtail: {openadr}: no IMPORT_CAPACITY_LIMIT events", err=True)
            return
        begin = at if start == "now" else as_utc(datetime.fromisoformat(start))
        end = begin + parse_duration(duration) if duration is not None else None
        event = GridEvent(start=begin, end=end, scope=scope, cap_w=cap_w, reduce_pct=reduce_pct, reason=reason)
        sink.add(event)
    except (BadTrace, ValueError) as exc:
        raise fail(exc, EXIT_INPUT) from None
    except CarbonError as exc:
        raise fail(exc, EXIT_ENV) from None
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    except (typer.Exit, SystemExit):
        raise
    except Exception as exc:  # the fleet's server refused or is away (a site's variable)
        if site is None:
            raise
        raise fail(f"site {site}: the event could not be written to the fleet's server: {type(exc).__name__}: {exc}",
                   EXIT_ENV) from None
    where = "this machine" if site is None else f"site {site}"
    if json_out:
        echo(json.dumps({"event": event.to_json()}))
    else:
        echo(f"gridshift curtail: {event.describe()}")
        echo(f"gridshift curtail: the gridshift runs on {where} re-plan within seconds; "
             f"`gridshift curtail --cancel {event.id}{' --site ' + site if site else ''}` ends it early", err=True)
