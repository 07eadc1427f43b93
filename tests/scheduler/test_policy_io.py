"""Policy loading: valid files load; every kind of bad input is one `file:line:col: ...` line."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import PolicyError
from scheduler.policy.loader import load_policy, parse_policy
from scheduler.policy.schema import policy_json_schema

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
schema_version: 1
carbon:
  provider: trace
  options: {column: hist}
modes:
  speed: {power_limit_fraction: 1.0}
  efficiency: {power_limit_w: 400, max_slowdown: 0.2}
rules:
  kind: absolute
  clean_below_g_per_kwh: 300
  dirty_above_g_per_kwh: 400
job:
  command: [python, -c, "pass"]
  expected_duration_s: 60
"""


def test_example_policy_loads() -> None:
    policy = load_policy(REPO / "examples" / "policy.yaml")
    assert set(policy.modes) >= {"speed", "efficiency"}
    assert policy.backend.name == "auto"


def test_good_policy_parses_with_defaults() -> None:
    p = parse_policy(GOOD, where="p.yaml")
    assert p.rules.kind == "absolute"
    assert p.job.command == ("python", "-c", "pass")
    assert p.modes["efficiency"].power_limit_w == 400


def _error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, where="p.yaml")
    return info.value


def test_unknown_key_names_file_line_and_key() -> None:
    err = _error(GOOD.replace("  speed: {power_limit_fraction: 1.0}", "  speed: {power_limit_fraction: 1.0, turbo: true}"))
    assert str(err).startswith("p.yaml:6:")
    assert "modes.speed.turbo" in str(err) and "unknown key" in str(err)
    assert "\n" not in str(err)


def test_wrong_type_names_line_and_value() -> None:
    err = _error(GOOD.replace("expected_duration_s: 60", "expected_duration_s: soon"))
    assert str(err).startswith("p.yaml:14:")
    assert "job.expected_duration_s" in str(err) and "'soon'" in str(err)


def test_yaml_syntax_error_has_line() -> None:
    err = _error(GOOD.replace("  kind: absolute", "  kind: [absolute"))
    assert str(err).startswith("p.yaml:")
    assert "YAML syntax error" in str(err)
    assert err.line >= 9


def test_missing_section_is_reported() -> None:
    err = _error("\n".join(line for line in GOOD.splitlines() if not line.startswith("job") and "command" not in line and "expected" not in line))
    assert "job: required key is missing" in str(err)


def test_cross_field_error_points_at_rule() -> None:
    err = _error(GOOD.replace("clean_below_g_per_kwh: 300", "clean_below_g_per_kwh: 500"))
    assert "clean_below_g_per_kwh must not exceed" in str(err)
    assert str(err).startswith("p.yaml:9:") or str(err).startswith("p.yaml:10:")


def test_unknown_mode_in_rule_points_at_the_key() -> None:
    text = GOOD.replace("  kind: absolute", "  kind: absolute\n  dirty_mode: eco")
    err = _error(text)
    assert "rules.dirty_mode: names unknown mode 'eco'" in str(err)
    assert str(err).startswith("p.yaml:10:")


def test_empty_and_non_mapping_files() -> None:
    assert "empty" in str(_error(""))
    assert "mapping" in str(_error("- a\n- b\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="not found"):
        load_policy(tmp_path / "nope.yaml")


def test_schema_is_json_with_top_level_sections() -> None:
    import json

    schema = json.loads(policy_json_schema())
    assert {"carbon", "modes", "rules", "job"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
