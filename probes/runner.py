"""``bytecanary probe``: attach the probes to existing checkpoints.

PATH is a checkpoint file (a run's weights file ``step{N}.safetensors``, or a Lightning
``.ckpt``), an HF model folder, a folder of checkpoints or a run folder (its weights files,
and the ``.ckpt`` files of runs from before them, probed in step order), or, with
``--revision``, a model id whose revisions form a series (Pythia's ``step1000``...).
Records go to a ``probes.jsonl`` of the training callback's shape, and (checkpoint, probe)
pairs already there are skipped, so a rerun after a crash does only what is missing: a
pair counts as done only for the probe's current version and fingerprint (parameters and
eval files), so a changed probe is redone and nothing else.
``--watch DIR`` follows a running training and probes each new checkpoint until
interrupted; a checkpoint that does not load yet (still being written, or corrupt) is
skipped with a warning and tried again once its file changes. Each probe is prepared (its
eval set read) once per tokenizer and data folder, before a model of that data runs. Two
processes may write one ``--out``: a pair the other finished meanwhile is skipped, and
``append_record`` never appends a duplicate. Printing the summary is the caller's job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from bytecanary.probes.common import build_probes, prepare_probe, validate_specs
from bytecanary.probes.records import append_record, completed, make_record
from bytecanary.probes.registry import Probe
from tqdm.auto import tqdm

from bytecanary.checkpoints import (
    STATE,
    WEIGHTS,
    checkpoint_data_dir,
    load_gpt2,
    probe_checkpoints,
    read_meta,
    step_of,
    tokenizer_dir,
)
from bytecanary.config import read_yaml
from bytecanary.errors import BytecanaryError
from bytecanary.io import check_output, read_json, warn

# what a model folder holds when its tokenizer was saved beside it (save_pretrained)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")


@dataclass(frozen=True)
class Target:
    """One checkpoint to probe; ``key`` is its ``checkpoint`` field in the records."""

    key: str
    path: str
    kind: str  # "file" (a weights file or a .ckpt) or "hf"
    revision: str | None = None

    @property
    def step_hint(self) -> int:
        return step_of(self.revision or Path(self.path).name)


def _ckpts_in(folder: Path) -> list[Target]:
    """The probe checkpoints of ``folder`` (or of its ``checkpoints/``) in step order;
    ``last.ckpt`` only when there is nothing else."""
    for where in (folder, folder / "checkpoints"):
        files = probe_checkpoints(where) or [f for f in [where / "last.ckpt"] if f.is_file()]
        if files:
            return [Target(str(f.resolve()), str(f), "file") for f in files]
    return []


def resolve(paths: list[str], revisions: list[str] | None = None) -> list[Target]:
    """Every checkpoint the PATH arguments name, in step order within each PATH."""
    targets: list[Target] = []
    for raw in paths:
        path = Path(raw)
        if revisions:
            targets += [Target(f"{raw}@{rev}", raw, "hf", rev) for rev in revisions]
        elif path.is_file() and path.suffix in (WEIGHTS, STATE):
            targets.append(Target(str(path.resolve()), raw, "file"))
        elif path.is_dir() and (path / "config.json").is_file():
            targets.append(Target(str(path.resolve()), raw, "hf"))
        elif path.is_dir() and _ckpts_in(path):
            targets += _ckpts_in(path)
        else:
            raise BytecanaryError(
                f"{raw}: not a checkpoint (.safetensors, .ckpt), an HF model folder, "
                "a folder of checkpoints, or (with --revision) a model id"
            )
    return targets


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    data_dir: Path | None
    step: int | None
    tokens_seen: int | None


def _hf_info(target: Target) -> dict[str, Any]:
    """``bytecanary.json`` beside an exported model (step, tokens_seen, data_dir), if any."""
    info_path = Path(target.path) / "bytecanary.json"
    return read_json(info_path) if info_path.is_file() else {}


def data_dir_of(target: Target) -> Path | None:
    """The data folder the checkpoint was trained on (its eval sets), from its metadata:
    no model is built, so an already-probed checkpoint is checked cheaply."""
    if target.kind == "file":
        return checkpoint_data_dir(read_meta(target.path), target.path)
    info = _hf_info(target)
    return Path(info["data_dir"]) if info.get("data_dir") else None


def load(target: Target, device: str) -> Loaded:
    """Model, tokenizer and where they came from; anything unreadable is one error naming it."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if target.kind == "file":
        meta, model = load_gpt2(target.path)
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir(meta, target.path)))
        data_dir = checkpoint_data_dir(meta, target.path)
        return Loaded(model.to(device), tokenizer, data_dir, meta.get("step"), meta.get("tokens_seen"))
    folder = Path(target.path)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        # transformers would quietly fall back to a tokenizer of the model type
        wanted = " or ".join(TOKENIZER_FILES[:2])
        raise BytecanaryError(f"{target.path}: no tokenizer beside the model (no {wanted})")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            target.path, revision=target.revision, trust_remote_code=False
        )
        tokenizer = AutoTokenizer.from_pretrained(
            target.path, revision=target.revision, trust_remote_code=False
        )
    except (OSError, ValueError, SafetensorError) as err:  # SafetensorError: a truncated weights file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BytecanaryError(f"{target.key}: cannot load the model: {first}") from None
    info = _hf_info(target)
    step = info.get("step", target.step_hint if target.step_hint >= 0 else None)
    return Loaded(model.eval().to(device), tokenizer, data_dir_of(target), step, info.get("tokens_seen"))


