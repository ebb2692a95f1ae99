#!/usr/bin/env python3
"""Every relative link of the docs resolves: its file exists and its #anchor
names a heading of that file (GitHub's anchors).

    python3 tests/docs_links.py            # exit 1 and one line per broken link

Checks README.md, docs/*.md and tests/bench/README.md; links to other
sites (http:, https:, mailto:) are not followed. Standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "tests/bench/README.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`[^`]*`")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation
    removed, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors: dict[Path, set[str]] = {}


def anchors(page: Path) -> set[str]:
    if page not in _anchors:
        seen: dict[str, int] = {}
        found = set()
        for _, line in prose_lines(page.read_text(encoding="utf-8")):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else f"{s}-{k}")
        _anchors[page] = found
    return _anchors[page]


def broken(page: Path) -> list[str]:
    problems = []
    for n, line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(CODE.sub("", line)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}:{n}: ({target})"
            if not dest.exists():
                problems.append(f"{where} no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where} no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


def main() -> int:
    problems = [p for page in PAGES for p in broken(page)]
    for p in problems:
        print(p)
    print(f"docs_links: {len(PAGES)} pages, {'%d broken links' % len(problems) if problems else 'every link resolves'}",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
