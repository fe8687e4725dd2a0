"""The tutorials run as written: every ```bash block of docs/tutorials/*.md, a tutorial's blocks
in order in one ``bash -e``, in a working copy of the checkout, on tiny stand-ins.

``STANDINS`` is the only change made to a documented command (docs/tutorials/README.md lists
it). A block whose first line is ``# GPU``, ``# SLURM`` or ``# ONLINE`` does not run: each of
its ``bytecanary`` commands goes through the real parser (``--print_config`` for ``train``), and
``tests/train/test_slurm.py`` builds the trainer of its ``sbatch`` training lines.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from . import relay, warm
from .conftest import SESSION_ENVIRONMENT, write_config

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted(p for p in (ROOT / "docs" / "tutorials").glob("*.md") if p.name != "README.md")
MARKERS = ("# GPU", "# SLURM", "# ONLINE")

# (documented text, its tiny stand-in), applied in order to the runnable blocks
STANDINS: list[tuple[str, str]] = [
    ("make venv", "test -x .venv/bin/bytecanary"),  # the working copy's .venv is a view of the checkout's
    # the tests' small_data config (1.35 MB of synthetic text), already prepared into data/default
    ("configs/data/default.yaml", "standins/data.yaml --out data/default"),
    (
        "bytecanary train --config configs/tiny.yaml",
        "bytecanary train --config configs/tiny.yaml --config standins/tiny.yaml",
    ),
    ("https://huggingface.co/EleutherAI/pythia-160m", "standins/pythia-160m.git"),  # branches step1000...
    ("--probes '[ppl, level0, level1]'", "--probes '[ppl, level0, level1]' --trial=true"),
    ("~/my-trainer-output", "standins/trainer-output"),  # checkpoint-1000, checkpoint-2000
]
# the tiny training: a 2 x 64 GPT-2 for 6 steps, checkpoints at 1, 2, 3, 6, trial-size probes
TINY = {
    "model": {"arch": {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 32}},
    "data": {"batch_size": 8, "val_tokens": 512},
    "trainer": {"max_steps": 6, "val_check_interval": 3, "log_every_n_steps": 2,
                "enable_progress_bar": False},
    "run": {"checkpoint_every": 3, "log_spaced_until": 2},
    "probes": [
        {"name": "level0", "trial": True, "per_language": 4},
        {"name": "level1", "trial": True, "per_language": 4},
        {"name": "mcqa", "trial": True, "embedded_per_language": 4, "nonsense_per_language": 4,
         "protocols": ["letter_separate", "letter_merged", "cloze"]},
    ],
}  # fmt: skip
HUB_MODELS = ("EleutherAI/pythia-160m",)
REVISIONS = ("step1000", "step2000", "step3000")
GIT = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def bash_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of each ```bash block of a markdown file."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if current is None and line.strip() == "```bash":
            current, start = [], number
        elif current is not None and line.strip() == "```":
            blocks.append((start, "\n".join(current)))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def marked(block: str) -> bool:
    return block.lstrip().startswith(MARKERS)


def stand_in(block: str) -> str:
    for documented, tiny in STANDINS:
        block = block.replace(documented, tiny)
    return block


def commands(block: str) -> list[list[str]]:
    """Each command of a block as its words (continuation lines joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", block)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def bytecanary_argv(words: list[str]) -> list[str] | None:
    """The arguments after ``bytecanary`` (or ``-m bytecanary.cli``) of a command, inside an
    ``sbatch --wrap`` too; None where it runs no bytecanary command."""
    if words[0] == "sbatch":
        wrap = next(
            w.split("=", 1)[1] if "=" in w else words[i + 1]
            for i, w in enumerate(words)
            if w.startswith("--wrap")
        )
        return bytecanary_argv(shlex.split(wrap))
    for i, word in enumerate(words):
        if word in ("bytecanary", "bytecanary.cli", ".venv/bin/bytecanary"):
            return words[i + 1 :]
    return None


def parses(argv: list[str]) -> str:
    """'' when the real parser takes ``argv``, else what it said; nothing runs."""
    from jsonargparse import ArgumentError

    from bytecanary.cli import _parse, main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            if argv[0] == "train":
                code = main([*argv, "--print_config"])
            else:
                _parse(argv)
                code = 0
        except SystemExit as exit_:
            code = exit_.code
        except ArgumentError as error:
            return str(error)
    return "" if code in (0, None) else err.getvalue() or f"exit {code}"


@pytest.fixture(scope="session")
def standins(tmp_path_factory, small_data) -> Path:
    """The stand-ins' folder: data config, tiny overrides, an offline hub cache, a bare git repo
    with a branch per revision, and an HF Trainer output folder; the data is ``small_data``."""
    root = tmp_path_factory.mktemp("standins")
    write_config(root / "data.yaml")
    (root / "tiny.yaml").write_text(yaml.safe_dump(TINY), encoding="utf-8")
    (root / "data").symlink_to(small_data)
    tokenizer = small_data / "tokenizer"
    for name in HUB_MODELS:
        repo = root / "hub" / f"models--{name.replace('/', '--')}"
        for seed, rev in enumerate(REVISIONS):
            commit = f"{seed + 1:040d}"
            save_model(repo / "snapshots" / commit, tokenizer, seed)
            (repo / "refs").mkdir(exist_ok=True)
            (repo / "refs" / rev).write_text(commit, encoding="utf-8")
    git_repo(root / "pythia-160m", tokenizer)
    for seed, step in enumerate((1000, 2000)):
        save_model(root / "trainer-output" / f"checkpoint-{step}", tokenizer, seed)
    return root


def save_model(folder: Path, tokenizer: Path, seed: int) -> None:
    """A random 1 x 32 GPT-2 with the data's tokenizer, as save_pretrained writes it."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(tokenizer)
    torch.manual_seed(seed)
    ids = {"bos_token_id": tok.eos_token_id, "eos_token_id": tok.eos_token_id}
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2, **ids)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)


def git_repo(work: Path, tokenizer: Path) -> None:
    """``work.git``: a bare repo with a branch per revision, each holding its own model."""
    env = {**os.environ, **GIT}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True, env=env)

    work.mkdir()
    git("init", "-q", "-b", "main")
    for seed, rev in enumerate(REVISIONS):
        git("checkout", "-q", "-B", rev, *(["main"] if seed else []))
        save_model(work, tokenizer, seed)
        git("add", "-A")
        git("commit", "-q", "-m", rev)
        git("branch", "-f", "main")
    git("checkout", "-q", "main")  # the hub's default branch, checked out by a clone
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(work), f"{work}.git"], check=True, capture_output=True
    )


def working_copy(tmp_path: Path, standins: Path, venv: Path) -> Path:
    """A folder laid out as a fresh clone after ``make venv``: configs/, .venv and the stand-ins."""
    import shutil

    work = tmp_path / "clone"
    work.mkdir()
    shutil.copytree(ROOT / "configs", work / "configs")
    (work / ".venv").symlink_to(venv)
    (work / "standins").symlink_to(standins)
    (work / "data").mkdir()
    (work / "data" / "default").symlink_to(standins / "data")
    return work


def warm_venv(folder: Path, venv: Path = ROOT / ".venv") -> Path:
    """``venv`` seen through ``folder``: links to its files, its ``activate`` naming ``folder``,
    and a ``bytecanary`` that forks each command from a warm server (tests/warm.py)."""
    (folder / "bin").mkdir(parents=True)
    for entry in venv.iterdir():
        if entry.name != "bin":
            (folder / entry.name).symlink_to(entry)
    for entry in (venv / "bin").iterdir():
        if entry.name == "bytecanary":
            relay.shim(folder / "bin" / entry.name, entry)
        elif entry.name == "activate":
            text = entry.read_text(encoding="utf-8").replace(str(venv), str(folder))
            (folder / "bin" / entry.name).write_text(text, encoding="utf-8")
        else:
            (folder / "bin" / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="session")
def venv_env(standins: Path, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the working copies' .venv, the tutorials' shell environment): offline, the .venv's bin
    on PATH, and the server that its ``bytecanary`` forks from, started as activated; from the
    session's environment, as a session fixture runs before ``session_environment``."""
    venv = warm_venv(tmp_path_factory.mktemp("warm") / ".venv")
    offline = {"HF_HUB_CACHE": str(standins / "hub"), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    env = {
        **SESSION_ENVIRONMENT,
        **GIT,
        **offline,
        "PATH": f"{venv / 'bin'}{os.pathsep}{SESSION_ENVIRONMENT['PATH']}",
        "OMP_NUM_THREADS": SESSION_ENVIRONMENT.get("OMP_NUM_THREADS", "1"),
    }
    activate = f". {venv / 'bin' / 'activate'} && env -0"
    shown = subprocess.run(["bash", "-c", activate], env=env, capture_output=True, check=True).stdout
    activated = dict(item.split("=", 1) for item in shown.decode().split("\0") if item)
    server = warm.server(activated)
    return venv, {**env, "BYTECANARY_WARM": str(server)} if server else env


def test_every_tutorial_has_blocks_that_run():
    assert {p.name for p in TUTORIALS} == {"train.md", "probe-a-series.md", "wandb.md"}
    for path in TUTORIALS:
        assert any(not marked(b) for _, b in bash_blocks(path)), path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.name)
def test_a_tutorial_runs_as_written(path, standins, venv_env, tmp_path):
    blocks = bash_blocks(path)
    script = "\n".join(
        f'echo "### {path.name}:{line} at $SECONDS s"\n{stand_in(b)}' for line, b in blocks if not marked(b)
    )
    venv, env = venv_env
    work = working_copy(tmp_path, standins, venv)
    done = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True)
    last = [line for line in done.stdout.splitlines() if line.startswith("### ")][-1:]
    assert done.returncode == 0, (
        f"{last}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    print(
        "\n".join(line for line in done.stdout.splitlines() if line.startswith("### "))
    )  # each block's start
    check_results(path.name, work)


