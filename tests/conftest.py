"""Shared fixtures: tiny tokenizers of every family and a small prepared data folder
(built in-process in seconds; nothing downloads)."""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from . import sharing, warm

if TYPE_CHECKING:
    from transformers import ByT5Tokenizer, PreTrainedTokenizerFast

# the environment each test starts in (``session_environment``) and the warm servers' key
SESSION_ENVIRONMENT: dict[str, str] = {}
HUB_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """A process that runs tests shares the cores, loads every installed probe (which declares how
    its keys are shown, as in `bytecanary report`) and notes its environment; pytest-xdist's
    controller only hands tests out, and importing torch there would delay the workers' start."""
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return
    _offline_hub(config)
    _share_the_cores()
    from bytecanary.probes import load_probes

    load_probes()
    importlib.import_module("lightning")  # which sets PYTORCH_NVML_BASED_CUDA_CHECK on import
    SESSION_ENVIRONMENT.update(os.environ)


def _offline_hub(config: pytest.Config) -> None:
    """Nothing reaches a hub, and the hub cache is this process's own, where a test puts the hub
    models it probes; set before huggingface_hub's import reads both, for every command alike."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HUB_CACHE"] = config.stash[HUB_CACHE] = tempfile.mkdtemp(prefix="bytecanary-hub-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if HUB_CACHE in config.stash:
        shutil.rmtree(config.stash[HUB_CACHE], ignore_errors=True)


def _share_the_cores() -> None:
    """Under pytest-xdist each worker takes its share of the cores (unless OMP_NUM_THREADS says
    otherwise), it and the processes its tests start: threads beyond the cores slow all down."""
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(share)
        torch.set_num_threads(share)


SAMPLE_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "日本語の文章です。東京は大きい。",
    "한국어 문장입니다. 서울은 큽니다.",
    "中文句子。北京很大。",
] * 20


def _byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials + [f"<0x{b:02X}>" for b in range(256)],
        limit_alphabet=60,
        show_progress=False,
    )
    tok.train_from_iterator(SAMPLE_TEXT, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )


def _gpt2_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SAMPLE_TEXT, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def _session_environment() -> None:
    test = os.environ.get("PYTEST_CURRENT_TEST")  # pytest's own, removed by pytest
    os.environ.clear()
    os.environ.update(SESSION_ENVIRONMENT)
    if test is not None:
        os.environ["PYTEST_CURRENT_TEST"] = test


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each pytest-xdist worker's share opens with its part of the long tests (marker ``slow``) and
    ends on short ones (``sharing.worker_order``)."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    items[:] = sharing.worker_order(items, workers)


@pytest.fixture(autouse=True)
def session_environment() -> Iterator[None]:
    """Each test starts in the environment this process started with, as a user's shell does:
    commands run in-process set variables (Lightning's seed, datatrove's executor, W&B's
    service, which a child that inherits it would share), and the warm servers are keyed on it."""
    _session_environment()
    yield
    _session_environment()


@pytest.fixture(scope="session", autouse=True)
def warm_server() -> None:
    """The warm server of the session's environment starts importing while the first tests run."""
    warm.start(SESSION_ENVIRONMENT)


@pytest.fixture(scope="session")
def byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    return _byte_fallback_tokenizer()


@pytest.fixture(scope="session")
def gpt2_tokenizer() -> PreTrainedTokenizerFast:
    return _gpt2_tokenizer()


@pytest.fixture(scope="session")
def bytes_tokenizer() -> ByT5Tokenizer:
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer()


@pytest.fixture(scope="session", params=["byte_fallback", "gpt2", "bytes"])
def any_tokenizer(request, byte_fallback_tokenizer, gpt2_tokenizer, bytes_tokenizer):
    return request.param, {
        "byte_fallback": byte_fallback_tokenizer,
        "gpt2": gpt2_tokenizer,
        "bytes": bytes_tokenizer,
    }[request.param]


SMALL = {
    "name": "small",
    "seed": 3,
    "mixture": {"en": 0.1, "ja": 0.3, "ko": 0.3, "zh": 0.3},
    "val_fraction": 0.05,
    "sources": [
        {"language": "en", "synthetic": {"megabytes": 0.15}},
        {"language": "ja", "synthetic": {"megabytes": 0.4}},
        {"language": "ko", "synthetic": {"megabytes": 0.4}},
        {"language": "zh", "synthetic": {"megabytes": 0.4}},
    ],
    "tokenizer": {"vocab_size": 1200, "character_coverage": 0.995},
    "eval": {"max_per_tier": 40, "snapshot_tokens": [50000], "level1_per_language": 16},
}


