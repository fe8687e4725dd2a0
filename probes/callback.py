"""Fire the configured probes at the checkpoints of a training run.

Subclassing ``Checkpoint`` makes Lightning run this after ``ModelCheckpoint`` in the same
hook, so the weights file of the step (``ScheduledCheckpoint.weights_path``) exists: the
probes read that file into a probe model of their own (fp32, on the training device, built
once and reloaded in place), so ``probes.jsonl`` holds what ``bytecanary probe`` gives on the
same file later, and FSDP-sharded or compiled training modules need nothing special. Fires
between checkpoints (``every_tokens``) probe the live module, in eval mode under
``no_grad``, restored after. Under DDP every rank probes its share of the samples,
and rank 0 aggregates the shares: the metrics equal a single-process run. Results are
logged to every logger with ``tokens_seen`` (W&B plots them beside ``val/ppl``) and
appended to ``probes.jsonl`` next to the checkpoints, with each probe's version and
fingerprint. A probe fires at every checkpoint, or at those its ``cadence`` picks from
the planned schedule (``bytecanary.probes.cadence``): every Nth, or log-spaced in tokens.

Every probe is prepared (eval sets found, tasks loaded) before the first training step,
so a misconfigured probe is one error line and nothing trains. At every (re)start the run's
existing checkpoints that lack a record of some probe (the run was killed during its
probes, or a probe was added) are probed from their files, so restarts converge to a
complete records file. Later, a probe that raises is recorded as failed and training goes
on, unless ``strict``.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from bytecanary.probes.common import build_probes, prepare_probe
from bytecanary.probes.records import append_record, completed, make_record
from bytecanary.probes.registry import Probe
from lightning.pytorch.callbacks import Checkpoint
from tqdm.auto import tqdm

from bytecanary import keys
from bytecanary.checkpoints import load_gpt2, probe_checkpoints, step_of
from bytecanary.errors import BytecanaryError
from bytecanary.io import warn


class ProbeCallback(Checkpoint):
    def __init__(
        self,
        probes: list[dict[str, Any] | Probe],
        every_tokens: int | None = None,
        strict: bool = False,
        out: str | Path | None = None,
        source: str | None = None,
    ) -> None:
        """
        Args:
            probes: ``[{name: level0, trial: true}, ...]``, as in the YAML ``probes`` section.
            every_tokens: also fire every this many training tokens (None: checkpoints only).
            strict: a failing probe stops training.
            out: records file (default: ``probes.jsonl`` beside the checkpoints folder).
            source: where ``probes`` came from (a YAML path), named by a bad spec's error.
        """
        self.probes = build_probes(probes, source)
        self.every_tokens, self.strict, self.out, self.source = every_tokens, strict, out, source
        self._prepared: list[tuple[Any, str]] | None = None  # (samples, fingerprint) per probe
        self._last_step = -1
        self._next_tokens = every_tokens or 0
        self._model: torch.nn.Module | None = None  # the probe model checkpoint files load into
        self._steps: list[set[int] | None] = [None] * len(self.probes)  # per probe: its steps (None: all)

    def prepare(self, tokenizer_dir: str | Path, data_dir: str | Path) -> None:
        """Load the tokenizer and prepare every probe; a missing or empty eval set or task
        is one ``BytecanaryError`` naming the probe."""
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        self._prepared = [prepare_probe(p, self._tokenizer, Path(data_dir), self.source) for p in self.probes]

    def on_fit_start(self, trainer, pl_module) -> None:
        if self._prepared is None:
            self.prepare(trainer.datamodule.tokenizer_dir, trainer.datamodule.data_dir)
        folder = getattr(trainer.checkpoint_callback, "dirpath", None)
        if self.out is None:
            self.out = Path(folder).parent / "probes.jsonl" if folder else Path("probes.jsonl")
        self._plan(trainer)
        if folder:
            self._catch_up(trainer, pl_module, Path(folder))

    def _plan(self, trainer) -> None:
        """Each probe's checkpoint steps, from its cadence over the checkpoint callback's
        planned schedule (None: every checkpoint)."""
        schedule = getattr(trainer.checkpoint_callback, "scheduled_steps", None)
        planned = schedule(trainer.max_steps) if schedule is not None and trainer.max_steps > 0 else None
        self._steps = [
            None if probe.cadence.always or planned is None else probe.cadence.steps(planned)
            for probe in self.probes
        ]

    def due(self, step: int | None) -> list[int]:
        """Indices of the probes whose cadence fires at the checkpoint of ``step``."""
        return [i for i, steps in enumerate(self._steps) if steps is None or step in steps]

    def _missing(self, folder: Path) -> list[tuple[str, list[int]]]:
        """(checkpoint, indices of the probes due there without a successful record) of each
        checkpoint."""
        done = completed(self.out)
        todo = []
        for path in probe_checkpoints(folder):
            key = str(path.resolve())
            missing = [
                i
                for i in self.due(step_of(path.name))
                if (key, self.probes[i].name, self.probes[i].version, self._prepared[i][1]) not in done
            ]
            todo += [(key, missing)] if missing else []
        return todo

    def _catch_up(self, trainer, pl_module, folder: Path) -> None:
        """Probe each existing checkpoint that lacks records, with its own weights."""
        todo = trainer.strategy.broadcast(self._missing(folder) if trainer.is_global_zero else None, src=0)
        for path, indices in todo:
            try:
                meta, model = self._load(path, pl_module.device)
            except BytecanaryError as err:  # resuming skips it too; the run rewrites it
                if trainer.is_global_zero:
                    warn(f"{err}; its probes are not caught up")
                continue
            self._run(trainer, model, indices, path, meta.get("step"), meta.get("tokens_seen"))

    def _load(self, path: str, device: torch.device) -> tuple[dict[str, Any], torch.nn.Module]:
        """(metadata, probe model holding ``path``'s weights): built on ``device`` once, then
        loaded in place, so a fire allocates no second model."""
        meta, model = load_gpt2(path, into=self._model)
        self._model = model.to(device)
        return meta, self._model

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return
        weights = getattr(trainer.checkpoint_callback, "weights_path", None)  # written at this step
        tokens = getattr(pl_module, "tokens_seen", None)
        due = bool(self.every_tokens) and tokens is not None and tokens >= self._next_tokens
        if weights is not None or due:
            if due:
                while self._next_tokens <= tokens:
                    self._next_tokens += self.every_tokens
            self.fire(trainer, pl_module, str(Path(weights).resolve()) if weights is not None else None)

    def fire(self, trainer, pl_module, checkpoint: str | None) -> None:
        """Run the probes due at this step (all ranks) on the weights file ``checkpoint`` or,
        with none (an ``every_tokens`` fire), every probe on the live module; record the results."""
        self._last_step = trainer.global_step
        tokens = getattr(pl_module, "tokens_seen", None)
        if checkpoint is not None:
            due = self.due(trainer.global_step)
            if due:
                _, model = self._load(checkpoint, pl_module.device)
                self._run(trainer, model, due, checkpoint, trainer.global_step, tokens)
            return
        model = getattr(pl_module, "model", pl_module)
        model = getattr(model, "_orig_mod", model)
        was_training = model.training
        model.eval()
        try:
            self._run(trainer, model, range(len(self.probes)), None, trainer.global_step, tokens)
        finally:
            model.train(was_training)

    def _run(
        self,
        trainer,
        model,
        indices: Iterable[int],
        checkpoint: str | None,
        step: int | None,
        tokens: int | None,
    ) -> None:
        """Run the probes ``indices`` on ``model``, then log their seconds in one row, summed
        per probe name (a probe listed twice, with other parameters or cadences, is one cost)."""
        seconds: dict[str, float] = {}
        for i in indices:
            record = self._run_one(trainer, model, i, checkpoint, step, tokens)
            if record is not None:
                seconds[record["probe"]] = seconds.get(record["probe"], 0.0) + record["seconds"]
        if seconds:
            row = {keys.probe_seconds(name): round(s, 3) for name, s in seconds.items()}
            row |= {keys.TOKENS_SEEN: tokens} if tokens is not None else {}
            for logger in trainer.loggers:
                logger.log_metrics(row, step=step)

    def _run_one(
        self, trainer, model, index: int, checkpoint: str | None, step: int | None, tokens: int | None
    ) -> dict[str, Any] | None:
        """One probe on ``model`` (every rank its share); rank 0 returns the record."""
        probe, (prepared, params) = self.probes[index], self._prepared[index]
        record = None
        start = time.perf_counter()
        try:
            with torch.no_grad():
                payload: Any = probe.compute(
                    model, self._tokenizer, prepared, trainer.global_rank, trainer.world_size
                )
        except Exception as err:  # recorded, not raised: one probe must not stop training
            payload = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        payloads = _gather(payload, trainer.world_size)
        error = None
        if trainer.is_global_zero:
            failed = [p for p in payloads if isinstance(p, dict) and "error" in p]
            metrics = None
            if failed:
                error = failed[0]["error"]
            else:
                try:
                    probe.record_context = {"checkpoint": checkpoint, "step": step, "tokens_seen": tokens}
                    metrics = probe.aggregate(prepared, payloads)
                except Exception as err:
                    error = f"{type(err).__name__}: {err}"
            record = make_record(
                checkpoint, step, tokens, probe.name, metrics, time.perf_counter() - start, error,
                version=probe.version, params=params,
            )  # fmt: skip
            self._publish(trainer, record)
            error = record["error"]
        error = trainer.strategy.broadcast(error, src=0)
        if error is not None and self.strict:
            first = str(error).strip().splitlines()[0] if str(error).strip() else "failed"
            raise BytecanaryError(f"probe {probe.name} failed at step {step} (run.probe_strict): {first}")
        return record

    def _publish(self, trainer, record: dict[str, Any]) -> None:
        """Append the record, log its metrics with ``tokens_seen``, and say how it went (above
        the progress bar)."""
        append_record(self.out, record)
        if record["metrics"]:
            extra = {"tokens_seen": record["tokens_seen"]} if record["tokens_seen"] is not None else {}
            for logger in trainer.loggers:
                logger.log_metrics({**record["metrics"], **extra}, step=record["step"])
        where = f"probe {record['probe']} at step {record['step']}: {record['seconds']:.1f} s"
        if record["error"]:
            warn(f"{where}, failed: {record['error']}")
        else:
            tqdm.write(f"{where}, {len(record['metrics'])} metrics")


def _gather(payload: Any, world: int) -> list[Any]:
    if world == 1 or not torch.distributed.is_initialized():
        return [payload]
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, payload)
    return gathered
