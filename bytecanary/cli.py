"""The ``bytecanary`` command: one jsonargparse subcommand per typed function below, its
docstring its ``--help``; the face, the only importer of ``train`` and the report room, each
lazily so ``bytecanary --help`` stays fast."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from docstring_parser import parse as parse_docstring
from jsonargparse import ArgumentError, ArgumentParser, Namespace

from bytecanary.config import config_file, flag_names, parse_error, typed
from bytecanary.data.config import DataConfig
from bytecanary.data.parallel import Parallel
from bytecanary.errors import BytecanaryError
from bytecanary.probe_options import ProbeOptions
from bytecanary.settling import Tolerance

DESCRIPTION = (
    "Train byte-aware language models and probe every checkpoint for UTF-8 validity and MCQA scoring traps."
)


def prepare(*, data: DataConfig, out: str | None = None, verify: bool = False, work: Parallel) -> int:
    """Corpus -> tokenizer -> token shards -> character snapshot -> eval sets.

    A stage whose output matches its inputs is skipped, so a killed run resumes where it stopped.

    Args:
        data: the data config: --config FILE (e.g. configs/data/default.yaml), then any of its
            fields as flags (--tokenizer.vocab_size=4096)
        out: output folder (unset: data/<name>)
        verify: also check every token shard against the hash in shards/index.json
        work: how the parallel stages run
    """
    from bytecanary.data.engine import Submitted
    from bytecanary.data.prepare import prepare as prepare_data

    try:
        prepare_data(data, out, verify=verify, run=work)
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


def _set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads for this process (None: torch's own default)."""
    if threads is None:
        return
    if threads < 1:
        raise BytecanaryError(f"probe: --threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def chosen_probes(options: ProbeOptions) -> list[dict[str, Any]]:
    """The specs of the probes to run: the entries of ``--config``'s ``probes:`` list that
    ``--probes`` names (all of them when unset); without a config, ``--probes`` or the probes
    that run by default."""
    from bytecanary.probes.specs import default_specs

    if options.config is None:
        return [spec.spec for spec in options.probes or default_specs()]
    from bytecanary.train.cli import probes_in

    listed = probes_in(options.config)
    names = None if options.probes is None else [spec.name for spec in options.probes]
    chosen = [spec.spec for spec in listed if names is None or spec.name in names]
    missing = sorted(set(names or []) - {spec["name"] for spec in chosen})
    if missing:
        raise BytecanaryError(f"{options.config}: probes: no entry for {', '.join(missing)}")
    return chosen


def probe(paths: list[str], *, options: ProbeOptions) -> int:
    """Attach probes to existing checkpoints.
    Pairs already in --out are skipped, so a rerun does only what is missing; several workers
    (torchrun, srun, array jobs) may share a series, each printing a table per probe.

    Args:
        paths: .safetensors/.ckpt checkpoints, HF model folders, (run) folders of checkpoints, or model ids
        options: which probes run on which checkpoints, and where their results go
    """
    if not paths and not options.watch:
        raise BytecanaryError("probe: give at least one PATH or --watch DIR")
    options.check()
    from bytecanary.probes.registry import load_probes
    from bytecanary.probes.runner import run, training_run
    from bytecanary.report.summary import add_series, summary
    from bytecanary.report.writer import probe_ratio_lines

    load_probes()
    _set_threads(options.threads)
    code = run(paths, chosen_probes(options), options, finish=add_series)
    training = training_run(paths, options.watch, options.revision)
    out = Path(options.out)
    ratios = probe_ratio_lines(training, out) if training else []
    print("\n".join([summary(out), *ratios, f"records: {out}"]))
    if code:
        print(f"error: probe: some probes failed; their records in {out} say why", file=sys.stderr)
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


def report(
    paths: list[str],
    *,
    tolerance: Tolerance,
    wandb: bool | None = None,
    tokens_per_step: int | None = None,
    out: str | None = None,
) -> int:
    """Convergence analysis, figures and tables into report/ beside one run's records.
    Of several runs, one comparison (compare.png, compare.md). Perplexity is the run's val/ppl
    (metrics.jsonl), else the ppl probe's held-out one.

    Args:
        paths: a training run folder (metrics.jsonl, probes.jsonl), a records file (bytecanary
            probe --out FILE) or a folder holding probes.jsonl; two or more: a comparison
        tolerance: the time-to-tolerance rule's tolerances (docs/report-and-wandb.md)
        wandb: log to the training run's W&B run (unset: when RUN/wandb has one; false: never);
            records without a training run, and a comparison, log nothing
        tokens_per_step: place records without tokens_seen at step x N (unset: where some lack
            it, every curve is drawn against the step)
        out: with several PATHS, the comparison's folder (unset: <parent of the first>/compare-<names>)
    """
    from bytecanary.probes.registry import load_probes
    from bytecanary.report.compare import write_compare
    from bytecanary.report.writer import report_summary, write_report

    if not paths:
        raise BytecanaryError("report: give a run folder, a records file or a folder holding probes.jsonl")
    if out is not None and len(paths) == 1:
        raise BytecanaryError(
            f"--out goes with two or more PATHS; {paths[0]}'s report goes to report/ beside it"
        )
    load_probes()
    if len(paths) > 1:
        print(write_compare(paths, out, tolerance, tokens_per_step, wandb))
        return 0
    write_report(paths[0], wandb=wandb, tolerance=tolerance, tokens_per_step=tokens_per_step)
    print(report_summary(paths[0], tolerance, tokens_per_step))
    return 0


COMMANDS: dict[str, Callable[..., int]] = {
    f.__name__: f for f in (prepare, train, export, probe, demo, report)
}


# subcommands whose --config FILE holds the fields of their dataclass parameter
CONFIG_FILES: dict[str, type] = {"prepare": DataConfig}


def command_parser(func: Callable[..., int]) -> ArgumentParser:
    """``func``'s parser, jsonargparse's from its signature and docstring: a positional list
    takes any number of words, a dataclass keyword gives its fields as flags (``--out``,
    ``--series.interval``), any other keyword a flag."""
    doc = parse_docstring(func.__doc__ or "")
    description = "\n\n".join(d for d in (doc.short_description, doc.long_description) if d)
    parser = ArgumentParser(
        prog=f"bytecanary {func.__name__}", description=description, exit_on_error=False, allow_abbrev=False
    )
    hints = typing.get_type_hints(func)
    params = inspect.signature(func).parameters
    words = [
        n
        for n, p in params.items()
        if p.kind is p.POSITIONAL_OR_KEYWORD and typing.get_origin(hints[n]) is list
    ]
    groups = [name for name in params if dataclasses.is_dataclass(hints[name])]
    parser.add_function_arguments(func, as_positional=True, skip={*words, *groups})
    helps = {p.arg_name: p.description for p in doc.params}
    for name in words:
        parser.add_argument(name, nargs="*", default=[], metavar=name.upper(), help=helps[name])
    for name in groups:
        parser.add_class_arguments(hints[name])
    if func.__name__ in CONFIG_FILES:
        cls = CONFIG_FILES[func.__name__]
        about = f"a YAML file of {cls.__name__}'s fields (flags after it override them)"
        parser.add_argument("--config", action=config_file(cls), help=about)
    return parser


def arguments(func: Callable[..., int], values: Namespace) -> dict[str, Any]:
    """``func``'s keyword arguments from its parsed flags: a dataclass parameter is built from its
    fields by ``config.typed``, so its own checks name the field (and the config file read)."""
    hints = typing.get_type_hints(func)
    plain = values.as_dict()
    where = str(plain.get("config") or func.__name__) if func.__name__ in CONFIG_FILES else func.__name__
    kwargs = {}
    for name in inspect.signature(func).parameters:
        cls = hints[name]
        if dataclasses.is_dataclass(cls):
            kwargs[name] = typed(
                cls, {f.name: plain[f.name] for f in dataclasses.fields(cls) if f.init}, where
            )
        else:
            kwargs[name] = plain[name]
    return kwargs


def build_parser() -> tuple[ArgumentParser, dict[str, ArgumentParser]]:
    """The ``bytecanary`` parser, and each subcommand's."""
    parser = ArgumentParser(
        prog="bytecanary", description=DESCRIPTION, exit_on_error=False, allow_abbrev=False
    )
    subcommands = parser.add_subcommands(metavar="COMMAND", dest="command")
    parsers = {name: command_parser(func) for name, func in COMMANDS.items()}
    for name, func in COMMANDS.items():
        summary = parse_docstring(func.__doc__ or "").short_description
        subcommands.add_subcommand(name, parsers[name], help=summary)
    return parser, parsers


def _parse(argv: list[str]) -> tuple[Callable[..., int], dict[str, Any]]:
    """The subcommand ``argv`` names and its keyword arguments."""
    parser, parsers = build_parser()
    try:
        values = parser.parse_args(argv)
    except ArgumentError as err:  # worded here, where the subcommand's flags are known
        flags = flag_names(parsers[argv[0]]) if argv and argv[0] in parsers else ()
        raise ArgumentError(None, parse_error(str(err), flags)) from None
    name = values.command
    return COMMANDS[name], arguments(COMMANDS[name], values[name])


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
            command, kwargs = _parse(argv)
        except (ArgumentError, BytecanaryError) as err:  # one line, like every other error
            print(f"error: {parse_error(str(err))}", file=sys.stderr)
            return 2
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
