"""``bytecanary train``: LightningCLI over ByteLM and ShardDataModule, configs composed from the
sections ``model``, ``data``, ``trainer``, ``run`` and ``probes`` into one run folder
(docs/training.md).
"""

from __future__ import annotations

import contextlib
import logging
import pydoc
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from jsonargparse import ArgumentError
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info

from bytecanary import records
from bytecanary.checkpoints import FINISHED, probe_checkpoints, training_states
from bytecanary.config import flag_names, parse_error, read_yaml
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_path, check_output, one_folder, remove_stale_temps, warn, write_json
from bytecanary.probe_options import ProbeSpec
from bytecanary.probes.callback import ProbeCallback, live_probes_refused, sharded_strategies
from bytecanary.tracking import DEFAULT_PROJECT, Detail, define_axis, finish_wandb
from bytecanary.train.checkpointing import (
    AtomicCheckpointIO,
    ScheduledCheckpoint,
    check_resumable,
    check_tokenizer,
    hold_run,
    keep_tokenizer,
    latest_checkpoint,
)
from bytecanary.train.datamodule import ShardDataModule
from bytecanary.train.heartbeat import beating
from bytecanary.train.loggers import JsonlLogger, TruncateMetricsOnStart, keep_wandb_id, make_wandb_logger
from bytecanary.train.model import ArchConfig, OptimConfig
from bytecanary.train.module import ByteLM
from bytecanary.train.throughput import PerfMonitor


@dataclass
class RunConfig:
    """Where a run lives and how it is checkpointed and logged."""

    name: str = "tiny"
    """Run name: the folder <root>/<name> and the W&B run name."""
    root: str = "runs"
    experiment: str | None = None
    """W&B group (default: the run name)."""
    wandb_project: str = DEFAULT_PROJECT
    wandb: bool = True
    """Log to W&B (offline without an API key); metrics.jsonl is always written."""
    wandb_detail: Detail = "tables"
    """W&B gets the headline metrics as charts and the probes' fine grid as tables
    (``tables``), or every probe key as its own chart (``scalars``)."""
    checkpoint_every: int = 100
    """Save a checkpoint every this many optimizer steps."""
    log_spaced_until: int | None = 512
    """Also save at steps 1, 2, 4, ... up to this (None: off)."""
    weights_dtype: Literal["bfloat16", "float32"] = "bfloat16"
    """dtype of the weights file every checkpoint writes (step<N>.safetensors, what the probes
    read); the full training state for resuming stays fp32."""
    keep_state_every: int | None = None
    """Also keep the full training state of scheduled checkpoints whose step is a multiple of
    this; None: only the newest."""
    resume: bool = False
    """Continue from the latest checkpoint in <root>/<name>/checkpoints/."""
    probe_every_tokens: int | None = None
    """Fire the probes every this many tokens as well as at each checkpoint, on the live module
    (refused under a sharding strategy: FSDP, DeepSpeed, model parallel)."""
    probe_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """What the probes' model computes in at checkpoints: auto is bfloat16 on CUDA (half the
    memory beside training) and float32 elsewhere, as ``bytecanary probe --dtype``."""
    probe_strict: bool = False
    """A failing probe stops training (default: recorded as failed, training goes on)."""
    probe_in_loop: bool = True
    """Fire the ``probes:`` list at checkpoints during training. False: training fires none
    and a sidecar (``bytecanary probe --watch RUN_DIR --config CONFIG``, on another GPU or
    node) probes each weights file as it lands, and exits once the run has finished."""

    def __post_init__(self) -> None:
        if not one_folder(self.name):
            raise ValueError(f"name: must name one folder under run.root, got {self.name!r}")
        for name in ("checkpoint_every", "keep_state_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: must be a positive number of steps, got {value}")

    @property
    def dir(self) -> Path:
        return Path(self.root) / self.name


class _Parser(LightningArgumentParser):
    """LightningCLI's parser; a config file that is not UTF-8 or not YAML is the one line
    ``read_yaml`` words for every command, naming the file."""

    def parse_path(self, path, *args: Any, **kwargs: Any):
        try:
            return super().parse_path(path, *args, **kwargs)
        except (UnicodeDecodeError, ArgumentError):
            read_yaml(path)  # raises where the file itself is bad
            raise


