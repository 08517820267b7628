"""Every relative link in README.md and docs/*.md resolves: the file exists in the checkout, and an
#anchor names a heading of the page it points to (GitHub's heading slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, re.sub(r"`[^`]*`", "", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def relative_links(page: Path) -> list[tuple[int, str]]:
    found = []
    for n, line in prose_lines(page.read_text(encoding="utf-8")):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            found.append((n, target))
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    bad = []
    for n, target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(root)}:{n}: {target}"
        if not dest.exists():
            bad.append(f"{where}: no such file")
            continue
        if root not in dest.parents and dest != root:
            bad.append(f"{where}: leaves the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    return bad


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_every_docs_page_is_in_the_table_of_contents() -> None:
    toc = {target.partition("#")[0] for _, target in relative_links(REPO / "docs" / "README.md")}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages - toc == set()


def test_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    """The check can fail: a missing file, a missing anchor and a link out of the tree are reported;
    links in code are not links."""
    assert slug("`prep verify`: prove a corpus is sound") == "prep-verify-prove-a-corpus-is-sound"
    assert "verdicts-each-checks-severity-mirrors-what-the-real-reader-does" in anchors(REPO / "docs" / "verify.md")
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# Top\n\n## Two commands\n")
    page = root / "docs" / "p.md"
    page.write_text(
        "[a](nope.md) [b](../README.md#no-such-heading) [c](../README.md#two-commands) `[d](x.md)`\n"
        "[e](../../outside.md) [f](https://example.com/x)\n```\n[g](y.md)\n```\n"
    )
    (tmp_path / "outside.md").touch()
    bad = broken_links(page, root=root)
    assert [b.split(": ")[-1].split(" ")[0] for b in bad] == ["no", "no", "leaves"], bad
    assert "nope.md" in bad[0] and "#no-such-heading" in bad[1] and "outside.md" in bad[2]
