"""The ``bytecanary`` command: one subcommand per function below (litgpt style).

Each function's typed signature is its schema and its docstring its ``--help``: a
positional parameter is a positional argument (a ``list`` one takes any number), a
keyword-only one is a ``--flag`` with dashes for underscores, a ``bool`` a bare switch,
and the default written in the signature is the flag's only default. The parser is
jsonargparse's; we map parameters to arguments ourselves so the documented flags
(``--level0-set``, ``--trial``) keep their shape. Heavy libraries (torch, lightning) load
inside the functions, so ``bytecanary --help`` stays fast. With ``bytecanary/demo.py`` this
is the face of the project: the only code that imports ``train`` and the report room.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from docstring_parser import parse as parse_docstring
from jsonargparse import ArgumentError, ArgumentParser

from bytecanary.data.parallel import Parallel
from bytecanary.errors import BytecanaryError
from bytecanary.settling import Tolerance
from bytecanary.tracking import DEFAULT_PROJECT

DESCRIPTION = (
    "Train byte-aware language models and probe every checkpoint for UTF-8 validity and MCQA scoring traps."
)


def prepare(*, config: str, out: str | None = None, verify: bool = False, work: Parallel) -> int:
    """Corpus -> tokenizer -> token shards -> character snapshot -> eval sets.

    Every stage is skipped when its output matches its inputs, so a rerun is a no-op; a killed
    run resumes at the corpus files or chunks it had not finished.

    Args:
        config: data config, e.g. configs/data/default.yaml
        out: output folder (unset: data/<config name>)
        verify: also check every token shard against the hash in shards/index.json
        work: how the parallel stages run
    """
    from bytecanary.data.engine import Submitted
    from bytecanary.data.prepare import prepare as prepare_data

    try:
        prepare_data(config, out, verify=verify, run=work)
    except Submitted as submitted:
        print(submitted)
    return 0


def train(args: list[str]) -> int:
    """Train with LightningCLI: --config configs/tiny.yaml [--trainer.max_steps=N ...].

    Args:
        args: LightningCLI's own arguments, passed on unchanged (``bytecanary train --help``)
    """
    from bytecanary.train.cli import main as train_main

    return train_main(args)


def export(checkpoint: str, out_dir: str, *, force: bool = False) -> int:
    """A run's checkpoint -> HF save_pretrained folder.

    Args:
        checkpoint: a weights file (step<N>.safetensors) or a Lightning .ckpt
        out_dir: output folder (safetensors + tokenizer)
        force: replace a previous export in OUT_DIR (nothing else is ever replaced)
    """
    from bytecanary.train.export import export as export_checkpoint

    out = export_checkpoint(checkpoint, out_dir, force=force)
    print(f"exported {checkpoint} -> {out} (AutoModelForCausalLM / AutoTokenizer load it)")
    return 0


@dataclass
class ProbeChoice:
    """Which probes run, with which parameters.

    Attributes:
        probes: comma-separated names (unset: level0,level1, or every probe of --config)
        config: YAML with a probes: list of {name, parameters}, e.g. the run's configs/tiny.yaml
        trial: trial sets (M per language) instead of full
        level0_set: Level 0 eval-set file (unset: the checkpoint's data)
        level1_set: Level 1 eval-set file (unset: the checkpoint's data)
    """

    probes: str | None = None
    config: str | None = None
    trial: bool = False
    level0_set: str | None = None
    level1_set: str | None = None


@dataclass
class ProbeOutput:
    """Where the results go.

    Attributes:
        out: records file
        wandb_project: W&B project (offline without a key)
        no_wandb: write the records file only
    """

    out: str = "probes.jsonl"
    wandb_project: str = DEFAULT_PROJECT
    no_wandb: bool = False


@dataclass
class ProbeSeries:
    """Checkpoints beyond the PATHs.

    Attributes:
        watch: probe each checkpoint of this run folder (or its checkpoints/) as it lands, until the
            run finishes (then exit 0), its training stops without finishing (one error line,
            exit 2) or Ctrl-C
        interval: seconds between looks with --watch
        idle_limit: with --watch: seconds its training may show no sign of life (no heartbeat;
            for a run without heartbeat.json, no changed file) before the watch ends with an error;
            also how long a --watch folder may take to appear
        revision: with a model id: revisions to probe, e.g. step1000,step2000
    """

    watch: str | None = None
    interval: float = 30.0
    idle_limit: float = 600.0
    revision: str | None = None


@dataclass
class ProbeWorker:
    """Several workers on one --out (torchrun, srun, array jobs, a second launch).

    Attributes:
        worker: this worker's name (unset: its launcher's rank, else host:pid); a worker
            restarted under its name takes back its own pairs at once
        lease: seconds a claim on a pair holds without renewal: how soon another worker takes
            over the pair of a killed one (unset: probes.claims.DEFAULT_LEASE, 2 minutes; at
            most a day)
    """

    worker: str | None = None
    lease: float | None = None


def _set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads for this process (None: torch's own default)."""
    if threads is None:
        return
    if threads < 1:
        raise BytecanaryError(f"probe: --threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def probe(
    paths: list[str],
    *,
    choice: ProbeChoice,
    output: ProbeOutput,
    series: ProbeSeries,
    workers: ProbeWorker,
    device: str | None = None,
    dtype: Literal["auto", "float32", "bfloat16"] = "auto",
    threads: int | None = None,
) -> int:
    """Attach probes to existing checkpoints.

    Pairs of (checkpoint, probe) already in --out are skipped, so a rerun after a crash only
    does what is missing. Several workers (torchrun --nproc-per-node N -m bytecanary.cli probe,
    srun bytecanary probe, array jobs) share a series: each claims a pair before computing it.
    Prints a table per probe (on a training run's folder, with the ratios to its perplexity that
    bytecanary report states) and writes an offline W&B run (the first rank's).

    Args:
        paths: .safetensors/.ckpt checkpoints, HF model folders, (run) folders of checkpoints, or model ids
        choice: which probes run
        output: where the results go
        series: checkpoints beyond the PATHs
        workers: several workers on one --out
        device: cpu, cuda, cuda:1, mps: one this machine has (unset: cuda when available)
        dtype: what the model computes in (auto: bfloat16 on CUDA, else float32); each its own records
        threads: torch CPU threads (unset: torch's default, which OMP_NUM_THREADS sets); give
            each of several jobs sharing a machine its share of the cores
    """
    if not paths and not series.watch:
        raise BytecanaryError("probe: give at least one PATH or --watch DIR")
    from bytecanary.probes.runner import Job, probe_specs, run, training_run
    from bytecanary.report.summary import add_mcqa_series, summary
    from bytecanary.report.writer import probe_ratio_lines

    _set_threads(threads)
    names = [p.strip() for p in choice.probes.split(",") if p.strip()] if choice.probes else None
    job = Job(
        out=output.out,
        trial=choice.trial,
        eval_sets={"level0": choice.level0_set, "level1": choice.level1_set},
        wandb_project=None if output.no_wandb else output.wandb_project,
        watch_dir=series.watch,
        interval=series.interval,
        idle_limit=series.idle_limit,
        revisions=[r for r in (series.revision or "").split(",") if r] or None,
        device=device,
        dtype=dtype,
        worker=workers.worker,
        source=choice.config,
        **({"lease": workers.lease} if workers.lease is not None else {}),
    )
    code = run(paths, probe_specs(choice.config, names), job, finish=add_mcqa_series)
    training = training_run(paths, series.watch, job.revisions)
    ratios = probe_ratio_lines(training, Path(output.out)) if training else []
    print("\n".join([summary(Path(output.out)), *ratios, f"records: {Path(output.out)}"]))
    if code:
        print(f"error: probe: some probes failed; their records in {output.out} say why", file=sys.stderr)
    return code


def demo(
    *,
    out: str = "runs/demo",
    minutes: float = 10.0,
    config: str = "configs/tiny.yaml",
    data_config: str = "configs/data/default.yaml",
    data: str | None = None,
    steps: int | None = None,
) -> int:
    """Run the embedded default end to end: prepare, train with probes, report, summarise.

    A rerun continues the same run.

    Args:
        out: run directory
        minutes: time budget in minutes
        config: training config
        data_config: data config to prepare
        data: data folder (unset: data/<data config name>)
        steps: training steps (unset: what fits --minutes)
    """
    from bytecanary.demo import run_demo

    return run_demo(out, minutes, config, data_config, data, steps)


def report(run_dir: str, *, tolerance: Tolerance, no_wandb: bool = False) -> int:
    """Convergence analysis, figures and tables into RUN_DIR/report/.

    Args:
        run_dir: a training run folder (metrics.jsonl, probes.jsonl)
        tolerance: the time-to-tolerance rule's tolerances (docs/report-and-wandb.md)
        no_wandb: do not log to the run's W&B run (without it: log when RUN_DIR/wandb has one)
    """
    from bytecanary.report.writer import report_summary, write_report

    write_report(run_dir, wandb=False if no_wandb else None, tolerance=tolerance)
    print(report_summary(run_dir, tolerance))
    return 0


COMMANDS: dict[str, Callable[..., int]] = {
    f.__name__: f for f in (prepare, train, export, probe, demo, report)
}


def _add_flag(parser: Any, name: str, hint: Any, default: Any, text: str) -> None:
    """``--name-with-dashes``: a bare switch for a bool, required where there is no default."""
    flag = f"--{name.replace('_', '-')}"
    if hint is bool:
        parser.add_argument(flag, dest=name, action="store_true", help=text)
    elif default is inspect.Parameter.empty:
        parser.add_argument(flag, dest=name, type=hint, required=True, help=text)
    else:
        parser.add_argument(flag, dest=name, type=hint, default=default, help=text)


def _add_group(parser: ArgumentParser, cls: type) -> None:
    """A dataclass parameter: one flag per field, under the class's docstring as a heading."""
    doc = parse_docstring(cls.__doc__ or "")
    helps = {p.arg_name: p.description for p in doc.params}
    group = parser.add_argument_group((doc.short_description or "").rstrip("."))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        _add_flag(group, f.name, hints[f.name], f.default, helps[f.name])


def _command_parser(func: Callable[..., int]) -> ArgumentParser:
    """A subcommand's parser: one argument per parameter of ``func`` (one per field of a
    dataclass parameter), its help from the docstrings."""
    doc = parse_docstring(func.__doc__ or "")
    helps = {p.arg_name: p.description for p in doc.params}
    description = "\n\n".join(d for d in (doc.short_description, doc.long_description) if d)
    parser = ArgumentParser(description=description, exit_on_error=False)
    hints = typing.get_type_hints(func)
    for name, param in inspect.signature(func).parameters.items():
        hint, text = hints[name], helps[name]
        if dataclasses.is_dataclass(hint):
            _add_group(parser, hint)
        elif param.kind is not param.KEYWORD_ONLY:  # positional; a list takes any number
            if typing.get_origin(hint) is list:
                item = typing.get_args(hint)[0]
                parser.add_argument(name, type=item, nargs="*", default=[], metavar=name.upper(), help=text)
            else:
                parser.add_argument(name, type=hint, metavar=name.upper(), help=text)
        else:
            _add_flag(parser, name, hint, param.default, text)
    return parser


def _arguments(func: Callable[..., int], values: dict[str, Any]) -> dict[str, Any]:
    """``func``'s keyword arguments from the parsed flags: a dataclass parameter gathers its fields."""
    hints = typing.get_type_hints(func)
    kwargs = {}
    for name in inspect.signature(func).parameters:
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = hint(**{f.name: values[f.name] for f in dataclasses.fields(hint)})
        else:
            kwargs[name] = values[name]
    return kwargs


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="bytecanary", description=DESCRIPTION, exit_on_error=False)
    subcommands = parser.add_subcommands(metavar="COMMAND", dest="command")
    for name, func in COMMANDS.items():
        summary = parse_docstring(func.__doc__ or "").short_description
        subcommands.add_subcommand(name, _command_parser(func), help=summary)
    return parser


