"""Typed configs: dataclasses are the schema, jsonargparse the one reader, errors one line.

``typed(Cls, data, where)`` reads plain data (from YAML) into nested dataclasses, rejecting
unknown keys, wrong types and (through each class's ``__post_init__``) bad values with one
line such as ``configs/data/x.yaml: tokenizer.vocab_size: expected int, got 'big'``. The
data config, every probe spec and ``bytecanary probe``'s flags go through it; LightningCLI
reads the training config with the same parser, and ``parse_error`` words all their errors.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from jsonargparse import ArgumentError, ArgumentParser

from bytecanary.errors import BytecanaryError
from bytecanary.io import read_text

T = TypeVar("T")


class ConfigError(BytecanaryError):
    """A config value is missing, unknown or invalid."""


def yaml_problem(err: yaml.YAMLError) -> str:
    """What is wrong and where, in one line: PyYAML's own message spans several and puts the
    context ("while parsing a flow mapping") before the problem."""
    mark, problem = getattr(err, "problem_mark", None), getattr(err, "problem", None)
    if mark is None or problem is None:
        return str(err).splitlines()[0]
    context, started = getattr(err, "context", None), getattr(err, "context_mark", None)
    since = f" ({context} at line {started.line + 1})" if context and started else ""
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{since}"


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content; a missing, non-UTF-8 or malformed file is one ConfigError naming it."""
    try:
        return yaml.safe_load(read_text(path, "config file"))
    except BytecanaryError as err:
        raise ConfigError(str(err)) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {yaml_problem(err)}") from None


_PARSER_KEY = re.compile(r'Parser key "([^"]+)":\s*(.*)', re.S)
_EXPECTED = re.compile(r"Expected a (.+?)(?:\. Got value:.*)?$", re.M)
_GIVEN = re.compile(r"(?:Got|Given) value: (.*)$", re.M)
_OWN_WORDS = re.compile(r"Not of type \w+: (.*)", re.S)  # a registered type's own message


def _type_name(hint: str) -> str:
    """``<class 'int'>`` -> ``int``, ``typing.Literal['a', 'b']`` -> ``one of 'a', 'b'``."""
    if hint == "<class 'NoneType'>":
        return "null"
    if hint.startswith("typing.Literal[") and hint.endswith("]"):
        return f"one of {hint[len('typing.Literal[') : -1]}"
    return re.sub(r"<class '([\w.]+)'>", r"\1", hint)


def parse_error(message: str) -> str:
    """jsonargparse's many-line message about a bad value as one line naming the field:
    ``run.wandb_detail: expected one of 'tables', 'scalars', got 'bogus'``."""
    m = _PARSER_KEY.match(message.strip())
    if m is None:  # unrecognized arguments, a bad config file, ...
        return " ".join(message.split())
    key, rest = m.groups()
    own = _OWN_WORDS.match(rest)
    if own is not None:  # it names its own field (``bytecanary.probes.specs.ProbeSpec``)
        return " ".join(own.group(1).split())
    expected, given = _EXPECTED.findall(rest), _GIVEN.search(rest)
    if not expected or given is None:
        return f"{key}: {' '.join(rest.split())}"
    names = " or ".join(dict.fromkeys(_type_name(t.strip()) for t in expected))
    return f"{key}: expected {names}, got {given.group(1).strip()!r}"


def load_config(cls: type[T], path: str | Path) -> T:
    """Read ``path`` (YAML) into dataclass ``cls``."""
    raw = read_yaml(path)
    return typed(cls, raw if raw is not None else {}, str(path))


def typed(cls: type[T], data: Any, where: str = "config") -> T:
    """Build dataclass ``cls`` from plain data; errors read ``where: field: problem``."""
    try:
        return _dataclass(cls, data, "")
    except _FieldError as err:
        at = f"{err.field}: " if err.field else ""
        raise ConfigError(f"{where}: {at}{err.problem}") from None


class _FieldError(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _join(field: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{field}[{key}]"
    return f"{field}.{key}" if field else key


@functools.cache
def _leaf_parser(hint: Any) -> ArgumentParser:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--value", type=hint)
    return parser


def _leaf(hint: Any, value: Any, field: str) -> Any:
    """A value of a type without dataclasses in it, checked and converted by jsonargparse
    (which would take a null for any type)."""
    if value is None and hint is not Any and type(None) not in typing.get_args(hint):
        raise _FieldError(field, f"expected {getattr(hint, '__name__', hint)}, got None")
    try:
        return _leaf_parser(hint).parse_object({"value": value}).value
    except ArgumentError as err:
        raise _FieldError(field, parse_error(str(err)).removeprefix("value: ")) from None


def _value(hint: Any, value: Any, field: str) -> Any:
    """``value`` as ``hint``: dataclasses (alone, optional or in a list) field by field, so an
    error names the path down to the field; anything else through ``_leaf``."""
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, value, field)
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    inner = [a for a in args if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
        return None if value is None else _dataclass(inner[0], value, field)
    if origin is list and args and dataclasses.is_dataclass(args[0]):
        if not isinstance(value, list):
            raise _FieldError(field, f"expected a list, got {value!r}")
        return [_dataclass(args[0], v, _join(field, i)) for i, v in enumerate(value)]
    return _leaf(hint, value, field)


def _dataclass(cls: Any, value: Any, field: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise _FieldError(field, f"expected a mapping of {cls.__name__} fields, got {value!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in value:
        if key not in fields:
            near = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise _FieldError(_join(field, str(key)), f"unknown key{hint}")
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = _value(hints[name], value[name], _join(field, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _FieldError(_join(field, name), "missing required key")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:  # the class's own checks
        raise _FieldError(field, str(err)) from None
