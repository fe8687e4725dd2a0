"""Real multilingual text from Debian packages: LibreOffice's help pages, the same pages translated
into each language, fetched once into a cache and cleaned into documents in a seeded order
(docs/data.md, "Stages").
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

from bytecanary.data.config import DebianSource
from bytecanary.data.languages import Language, in_blocks
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir

# page chrome, scripts and code samples (``pre``) hold no translated prose
SKIPPED = {"head", "header", "nav", "aside", "footer", "script", "style", "noscript", "pre"}
BLOCKS = {"p", "div", "br", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "tr", "td", "th", "table"}
_WILDCARDS = "*?["


class _PageText(HTMLParser):
    """The visible body text of a help page, a newline at every block boundary."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0  # how many SKIPPED elements we are inside

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in SKIPPED:
            self.skipping += 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def page_lines(html: str) -> list[str]:
    """Non-empty lines of a page's body text, whitespace runs collapsed to one space."""
    parser = _PageText()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    return [line for line in lines if line]


def script_share(line: str, lang: Language) -> float:
    """Share of the line's letters written in the language's script (0 without letters);
    English counts ASCII letters too."""
    letters = [c for c in line if c.isalpha()]
    if not letters:
        return 0.0
    own = sum((lang.code == "en" and c.isascii()) or in_blocks(c, lang.word_blocks) for c in letters)
    return own / len(letters)


def cache_dir(src: DebianSource) -> Path:
    if src.cache_dir:
        return Path(src.cache_dir).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bytecanary" / "debian"


def _run(command: list[str], cwd: Path, where: str, package: str) -> None:
    """Run apt-get or dpkg-deb; a failure is one line: the tool's last error, and what to do
    when apt does not know the package (empty package lists, or a wrong name)."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode == 0:
        return
    errors = [line for line in done.stderr.splitlines() if line.startswith("E:")] or done.stderr.splitlines()
    last = errors[-1].removeprefix("E: ") if errors else f"exit code {done.returncode}"
    if "Unable to locate package" in last or "no installation candidate" in last:
        raise BytecanaryError(
            f"{where}: debian: apt cannot find {package} ({last}); run `sudo apt-get update` "
            "if the package lists are empty, or check the name"
        )
    raise BytecanaryError(f"{where}: debian: `{' '.join(command)}` failed for {package}: {last}")


def unpacked(package: str, src: DebianSource, where: str) -> Path:
    """The package's files in the cache, downloading and unpacking it the first time.
    The folder appears only once it is complete (it keeps the .deb, which names the version)."""
    target = cache_dir(src) / package
    if target.is_dir():
        return target
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise BytecanaryError(
                f"{where}: debian: {tool} not found, so {package} cannot be fetched; the debian source "
                "needs Debian or Ubuntu (elsewhere use configs/data/synthetic.yaml)"
            )
    with atomic_dir(target) as tmp:
        _run(["apt-get", "download", package], tmp, where, package)
        debs = sorted(tmp.glob("*.deb"))
        if len(debs) != 1:
            raise BytecanaryError(f"{where}: debian: apt-get download {package} left {len(debs)} .deb files")
        _run(["dpkg-deb", "-x", debs[0].name, "."], tmp, where, package)
    return target


def _fixed_folder(pattern: str) -> Path:
    """The folders of a glob before its first wildcard: what a page's key is relative to."""
    parts = Path(pattern).parts
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in _WILDCARDS)), len(parts) - 1)
    return Path(*parts[:fixed])


def page_files(src: DebianSource, where: str) -> dict[str, Path]:
    """Every page of the source by key; a key found twice keeps the first package's page."""
    pages: dict[str, Path] = {}
    for package in src.packages:
        root = unpacked(package, src, where)
        for pattern in src.paths:
            for path in sorted(root.glob(pattern)):
                if path.is_file():
                    pages.setdefault(path.relative_to(root / _fixed_folder(pattern)).as_posix(), path)
    if not pages:
        raise BytecanaryError(
            f"{where}: debian.paths: no file matches {', '.join(map(repr, src.paths))} "
            f"in {', '.join(src.packages)}"
        )
    return pages


def page_order(key: str, seed: int) -> str:
    """A seeded sort key: pages in an order that mixes the package's sections, the same
    order for every translation."""
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def debian_documents(src: DebianSource, lang: Language, seed: int, where: str) -> Iterator[tuple[str, str]]:
    """(key, text) of each page with any line left after cleaning, in seeded page order."""
    pages = page_files(src, where)
    seen: set[str] = set()
    produced = 0
    for key in sorted(pages, key=lambda k: page_order(k, seed)):
        try:
            html = pages[key].read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            problem = f"byte {err.start}: {err.reason}"
            raise BytecanaryError(f"{where}: {pages[key]} is not UTF-8 ({problem})") from None
        kept = []
        for line in page_lines(html):
            if line not in seen and script_share(line, lang) >= src.min_script_share:
                seen.add(line)
                kept.append(line)
        if kept:
            produced += 1
            yield key, "\n".join(kept)
    if not produced:
        raise BytecanaryError(
            f"{where}: debian: no line of {len(pages)} pages has {src.min_script_share:.0%} of its letters "
            f"in the {lang.code} script (min_script_share)"
        )
