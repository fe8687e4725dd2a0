"""Fire the configured probes at a training run's checkpoints, on the weights file just written,
or between them on the live module, through the same ``Pipeline`` as ``bytecanary probe``; its
inputs are checked before the first step (docs/training.md, docs/faults.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Checkpoint
from tqdm.auto import tqdm

from bytecanary import keys, records
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_jsonl, warn
from bytecanary.probes.inputs import Inputs
from bytecanary.probes.numerics import probe_dtype
from bytecanary.probes.pipeline import Pipeline
from bytecanary.probes.registry import Probe
from bytecanary.probes.specs import ProbeSpec, build_probes
from bytecanary.probes.targets import Loaded, Loader, Target, in_folder
from bytecanary.records import Context, Record


def sharded_strategies() -> tuple[type, ...]:
    """Lightning's strategies that shard the training module: no rank holds the whole live
    module, so it cannot be probed between checkpoints (the weights files are whole)."""
    from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy, ModelParallelStrategy

    return (FSDPStrategy, DeepSpeedStrategy, ModelParallelStrategy)


def live_probes_refused(strategy: str) -> str:
    """The one line refusing ``run.probe_every_tokens`` under the sharding ``strategy``."""
    return (
        f"run.probe_every_tokens: probes between checkpoints run on the live module, which {strategy} "
        "shards; probe at checkpoints instead (run.checkpoint_every, a probe's cadence) or train with DDP"
    )


class ProbeCallback(Checkpoint):
    def __init__(
        self,
        probes: list[ProbeSpec | dict[str, Any] | Probe],
        every_tokens: int | None = None,
        strict: bool = False,
        out: str | Path | None = None,
        source: str | None = None,
        dtype: str = "auto",
        metrics: str | Path | None = None,
    ) -> None:
        """
        Args:
            probes: ``[{name: level0, trial: true}, ...]``, as in the YAML ``probes`` section
                (``ProbeSpec``s, as training's parser reads them, or plain mappings).
            every_tokens: also fire every this many training tokens (None: checkpoints only).
            strict: a failing probe stops training.
            out: records file (default: ``probes.jsonl`` beside the checkpoints folder).
            source: where ``probes`` came from (a YAML path), named by a bad spec's error.
            dtype: what the probe model computes in: auto (bfloat16 on CUDA, else float32),
                float32 or bfloat16, as ``bytecanary probe --dtype``.
            metrics: the run's metrics log (``JsonlLogger``'s file): at training start, the
                records it lacks the cells of are logged again (None: never looked at).
        """
        self.probes = build_probes(probes, source)
        self.every_tokens, self.strict, self.out, self.source = every_tokens, strict, out, source
        self.dtype = dtype
        self.metrics = Path(metrics) if metrics is not None else None
        self._logging = metrics is None
        """Whether a record is logged as it is appended: with ``metrics``, from training's start
        on, when ``_restore`` has logged those appended before (the catch-up's)."""
        self.pipeline: Pipeline | None = None
        """Built at fit start, when the records file and the device are known."""
        self._inputs: Inputs | None = None
        self._loader: Loader | None = None
        self._tokenizer: Any = None
        self._data_dir: Path | None = None
        self._trainer: Any = None
        self._last_step = -1
        self._pending: tuple[Any, Any, Path | None] | None = None
        """(trainer, module, weights file) of a step whose probes wait for its validation."""
        self._next_tokens = every_tokens or 0
        self._steps: list[set[int] | None] = [None] * len(self.probes)  # per probe: its steps (None: all)

    def prepare(self, tokenizer_dir: str | Path, data_dir: str | Path) -> None:
        """Check every probe's inputs on ``data_dir`` and prepare its samples (``Inputs``, which
        the pipeline checks through), before the first step; a missing or empty eval set or
        task is one ``BytecanaryError`` naming the probe."""
        self._tokenizer, self._data_dir = Loader("cpu").tokenizer(tokenizer_dir), Path(data_dir)
        self._inputs = Inputs(self.probes, self.source)
        self._inputs.check(self._data_dir)
        for index in range(len(self.probes)):
            self._inputs.prepare(index, self._tokenizer, self._data_dir)

    def on_fit_start(self, trainer, pl_module) -> None:
        """Build the pipeline, now that its records file and the module's device are known."""
        if self._inputs is None:
            self.prepare(trainer.datamodule.tokenizer_dir, trainer.datamodule.data_dir)
        folder = getattr(trainer.checkpoint_callback, "dirpath", None)
        if self.out is None:
            self.out = Path(folder).parent / "probes.jsonl" if folder else Path("probes.jsonl")
        out = records.check_file(self.out)  # before a step trains, not at its checkpoint
        dtype = probe_dtype(self.dtype, pl_module.device)
        self._loader = Loader(pl_module.device, dtype)
        strict = "run.probe_strict" if self.strict else None
        self.pipeline = Pipeline(
            self.probes, out, strict, self.source, self._publish, dtype=dtype, inputs=self._inputs
        )
        self._trainer = trainer
        self._plan(trainer)
        if folder:
            self._catch_up(Path(folder))

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

    def missing(self, folder: Path) -> list[tuple[Target, list[int]]]:
        """(checkpoint, indices of the probes due there without a successful record) of each
        checkpoint of ``folder``."""
        return self.pipeline.todo(in_folder(folder), lambda target: self.due(target.step_hint))

    def _catch_up(self, folder: Path) -> None:
        """Probe each existing checkpoint that lacks records, with its own weights."""
        trainer = self._trainer
        todo = trainer.strategy.broadcast(self.missing(folder) if trainer.is_global_zero else None, src=0)
        for target, indices in todo:
            self._fire(target, indices, catching_up=True)

    def on_train_start(self, trainer, pl_module) -> None:
        """Lightning runs checkpoint callbacks last, so the metrics log is already cut back to
        the resumed step (``TruncateMetricsOnStart``) here."""
        self._restore(trainer)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._restore(trainer)  # a resume with no step left to train has no training start

    def _restore(self, trainer) -> None:
        """Log each record of this run's training (no ``worker``) whose cells the metrics log
        lacks, at its own step, once; then log records as they are appended."""
        if self._logging:
            return
        self._logging = True
        if not trainer.is_global_zero:
            return
        rows = read_jsonl(self.metrics, on_bad=warn) if self.metrics.exists() else []
        made = [
            r
            for r in records.read(self.pipeline.out)
            if r.worker is None and r.metrics and r.step is not None
        ]
        for record in unlogged(made, rows):
            self._log(record)

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
            self._pending = (trainer, pl_module, weights)

    def on_validation_end(self, trainer, pl_module) -> None:
        self._fire_pending()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._fire_pending()

    def on_train_end(self, trainer, pl_module) -> None:
        self._fire_pending()

    def _fire_pending(self) -> None:
        """Fire the probes due at the last step once its validation, if it had one, is logged:
        a kill during the probes then loses no validation row (the resumed run starts after
        the step's full state, and would not validate that step again)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self.fire(*pending)

    def fire(self, trainer, pl_module, checkpoint: str | Path | None) -> None:
        """Run the probes due at this step (all ranks) on the weights file ``checkpoint`` or,
        with none (an ``every_tokens`` fire), every probe on the live module; record the results."""
        self._last_step = trainer.global_step
        self._trainer = trainer
        if checkpoint is not None:
            indices = self.due(trainer.global_step)
            if indices:
                self._fire(Target.file(checkpoint), indices)
            return
        if isinstance(trainer.strategy, sharded_strategies()):  # the CLI refuses it before training
            raise BytecanaryError(live_probes_refused(type(trainer.strategy).__name__))
        # a module whose training model is no transformers one gives a view of its weights
        hf_model = getattr(pl_module, "hf_model", None)
        live = hf_model() if hf_model is not None else getattr(pl_module, "model", pl_module)
        model = getattr(live, "_orig_mod", live)
        was_training = model.training
        model.eval()
        context = Context(None, trainer.global_step, getattr(pl_module, "tokens_seen", None))
        try:
            live = Loaded(model, self._tokenizer, self._data_dir, context.step, context.tokens_seen)
            self._log_seconds(self.pipeline.measure(live, range(len(self.probes)), context), context)
        finally:
            model.train(was_training)

    def _fire(self, target: Target, indices: list[int], catching_up: bool = False) -> None:
        """A checkpoint that does not load stops training, unless it is caught up on (resuming
        skips it too, and the run rewrites it)."""
        made = self.pipeline.probe(self._loader, target, indices, "skip" if catching_up else "raise")
        if made:
            self._log_seconds(made, Context(target.key, made[0].step, made[0].tokens_seen))

    def _log_seconds(self, made: list[Record], context: Context) -> None:
        """The seconds of the probes just run, in one row, summed per probe name (a probe
        listed twice, with other parameters or cadences, is one cost)."""
        seconds: dict[str, float] = {}
        for record in made:
            seconds[record.probe] = seconds.get(record.probe, 0.0) + record.seconds
        if seconds:
            row = {keys.probe_seconds(name): round(s, 3) for name, s in seconds.items()}
            row |= {keys.TOKENS_SEEN: context.tokens_seen} if context.tokens_seen is not None else {}
            for logger in self._trainer.loggers:
                logger.log_metrics(row, step=context.step)

    def _log(self, record: Record) -> None:
        """Log the record's metrics with ``tokens_seen`` at its step."""
        extra = {keys.TOKENS_SEEN: record.tokens_seen} if record.tokens_seen is not None else {}
        for logger in self._trainer.loggers:
            logger.log_metrics({**record.metrics, **extra}, step=record.step)

    def _publish(self, record: Record) -> None:
        """Log the record's metrics (from training's start on: ``_restore``) and say how it
        went (above the progress bar); failures are warned about by the pipeline."""
        if record.metrics and self._logging:
            self._log(record)
        if not record.error:
            where = f"probe {record.probe} at step {record.step}: {record.seconds:.1f} s"
            tqdm.write(f"{where}, {len(record.metrics)} metrics")


def _holds(row: dict[str, Any], metrics: dict[str, Any]) -> bool:
    """Whether a metrics-log row holds every cell of a record (NaN, as JSON writes it, equals NaN)."""
    return all(k in row and (row[k] == v or (row[k] != row[k] and v != v)) for k, v in metrics.items())


def unlogged(made: list[Record], rows: list[dict[str, Any]]) -> list[Record]:
    """The records of ``made`` whose cells no row of ``rows`` (a metrics log) holds at their
    step; each row stands for one record, so a probe listed twice needs two rows."""
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        by_step.setdefault(row.get(keys.STEP), []).append(row)
    missing = []
    for record in made:
        candidates = by_step.get(record.step, [])
        hit = next((i for i, row in enumerate(candidates) if _holds(row, record.metrics)), None)
        if hit is None:
            missing.append(record)
        else:
            candidates.pop(hit)
    return missing
