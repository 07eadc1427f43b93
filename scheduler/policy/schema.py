"""The JSON schema of policy files, for editors: pydantic's, plus what the loader adds to the models."""

from __future__ import annotations

import json
from typing import Any

from scheduler.policy.types import Policy

__all__ = ["policy_json_schema"]


def policy_json_schema() -> str:
    """The JSON schema of policy files, for editors (``# yaml-language-server: $schema=...``).

    pydantic's schema, plus what the loader accepts or requires that pydantic cannot see in the
    models' types: the string form of ``command`` and the single-integer ``sm_clock_mhz`` (both
    converted by validators), ``kind`` being required to pick a rule, the two required modes, the
    keys that exclude each other, a job's command or callable (and a checkpointable job's command),
    the known carbon providers and price sources and the cron's five fields. What no JSON schema can say (one number
    below another, a mode named by a rule existing, files existing, a cron's values, a time zone,
    a backend plugin) is left to ``gridshift policy check``;
    ``tests/scheduler/test_schema_agrees_with_loader.py`` lists those cases.
    """
    from backends.registry import backend_names
    from carbon.prices.registry import price_source_names
    from carbon.providers.registry import provider_names

    schema = Policy.model_json_schema()
    defs = schema["$defs"]
    job = defs["JobSpec"]
    job["properties"]["command"]["anyOf"] = [
        {"type": "string", "pattern": "\\S", "description": "split like a shell would"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
        {"type": "null"},
    ]
    job["properties"]["callable"]["anyOf"][0]["pattern"] = "^[^:]+:[\\s\\S]+$"
    job["properties"]["cron"]["anyOf"][0]["pattern"] = "^\\s*\\S+(\\s+\\S+){4}\\s*$"  # five fields
    # something to run, not both; and a checkpointable job is a command (a callable cannot be paused)
    job["anyOf"] = [_given("command"), _given("callable")]
    job["not"] = {"anyOf": [_both_given("command", "callable"),
                            {"required": ["checkpointable", "callable"],
                             "properties": {"checkpointable": {"const": True}, "callable": {"type": "string"}}}]}
    for source in ("CarbonSource", "CarbonConfig"):  # the providers are a closed set; backends are plugins
        defs[source]["properties"]["provider"]["enum"] = provider_names()
    for source in ("PriceSource", "PriceConfig"):  # so are the price sources
        defs[source]["properties"]["provider"]["enum"] = price_source_names()
    defs["BackendConfig"]["properties"]["name"]["examples"] = ["auto", *backend_names()]
    mode = defs["Mode"]
    mode["properties"]["sm_clock_mhz"]["anyOf"].insert(0, {"type": "integer"})
    mode["not"] = {"anyOf": [_both_given("power_limit_w", "power_limit_fraction"),
                             _both_given("power_limit_select", "power_limit_w"),
                             _both_given("power_limit_select", "power_limit_fraction")]}
    for rule in ("AbsoluteRule", "RelativeRule"):
        defs[rule]["required"] = sorted({*defs[rule].get("required", []), "kind"})
    schema["properties"]["modes"]["required"] = ["efficiency", "speed"]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gridshift policy"
    return json.dumps(schema, indent=2, sort_keys=True)


def _given(key: str) -> dict[str, Any]:
    """A JSON-schema clause matching an object that gives ``key`` as a non-null value."""
    return {"required": [key], "properties": {key: {"not": {"type": "null"}}}}


def _both_given(a: str, b: str) -> dict[str, Any]:
    """A JSON-schema clause matching an object that gives both ``a`` and ``b`` (as non-null values)."""
    not_null = {"not": {"type": "null"}}
    return {"required": [a, b], "properties": {a: not_null, b: not_null}}
