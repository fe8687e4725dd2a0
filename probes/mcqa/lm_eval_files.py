"""What an lm-eval task depends on, read from its YAMLs' structure alone (nothing imported),
including which YAMLs of a folder do not parse: lm-eval's index skips them without a word.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from bytecanary.config import yaml_problem


class _FunctionRef(str):
    """A ``!function module.name`` reference in a task YAML."""


class _YamlLoader(yaml.SafeLoader):
    """Reads a task YAML's structure only: ``!function`` references stay text."""


_YamlLoader.add_constructor("!function", lambda loader, node: _FunctionRef(loader.construct_scalar(node)))


def _values(tree: Any) -> Iterator[Any]:
    """Every leaf value of a YAML tree."""
    if isinstance(tree, Mapping):
        for value in tree.values():
            yield from _values(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _values(value)
    else:
        yield tree


def yaml_files(path: Path, seen: set[Path]) -> list[Path]:
    """A task YAML, the YAMLs it includes and the local modules its ``!function``s name."""
    path = path.resolve()
    if path in seen:
        return []
    seen.add(path)
    cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=_YamlLoader)  # a SafeLoader
    out = [path]
    for value in _values(cfg):
        if isinstance(value, _FunctionRef):
            module = path.parent / f"{value.rpartition('.')[0].replace('.', '/')}.py"
            out += [module] if module.is_file() else []
    includes = cfg.get("include", []) if isinstance(cfg, dict) else []
    for include in includes if isinstance(includes, list) else [includes]:
        out += yaml_files(path.parent / include, seen)
    return out


def data_files(spec: Any) -> list[Path]:
    """The local files a ``data_files`` value (a path or pattern, a list, a split mapping) names."""
    if isinstance(spec, Mapping):
        return [f for value in spec.values() for f in data_files(value)]
    if isinstance(spec, list):
        return [f for value in spec for f in data_files(value)]
    if isinstance(spec, str):
        return [Path(f).resolve() for f in sorted(glob.glob(spec, recursive=True)) if Path(f).is_file()]
    return []


class BrokenYaml(NamedTuple):
    path: Path
    mentions_task: bool
    problem: str


def broken_yamls(folder: Path, name: str) -> list[BrokenYaml]:
    """Each YAML under ``folder`` that does not parse, those that mention task ``name`` first."""
    broken = []
    for path in sorted(folder.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            yaml.load(text, Loader=_YamlLoader)  # a SafeLoader
        except yaml.YAMLError as err:
            broken.append(BrokenYaml(path, name in text, yaml_problem(err)))
    return sorted(broken, key=lambda found: not found.mentions_task)
