"""``bytecanary prepare`` in parallel: chunked shards equal to a plain pass, the same
bytes whatever the number of workers, resume after SIGKILL inside the shard stage, and
the SLURM path up to where a machine without SLURM can go (its job arrays run here)."""

import contextlib
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

from bytecanary.cli import main
from bytecanary.data.chunks import split_documents
from bytecanary.data.mixture import chunked_docs_within
from bytecanary.data.parallel import Parallel
from bytecanary.data.prepare import prepare
from bytecanary.data.shards import TokenSeries, docs_within, open_split

from .. import sharing, warm
from ..conftest import SMALL, write_config

CHUNKED = {"chunk_megabytes": 0.03}  # about ten chunks per language


def _files(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` but the stages' timing records."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "stage.json"
    }


@pytest.fixture(scope="module")
def chunked(tmp_path_factory) -> Path:
    def build(root: Path) -> Path:
        return prepare(write_config(root / "chunked.yaml", **CHUNKED), root / "data", run=Parallel(workers=1))

    return sharing.built_once(tmp_path_factory, "chunked", build)


def test_chunked_cut_equals_the_whole_array_cut():
    rng = np.random.default_rng(0)
    for _ in range(400):
        chunks = [rng.integers(1, 50, size=rng.integers(0, 6)) for _ in range(rng.integers(1, 6))]
        flat = np.concatenate(chunks)
        if not len(flat):
            continue
        target = int(rng.integers(0, flat.sum() + 20))
        whole, part = chunked_docs_within([int(c.sum()) for c in chunks], chunks.__getitem__, target)
        kept = sum(len(c) for c in chunks[:whole]) + part
        assert kept == docs_within(flat, target), (chunks, target)
        assert part < len(chunks[whole]) if part else True


def test_token_series_slices_like_one_array():
    rng = np.random.default_rng(1)
    parts = [rng.integers(0, 1000, size=n).astype(np.uint16) for n in (5, 0, 17, 1, 9)]
    series, flat = TokenSeries(parts), np.concatenate(parts)
    assert len(series) == len(flat)
    for start in range(len(flat)):
        for stop in range(start, len(flat) + 1):
            assert np.array_equal(series[start:stop], flat[start:stop])


def test_chunks_hold_the_documents_a_plain_pass_encodes(chunked):
    """Independent of the stage: encode every training document one by one, cut where the
    index says, and compare with the shards read back through the training reader."""
    tok = AutoTokenizer.from_pretrained(str(chunked / "tokenizer"))
    index = json.loads((chunked / "shards" / "index.json").read_text())
    assert sum(len(e["train"]["files"]) for e in index["languages"].values()) > 20
    for lang, entry in index["languages"].items():
        for split in ("train", "val"):
            flat = []
            docs = split_documents(chunked / "corpus", lang, split)
            for _, doc in zip(range(entry[split]["documents"]), docs, strict=False):
                flat += [*tok.encode(doc, add_special_tokens=False), tok.eos_token_id]
            series = open_split(chunked / "shards", entry[split], index["dtype"])
            assert np.array_equal(series[0 : len(series)], np.array(flat, dtype=index["dtype"]))


@pytest.mark.slow
def test_one_and_three_workers_write_the_same_bytes(chunked, tmp_path):
    three = prepare(
        write_config(tmp_path / "chunked.yaml", **CHUNKED), tmp_path / "data", run=Parallel(workers=3)
    )
    assert _files(three) == _files(chunked)


def test_a_prepare_killed_inside_the_shard_stage_resumes_at_its_unfinished_chunks(chunked, tmp_path, capsys):
    """The stages before the shards are copied from ``chunked`` (same config, same hashes), so
    the process to kill goes straight to the shard stage; the resume runs in-process, as nothing
    about its process is checked."""
    config = write_config(tmp_path / "chunked.yaml", **CHUNKED)
    out = tmp_path / "data"
    for stage in ("corpus", "tokenizer"):
        shutil.copytree(chunked / stage, out / stage)
    cmd = ["prepare", "--config", str(config), "--out", str(out)]
    proc = warm.Popen(
        [sys.executable, "-m", "bytecanary.cli", *cmd, "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    done: list[Path] = []
    while proc.poll() is None and len(done) < 4:
        done = sorted(out.glob(".shards.*.tasks/results/*.json"))
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(done) >= 4 and not (out / "shards").exists(), "the kill came after the shard stage"
    assert _left_behind(str(config)) == [], "a process of the killed prepare lives on"
    tasks = done[0].parent.parent
    # each finished chunk's shard, by inode: a task run again would write a new file
    finished = {}
    for path in tasks.glob("shards/*/*/*.bin"):
        finished[str(path.relative_to(tasks / "shards"))] = path.stat().st_ino
    assert finished
    assert main(cmd) == 0
    assert "[corpus] up to date, skipped" in capsys.readouterr().out
    assert _files(out) == _files(chunked)
    assert not list(out.glob(".*")), "a temporary or task folder is left"
    kept = {str(p.relative_to(out / "shards")): p.stat().st_ino for p in (out / "shards").rglob("*.bin")}
    reused = [name for name, inode in finished.items() if kept.get(name) == inode]
    # all but the chunk the training cut falls in, which is a shorter copy
    assert len(reused) >= len([n for n in finished if n in kept]) - 1 >= 1


def _left_behind(marker: str, patience: float = 10.0) -> list[int]:
    """The pids whose command line holds ``marker`` still alive after ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        alive = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if marker in cmdline.read_bytes().decode(errors="replace"):
                    alive.append(int(cmdline.parent.name))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _fake_slurm(bin_dir: Path, log: Path) -> None:
    """``sbatch`` that keeps each script it is given, ``squeue`` that knows no job, and
    ``scontrol`` that expands a node list to this host."""
    bin_dir.mkdir()
    scripts = {
        "sbatch": f'cat "${{@: -1}}" >> {log}\necho "--- $*" >> {log}\necho "Submitted batch job 4242"\n',
        "squeue": "exit 0\n",
        "scontrol": 'echo "$3"\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)


def _run_array(pickled: Path, tasks: int) -> None:
    """What SLURM would do with the job array: every array task loads the pickled
    executor and runs it with its own ``SLURM_ARRAY_TASK_ID``."""
    code = (
        "import dill, os, sys\n"
        "executor = dill.load(open(sys.argv[1], 'rb'))\n"
        "for i in range(int(sys.argv[2])):\n"
        "    os.environ['SLURM_ARRAY_TASK_ID'] = str(i)\n"
        "    executor.run()\n"
    )
    env = {**os.environ, "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": "4242"}
    subprocess.run([sys.executable, "-c", code, str(pickled), str(tasks)], env=env, check=True)


@pytest.mark.slow
def test_slurm_path_submits_job_arrays_whose_tasks_write_the_local_bytes(
    chunked, tmp_path, monkeypatch, capsys
):
    log = tmp_path / "sbatch.log"
    _fake_slurm(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    config = write_config(tmp_path / "chunked.yaml", **CHUNKED)
    out = tmp_path / "data"
    cmd = ["prepare", "--config", str(config), "--out", str(out), "--slurm_partition", "cpu"]
    for stage, tasks in (("corpus", len(SMALL["sources"])), ("shards", None)):
        assert main(cmd) == 0
        printed = capsys.readouterr().out
        assert f"[{stage}] submitted SLURM job 4242" in printed and not (out / stage).exists()
        (folder,) = out.glob(f".{stage}.*.tasks")
        script = (folder / "tasks" / "launch_script.slurm").read_text()
        ranks = json.loads((folder / "tasks" / "ranks_to_run.json").read_text())
        assert ranks == list(range(tasks or len(ranks)))
        assert f"#SBATCH --array=0-{len(ranks) - 1}" in script and "#SBATCH --partition=cpu" in script
        assert f"source {sys.prefix}/bin/activate" in script and "launch_pickled_pipeline" in script
        _run_array(folder / "tasks" / "executor.pik", len(ranks))
    assert main(cmd) == 0
    assert "[evalsets] done" in capsys.readouterr().out
    assert _files(out) == _files(chunked)
    assert log.read_text().count("#SBATCH --array") >= 2  # each stage, and datatrove's stats merge


def test_a_folder_in_the_single_file_layout_still_trains_and_verifies(chunked, tmp_path):
    """One ``<lang>/<split>.bin`` per split, as folders prepared before chunking hold: the
    same batches as the chunked folder it was joined from."""
    from bytecanary.data.shards import sha256, verify
    from bytecanary.train.datamodule import ShardDataModule

    legacy = tmp_path / "legacy"
    shutil.copytree(chunked / "tokenizer", legacy / "tokenizer")
    index = json.loads((chunked / "shards" / "index.json").read_text())
    for lang, entry in index["languages"].items():
        for split in ("train", "val"):
            path = legacy / "shards" / lang / f"{split}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(
                b"".join((chunked / "shards" / f["path"]).read_bytes() for f in entry[split]["files"])
            )
            files = entry[split].pop("files")
            entry[split] |= {"path": f"{lang}/{split}.bin", "file_bytes": sum(f["file_bytes"] for f in files)}
            entry[split]["sha256"] = sha256(path)
    (legacy / "shards" / "index.json").write_text(json.dumps(index))
    assert verify(legacy / "shards") == 8
    new, old = ShardDataModule(str(chunked), seq_len=64), ShardDataModule(str(legacy), seq_len=64)
    new_train, old_train = new.train_dataloader(), old.train_dataloader()
    for k in range(20):
        assert np.array_equal(new_train.batch(k)["input_ids"], old_train.batch(k)["input_ids"])
    for a, b in zip(new.val_dataloader(), old.val_dataloader(), strict=True):
        assert np.array_equal(a["input_ids"], b["input_ids"])


def test_bad_files_among_many_are_named_the_others_finish_and_only_they_rerun(tmp_path, capsys):
    folder = tmp_path / "ja"
    folder.mkdir()
    texts = [f"日本語の文です。{i}番目の文書" for i in range(40)]
    for i in range(6):
        rows = [json.dumps({"text": t}, ensure_ascii=False) for t in texts[i::6]]
        (folder / f"{i}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (folder / "2.jsonl").write_bytes(b'{"text": "\xff\xfe"}\n')
    (folder / "4.jsonl").write_text('{"text": "ok"}\n{"body": "no text"}\n', encoding="utf-8")
    sources = [SMALL["sources"][0], {"language": "ja", "files": {"path": str(folder), "pattern": "*.jsonl"}}]
    config = write_config(tmp_path / "files.yaml", mixture={"en": 0.5, "ja": 0.5}, sources=sources)
    out = tmp_path / "data"
    assert main(["prepare", "--config", str(config), "--out", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: [corpus] 2 of 7 items failed (each named above); fix them and rerun"
    assert err[0] == f"[corpus] {folder / '2.jsonl'}: line 1: not UTF-8 (byte 10: invalid start byte)"
    assert err[1] == f"[corpus] {folder / '4.jsonl'}: row 2: text_column 'text' holds nothing, not text"
    (tasks,) = out.glob(".corpus.*.tasks")
    assert len(list((tasks / "results").iterdir())) == 5 and not (out / "corpus").exists()
    # the finished files' chunks, by inode: the stage links them into place unless redone
    finished = {p.relative_to(tasks / "chunks"): p.stat().st_ino for p in (tasks / "chunks").rglob("*.jsonl")}
    assert finished
    (folder / "2.jsonl").write_text('{"text": "直した文書"}\n', encoding="utf-8")
    (folder / "4.jsonl").write_text('{"text": "ok"}\n', encoding="utf-8")
    assert main(["prepare", "--config", str(config), "--out", str(out), "--workers", "1"]) == 0
    capsys.readouterr()
    ja = "".join(split_documents(out / "corpus", "ja", "train")) + "".join(
        split_documents(out / "corpus", "ja", "val")
    )
    kept = [t for i in (0, 1, 3, 5) for t in texts[i::6]]
    assert "直した文書" in ja and all(t in ja for t in kept)
    assert all((out / "corpus" / name).stat().st_ino == inode for name, inode in finished.items())


def test_progress_in_a_log_is_one_line_at_a_bounded_rate(monkeypatch, capsys):
    from bytecanary.data import progress

    bar = progress.Progress("shards", 1_000_000_000)
    for done in range(0, 500_000_001, 1_000_000):
        bar.set(done)  # 500 updates within LOG_EVERY seconds: no line yet
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "LOG_EVERY", 0.0)
    bar.close(600_000_000)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("[shards] 0.60 of 1.00 GB, ") and " MB/s, ETA " in line
