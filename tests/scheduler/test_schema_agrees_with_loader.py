"""`gridshift policy schema` accepts exactly what the loader's schema stage accepts: every shipped
example and a corpus of valid and invalid policies get the same verdict from `jsonschema` (what an
editor runs) and from the loader. What no JSON schema can express is listed in LOADER_ONLY and must
be accepted by the schema and rejected by the loader, so the list cannot silently go stale."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scheduler.errors import PolicyError
from scheduler.policy.loader import load_policy, parse_policy, schema_errors
from scheduler.policy.schema import policy_json_schema

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
SCHEMA = json.loads(policy_json_schema())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

BASE: dict[str, Any] = {
    "schema_version": 1,
    "carbon": {"provider": "static", "options": {"g_per_kwh": 300}},
    "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_w": 250, "max_slowdown": 0.2}},
    "rules": {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 400},
    "job": {"command": ["python", "-c", "pass"], "expected_duration_s": 60},
}


def _with(**changes: Any) -> dict[str, Any]:
    """BASE with dotted keys set (``job.command="x"``) or removed (value ``...``)."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is ...:
            node.pop(last, None)
        else:
            node[last] = value
    return data


VALID = {
    "base": BASE,
    "string command": _with(job__command="python train.py --epochs 3"),
    "callable": _with(job__command=..., job__callable="mypkg.train:main"),
    "integer sm clock": _with(modes__speed={"sm_clock_mhz": 1500}),
    "sm clock range": _with(modes__speed={"sm_clock_mhz": [1200, 1500]}),
    "integer where a float goes": _with(job__expected_duration_s=60, rules__clean_below_g_per_kwh=0),
    "relative rule with defaults": _with(rules={"kind": "relative"}),
    "no rules: the planner": _with(rules=...),
    "plan rule without kind": _with(rules={"slot_s": 600}),
    "plan rule": _with(rules={"kind": "plan", "deadline_margin_s": 0}),
    "a price source and a carbon price": _with(rules=..., objective={"carbon_price": 85},
                                               price={"provider": "energycharts", "zone": "DE-LU"}),
    "a third mode": _with(modes__eco={"batch_size": 16, "clock_plan": "plan.json"}),
    "fallbacks": _with(carbon__fallbacks=[{"provider": "static", "options": {"country": "DEU"}}]),
    "selector": _with(modes__efficiency={"power_limit_select": "zeus_cost", "eta": 0.3}),
    "null command beside a callable": _with(job__command=None, job__callable="m:f"),
    "full job": _with(job__name="n", job__earliest_start_s=-3600, job__deadline_s=7200, job__cron="0 1 * * *",
                      job__checkpointable=True, job__env={"A": "1"}, job__workdir="work"),
    "backend": _with(backend={"name": "simulated", "require_control": True, "options": {"seed": 1}}),
}

INVALID = {
    "unknown top-level key": _with(rule={}),
    "unknown mode key": _with(modes__speed={"turbo": True}),
    "missing job": _with(job=...),
    "missing efficiency mode": _with(modes={"speed": {}}),
    "rule without kind": _with(rules={"clean_below_g_per_kwh": 1, "dirty_above_g_per_kwh": 2}),
    "unknown rule kind": _with(rules__kind="relativ"),
    "threshold keys without kind (so: the planner)": _with(rules={"clean_below_g_per_kwh": 1}),
    "string number": _with(job__expected_duration_s="60"),
    "integer bool": _with(job__checkpointable=1),
    "string bool": _with(backend={"require_control": "yes"}),
    "negative duration": _with(job__expected_duration_s=-1),
    "zero power limit": _with(modes__speed={"power_limit_w": 0}),
    "fraction above one": _with(modes__speed={"power_limit_fraction": 1.5}),
    "both power limits": _with(modes__speed={"power_limit_w": 300, "power_limit_fraction": 0.5}),
    "selector with a limit": _with(modes__speed={"power_limit_select": "energy", "power_limit_w": 300}),
    "unknown selector": _with(modes__speed={"power_limit_select": "greenest"}),
    "command and callable": _with(job__callable="m:f"),
    "empty command list": _with(job__command=[]),
    "blank command string": _with(job__command="   "),
    "callable without colon": _with(job__command=..., job__callable="main"),
    "callable without function": _with(job__command=..., job__callable="mod:"),
    "checkpointable callable": _with(job__command=..., job__callable="m:f", job__checkpointable=True),
    "three sm clocks": _with(modes__speed={"sm_clock_mhz": [1, 2, 3]}),
    "float sm clock": _with(modes__speed={"sm_clock_mhz": 1500.5}),
    "schema version 2": _with(schema_version=2),
    "percentile above 100": _with(rules={"kind": "relative", "clean_below_percentile": 120}),
    "env not strings": _with(job__env={"A": 1}),
    "fallbacks not a list": _with(carbon__fallbacks={"provider": "static"}),
    "provider missing": _with(carbon={"zone": "DE"}),
    "a list as policy": [1, 2],
}