def with_cli_params(spec: dict[str, Any], trial: bool, eval_sets: dict[str, str | None]) -> dict[str, Any]:
    """``spec`` with the command line's ``--trial`` and eval-set files; the spec's own values win."""
    params: dict[str, Any] = {"trial": trial}
    if eval_sets.get(spec["name"]):
        params["eval_sets"] = [eval_sets[spec["name"]]]
    return {**params, **spec}


def probe_specs(config: str | None, names: list[str] | None) -> list[dict[str, Any]]:
    """``{name, **params}`` per probe: the ``probes:`` list of a YAML config (a training
    config's, so a checkpoint is probed as its training probed it), kept to ``names`` when
    given and checked against each probe's parameters; without a config, ``names`` with
    default parameters."""
    if config is None:
        return [{"name": n} for n in names or ["level0", "level1"]]
    doc = read_yaml(config)
    specs = doc.get("probes") if isinstance(doc, dict) else None
    if not isinstance(specs, list) or not all(isinstance(s, dict) and "name" in s for s in specs):
        raise BytecanaryError(f"{config}: probes: expected a list of {{name: ..., <parameters>}} mappings")
    chosen = [dict(s) for s in specs if names is None or s["name"] in names]
    missing = sorted(set(names or []) - {s["name"] for s in chosen})
    if missing:
        raise BytecanaryError(f"{config}: probes: no entry for {', '.join(missing)}")
    validate_specs(chosen, source=config)
    return chosen


def pending(targets: list[Target], probes: list[Probe], out: Path) -> list[tuple[Target, Probe]]:
    """(target, probe) pairs with no successful record of the probe's version and fingerprint.
    The fingerprint may read the checkpoint's data folder, which is looked up only for a
    checkpoint that has records at all."""
    finished = completed(out)
    todo = []
    for target in targets:
        mine = {(name, version, params) for key, name, version, params in finished if key == target.key}
        data_dir = data_dir_of(target) if mine else None
        todo += [
            (target, p)
            for p in probes
            if not mine or (p.name, p.version, p.fingerprint(data_dir)) not in mine
        ]
    return todo


def probe_one(target: Target, loaded: Loaded, probe: Probe, prepared: Any, params: str) -> dict[str, Any]:
    """The record of one prepared probe on one loaded checkpoint; a probe bug becomes a failed record."""
    start = time.perf_counter()
    try:
        with torch.no_grad():
            payload = probe.compute(loaded.model, loaded.tokenizer, prepared)
            context = {"checkpoint": target.key, "step": loaded.step, "tokens_seen": loaded.tokens_seen}
            probe.record_context = context  # the first fields of its per-sample records
            metrics, error = probe.aggregate(prepared, [payload]), None
    except BytecanaryError:
        raise  # bad input (eval set, tokenizer): the user must fix it
    except Exception as err:  # a probe bug must not lose the other probes' results
        metrics, error = None, f"{type(err).__name__}: {err}"
    return make_record(
        target.key,
        loaded.step,
        loaded.tokens_seen,
        probe.name,
        metrics,
        time.perf_counter() - start,
        error,
        version=probe.version,
        params=params,
    )


class _Session:
    """One ``probe_targets`` call: the records file, the prepared probes (cached per tokenizer
    and data folder) and where the new records go."""

    def __init__(self, out: Path, wandb_run: Any) -> None:
        self.out, self.wandb_run = out, wandb_run
        self.prepared: dict[tuple, tuple[Any, str]] = {}
        self.new: list[dict[str, Any]] = []

    def prepare(self, target: Target, loaded: Loaded, probe: Probe) -> tuple[Any, str]:
        key = (id(probe), str(loaded.data_dir), loaded.tokenizer.name_or_path, target.revision)
        if key not in self.prepared:
            self.prepared[key] = prepare_probe(probe, loaded.tokenizer, loaded.data_dir)
        return self.prepared[key]

    def probe(self, target: Target, loaded: Loaded, probe: Probe) -> None:
        """Probe and append, unless another process finished the pair meanwhile."""
        prepared, params = self.prepare(target, loaded, probe)
        if (target.key, probe.name, probe.version, params) in completed(self.out):
            return
        record = probe_one(target, loaded, probe, prepared, params)
        if not append_record(self.out, record):
            return
        self.new.append(record)
        if record["error"]:
            warn(f"probe {probe.name} on {target.key} failed: {record['error']}")
        elif self.wandb_run is not None:
            axes = (("tokens_seen", loaded.tokens_seen), ("step", loaded.step))
            extra = {k: v for k, v in axes if v is not None}
            self.wandb_run.log({**record["metrics"], **extra}, checkpoint=target.key)


