"""``pip install .`` pulls only what gridshift imports: every runtime dependency in pyproject.toml is
imported by the installed packages (what Prefect itself needs, Prefect declares)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: distributions whose import name differs from their name
IMPORT_NAMES = {"nvidia-ml-py": "pynvml", "pyyaml": "yaml"}
#: modules imported by name at run time rather than by an import statement
DYNAMIC_IMPORTS = {"pynvml"}  # backends/nvidia/_nvml.py: "pynvml" unless $GRIDSHIFT_NVML_MODULE names another


def _imported_top_level_modules() -> set[str]:
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    names: set[str] = set()
    for folder in {p.rstrip("*") for p in packages}:
        for source in (REPO / folder).rglob("*.py"):
            names |= set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", source.read_text(), flags=re.MULTILINE))
    return names | DYNAMIC_IMPORTS


def test_every_runtime_dependency_is_imported() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    imported = _imported_top_level_modules()
    unused = []
    for requirement in declared:
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()  # type: ignore[union-attr]
        if IMPORT_NAMES.get(name, name.replace("-", "_")) not in imported:
            unused.append(name)
    assert unused == [], f"declared in pyproject.toml but never imported: {unused}"