#: rejected by the loader, accepted by any JSON schema: comparisons between fields and names defined elsewhere
LOADER_ONLY = {
    "clean threshold above dirty": _with(rules__clean_below_g_per_kwh=500),
    "percentile band inverted": _with(rules={"kind": "relative", "clean_below_percentile": 70, "dirty_above_percentile": 60}),
    "sm clock min above max": _with(modes__speed={"sm_clock_mhz": [1500, 1200]}),
    "deadline leaves no room": _with(job__deadline_s=30),
    "rule names a mode that does not exist": _with(rules__clean_mode="sped"),
    "unbalanced quote in a string command": _with(job__command='python -c "pass'),
    "a time value worth nothing at carbon price 0": _with(rules=..., objective={"carbon_price": 0, "time_value_g_per_h": 5}),
    "a carbon price under threshold rules": _with(objective={"carbon_price": 50}),
}


#: refused by the JSON schema and by the loader's checks (scheduler.policy.checks), which its schema stage leaves them to
CHECKED = {
    "nothing to run": _with(job__command=...),
    "unknown provider": _with(carbon__provider="statik"),
    "unknown fallback provider": _with(carbon__fallbacks=[{"provider": "static"}, {"provider": "wattime"}]),
    "a cron of four fields": _with(job__cron="0 1 * *"),
    "unknown price source": _with(price={"provider": "energychart"}),
}


def _schema_ok(data: Any) -> bool:
    return VALIDATOR.is_valid(data)


def _loader_ok(data: Any) -> bool:
    return not schema_errors(data)


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_shipped_example_passes_both(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert _schema_ok(data), [e.message for e in VALIDATOR.iter_errors(data)]
    assert _loader_ok(data)
    load_policy(path)  # and every file check


@pytest.mark.parametrize("name", list(VALID))
def test_valid_corpus_passes_both(name: str) -> None:
    data = VALID[name]
    assert _schema_ok(data), [e.message for e in VALIDATOR.iter_errors(data)]
    assert _loader_ok(data), schema_errors(data)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_corpus_fails_both(name: str) -> None:
    data = INVALID[name]
    assert not _schema_ok(data), "the schema accepts it"
    assert not _loader_ok(data), "the loader accepts it"


@pytest.mark.parametrize("name", list(LOADER_ONLY))
def test_what_no_schema_can_say_is_the_loaders_alone(name: str) -> None:
    data = LOADER_ONLY[name]
    assert _schema_ok(data), [e.message for e in VALIDATOR.iter_errors(data)]
    assert not _loader_ok(data)


@pytest.mark.parametrize("name", list(CHECKED))
def test_what_the_checks_refuse_the_schema_refuses_too(name: str) -> None:
    data = CHECKED[name]
    assert not _schema_ok(data), "the schema accepts it"
    with pytest.raises(PolicyError):
        parse_policy(yaml.safe_dump(data))


def test_the_cli_prints_the_same_schema() -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    result = CliRunner().invoke(app, ["policy", "schema"])
    assert result.exit_code == 0 and json.loads(result.stdout) == SCHEMA
