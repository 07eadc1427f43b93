from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.policy import Policy
from scheduler.policy_io import load_policy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def nightly_policy() -> Policy:
    return load_policy(REPO / "examples" / "nightly.yaml")
