"""Typed YAML configs: dataclasses are the schema, errors name the file and the field.

``load_config(Cls, path)`` reads YAML into nested dataclasses, rejecting unknown keys,
wrong types and (through each class's ``__post_init__``) bad values with one line such
as ``configs/data/x.yaml: tokenizer.vocab_size: expected int, got 'big'``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

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


def load_config(cls: type[T], path: str | Path) -> T:
    """Read ``path`` (YAML) into dataclass ``cls``."""
    raw = read_yaml(path)
    return from_dict(cls, raw if raw is not None else {}, source=str(path))


def from_dict(cls: type[T], data: Any, source: str = "config", field: str = "") -> T:
    """Build dataclass ``cls`` from plain data; errors read ``source: field: problem``."""
    try:
        return _convert(cls, data, field)
    except _FieldError as err:
        where = f"{err.field}: " if err.field else ""
        raise ConfigError(f"{source}: {where}{err.problem}") from None


class _FieldError(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


def _join(field: str, key: str | int) -> str:
    return f"{field}[{key}]" if isinstance(key, int) else f"{field}.{key}" if field else key


def _convert(tp: Any, value: Any, field: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, field)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for arg in options[:-1]:
            try:
                return _convert(arg, value, field)
            except _FieldError:
                pass
        return _convert(options[-1], value, field)
    if origin is typing.Literal:
        if value not in args:
            raise _FieldError(field, f"must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _FieldError(field, f"expected a list, got {value!r}")
        item = args[0] if args else Any
        items = [_convert(item, v, _join(field, i)) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise _FieldError(field, f"expected a mapping, got {value!r}")
        key_tp, val_tp = args or (Any, Any)
        return {
            _convert(key_tp, k, field): _convert(val_tp, v, _join(field, str(k))) for k, v in value.items()
        }
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool) and (
        not isinstance(value, tp) or (tp is int and isinstance(value, bool))
    ):
        raise _FieldError(field, f"expected {tp.__name__}, got {value!r}")
    return value


def _convert_dataclass(cls: Any, value: Any, field: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise _FieldError(field, f"expected a mapping, got {value!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in value if k not in fields]
    if unknown:
        near = difflib.get_close_matches(str(unknown[0]), fields, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise _FieldError(_join(field, str(unknown[0])), f"unknown key{hint}")
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], _join(field, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _FieldError(_join(field, name), "missing required key")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:
        raise _FieldError(field, str(err)) from None