def check_results(name: str, work: Path) -> None:
    """What each tutorial promises to leave behind."""
    if name == "train.md":
        finished = json.loads((work / "runs" / "tiny" / "finished.json").read_text())
        assert finished["step"] == TINY["trainer"]["max_steps"]
        assert (work / "runs" / "tiny" / "report" / "report.md").is_file()
    if name == "probe-a-series.md":
        for records in ("runs/pythia-160m/probes.jsonl", "runs/pythia-160m-git/probes.jsonl"):
            rows = [json.loads(line) for line in (work / records).read_text().splitlines()]
            steps = sorted({(r["step"], r["tokens_seen"]) for r in rows})
            assert steps == [(s, s * 2_097_152) for s in (1000, 2000, 3000)], records
        rows = [
            json.loads(line)
            for line in (work / "standins/trainer-output/probes.jsonl").read_text().splitlines()
        ]
        assert sorted({(r["step"], r["tokens_seen"]) for r in rows}) == [
            (1000, 1000 * 65_536),
            (2000, 2000 * 65_536),
        ]
    if name == "wandb.md":
        assert list((work / "runs").glob("compare-*/compare.png"))


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.name)
def test_the_commands_that_do_not_run_here_parse(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the documented paths are the checkout's
    checked = []
    for line, block in bash_blocks(path):
        for words in commands(block) if marked(block) else []:
            argv = bytecanary_argv(words)
            if argv:
                said = parses(argv)
                assert not said, f"{path.name}:{line}: {shlex.join(words)}: {said}"
                checked.append(argv[0])
    assert checked or not any(marked(b) for _, b in bash_blocks(path))
