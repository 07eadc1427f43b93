"""Read the provider bodies kept in tests/data/carbon/ (see SOURCES.md there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "carbon"


def load_body(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def raw_body(name: str) -> bytes:
    return (DATA / name).read_bytes()