def describe(err: BaseException) -> str:
    """One line naming the path and the cause."""
    if isinstance(err, OSError) and err.filename is not None:
        target = f" -> {err.filename2}" if err.filename2 is not None else ""
        text = f"{err.filename}{target}: {err.strerror or err}"
    elif isinstance(err, json.JSONDecodeError):
        text = f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
    else:
        text = str(err) or type(err).__name__
    return " ".join(text.split())


def _user_errors() -> tuple[type[BaseException], ...]:
    """What a user can cause and fix: our errors, the file system (disk full, file too large,
    a file where a folder should be, permissions), an unreadable weights file, bad JSON/YAML."""
    import yaml
    from safetensors import SafetensorError

    return (BytecanaryError, OSError, SafetensorError, json.JSONDecodeError, yaml.YAMLError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Every error a user can fix is one ``error:`` line on stderr and exit
    code 2; ``BYTECANARY_DEBUG=1`` shows the traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:  # LightningCLI parses its own arguments
        command, kwargs = train, {"args": argv[1:]}
    else:
        try:
            args = build_parser().parse_args(argv)
        except ArgumentError as err:  # one line, like every other error
            print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
            return 2
        command = COMMANDS[args.command]
        kwargs = _arguments(command, args[args.command].as_dict())
    try:
        return command(**kwargs)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _user_errors() as err:
        if os.environ.get("BYTECANARY_DEBUG", "0") not in ("", "0"):
            raise
        print(f"error: {describe(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
