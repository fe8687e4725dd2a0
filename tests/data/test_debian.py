"""The ``debian`` source on fabricated help pages: extraction, script filter, dedup, the
page-keyed split, determinism and the one-line errors (no apt and no network needed)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bytecanary.config import typed
from bytecanary.data import debian
from bytecanary.data.chunks import split_chunks
from bytecanary.data.config import DataConfig, DebianSource
from bytecanary.data.corpus import held_out, source_documents
from bytecanary.data.languages import LANGUAGES
from bytecanary.data.parallel import Parallel
from bytecanary.data.prepare import _corpus, prepare
from bytecanary.errors import BytecanaryError

FOLDERS = {"en": "en-US", "ja": "ja", "ko": "ko", "zh": "zh-CN"}
PACKAGES = {lang: f"libreoffice-help-{folder.lower()}" for lang, folder in FOLDERS.items()}
SENTENCE = {
    "en": "Page {i} explains how the dialog sets option {i}.",
    "ja": "ページ{i}では設定の使い方を説明します。",
    "ko": "페이지 {i}에서는 설정 사용법을 설명합니다.",
    "zh": "第{i}页说明如何使用设置。",
}
SEE_ALSO = {"en": "Related Topics", "ja": "関連項目", "ko": "관련 항목", "zh": "相关主题"}
UNTRANSLATED = "Choose Tools - Options - LibreOffice Writer."


def page_html(lang: str, i: int) -> str:
    """A help page shaped like LibreOffice's: chrome around the body, a code sample, a debug footer."""
    return f"""<!DOCTYPE html><html lang="{lang}"><head><title>Title {i}</title>
<script>var x = "script text";</script></head><body>
<header><a class="logo"><p>LibreOffice 7.4 Help</p></a><nav>モジュール</nav></header>
<aside><label>目次</label></aside><div id="DisplayArea">
<h1>{SENTENCE[lang].format(i=i)}</h1>
<p class="paragraph">{UNTRANSLATED}</p>
<div class="bascode"><pre><code>Sub Main
  MsgBox "Hello"
End Sub</code></pre></div>
<table><tr><td>{SENTENCE[lang].format(i=i + 1000)}</td><td>42</td></tr></table>
<p>  {SEE_ALSO[lang]} &amp;<br>{SENTENCE[lang].format(i=i + 2000)}</p>
</div><footer><div class="debug"><h3>Help content debug info:</h3><p>Title is: {i}</p></div></footer>
</body></html>"""


def write_help_tree(cache: Path, pages: int = 40) -> None:
    """Unpacked ``libreoffice-help-*`` packages in the cache, ``pages`` pages in two modules."""
    for lang, folder in FOLDERS.items():
        for i in range(pages):
            module = "swriter/guide" if i % 2 else "scalc/01"
            path = cache / PACKAGES[lang] / "usr/share/libreoffice/help" / folder / "text" / module
            path.mkdir(parents=True, exist_ok=True)
            (path / f"page{i}.html").write_text(page_html(lang, i), encoding="utf-8")


def source(lang: str, cache: Path) -> dict:
    glob = f"usr/share/libreoffice/help/{FOLDERS[lang]}/text/**/*.html"
    return {
        "language": lang,
        "debian": {"packages": [PACKAGES[lang]], "paths": [glob], "cache_dir": f"{cache}"},
    }


def data_config(cache: Path, seed: int = 0) -> DataConfig:
    raw = {
        "name": "help",
        "seed": seed,
        "mixture": {"en": 0.1, "ja": 0.3, "ko": 0.3, "zh": 0.3},
        "val_fraction": 0.25,
        "sources": [source(lang, cache) for lang in FOLDERS],
    }
    return typed(DataConfig, raw)


def test_page_text_keeps_the_body_and_drops_chrome_code_and_debug():
    lines = debian.page_lines(page_html("ja", 3))
    assert lines == [
        SENTENCE["ja"].format(i=3),
        UNTRANSLATED,
        SENTENCE["ja"].format(i=1003),
        "42",
        "関連項目 &",
        SENTENCE["ja"].format(i=2003),
    ]


