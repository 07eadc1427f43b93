"""A price source and a carbon price in a policy: what is accepted, what is refused at file:line, what a run resolves."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import PolicyError
from scheduler.policy.loader import parse_policy
from scheduler.run_spec import resolve_run

BASE = """carbon: {provider: static, options: {country: DEU}}
modes: {speed: {}, efficiency: {power_limit_fraction: 0.7}}
job: {expected_duration_s: 3600, command: [echo, hi]}
"""


def _parse(extra: str, tmp_path: Path) -> object:
    return parse_policy(BASE + extra, where="p.yaml", base_dir=tmp_path)


def test_a_price_source_and_a_carbon_price_resolve_into_the_run(tmp_path: Path) -> None:
    (tmp_path / "prices.csv").write_text("timestamp,price\n2021-08-01T00:00:00+00:00,20\n2021-08-01T01:00:00+00:00,-1\n")
    policy = _parse("objective: {carbon_price: 85}\nprice: {provider: trace, zone: ERCOT, options: {path: prices.csv}}\n",
                    tmp_path)
    spec = resolve_run(policy)  # type: ignore[arg-type]
    assert spec.objective.carbon_price == 85 and spec.objective.currency == "USD"
    assert spec.price is not None and spec.price.options["path"] == str(tmp_path / "prices.csv")  # read from the policy's folder


def test_without_an_objective_the_run_plans_on_carbon_alone(tmp_path: Path) -> None:
    spec = resolve_run(_parse("price: {provider: energycharts, zone: DE-LU}\n", tmp_path))  # type: ignore[arg-type]
    assert spec.objective.carbon_price is None and not spec.objective.priced and spec.objective.currency == "EUR"


@pytest.mark.parametrize("extra, message", [
    ("price: {provider: energychart}\n", "p.yaml:4:19: price.provider: unknown price source 'energychart' (did you mean 'energycharts'?)"),
    ("price: {provider: awattar, options: {zonee: DE}}\n", "price.options.zonee: unknown option 'zonee'"),
    ("price: {provider: trace, options: {path: missing.csv}}\n", "price trace not found"),
    ("price: {provider: trace, options: {path: p.csv, market: NYISO}}\n", "unknown day-ahead market 'NYISO'"),
    ("objective: {carbon_price: 0, time_value_g_per_h: 100}\n", "makes grams worth nothing"),
    ("objective: {carbon_price: -5}\n", "greater than or equal to 0"),
    ("rules: {kind: relative}\nobjective: {carbon_price: 50}\n", "decides by carbon thresholds"),
])
def test_price_mistakes_are_refused_with_their_line(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        _parse(extra, tmp_path)
    assert message in str(err.value)