def probe_targets(
    targets: list[Target],
    probes: list[Probe],
    out: Path,
    device: str | None = None,
    wandb_run: Any = None,
    retry: bool = False,
) -> list[dict[str, Any]]:
    """Probe every (target, probe) pair not yet in ``out``; returns the new records. With
    ``retry`` (watching), a checkpoint that does not load is skipped with a warning."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    todo = pending(targets, probes, out)
    if not todo:
        print(f"nothing to do: every checkpoint and probe is already in {out}")
        return []
    session = _Session(out, wandb_run)
    bar = tqdm(total=len(todo), desc="probing", unit="probe")
    for target in dict.fromkeys(t for t, _ in todo):
        mine = [p for t, p in todo if t == target]
        try:
            loaded = load(target, device)
        except BytecanaryError as err:
            if not retry:
                raise
            warn(f"{err}; skipped, tried again when the file changes")
            bar.update(len(mine))
            continue
        for probe in mine:  # every probe prepared before this model runs
            session.prepare(target, loaded, probe)
        for probe in mine:
            bar.set_postfix_str(f"{Path(target.path).name} {probe.name}")
            session.probe(target, loaded, probe)
            bar.update(1)
        del loaded
    bar.close()
    return session.new


def watch(folder: Path, interval: float) -> Iterator[list[Target]]:
    """Yield the checkpoints that appeared or changed (size, mtime) in ``folder`` since the
    last look, forever: a file caught half-written comes again once it is whole."""
    seen: dict[str, tuple[int, int]] = {}
    while True:
        fresh = []
        for target in _ckpts_in(folder) if folder.exists() else []:
            try:
                st = Path(target.path).stat()
            except FileNotFoundError:  # replaced between the listing and now
                continue
            if Path(target.path).name != "last.ckpt" and seen.get(target.key) != (st.st_size, st.st_mtime_ns):
                seen[target.key] = (st.st_size, st.st_mtime_ns)
                fresh.append(target)
        yield fresh
        time.sleep(interval)


def _start_wandb(project: str, out: Path, config: dict[str, Any]) -> Any:
    import wandb

    from bytecanary.tracking import ViewedRun, define_tokens_seen_axis, wandb_mode

    out.parent.mkdir(parents=True, exist_ok=True)
    wandb_run = wandb.init(
        project=project,
        dir=str(out.parent),
        job_type="probe",
        mode=wandb_mode(),
        config=config,
        settings={"silent": True},
    )
    define_tokens_seen_axis(wandb_run)
    return ViewedRun(wandb_run)


def run(
    paths: list[str],
    probes: list[dict[str, Any]],
    out: str = "probes.jsonl",
    trial: bool = False,
    eval_sets: dict[str, str | None] | None = None,
    wandb_project: str | None = None,
    watch_dir: str | None = None,
    interval: float = 30.0,
    revisions: list[str] | None = None,
    device: str | None = None,
    finish: Callable[[Path, Any], None] | None = None,
) -> int:
    """The ``bytecanary probe`` command: probe ``paths`` (then ``watch_dir``) into ``out``.

    ``wandb_project`` (None: no W&B) gets the metrics as they come; ``finish`` is called
    with (records path, W&B run) before that run is closed, e.g. to add cross-checkpoint
    statistics to its summary. The caller prints the summary table."""
    out_path = check_output(out)  # now, not after hours of probing
    targets = resolve(paths, revisions) if paths else []
    built = build_probes([with_cli_params(s, trial, eval_sets or {}) for s in probes])
    if targets:  # bad inputs fail before any model loads (a watched folder's data is known later)
        data_dir = data_dir_of(targets[0])
        for probe in built:
            probe.validate(data_dir)
    wandb_run = None
    if wandb_project:
        wandb_run = _start_wandb(wandb_project, out_path, {"paths": paths, "probes": probes, "trial": trial})
    try:
        probe_targets(targets, built, out_path, device, wandb_run)
        if watch_dir:
            print(f"watching {watch_dir} for new checkpoints (Ctrl-C to stop)")
            try:
                for fresh in watch(Path(watch_dir), interval):
                    if fresh:
                        probe_targets(fresh, built, out_path, device, wandb_run, retry=True)
            except KeyboardInterrupt:
                print("stopped watching")
        if wandb_run is not None and finish is not None:
            finish(out_path, wandb_run)
    finally:
        if wandb_run is not None:
            from bytecanary.tracking import finish_wandb

            sync = finish_wandb()
            if sync:
                print(f"W&B offline run saved; upload it with: {sync}")
    return 0
