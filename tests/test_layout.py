"""Meta-tests: public surfaces are explicit and imports point one way (design.md)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOMS = ("carbon", "backends", "plans", "scheduler", "simulation", "flows")
# what each room may import from the others
ALLOWED = {
    "carbon": set(),
    "backends": set(),
    "plans": {"carbon", "backends"},
    "scheduler": {"carbon", "backends", "plans"},
    "simulation": {"carbon", "backends", "plans", "scheduler"},
    "flows": {"carbon", "backends", "plans", "scheduler", "simulation"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("room", ROOMS)
def test_imports_point_one_way(room: str) -> None:
    offenders = []
    for path in sorted((REPO / room).rglob("*.py")):
        bad = (_imports(path) & set(ROOMS)) - ALLOWED[room] - {room}
        if bad:
            offenders.append(f"{path.relative_to(REPO)} imports {sorted(bad)}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("room", ["carbon", "backends", "plans", "scheduler", "simulation"])
def test_public_names_exist(room: str) -> None:
    module = importlib.import_module(room)
    assert hasattr(module, "__all__")
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing


def test_core_rooms_do_not_import_prefect() -> None:
    """carbon/backends/plans/scheduler/simulation stay usable (and fast to import) without a Prefect server."""
    import subprocess
    import sys

    code = "import sys, carbon, backends, plans, scheduler, simulation; print('prefect' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"