class BytecanaryCLI(LightningCLI):
    def parse_arguments(self, parser, args) -> None:
        """A bad value is one line naming the field, not jsonargparse's usage block; a bad
        probe spec names the config file it is in, as ``bytecanary probe`` does."""
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as err:
            raise BytecanaryError(parse_error(str(err), flag_names(parser))) from err

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_class_arguments(RunConfig, "run")
        parser.add_argument(
            "--probes",
            type=list[ProbeSpec],
            default=[],
            help="probes fired at checkpoints: names or {name: ..., <parameters>, cadence: {...}} entries",
        )
        parser.link_arguments("model.arch.n_positions", "data.seq_len")
        parser.link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.eos_token_id", "model.eos_token_id", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        """Check the values, the run folder and the probes before anything is built or written, so a bad
        flag, path, probe parameter, missing eval set or live probes under FSDP is one line naming it
        and no run folder is touched.
        """
        for group, cls in CHECKED_GROUPS.items():
            try:
                cls(**self.config[group].as_dict())
            except ValueError as err:  # the message starts with the field
                raise BytecanaryError(f"{group}.{err}") from None
        check_accelerator(self.config["trainer"]["accelerator"])
        run = self.run_config()
        self.probe_callback = None
        if self.config["probes"] and run.probe_in_loop:
            if run.probe_every_tokens:
                refuse_sharded_live_probes(self.config["trainer"]["strategy"])
            self.probe_callback = ProbeCallback(
                self.config["probes"],
                run.probe_every_tokens,
                run.probe_strict,
                source=self.config["probes"][0].source,
                dtype=run.probe_dtype,
                metrics=run.dir / "metrics.jsonl",
            )
            data_dir = Path(self.config["data"]["data_dir"])
            if (data_dir / "tokenizer").is_dir():  # else the data module says what is missing
                self.probe_callback.prepare(data_dir / "tokenizer", data_dir)
        check_output(run.dir, folder=True)  # last: a bad config above leaves no run folder behind

    def run_config(self) -> RunConfig:
        return RunConfig(**vars(self.config["run"]))

    def instantiate_trainer(self, **kwargs: Any):
        """The trainer, once its plan fits the data (``data.max_repeats``): the first moment the
        world size is known, before the model's first step and before anything is written."""
        run = self.run_config()
        callbacks = list(self.config_init["trainer"].get("callbacks") or [])
        callbacks.append(
            ScheduledCheckpoint(
                run.dir / "checkpoints",
                run.checkpoint_every,
                run.log_spaced_until,
                run.weights_dtype,
                run.keep_state_every,
            )
        )
        if self.probe_callback is not None:  # after the checkpoint callback: probes see saved weights
            callbacks.append(self.probe_callback)
        callbacks.append(TruncateMetricsOnStart())
        callbacks.append(PerfMonitor())  # perf/tokens_per_s, perf/samples_per_s, perf/mfu
        kwargs.update(
            default_root_dir=str(run.dir),
            logger=[JsonlLogger(run.dir / "metrics.jsonl")],
            callbacks=callbacks,
            plugins=[AtomicCheckpointIO()],
        )
        trainer = super().instantiate_trainer(**kwargs)
        self.datamodule.check_repeats(trainer)
        if run.wandb:
            wandb = make_wandb_logger(run.dir, run.name, run.wandb_project, run.experiment, run.wandb_detail)
            trainer.loggers = [*trainer.loggers, wandb]
        return trainer


class _Parsed(Exception):
    """Carries a parsed training config out of ``ParseOnly``."""

    def __init__(self, config: Any) -> None:
        super().__init__("parsed")
        self.config = config


class ParseOnly(BytecanaryCLI):
    """``train``'s parser, which stops once the config is read: nothing is built or seeded."""

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        raise _Parsed(self.config)