def test_script_share_counts_letters_only():
    ja, en = LANGUAGES["ja"], LANGUAGES["en"]
    assert debian.script_share("ページ3では設定を説明します。", ja) == 1.0
    assert debian.script_share(UNTRANSLATED, ja) == 0.0
    assert debian.script_share("LibreOffice の設定", ja) == pytest.approx(3 / 14)
    assert debian.script_share("Café au lait", en) == 1.0 and debian.script_share("42 %", en) == 0.0


def test_documents_are_cleaned_deduplicated_and_keyed(tmp_path):
    write_help_tree(tmp_path)
    cfg = data_config(tmp_path)
    docs = {src.language: list(source_documents(src, i, cfg.seed)) for i, src in enumerate(cfg.sources)}
    keys = [d.key for d in docs["ja"]]
    assert sorted(keys) == sorted(
        f"{'swriter/guide' if i % 2 else 'scalc/01'}/page{i}.html" for i in range(40)
    )
    assert all([d.key for d in docs[lang]] == keys for lang in FOLDERS)  # one seeded order for all
    ja = "\n".join(d.text for d in docs["ja"])
    assert UNTRANSLATED not in ja and "42" not in ja and "Sub Main" not in ja and "debug" not in ja
    assert ja.count(SEE_ALSO["ja"]) == 1  # a line seen before in this source is dropped
    en = "\n".join(d.text for d in docs["en"])
    assert en.count(UNTRANSLATED) == 1 and "LibreOffice 7.4 Help" not in en and "Title is" not in en
    again = list(source_documents(cfg.sources[1], 1, cfg.seed))
    assert again == docs["ja"]
    assert [d.key for d in source_documents(cfg.sources[1], 1, seed=1)] != keys


def test_a_page_and_its_translations_share_a_split(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "corpus"
    write_help_tree(cache)
    out.mkdir()
    info = _corpus(data_config(cache), out, tmp_path / "tasks", Parallel(workers=1))
    keys = {}
    for lang in FOLDERS:
        for split in ("train", "val"):
            rows = [json.loads(line) for path in split_chunks(out, lang, split) for line in path.open()]
            keys[lang, split] = {r["key"] for r in rows}
            assert info["languages"][lang][split]["documents"] == len(rows)
    assert all(keys[lang, "val"] == keys["en", "val"] for lang in FOLDERS)
    assert 0 < len(keys["en", "val"]) < 40 and not keys["en", "val"] & keys["en", "train"]
    assert all(held_out(k, 0, 0.25) for k in keys["en", "val"])


def test_held_out_is_a_seeded_share_of_keys():
    keys = [f"text/page{i}.html" for i in range(4000)]
    share = sum(held_out(k, 0, 0.1) for k in keys) / len(keys)
    assert 0.08 < share < 0.12
    assert [held_out(k, 0, 0.1) for k in keys] != [held_out(k, 1, 0.1) for k in keys]


def test_missing_apt_is_one_line_naming_the_package_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(debian.shutil, "which", lambda tool: None)
    cfg_path = tmp_path / "help.yaml"
    raw = {"name": "help", "mixture": {"ja": 1.0}, "sources": [source("ja", tmp_path / "cache")]}
    cfg_path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(BytecanaryError) as info:
        prepare(cfg_path, tmp_path / "data")
    message = str(info.value)
    assert "\n" not in message and message.startswith("sources[0] (ja): debian: apt-get not found")
    assert "libreoffice-help-ja" in message and "configs/data/synthetic.yaml" in message
    assert not any(p.is_file() for p in (tmp_path / "data").rglob("*"))
    assert not (tmp_path / "cache" / "libreoffice-help-ja").exists()


def _fake_apt_get(tmp_path: Path, monkeypatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text("#!/bin/sh\n" + script, encoding="utf-8")
    (bin_dir / "apt-get").chmod(0o755)
    if shutil.which("dpkg-deb") is None:
        (bin_dir / "dpkg-deb").write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
        (bin_dir / "dpkg-deb").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        (
            "E: Unable to locate package libreoffice-help-ja",
            r"apt cannot find libreoffice-help-ja .*apt-get update",
        ),
        (
            "E: Failed to fetch http://deb.debian.org/x.deb  Temporary failure resolving",
            r"`apt-get download libreoffice-help-ja` failed for libreoffice-help-ja: Failed to fetch",
        ),
    ],
)
def test_failed_download_is_one_line(tmp_path, monkeypatch, stderr, expected):
    _fake_apt_get(tmp_path, monkeypatch, f"echo 'W: a warning' >&2\necho '{stderr}' >&2\nexit 100\n")
    src = DebianSource([PACKAGES["ja"]], ["usr/**/*.html"], cache_dir=str(tmp_path / "cache"))
    with pytest.raises(BytecanaryError, match=expected) as info:
        list(debian.debian_documents(src, LANGUAGES["ja"], 0, "sources[1] (ja)"))
    assert "\n" not in str(info.value) and str(info.value).startswith("sources[1] (ja): debian: ")
    assert not (tmp_path / "cache" / PACKAGES["ja"]).exists()  # nothing half-unpacked


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="building a .deb needs dpkg-deb (Debian)")
def test_a_real_deb_is_downloaded_once_and_unpacked(tmp_path, monkeypatch):
    tree = tmp_path / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: help-ja\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n"
    )
    (tree / "help" / "text").mkdir(parents=True)
    (tree / "help" / "text" / "a.html").write_text(page_html("ja", 1), encoding="utf-8")
    deb = tmp_path / "help-ja_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--build", str(tree), str(deb)], check=True, capture_output=True)
    _fake_apt_get(tmp_path, monkeypatch, f'[ "$1" = download ] && cp {deb} "./$(basename {deb})"\n')
    src = DebianSource(["help-ja"], ["help/text/*.html"], cache_dir=str(tmp_path / "cache"))
    docs = list(debian.debian_documents(src, LANGUAGES["ja"], 0, "s"))
    assert [key for key, _ in docs] == ["a.html"] and SENTENCE["ja"].format(i=1) in docs[0][1]
    assert (tmp_path / "cache" / "help-ja" / deb.name).is_file()  # the .deb names the version
    deb.unlink()  # cached: no second download
    assert list(debian.debian_documents(src, LANGUAGES["ja"], 0, "s")) == docs


