"""'did you mean ...?' for a misspelt key or name, from the names that would have been accepted."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The accepted name nearest to ``word``, or None when nothing is near (case is ignored)."""
    options = {c.lower(): c for c in choices if isinstance(c, str)}
    hits = difflib.get_close_matches(str(word).lower(), list(options), n=1, cutoff=0.6)
    return options[hits[0]] if hits else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'speed'?)"`` or ``""``; meant to be appended to an error message."""
    hit = closest(word, choices)
    return f" (did you mean {hit!r}?)" if hit is not None and hit != word else ""
