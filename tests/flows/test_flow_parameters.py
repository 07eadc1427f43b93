"""The training flow stores its parameters as Prefect would, without importing FastAPI for JSON ones."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# Prefect is imported inside the tests: imported at collection it would be loaded for the whole
# session (tests/carbon/test_http_errors.py counts the httpx error classes Prefect adds)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _params(**kwargs: Any) -> dict[str, Any]:
    return kwargs


def _both(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    from prefect import Flow

    from flows.deployments.flow_parameters import JsonParametersFlow

    ours = JsonParametersFlow(_params, name="p")
    prefects = Flow(_params, name="p")
    return ours.serialize_parameters(params), prefects.serialize_parameters(params)


@settings(deadline=None, max_examples=60)  # the first example imports FastAPI for Prefect's encoder
@given(st.dictionaries(st.text(min_size=1), json_values, max_size=5))
def test_json_parameters_are_stored_as_prefect_stores_them(params: dict[str, Any]) -> None:
    ours, prefects = _both(params)
    assert ours == prefects


def test_the_stored_parameters_are_a_copy() -> None:
    from flows.deployments.flow_parameters import JsonParametersFlow

    resume = {"windows": [{"start": "2026-01-01T00:00:00+00:00"}]}
    stored = JsonParametersFlow(_params, name="p").serialize_parameters({"resume": resume})
    stored["resume"]["windows"].append("changed")
    assert resume == {"windows": [{"start": "2026-01-01T00:00:00+00:00"}]}


@pytest.mark.parametrize("value", [datetime(2026, 1, 1, tzinfo=timezone.utc), Path("/x/y"), ("a", 1), {1: "a"}])
def test_other_values_are_left_to_prefect(value: Any) -> None:
    from flows.deployments.flow_parameters import json_native_copy

    assert json_native_copy(value) == (False, None)
    ours, prefects = _both({"value": value, "plain": "x"})
    assert ours == prefects


def test_the_training_flow_uses_it_and_keeps_its_prefect_options() -> None:
    from flows.deployments.flow_parameters import JsonParametersFlow
    from flows.training import carbon_aware_training

    assert isinstance(carbon_aware_training, JsonParametersFlow)
    assert carbon_aware_training.name == "carbon_aware_training"
    assert carbon_aware_training.log_prints is True
    assert carbon_aware_training.should_validate_parameters is False


@pytest.mark.usefixtures("prefect_harness")
def test_a_plain_flow_run_has_no_deployment() -> None:
    from prefect import flow

    from flows.job.windows import flow_run_deployment

    @flow(name="no-deployment")
    def probe() -> str | None:
        return flow_run_deployment()

    assert flow_run_deployment() is None  # outside any flow run
    assert probe() is None


@pytest.mark.usefixtures("prefect_harness")
def test_a_deployments_flow_run_knows_its_deployment_without_asking_the_api_again() -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    from flows.job.windows import flow_run_deployment

    @flow(name="in-a-deployment")
    def probe() -> str | None:
        return flow_run_deployment()

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("in-a-deployment")
        deployment_id = client.create_deployment(flow_id=flow_id, name="probe")
        flow_run = client.create_flow_run_from_deployment(deployment_id)
    assert run_flow(probe, flow_run=flow_run) == str(deployment_id)