def probes_in(config: str) -> list[ProbeSpec]:
    """The ``probes:`` list of training config ``config``, read by ``train``'s own parser, so a
    checkpoint is probed as its training probed it."""
    try:
        make_cli(["--config", config], ParseOnly)
    except _Parsed as parsed:
        return parsed.config["probes"]
    except BytecanaryError as err:  # the one file read: named where the error does not
        raise BytecanaryError(str(err) if str(err).startswith(config) else f"{config}: {err}") from None
    raise AssertionError("ParseOnly always stops at the parse")


def strategy_class(spec: Any) -> type | None:
    """The Lightning strategy class that ``trainer.strategy`` names: a registry name (``fsdp``,
    ``deepspeed_stage_2``, any case, as Lightning reads it), a ``{class_path: ...}`` config or
    an instance; None for ``auto`` and for what Lightning will refuse itself."""
    from lightning.pytorch.strategies import Strategy, StrategyRegistry

    if isinstance(spec, Strategy):
        return type(spec)
    if isinstance(spec, str):
        name = spec.lower()  # StrategyRegistry.get would build one
        return StrategyRegistry[name]["strategy"] if name in StrategyRegistry else None
    path = spec.get("class_path") if hasattr(spec, "get") else None
    found = pydoc.locate(path) if isinstance(path, str) else None
    return found if isinstance(found, type) else None


def refuse_sharded_live_probes(spec: Any) -> None:
    """Probes between checkpoints read the live module, which a sharding strategy splits over
    the ranks: refuse them before anything is built (probes at checkpoints read whole files)."""
    cls = strategy_class(spec)
    if cls is not None and issubclass(cls, sharded_strategies()):
        raise BytecanaryError(live_probes_refused(cls.__name__))


