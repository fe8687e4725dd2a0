"""The README and docs/: every relative link resolves, and the README stays a quickstart.

A link is a markdown ``[text](target)``, ``![alt](target)`` or ``[label]: target`` outside
code. Targets with ``http(s)://`` or ``mailto:`` are not checked. Anchors are checked the way
GitHub renders them: ``file.md#anchor`` needs a heading whose slug is ``anchor`` in that
file, a bare ``#anchor`` one in the same file.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 200

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # [text] or ![alt], one level of nested brackets
    r"\(\s*(<[^>]*>|[^)\s]+)"  # (target or (<target>
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"  # optional "title", then )
)
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)
EXTERNAL = ("http://", "https://", "mailto:")


def doc_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of everything outside fenced code blocks."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
        elif fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
        else:
            out.append((number, line))
    return out


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each run of non-blank lines outside fenced code."""
    out: list[tuple[int, list[str]]] = []
    last = None
    for number, line in prose_lines(text):
        if not line.strip():
            last = None
            continue
        if last is None or number != last + 1:
            out.append((number, []))
        out[-1][1].append(line)
        last = number
    return [(first, "\n".join(lines)) for first, lines in out]


def blank_code(paragraph: str) -> str:
    """The paragraph with each inline code span (which may cross lines) blanked out, so
    offsets, and so line numbers, stay as they were."""
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), paragraph)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link outside code."""
    found = []
    for first, paragraph in paragraphs(text):
        prose = blank_code(paragraph)
        matches = [*INLINE_LINK.finditer(prose), *REFERENCE_LINK.finditer(prose)]
        for m in sorted(matches, key=lambda m: m.start()):
            target = m.group(1)
            number = first + prose.count("\n", 0, m.start())
            found.append((number, target[1:-1] if target.startswith("<") else target))
    return found


def slug(heading: str) -> str:
    """GitHub's heading anchor: inline markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    kept = "".join(
        c for c in text if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    )
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives ``path``: heading slugs (a repeated one gets ``-1``,
    ``-2``, ...) and HTML ``name``/``id`` anchors."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        out.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def exists_with_case(path: Path) -> bool:
    """Whether ``path`` exists with exactly this spelling (GitHub is case-sensitive even
    where the filesystem is not)."""
    if not path.exists():
        return False
    try:
        parts = path.resolve().relative_to(ROOT).parts
    except ValueError:
        return True
    folder = ROOT
    for part in parts:
        if part not in {p.name for p in folder.iterdir()}:
            return False
        folder = folder / part
    return True


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path.read_text(encoding="utf-8")):
        if target.lower().startswith(EXTERNAL):
            continue
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        file_part, _, anchor = unquote(target).partition("#")
        resolved = (path.parent / file_part) if file_part else path
        if not exists_with_case(resolved):
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading #{anchor} in {resolved.resolve()}")
    return problems


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_docs_exist_and_have_links() -> None:
    # guards the check itself: a regex that matches nothing would pass every file
    assert len(doc_files()) > 5
    assert len(links(README.read_text(encoding="utf-8"))) > 10


def test_readme_is_a_quickstart() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


# a glossary term as written in prose (case and word boundaries kept exact, to avoid false hits)
# -> its entry in docs/glossary.md
GLOSSARY_TERMS = {
    r"\bDFA\b": "dfa",
    r"\bMCQA\b": "mcqa",
    r"\bLevel 0\b": "level-0",
    r"\bLevel 1\b": "level-1",
    r"\bbyte[- ]fallback\b": "byte-fallback",
    r"\bV_partial\b": "v_partial",
    r"\bp_valid\b": "p_valid",
    r"\bTerm Match\b": "term-match",
    r"\bMatched-and-Dashed\b": "matched-and-dashed",
    r"\bFSI\b": "fsi-and-psi",
    r"\b[Ff]lat[- ]tail\b": "flat-tail",
    r"\b[Tt]ime to tolerance\b": "time-to-tolerance",
    r"\bbits per byte\b": "bits-per-byte",
    r"\b[Hh]eld-out perplexity\b": "held-out-perplexity",
    r"\bsidecar\b": "sidecar",
}
GLOSSARY = ROOT / "docs" / "glossary.md"
IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")


def prose_only(paragraph: str) -> str:
    """The paragraph with inline code, images and heading lines blanked (offsets kept)."""
    text = blank_code(paragraph)
    text = IMAGE.sub(lambda m: " " * len(m.group(0)), text)
    return "\n".join(" " * len(line) if HEADING.match(line) else line for line in text.split("\n"))


def unlinked_terms(path: Path) -> list[str]:
    """Each glossary term whose first prose use in ``path`` is not a link to its entry."""
    problems, found = [], set()
    for first, paragraph in paragraphs(path.read_text(encoding="utf-8")):
        prose = prose_only(paragraph)
        spans = [(m.start(), m.end(), m.group(1)) for m in INLINE_LINK.finditer(prose)]
        for term, anchor in GLOSSARY_TERMS.items():
            match = None if term in found else re.search(term, prose)
            if match is None:
                continue
            found.add(term)
            target = next((t for s, e, t in spans if s <= match.start() < e), "")
            if not target.endswith(f"glossary.md#{anchor}"):
                number = first + prose.count("\n", 0, match.start())
                problems.append(
                    f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r} -> glossary.md#{anchor}"
                )
    return problems


def glossary_linked_files() -> list[Path]:
    """README and the topic pages; not the glossary itself, nor results or tutorials."""
    pages = sorted(p for p in (ROOT / "docs").glob("*.md") if p != GLOSSARY)
    return [README, *pages]


@pytest.mark.parametrize("path", glossary_linked_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_terms_first_use_links_the_glossary(path: Path) -> None:
    problems = unlinked_terms(path)
    assert not problems, "first use of a term without its glossary link:\n" + "\n".join(problems)


def test_every_glossary_term_has_its_entry() -> None:
    assert set(GLOSSARY_TERMS.values()) <= anchors(GLOSSARY)
    assert unlinked_terms(GLOSSARY)  # guards the check: the glossary uses its terms unlinked


def test_slug_matches_github() -> None:
    assert slug("Data: `bytecanary prepare`") == "data-bytecanary-prepare"
    assert slug("Monitoring in W&B") == "monitoring-in-wb"
    assert slug("The 355M on CPU") == "the-355m-on-cpu"
    assert slug("UTF-8 probes: Level 0 and Level 1") == "utf-8-probes-level-0-and-level-1"
