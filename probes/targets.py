"""What to probe: checkpoint files, HF model folders, model revisions, run and checkpoint folders
(docs/utf8-probes.md, "Probing existing checkpoints"), and how to load one: never running remote
code, anything unreadable one ``BytecanaryError`` naming it.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bytecanary.checkpoints import (
    STATE,
    WEIGHTS,
    checkpoint_data_dir,
    load_gpt2,
    probe_checkpoints,
    read_meta,
    step_of,
    tokenizer_dir,
    weights_id,
)
from bytecanary.errors import BytecanaryError, one_line
from bytecanary.io import read_json
from bytecanary.records import Context

# an HF model folder named for its step: HF Trainer's checkpoint-N, stepN, global_stepN, iter_N
_STEP_FOLDER = re.compile(r"^(?:checkpoint-|global_step|step|iter_)(\d+)$")
# what a model folder holds when its tokenizer was saved beside it (save_pretrained)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")


@dataclass(frozen=True)
class Target:
    """One checkpoint to probe; ``key`` is its ``checkpoint`` field in the records."""

    key: str
    path: str
    kind: str  # "file" (a weights file or a .ckpt) or "hf"
    revision: str | None = None
    id: str | None = None
    """What it is wherever it lies (a weights file's ``weights_id``); None: known by ``key``."""
    tokens_per_step: int | None = None
    """The tokens of one training step of its series (``--tokens_per_step``): its tokens_seen
    where the checkpoint knows only its step (hub revisions, HF folders)."""

    @property
    def step_hint(self) -> int:
        name = self.revision or Path(self.path).name
        found = _STEP_FOLDER.match(name)
        return int(found.group(1)) if found else step_of(name)

    @classmethod
    def file(cls, path: str | Path) -> Target:
        identity = weights_id(path) if Path(path).suffix == WEIGHTS else None
        return cls(str(Path(path).resolve()), str(path), "file", id=identity)

    def context(self, step: int | None, tokens_seen: int | None) -> Context:
        """What its records start with; a tokens_seen the checkpoint knows is never replaced."""
        if tokens_seen is None and step is not None and self.tokens_per_step is not None:
            tokens_seen = step * self.tokens_per_step
        return Context(self.key, step, tokens_seen, self.id)


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    data_dir: Path | None
    step: int | None
    tokens_seen: int | None


def _weights_files(folder: Path) -> list[Path]:
    """The weights files of ``folder`` (or of its ``checkpoints/``) in step order."""
    for where in (folder, folder / "checkpoints"):
        files = probe_checkpoints(where)
        if files:
            return files
    return []


def in_folder(folder: Path) -> list[Target]:
    """The weights files of ``folder`` (or of its ``checkpoints/``) as targets, in step order."""
    return [Target.file(f) for f in _weights_files(folder)]


def hf_series(folder: Path) -> list[Target]:
    """The HF model folders a folder holds as a series, in step order: subfolders named for
    their step (``checkpoint-500``, ``step500``, ``global_step500``, ``iter_500``), or, in the
    hub cache's layout (``models--org--name``), the snapshot each ref (branch, tag) names."""
    refs, snapshots = folder / "refs", folder / "snapshots"
    if refs.is_dir() and snapshots.is_dir():
        named = sorted(p for p in refs.rglob("*") if p.is_file())
        found = [
            (p.relative_to(refs).as_posix(), snapshots / p.read_text(encoding="utf-8").strip()) for p in named
        ]
        targets = [
            Target(f"{folder}@{ref}", str(snap), "hf", ref)
            for ref, snap in found
            if (snap / "config.json").is_file()
        ]
    else:
        subs = [
            p
            for p in folder.iterdir()
            if p.is_dir() and _STEP_FOLDER.match(p.name) and (p / "config.json").is_file()
        ]
        targets = [Target(str(p.resolve()), str(p), "hf") for p in subs]
    return sorted(targets, key=lambda t: (t.step_hint, t.key))


def resolve(paths: list[str], revisions: list[str] | None = None) -> list[Target]:
    """Every checkpoint the PATH arguments name, in step order within each PATH."""
    targets: list[Target] = []
    for raw in paths:
        path = Path(raw)
        if revisions and path.is_dir():  # transformers reads a local folder as checked out
            raise BytecanaryError(
                f"{raw}: --revision names branches or tags of a hub model, but {raw} is a local folder, "
                "whose files load as they are checked out; check each revision out into a folder of "
                "its own and give those folders"
            )
        if revisions:
            targets += [Target(f"{raw}@{rev}", raw, "hf", rev) for rev in revisions]
        elif path.is_file() and path.suffix in (WEIGHTS, STATE):
            targets.append(Target.file(raw))
        elif path.is_dir() and (path / "config.json").is_file():  # with its checkpoints, if any
            targets += [*hf_series(path), Target(str(path.resolve()), raw, "hf")]
        elif path.is_dir() and (found := in_folder(path) or hf_series(path)):
            targets += found
        else:
            raise BytecanaryError(
                f"{raw}: not a checkpoint (.safetensors, .ckpt), an HF model folder, a folder of "
                "checkpoints or of HF model folders (checkpoint-N, stepN, a hub cache's models--org--name), "
                "or (with --revision) a model id"
            )
    return targets


def _hf_info(target: Target) -> dict[str, Any]:
    """``bytecanary.json`` beside an exported model (step, tokens_seen, data_dir), if any."""
    info_path = Path(target.path) / "bytecanary.json"
    return read_json(info_path) if info_path.is_file() else {}


def _trainer_step(target: Target) -> int | None:
    """``global_step`` of HF Trainer's ``trainer_state.json`` in the folder, if any: the step
    of a Trainer output's final model, whose folder name carries none."""
    state_path = Path(target.path) / "trainer_state.json"
    state = read_json(state_path) if state_path.is_file() else None
    step = state.get("global_step") if isinstance(state, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def data_dir_of(target: Target) -> Path | None:
    """The data folder the checkpoint was trained on (its eval sets), from its metadata:
    no model is built, so an already-probed checkpoint is checked cheaply."""
    if target.kind == "file":
        stat = Path(target.path).stat()
        return _file_data_dir(target.path, stat.st_size, stat.st_mtime_ns)
    info = _hf_info(target)
    return Path(info["data_dir"]) if info.get("data_dir") else None


@functools.lru_cache(maxsize=4096)
def _file_data_dir(path: str, size: int, mtime_ns: int) -> Path | None:
    """``data_dir_of`` a checkpoint file, read once per version of the file (a full state's
    metadata means loading all of it)."""
    return checkpoint_data_dir(read_meta(path))


class Loader:
    """Loads targets onto one device, in ``dtype``. Weights files of one model shape load in
    place into one model, so probing a series allocates no second model; tokenizers are read
    once."""

    def __init__(self, device: Any, dtype: torch.dtype = torch.float32) -> None:
        self.device, self.dtype = device, dtype
        self._model: Any = None
        self._shape: dict[str, Any] | None = None
        self._tokenizers: dict[str, Any] = {}

    def tokenizer(self, folder: str | Path) -> Any:
        from transformers import AutoTokenizer

        key = str(Path(folder).resolve())
        if key not in self._tokenizers:
            self._tokenizers[key] = AutoTokenizer.from_pretrained(key)
        return self._tokenizers[key]

    def load(self, target: Target) -> Loaded:
        """Model, tokenizer and where they came from."""
        if target.kind == "file":
            # a weights file's shape is in its header; a full state is not read twice to know it
            weights = Path(target.path).suffix == WEIGHTS
            shape = read_meta(target.path).get("gpt2_config") if weights else None
            reuse = self._model if shape is not None and shape == self._shape else None
            meta, model = load_gpt2(target.path, into=reuse)
            self._model, self._shape = model.to(self.device, self.dtype), shape
            tokenizer = self.tokenizer(tokenizer_dir(meta, target.path))
            data_dir = checkpoint_data_dir(meta)
            return Loaded(self._model, tokenizer, data_dir, meta.get("step"), meta.get("tokens_seen"))
        model, tokenizer = _load_hf(target)
        info = _hf_info(target)
        hint = target.step_hint
        step = info["step"] if "step" in info else hint if hint >= 0 else _trainer_step(target)
        return Loaded(
            model.to(self.device, self.dtype), tokenizer, data_dir_of(target), step, info.get("tokens_seen")
        )


def _load_hf(target: Target) -> tuple[Any, Any]:
    """An HF model and its tokenizer, the tokenizer first, so one without byte tokens is refused before
    the model loads; weights with missing, unknown or misshapen parameters are refused rather than
    probed as random (the first mismatch named, with both shapes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bytecanary.bytecodec import ByteCodec

    folder = Path(target.path)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        # transformers would quietly fall back to a tokenizer of the model type
        wanted = " or ".join(TOKENIZER_FILES[:2])
        raise BytecanaryError(f"{target.path}: no tokenizer beside the model (no {wanted})")
    with one_line(f"{target.key}: cannot load the tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(
            target.path, revision=target.revision, trust_remote_code=False
        )
    try:
        ByteCodec.from_tokenizer(tokenizer)
    except ValueError as err:  # UnsupportedTokenizerError: no complete set of byte tokens
        raise BytecanaryError(f"{target.key}: {err}") from None
    with one_line(f"{target.key}: cannot load the model"):
        model, info = AutoModelForCausalLM.from_pretrained(
            target.path,
            revision=target.revision,
            trust_remote_code=False,
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # loaded, to be named below rather than behind a table
        )
    order = {name: i for i, name in enumerate(model.state_dict())}
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda m: order.get(m[0], len(order)))
    if mismatched:
        name, in_file, in_config = mismatched[0]
        raise BytecanaryError(
            f"{target.key}: weights do not fit the config: {name} is {list(in_file)} in the checkpoint's "
            f"files, {list(in_config)} in the config ({len(mismatched)} tensors differ)"
        )
    for what, names in (("missing from", "missing_keys"), ("unknown to", "unexpected_keys")):
        found = sorted(info.get(names) or ())
        if found:
            first = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            raise BytecanaryError(
                f"{target.key}: {len(found)} weights {what} the checkpoint's files for its architecture "
                f"({type(model).__name__}): {first}; it would be probed as a random model"
            )
    return model.eval(), tokenizer


def watch_target(path: str | Path) -> Path:
    """``--watch PATH``: a folder, or a path where one may yet appear (a run not started yet);
    anything else is one error at start, before any model loads."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BytecanaryError(f"--watch {path}: not a folder (give a run folder or its checkpoints/)")
    return path


def appeared(folder: Path, limit: float, interval: float) -> None:
    """Return once ``folder`` exists, saying first that it waits, for at most ``limit``
    seconds: a sidecar may start before its training, and a mistyped path must not hold it."""
    if folder.is_dir():
        return
    print(f"waiting up to {limit:g} s (--series.idle_limit) for {folder} to appear", flush=True)
    deadline = time.monotonic() + limit
    while not folder.is_dir():
        left = deadline - time.monotonic()
        if folder.exists() or left <= 0:
            what = "is not a folder" if folder.exists() else f"did not appear in {limit:g} s"
            raise BytecanaryError(f"--watch {folder}: {what} (give a run folder or its checkpoints/)")
        time.sleep(min(interval, left))


def watch(folder: Path, interval: float) -> Iterator[list[Target]]:
    """Yield the checkpoints that appeared or changed (size, mtime) in ``folder`` since the
    last look, forever: a file caught half-written comes again once it is whole. Only files
    that changed are read."""
    seen: dict[Path, tuple[int, int]] = {}
    while True:
        fresh = []
        for path in _weights_files(folder) if folder.exists() else []:
            try:
                st = path.stat()
            except FileNotFoundError:  # replaced between the listing and now
                continue
            if seen.get(path) != (st.st_size, st.st_mtime_ns):
                seen[path] = (st.st_size, st.st_mtime_ns)
                fresh.append(Target.file(path))
        yield fresh
        time.sleep(interval)
