"""The README gets out of the way (at most 160 lines, the test command near the top) and no relative link in
the README or docs/ is broken: every file it names exists, and every #anchor is a heading of that page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    text = heading.strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.MULTILINE)}


def _links(page: Path) -> list[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [m.group(1) for m in _LINK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto:, data: ...
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: no heading #{anchor} in {path.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}:\n" + "\n".join(broken)


def test_the_readme_is_short_and_starts_with_what_to_run() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 160
    marker = lines.index("<!-- test-command -->")
    assert marker < 60 and lines[marker + 1] == "```bash" and lines[marker + 3] == "```"
    assert lines.index("<!-- main-command -->") < marker
    # the one headline figure is a paragraph of its own, between markers, so edits to it merge cleanly
    start = next(i for i, line in enumerate(lines) if line.startswith("<!-- headline-figure"))
    assert "<!-- /headline-figure -->" in lines[start + 1:]


def test_the_link_checker_catches_what_it_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A title: with `code`\n\n[ok](#a-title-with-code) [gone](missing.md) "
                    "[web](https://example.org) `[not a link](nowhere.md)`\n```\n[in code](nowhere.md)\n```\n")
    assert _links(page) == ["#a-title-with-code", "missing.md", "https://example.org"]
    assert _anchors(page) == {"a-title-with-code"}
