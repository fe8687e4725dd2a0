"""Subcommand parsers from typed signatures (jsonargparse, as LightningCLI reads ``train``'s
config), and the previous release's flag spellings mapped onto today's."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

from docstring_parser import parse as parse_docstring
from jsonargparse import ArgumentParser, Namespace

# the previous release's spellings -> today's (beyond dashes for underscores, and its bare
# SWITCHES for `=true`); they keep working, with a note, until the next release
SWITCHES = ("trial", "verify", "force")
RENAMED = {
    "no-wandb": "wandb=false",
    "interval": "series.interval",
    "idle-limit": "series.idle_limit",
    "worker": "workers.name",
    "lease": "workers.lease",
}
_EVAL_SET = re.compile(r"([a-z0-9_]+)-set")


def command_parser(func: Callable[..., int]) -> tuple[ArgumentParser, dict[str, Any]]:
    """A subcommand's parser, jsonargparse's from ``func``'s signature and docstrings: a
    positional parameter is an argument (a ``list`` one takes any number), a dataclass one
    gives its fields as flags (``--out``, nested ones as ``--series.interval``), another
    keyword one a flag; with its flags' types by name."""
    doc = parse_docstring(func.__doc__ or "")
    helps = {p.arg_name: p.description for p in doc.params}
    description = "\n\n".join(d for d in (doc.short_description, doc.long_description) if d)
    parser = ArgumentParser(description=description, exit_on_error=False, allow_abbrev=False)
    hints = typing.get_type_hints(func)
    flags: dict[str, Any] = {}
    for name, param in inspect.signature(func).parameters.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            parser.add_class_arguments(hint)
            flags |= _fields(hint, "")
        elif param.kind is param.KEYWORD_ONLY:
            default = None if param.default is param.empty else param.default
            required = param.default is param.empty
            parser.add_argument(f"--{name}", type=hint, default=default, required=required, help=helps[name])
            flags[name] = hint
        elif typing.get_origin(hint) is list:
            item = typing.get_args(hint)[0]
            metavar = name.upper()
            parser.add_argument(name, type=item, nargs="*", default=[], metavar=metavar, help=helps[name])
        else:
            parser.add_argument(name, type=hint, metavar=name.upper(), help=helps[name])
    return parser, flags


def _fields(cls: type, prefix: str) -> dict[str, Any]:
    """Flag name -> type of every field of dataclass ``cls``, nested ones as ``group.field``."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out |= _fields(hints[f.name], f"{prefix}{f.name}.")
        else:
            out[f"{prefix}{f.name}"] = hints[f.name]
    return out


def _known(flag: str, flags: dict[str, Any]) -> bool:
    """A flag of the parser: one of ``flags``, or a key of a ``dict`` one (``eval_sets.level0``)."""
    group = flag.split(".")[0]
    return flag in flags or (group in flags and typing.get_origin(flags[group]) is dict)


def _today(name: str) -> str:
    """The flag a previous release's ``name`` became."""
    if name in RENAMED:
        return RENAMED[name]
    found = _EVAL_SET.fullmatch(name)
    if found is not None:
        return f"eval_sets.{found.group(1)}"
    return name.replace("-", "_")


def modernize(argv: list[str], flags: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``argv`` with the previous release's flag spellings (``--level0-set F``, ``--no-wandb``,
    ``--idle-limit 60``, a bare ``--trial``) in today's, and a note for each one changed;
    nothing after ``--``."""
    out: list[str] = []
    notes: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:], notes
        name, eq, value = token[2:].partition("=")
        new = _today(name)
        if eq:
            new += f"={value}"
        elif name in SWITCHES and argv[i + 1 : i + 2] not in (["true"], ["false"]):
            new += "=true"
        if not token.startswith("--") or f"--{new}" == token or not _known(new.split("=")[0], flags):
            out.append(token)  # today's spelling, or not a flag at all: jsonargparse judges it
            continue
        notes.append(f"note: --{name} is deprecated (it goes in the next release); use --{new}")
        out.append(f"--{new}")
    return out, notes


def arguments(func: Callable[..., int], parser: ArgumentParser, values: Namespace) -> dict[str, Any]:
    """``func``'s keyword arguments from the parsed flags: a dataclass parameter gathers its fields."""
    hints = typing.get_type_hints(func)
    built = parser.instantiate(values)
    kwargs = {}
    for name in inspect.signature(func).parameters:
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = hint(**{f.name: built[f.name] for f in dataclasses.fields(hint)})
        else:
            kwargs[name] = built[name]
    return kwargs