def check_accelerator(name: Any) -> None:
    """A named accelerator this machine lacks (``cuda`` without a GPU) is one line saying what
    it has, when the config is read, not a traceback once the trainer is built."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    if not isinstance(name, str) or name == "auto":
        return
    key = "cuda" if name == "gpu" else name
    names = sorted(AcceleratorRegistry.available_accelerators())
    here = [n for n in names if AcceleratorRegistry[n]["accelerator"].is_available()]
    if key not in names or key not in here:
        what = (
            "is not an accelerator Lightning knows"
            if key not in names
            else "is not available on this machine"
        )
        raise BytecanaryError(f"trainer.accelerator: {name!r} {what}; this machine has: {', '.join(here)}")


TRAINER_DEFAULTS = {
    "max_steps": 1000,
    "max_epochs": -1,
    "val_check_interval": 100,
    "check_val_every_n_epoch": None,
    "log_every_n_steps": 10,
    "num_sanity_val_steps": 0,
    "use_distributed_sampler": False,
    "gradient_clip_val": 1.0,
}


CHECKED_GROUPS = {
    "model.arch": ArchConfig,
    "model.optim": OptimConfig,
    "run": RunConfig,
}  # validated before building


def make_cli(args: list[str] | None, cli_class: type[BytecanaryCLI] = BytecanaryCLI) -> BytecanaryCLI:
    """Parse (and, with the default class, instantiate) a training config."""
    # `bytecanary train ...` passes its own argv; sys.argv stays whole for DDP's re-launch
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    warnings.filterwarnings("ignore", message=".*treespec, LeafSpec.*")  # Lightning 2.6 on torch 2.13: noise
    # what a run's checkpoints folder may hold is resume_from's call
    warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
    logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)  # config.yaml has it
    return cli_class(
        ByteLM,
        ShardDataModule,
        args=args,
        run=False,
        save_config_callback=None,
        auto_configure_optimizers=False,
        parser_class=_Parser,
        trainer_defaults=TRAINER_DEFAULTS,
        seed_everything_default=0,
        parser_kwargs={
            "prog": "bytecanary train",
            "default_config_files": [],
            "exit_on_error": False,
            "allow_abbrev": False,
        },
    )


def resume_from(run: RunConfig) -> Path | None:
    """The full training state to continue from (the newest that loads), or None to start at step 0;
    ``run.resume`` must fit the folder. A run killed before its first full state restarts from step 0:
    data order and seeds are fixed, so it rewrites the same weights bit for bit.
    """
    folder = run.dir / "checkpoints"
    if not run.resume:
        if probe_checkpoints(folder) or training_states(folder):  # any step file, weights or full state
            raise BytecanaryError(
                f"{run.dir} already holds checkpoints: pass --run.resume=true to continue it, "
                "or choose another --run.name"
            )
        return None
    last = latest_checkpoint(folder)
    if last is not None:
        return last
    if training_states(folder):  # written, and none loads: the run's state is lost, not unwritten
        raise BytecanaryError(f"run.resume: no loadable training state (step*.ckpt) to resume in {folder}")
    if not (run.dir / "config.yaml").is_file():  # written first at every start: none ever began here
        raise BytecanaryError(f"run.resume: no run to resume in {run.dir}: start it without --run.resume")
    rank_zero_info(f"{run.dir}: killed before its first training state; starting again from step 0")
    return None


def main(args: list[str] | None = None) -> int:
    cli = make_cli(args)
    run = cli.run_config()
    last = resume_from(run)
    if last is None:  # a fresh start records resume: false, so its files are those of any fresh start
        cli.config["run"].resume = False
    trainer = cli.trainer
    config = cli.parser.dump(cli.config, skip_none=False)
    changed = check_resumable(last, cli.model.hparams, yaml.safe_load(config)) if last is not None else []
    check_tokenizer(cli.datamodule.tokenizer_dir, run.dir)
    if cli.config["probes"] and run.probe_in_loop:
        records.check_file(run.dir / "probes.jsonl")
    zero = trainer.is_global_zero
    # checked above; from here on the run folder is this process's to change, the marker and the
    # heartbeat first, so a sidecar started beside this resume watches on
    with hold_run(run.dir) if zero else contextlib.nullcontext():
        if zero:
            for line in changed:
                warn(line)
            (run.dir / FINISHED).unlink(missing_ok=True)
        with beating(run.dir, writes=zero) as attempt:
            return _train(cli, run, last, config, attempt)


def _train(cli: BytecanaryCLI, run: RunConfig, last: Path | None, config: str, attempt: str) -> int:
    """Write the run's config and train; the caller checked the inputs, holds the run and beats
    as ``attempt``, which ``finished.json`` names at the end."""
    trainer = cli.trainer
    wandb_logger = next((lg for lg in trainer.loggers if not isinstance(lg, JsonlLogger)), None)
    if trainer.is_global_zero:
        stale = [p for folder in (run.dir, run.dir / "checkpoints") for p in remove_stale_temps(folder)]
        if stale:
            rank_zero_info(f"removed {len(stale)} temp files left by a killed run in {run.dir}")
        with atomic_path(run.dir / "config.yaml") as tmp:
            tmp.write_text(config, encoding="utf-8")
        if wandb_logger is not None:
            keep_wandb_id(run.dir, wandb_logger)
    cli.model.tokenizer_path = keep_tokenizer(cli.datamodule.tokenizer_dir, run.dir, trainer.is_global_zero)
    cli.model.run_config = yaml.safe_load(config)  # plain types: checkpoints stay weights_only
    rank_zero_info(trainer.checkpoint_callback.disk_plan(cli.model.model, trainer.max_steps))
    try:
        if wandb_logger is not None and trainer.is_global_zero:
            define_axis(wandb_logger.experiment)
            wandb_logger.log_hyperparams(cli.model.run_config)
        trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=str(last) if last else None)
        if trainer.is_global_zero and trainer.global_step >= trainer.max_steps > 0:
            done = {"step": trainer.global_step, "tokens_seen": cli.model.tokens_seen, "attempt": attempt}
            write_json(run.dir / FINISHED, done)
    finally:
        if wandb_logger is not None and trainer.is_global_zero:
            sync = finish_wandb()
            if sync:
                rank_zero_info(f"W&B offline run saved; upload it with: {sync}")
    in_loop = cli.config["probes"] and run.probe_in_loop
    files = "config.yaml, checkpoints/, metrics.jsonl" + (", probes.jsonl" if in_loop else "")
    rank_zero_info(f"run folder: {run.dir} ({files}{', wandb/' if run.wandb else ''})")
    return 0
