"""Typed configs: dataclasses are the schema, ``read_yaml`` the one reader of YAML files,
``typed`` the one builder of dataclasses from what YAML holds (its scalars as written: a quoted
``"2023"`` stays a string), and ``parse_error`` the one translator of jsonargparse's errors."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from jsonargparse import ArgumentError, ArgumentParser, Namespace

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


def flag_names(parser: ArgumentParser) -> list[str]:
    """Every ``--flag`` of ``parser``, nested ones (``--trainer.max_steps``) included."""
    return [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]


def _given(text: str) -> str:
    """A value as jsonargparse prints it (``str(value)``), with its type where the text alone
    would pass for a string: ``2023 (an int)``, ``[1, 2] (a list)``, but ``'abc'``."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return repr(text)
    if isinstance(value, str):
        return repr(text)
    if value is None:
        return "null"
    kind = _name(type(value))
    return f"{text} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def _unrecognized(message: str, flags: Iterable[str]) -> str:
    """argparse's ``unrecognized arguments: ...`` with the flag nearest the first one, as a
    misspelt flag is never taken for another (``allow_abbrev=False``)."""
    first = next((t for t in message.split(":", 1)[1].split() if t.startswith("--")), None)
    names = [flag.removeprefix("--") for flag in flags]  # the dashes alone make any two flags alike
    near = difflib.get_close_matches(first.split("=")[0][2:], names, n=1) if first else []
    return f"{message} (did you mean --{near[0]}?)" if near else message


def parse_error(message: str, flags: Iterable[str] = ()) -> str:
    """jsonargparse's many-line message about a bad value as one line naming the field:
    ``run.wandb_detail: expected one of 'tables', 'scalars', got 'bogus'``; an unknown flag
    with the nearest of the parser's ``flags``."""
    m = _PARSER_KEY.match(message.strip())
    if m is None:  # unrecognized arguments, a bad config file, ...
        line = " ".join(message.split())
        return _unrecognized(line, flags) if line.startswith("unrecognized arguments:") else line
    key, rest = m.groups()
    own = _OWN_WORDS.match(rest)
    if own is not None:  # it names its own field (``bytecanary.probe_options.ProbeSpec``)
        return " ".join(own.group(1).split())
    expected, given = _EXPECTED.findall(rest), _GIVEN.search(rest)
    if not expected or given is None:
        return f"{key}: {' '.join(rest.split())}"
    names = " or ".join(dict.fromkeys(_type_name(t.strip()) for t in expected))
    return f"{key}: expected {names}, got {_given(given.group(1).strip())}"


def load_config(cls: type[T], path: str | Path) -> T:
    """Read ``path`` (YAML) into dataclass ``cls``."""
    raw = read_yaml(path)
    return typed(cls, raw if raw is not None else {}, str(path))