def test_bad_pages_name_the_source_and_file(tmp_path):
    write_help_tree(tmp_path, pages=2)
    src = DebianSource([PACKAGES["ja"]], ["usr/**/*.htm"], cache_dir=str(tmp_path))
    with pytest.raises(BytecanaryError, match=r"^s: debian\.paths: no file matches 'usr/\*\*/\*\.htm'"):
        list(debian.debian_documents(src, LANGUAGES["ja"], 0, "s"))
    src = DebianSource([PACKAGES["ja"]], ["usr/**/*.html"], cache_dir=str(tmp_path))
    with pytest.raises(BytecanaryError, match=r"no line of 2 pages has 50% of its letters in the ko script"):
        list(debian.debian_documents(src, LANGUAGES["ko"], 0, "s"))  # Japanese pages under a ko source
    page = next((tmp_path / PACKAGES["ja"]).rglob("page0.html"))
    page.write_bytes(b"<p>caf\xe9</p>")
    with pytest.raises(BytecanaryError, match=r"page0\.html is not UTF-8 \(byte 6"):
        list(debian.debian_documents(src, LANGUAGES["ja"], 0, "s"))


def test_demo_trains_on_the_real_default_or_says_on_one_line_why_not(tmp_path, monkeypatch, capsys):
    from bytecanary import demo

    monkeypatch.setattr(debian.shutil, "which", lambda tool: None)
    path = tmp_path / "help.yaml"
    raw = {"name": "help", "mixture": {"ja": 1.0}, "sources": [source("ja", tmp_path / "cache")]}
    path.write_text(json.dumps(raw), encoding="utf-8")
    assert demo.corpus_config(str(path)) == demo.SYNTHETIC
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith("demo: sources[0] (ja): debian: apt-get not found")
    assert printed[0].endswith(f"; using {demo.SYNTHETIC} instead")
    write_help_tree(tmp_path / "cache", pages=2)  # in the cache: no apt needed
    assert demo.corpus_config(str(path)) == str(path) and capsys.readouterr().out == ""
    line = demo.corpus_line(str(path), tmp_path / "data")
    assert line == f"corpus: {path} -> {tmp_path / 'data'} (debian(libreoffice-help-ja))"