def write_config(path: Path, **overrides) -> Path:
    cfg = {**SMALL, **overrides}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def small_data(tmp_path_factory) -> Path:
    """The tests' prepared data folder (``SMALL``), one for all workers: tests only read it."""
    from bytecanary.data.prepare import prepare

    def build(root: Path) -> Path:
        return prepare(write_config(root / "small.yaml"), root / "data")

    return sharing.built_once(tmp_path_factory, "small", build)


# --- a micro GPT-2 config over the small data, trained as a subprocess like a user would ---

MICRO = {
    "model": {
        "arch": {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 32},
        "optim": {"lr": 3e-3, "warmup_steps": 4},
    },
    "data": {"batch_size": 8, "val_tokens": 512},
    "trainer": {
        "accelerator": "cpu",
        "devices": 1,
        "max_steps": 12,
        "val_check_interval": 4,
        "log_every_n_steps": 2,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    },
    "run": {"checkpoint_every": 4, "log_spaced_until": None, "wandb": False},
}


@pytest.fixture
def micro(tmp_path, small_data) -> Path:
    path = tmp_path / "micro.yaml"
    cfg = {
        **MICRO,
        "data": {**MICRO["data"], "data_dir": str(small_data)},
        "run": {**MICRO["run"], "root": str(tmp_path / "runs")},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


DDP_PRESET = Path(__file__).resolve().parents[1] / "configs" / "strategy" / "ddp.yaml"
DDP_2_CPU = ("--trainer.accelerator", "cpu", "--trainer.devices", "2", "--config", str(DDP_PRESET))


def train_cmd(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "bytecanary.cli", "train", "--config", str(config), *args]


def run_train(config: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = warm.run(
        train_cmd(config, *args),
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def wandb_records(run_dir: Path, kind: str) -> list[dict]:
    """Records of an offline W&B run, read back with W&B's own log inspector."""
    run_dir = Path(run_dir)
    logs = [run_dir] if run_dir.is_file() else sorted(run_dir.rglob("*.wandb"))
    state = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in logs)
    lines = _inspected(str(run_dir), state).splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [r[kind] for r in records if r.get("type") == kind]


@functools.lru_cache(maxsize=16)
def _inspected(run_dir: str, state: tuple) -> str:
    """The inspector's output for ``run_dir`` while its log files are in ``state`` (paths, sizes,
    times): a test that asks for several kinds of records starts it once."""
    wandb_bin = Path(sys.executable).parent / "wandb"
    out = subprocess.run(
        [str(wandb_bin), "leet", "inspect", "--json", run_dir], capture_output=True, text=True, check=True
    )
    return out.stdout


def assert_same_measurement(got: dict[str, float], want: dict[str, float], tol: float = 1e-5) -> None:
    """Two computations of one model's probe (other processes, ranks or thread counts): the
    same keys, and every smooth metric (``display.smooth``) within ``tol``. Greedy metrics are
    not compared: a near tie flips with rounding, which differs between such computations."""
    from bytecanary import display

    assert got.keys() == want.keys()
    smooth = [k for k in want if display.smooth(k)]
    assert smooth, "no smooth metric to compare"
    for k in smooth:
        assert got[k] == pytest.approx(want[k], rel=tol, abs=tol, nan_ok=True), k


@contextmanager
def installed_plugin(folder: Path, monkeypatch, modules: dict[str, str]) -> Iterator[None]:
    """A package ``toyprobe`` of ``modules`` (name: source) whose entry point registers the probe
    ``toy``, with the metadata file every installed package has, installed for a test and then
    forgotten."""
    from bytecanary import display, keys
    from bytecanary.probes import registry

    (folder / "toyprobe-0.1.dist-info").mkdir(parents=True)
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    (folder / "toyprobe-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toyprobe\nVersion: 0.1\n"
    )
    (folder / "toyprobe-0.1.dist-info" / "entry_points.txt").write_text(
        "[bytecanary.probes]\ntoy = toyprobe\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    display.discover.cache_clear()
    yield
    registry.PROBES.pop("toy", None)
    display.DECLARED.pop("toy", None)
    keys.METRICS.pop("logprob", None)
    for name in modules:
        sys.modules.pop(name, None)
    display.discover.cache_clear()
