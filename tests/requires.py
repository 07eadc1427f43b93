"""Optional libraries in tests: skipped with the reason outside CI, a failure under ``CI=true``
(``.ci/run`` installs torch, transformers, accelerate and lightning, so no test of them may vanish there)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def need(module: str) -> ModuleType:
    """``import module``, or skip (locally) / fail (``CI=true``) naming what is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        why = f"{module} is not installed ({exc}); the README's test command installs it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (CI=true: a test that needs it fails instead of skipping)")
        pytest.skip(why)