def _as_flags(cls: type, value: Any) -> Namespace:
    """A dataclass instance as jsonargparse holds ``cls``'s fields: a nested dataclass field
    (a group of flags, ``tokenizer.vocab_size``) as a Namespace, any other value as it is."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    return Namespace(
        **{
            f.name: _as_flags(hints[f.name], getattr(value, f.name))
            if dataclasses.is_dataclass(hints[f.name])
            else getattr(value, f.name)
            for f in fields
        }
    )


def config_file(cls: type) -> type[argparse.Action]:
    """A ``--config FILE`` action for a parser of ``cls``'s fields: the file read by
    ``load_config`` (scalars as written; errors naming file and field), its values then held as
    given flags, so flags after it override them."""

    class ConfigFile(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None) -> None:
            for key, value in vars(_as_flags(cls, load_config(cls, values))).items():
                namespace[key] = value
            namespace[self.dest] = values

    return ConfigFile


def typed(cls: type[T], data: Any, where: str = "config") -> T:
    """Build dataclass ``cls`` from plain data; errors read ``where: field: problem``."""
    try:
        return _dataclass(cls, data, "")
    except _FieldError as err:
        at = f"{err.field}: " if err.field else ""
        raise ConfigError(f"{where}: {at}{err.problem}") from None


class _FieldError(Exception):
    """What is wrong (``problem``) and where (``field``, a path such as ``sources[0].name``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _join(field: str, key: str | int) -> str:
    """``field[2]`` for a list's item, ``field.key`` for a mapping's."""
    if isinstance(key, int):
        return f"{field}[{key}]"
    return f"{field}.{key}" if field else key


def _name(hint: Any) -> str:
    """A type as an error names it: ``int``, ``list``, ``mapping``, ``null``."""
    origin = typing.get_origin(hint) or hint
    names = {list: "list", tuple: "list", dict: "mapping", type(None): "null"}
    return names.get(origin, getattr(origin, "__name__", str(origin)))


def _scalar(hint: type, value: Any, field: str) -> Any:
    """YAML's own scalars, taken as they are (a quoted ``"2023"`` stays a string, as the
    data config hashes it); an int widens to a float, a bool is no number."""
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise _FieldError(field, f"expected {hint.__name__}, got {value!r}")


def _union(hint: Any, value: Any, field: str) -> Any:
    """The first member ``value`` fits; else the one member's own error where it says more
    than a type (an item of a list, a dataclass's checks), or what the members are."""
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    members = [a for a in args if a is not type(None)]
    errors = []
    for member in members:
        try:
            return _value(member, value, field)
        except _FieldError as err:
            errors.append(err)
    if len(errors) == 1 and (errors[0].field != field or dataclasses.is_dataclass(members[0])):
        raise errors[0]
    names = " or ".join(dict.fromkeys(_name(a) for a in args))
    raise _FieldError(field, f"expected {names}, got {value!r}")


def _sequence(hint: Any, value: Any, field: str) -> Any:
    """A list (or a fixed or open tuple), item by item."""
    if not isinstance(value, list | tuple):
        raise _FieldError(field, f"expected a list, got {value!r}")
    args = typing.get_args(hint)
    fixed = typing.get_origin(hint) is tuple and args and args[-1] is not Ellipsis
    if fixed and len(value) != len(args):
        raise _FieldError(field, f"expected {len(args)} items, got {value!r}")
    items = args if fixed else [args[0] if args else Any] * len(value)
    out = [_value(item, v, _join(field, i)) for i, (item, v) in enumerate(zip(items, value, strict=True))]
    return tuple(out) if typing.get_origin(hint) is tuple else out


def _mapping(hint: Any, value: Any, field: str) -> dict:
    """A mapping, key by key."""
    if not isinstance(value, Mapping):
        raise _FieldError(field, f"expected a mapping, got {value!r}")
    key_hint, value_hint = typing.get_args(hint) or (Any, Any)
    return {_value(key_hint, k, field): _value(value_hint, v, _join(field, str(k))) for k, v in value.items()}


@functools.cache
def _leaf_parser(hint: Any) -> ArgumentParser:
    """A parser of one value of ``hint``, built once per type."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--value", type=hint)
    return parser


def _leaf(hint: Any, value: Any, field: str) -> Any:
    """A value of a type the walk does not know (a ``Path``, a class), read by jsonargparse."""
    try:
        return _leaf_parser(hint).parse_object({"value": value}).value
    except ArgumentError as err:
        raise _FieldError(field, parse_error(str(err)).removeprefix("value: ")) from None


def _value(hint: Any, value: Any, field: str) -> Any:
    """``value`` as ``hint``, walked down to its scalars so that an error names the path
    (``sources[0].synthetic.megabytes``) and the value as written."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, value, field)
    if origin in (typing.Union, types.UnionType):
        return _union(hint, value, field)
    if origin is typing.Literal:
        if value in typing.get_args(hint) and not isinstance(value, bool):
            return value
        raise _FieldError(
            field, f"expected one of {', '.join(map(repr, typing.get_args(hint)))}, got {value!r}"
        )
    if origin in (list, tuple):
        return _sequence(hint, value, field)
    if origin is dict:
        return _mapping(hint, value, field)
    if hint in (int, float, str, bool):
        return _scalar(hint, value, field)
    return _leaf(hint, value, field)


def _dataclass(cls: Any, value: Any, field: str) -> Any:
    """``cls`` from a mapping of its fields: unknown and missing keys named, then the class's
    own checks (``__post_init__``)."""
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
    # the class's own checks, worded ``field: problem`` where one field is at fault
    except (ValueError, TypeError) as err:
        name, colon, problem = str(err).partition(": ")
        if colon and name in fields:
            raise _FieldError(_join(field, name), problem) from None
        raise _FieldError(field, str(err)) from None
