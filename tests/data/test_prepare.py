"""``bytecanary prepare`` end to end on a small config: outputs, mixture, reruns, kills."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from bytecanary.data import evalsets, wordcomp
from bytecanary.data.chunks import split_documents
from bytecanary.data.languages import LANGUAGES
from bytecanary.data.prepare import STAGES, prepare

from .. import warm
from ..conftest import SMALL, write_config


def _index(data: Path) -> dict:
    return json.loads((data / "shards" / "index.json").read_text())


def test_realised_mixture_is_within_two_points(small_data):
    langs = _index(small_data)["languages"]
    total = sum(e["train"]["tokens"] for e in langs.values())
    for lang, weight in SMALL["mixture"].items():
        assert abs(langs[lang]["train"]["tokens"] / total - weight) < 0.02


def test_shards_decode_to_the_corpus_documents(small_data):
    tok = AutoTokenizer.from_pretrained(str(small_data / "tokenizer"))
    index = _index(small_data)
    for lang, entry in index["languages"].items():
        for split in ("train", "val"):
            files = entry[split]["files"]
            ids = np.concatenate(
                [np.fromfile(small_data / "shards" / f["path"], index["dtype"]) for f in files]
            )
            offsets = np.cumsum([0] + [f["tokens"] for f in files])
            starts = np.concatenate(
                [
                    np.load(small_data / "shards" / f["path"].replace(".bin", ".idx.npy")) + o
                    for f, o in zip(files, offsets, strict=False)
                ]
            )
            assert len(ids) == entry[split]["tokens"] and len(starts) == entry[split]["documents"]
            docs = split_documents(small_data / "corpus", lang, split)
            ends = np.append(starts[1:], len(ids))
            for start, end, doc in zip(starts[:20], ends[:20], docs, strict=False):
                assert ids[end - 1] == tok.eos_token_id
                assert tok.decode(ids[start : end - 1].tolist()) == doc
        assert entry["train"]["byte_fallback_rate"] > 0  # rare characters appear as bytes


def test_validation_documents_never_enter_training(small_data):
    for lang in SMALL["mixture"]:
        train = set(split_documents(small_data / "corpus", lang, "train"))
        val = list(split_documents(small_data / "corpus", lang, "val"))
        assert val and not train.intersection(val)


def test_level0_tiers_follow_the_snapshot(small_data):
    snapshot = json.loads((small_data / "snapshot" / "chars.json").read_text())
    assert set(snapshot["budgets"]) == {"all", "50000"}
    for lang in SMALL["mixture"]:
        counts = snapshot["budgets"]["all"]["languages"][lang]["counts"]
        (level0,) = evalsets.load_level0(small_data / "evalsets" / f"level0_{lang}.json")
        assert level0.language == lang
        # independent recomputation of the documented rule
        blocks = LANGUAGES[lang].eval_blocks
        seen = sorted(
            ((c, n) for c, n in counts.items() if any(lo <= ord(c) <= hi for lo, hi in blocks)),
            key=lambda cn: (-cn[1], cn[0]),
        )
        total, running, want = sum(n for _, n in seen), 0, {}
        for c, n in seen:
            want[c] = "common" if running / total < 0.5 else "uncommon" if running / total < 0.9 else "rare"
            running += n
        for e in level0.entries:
            if e.tier in ("unseen", "unseen_3b"):
                assert counts.get(e.char, 0) == 0 and e.count == 0
                assert e.tier != "unseen_3b" or len(e.char.encode()) == 3
            else:
                assert want[e.char] == e.tier and e.count == counts[e.char]
        tiers = {e.tier for e in level0.entries}
        assert {"unseen", "unseen_3b"} <= tiers and len(level0.entries) > 50
    (zh,) = evalsets.load_level0(small_data / "evalsets" / "level0_zh.json")
    assert any(len(e.char.encode()) == 4 for e in zh.entries if e.tier == "unseen")


def test_level1_sentences_come_from_heldout_text(small_data):
    samples = evalsets.load_level1(small_data / "evalsets" / "level1.json")
    for lang in SMALL["mixture"]:
        mine = [s for s in samples if s.language == lang]
        assert len(mine) == SMALL["eval"]["level1_per_language"]
        val_text = "\n".join(split_documents(small_data / "corpus", lang, "val"))
        for s in mine:
            assert s.sentence_prompt.endswith(s.term) and s.tier in ("rare", "unseen")
            assert s.source == "template" or s.sentence_prompt in val_text
        if lang != "en":
            assert sum(s.source == "heldout" for s in mine) > len(mine) // 2


def test_the_stages_prepare_owns_are_the_folders_it_writes(small_data):
    assert sorted(p.name for p in small_data.iterdir() if p.is_dir()) == sorted(STAGES)


def test_rerun_is_a_no_op(small_data, capsys):
    stamps = {p: p.stat().st_mtime_ns for p in small_data.rglob("*") if p.is_file()}
    prepare(small_data.parent / "small.yaml", small_data)
    out = capsys.readouterr().out
    assert all(f"[{s}] up to date, skipped" in out for s in STAGES)
    assert {p: p.stat().st_mtime_ns for p in small_data.rglob("*") if p.is_file()} == stamps


def test_changed_config_reruns_only_the_stages_it_touches(small_data, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(small_data, data)
    cfg = write_config(tmp_path / "small.yaml", eval={**SMALL["eval"], "max_per_tier": 10})
    prepare(cfg, data)
    out = capsys.readouterr().out
    assert "[shards] up to date" in out and "[evalsets] done" in out
    (level0,) = evalsets.load_level0(data / "evalsets" / "level0_ja.json")
    assert max(sum(e.tier == t for e in level0.entries) for t in evalsets.TIERS) == 10


@pytest.mark.slow
def test_killed_run_resumes_and_leaves_no_partial_output(tmp_path, small_data):
    """The corpus stage is copied from ``small_data`` (same config, same hash), so the process
    to kill starts at the tokenizer stage and is killed once that stage has begun."""
    cfg = write_config(tmp_path / "small.yaml")
    out = tmp_path / "data"
    shutil.copytree(small_data / "corpus", out / "corpus")
    cmd = [
        sys.executable,
        "-m",
        "bytecanary.cli",
        "prepare",
        "--config",
        str(cfg),
        "--out",
        str(out),
    ]
    proc = warm.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (any(out.glob(".tokenizer.*.tmp")) or (out / "tokenizer").exists()) and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # mid-run: the corpus is done, later stages are not
    proc.wait()
    assert (out / "corpus" / "stage.json").exists() and not (out / "evalsets").exists()
    done = warm.run(cmd, capture_output=True, text=True, check=True)
    assert "[corpus] up to date, skipped" in done.stdout
    assert all((out / s / "stage.json").exists() for s in STAGES)
    assert not list(out.glob(".*.tmp"))  # the killed stage's temporary folder is gone
    for lang in SMALL["mixture"]:  # another process, another hash seed: the same MCQA pool
        name = wordcomp.file_name(lang)
        assert (out / "evalsets" / name).read_bytes() == (small_data / "evalsets" / name).read_bytes()


def test_bad_source_writes_nothing(tmp_path):
    from bytecanary.errors import BytecanaryError

    bad = tmp_path / "x.jsonl"
    bad.write_text('{"body": "テキスト"}\n', encoding="utf-8")
    sources = [
        *SMALL["sources"][:3],
        {"language": "zh", "dataset": {"path": "json", "data_files": [str(bad)]}},
    ]
    cfg = write_config(tmp_path / "bad.yaml", sources=sources)
    with pytest.raises(BytecanaryError, match=r"sources\[3\] \(zh\): text_column 'text' not found"):
        prepare(cfg, tmp_path / "data")
    # no stage is written; only the hidden task folder of the sources that finished, to resume from
    written = [p.relative_to(tmp_path / "data") for p in (tmp_path / "data").rglob("*") if p.is_file()]
    assert written and all(p.parts[0].startswith(".corpus.") for p in written)
