"""Every relative link in README.md and docs/*.md reaches a file, and its ``#anchor`` a
heading of that file, as GitHub slugs headings. Moving text between README and docs
renames headings: a link left pointing at the old one fails here, named by file and line."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped
    (backticks and emphasis too), spaces as ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def outside_fences(path: Path) -> list[tuple[int, str]]:
    """``(line number, line)`` of the lines of ``path`` outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((n, line))
    return out


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings; a repeated one gets ``-1``, ``-2``, ..."""
    seen: Counter[str] = Counter()
    out = set()
    for _, line in outside_fences(path):
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            out.add(s if not seen[s] else f"{s}-{seen[s]}")
            seen[s] += 1
    return out


def test_slug_is_githubs() -> None:
    assert slug("`headrace bench`") == "headrace-bench"
    assert slug("Evaluation: one exact pass, on any number of hosts") == (
        "evaluation-one-exact-pass-on-any-number-of-hosts"
    )
    assert slug('Hosts on shared storage: `host_order="address"`') == (
        "hosts-on-shared-storage-host_orderaddress"
    )


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_reaches_its_file_and_heading(path: Path) -> None:
    bad = []
    for n, line in outside_fences(path):
        for target in LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                bad.append(f"{path.name}:{n}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{path.name}:{n}: {target}: no heading #{anchor} in {dest.name}")
    assert not bad, "\n".join(bad)
