"""Read a versioned gridshift JSON file (profiles, plans) into a pydantic model, with one-line errors.

Every failure raises ``error_cls`` with a message that starts with the file name (and line:column
for JSON syntax errors), so the CLI can print it as is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["load_versioned"]

_M = TypeVar("_M", bound=BaseModel)


def load_versioned(path: Path, model: type[_M], *, fmt: str, version: int, what: str,
                   error_cls: type[Exception]) -> _M:
    """Parse ``path`` as ``model``; the file's ``format`` must be ``fmt`` and its ``version`` <= ``version``."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise error_cls(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error_cls(f"{path}: cannot read {what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise error_cls(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        raise error_cls(f"{path}: not a gridshift {what} (format must be {fmt!r})")
    found = raw.get("version")
    if not isinstance(found, int) or found > version:
        raise error_cls(f"{path}: {what} version {found!r} is newer than this gridshift reads ({version})")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or what
        raise error_cls(f"{path}: {loc}: {err['msg']}") from None
