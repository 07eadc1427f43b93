"""Where gridshift keeps its files: ``$GRIDSHIFT_HOME``, the lowest room's answer so every room reads it alike."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["gridshift_home"]


def gridshift_home() -> Path:
    """``$GRIDSHIFT_HOME`` or the user's data directory."""
    env = os.environ.get("GRIDSHIFT_HOME")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gridshift"
