"""The README and docs/ stay a front door a newcomer can use: short, linked, present tense."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
FLOW = DOCS / "flow.svg"
GENERATED_BENCHMARKS = DOCS / "benchmarks.md"  # `python -m loadtests.report` writes it, run dates included

# Work-diary wording: the check is `grep -riE` with this pattern over README.md and docs/.
DIARY = re.compile(r"UTC|scratch|(this|afternoon|morning|evening|night|[0-9a-z]+th) session", re.IGNORECASE)
RUN_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def doc_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def relative_links(path: Path) -> list[str]:
    """Targets of the Markdown links outside code blocks that point into the repository."""
    text = FENCE.sub("", path.read_text())
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def diary_lines(path: Path) -> list[str]:
    """Lines of `path` the diary pattern finds, less the generated run dates of the benchmarks page."""
    found = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not DIARY.search(line):
            continue
        if path == GENERATED_BENCHMARKS and RUN_DATE.search(line):
            continue
        found.append(f"{path.name}:{n}: {line.strip()[:120]}")
    return found


def test_readme_is_at_most_300_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= 300, f"README.md has {lines} lines; move detail into a page under docs/"


def test_no_diary_wording_in_readme_or_docs() -> None:
    files = [README] + sorted(p for p in DOCS.rglob("*") if p.is_file() and p.suffix in {".md", ".svg"})
    found = [line for f in files for line in diary_lines(f)]
    assert not found, "work-diary wording (describe what the software does):\n" + "\n".join(found)


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index() -> None:
    assert INDEX.is_file(), "docs/README.md lists the pages"
    linked = {
        (src.parent / t.split("#", 1)[0]).resolve()
        for src in (README, INDEX)
        for t in relative_links(src)
        if t.split("#", 1)[0]
    }
    orphans = [p.name for p in doc_pages() if p != INDEX and p.resolve() not in linked]
    assert not orphans, f"docs pages no index links to: {orphans}"


def test_every_relative_link_resolves_to_a_file() -> None:
    broken = []
    for src in [README, *doc_pages()]:
        for target in relative_links(src):
            file_part = target.split("#", 1)[0]
            if file_part and not (src.parent / file_part).exists():
                broken.append(f"{src.relative_to(ROOT)} -> {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_the_flow_diagram_exists_and_the_readme_shows_it() -> None:
    assert FLOW.is_file(), "docs/flow.svg"
    root = ET.parse(FLOW).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "docs/flow.svg" in relative_links(README)


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The helpers are not vacuous: a diary line, an external link and a code-block link."""
    page = tmp_path / "page.md"
    page.write_text(
        "Done in the afternoon session at 14:00 UTC.\n"
        "[a](api.md#errors) [b](https://example.com) [c](#local)\n"
        "```\n[d](not-a-link.md)\n```\n"
    )
    assert len(diary_lines(page)) == 1
    assert relative_links(page) == ["api.md#errors"]
