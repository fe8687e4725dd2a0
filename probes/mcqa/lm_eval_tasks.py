"""MCQA items from any multiple-choice task of lm-evaluation-harness, read through lm-eval itself
so its templates are never re-implemented and cloze ``acc``/``acc_norm`` equal those of
``lm_eval --tasks <task>`` item for item (docs/mcqa-probes.md).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from bytecanary import versions
from bytecanary.data.languages import LANGUAGES
from bytecanary.errors import BytecanaryError, one_line
from bytecanary.probes.mcqa.lm_eval_files import broken_yamls, data_files, yaml_files
from bytecanary.probes.mcqa.tasks import McqaItem, TaskSource, no_progress_bars

PIN = "==0.4.13"  # the extra's pin: the task and sampler behaviour relied on below
INSTALL = "pip install -e '.[lm-eval]'"
FEWSHOT_SEED = 1234  # lm-eval's default fewshot_random_seed, so its few-shot draws are ours


@dataclass(frozen=True)
class LmEvalItem(McqaItem):
    """An item of an lm-eval task. ``context`` is what cloze scores after (lm-eval's
    few-shot context and the document's text); ``doc_id`` and ``task_version`` join the
    per-item records with lm-eval's ``--log_samples`` lines."""

    context: str = ""
    doc_id: int = 0
    task_version: str | int | float | None = None
    special_tokens: bool | None = None
    """Its prompts' special tokens (BOS): None as lm-eval does, True/False forced (the entry's
    ``add_special_tokens``)."""
    contexts: tuple[str, ...] = ()
    """A multiple-input task's (Winogrande's): one context per choice, which cloze scores
    ``target`` after; empty for every other task."""
    target: str = ""


def require_lm_eval(where: str) -> None:
    """One line with the install command where lm-eval is missing or not the pinned release."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise BytecanaryError(
            f"{where}: lm-eval tasks need lm-evaluation-harness (lm-eval{PIN}): {INSTALL}"
        ) from None
    versions.require("lm_eval", PIN, "the mcqa probe's lm-eval tasks")


@dataclass
class LmEvalSource:
    """One entry ``{name: ..., source: lm_eval}`` of the mcqa probe's ``tasks``."""

    name: str
    """An lm-eval task (or group, or tag: each of its tasks) name."""
    include_path: str | None = None
    """A folder of the user's own task YAMLs, searched before lm-eval's registry."""
    language: str | None = None
    """The items' language where the task names none."""
    limit: int | None = None
    """The first this many documents of each task (None: all, as lm-eval)."""
    add_special_tokens: bool | None = None
    """The tokenizer's special tokens (BOS) before every prompt: None as lm-eval 0.4.13 does
    (the tokenizer's default: Llama, Mistral and Gemma tokenizers add BOS, GPT-2's none), or
    True/False for every prompt, as lm-eval's ``add_bos_token``."""
    _built: dict[int | None, list[tuple[LmEvalItem, tuple[McqaItem, ...]]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The items per document limit, built once: checking them, preparing them and the
    fingerprint's files would each load the task and render every document again."""

    def __post_init__(self) -> None:
        where = f"lm-eval task {self.name!r}"
        if self.language is not None and self.language not in LANGUAGES:
            known = ", ".join(LANGUAGES)
            raise BytecanaryError(f"{where}: language: unknown language {self.language!r} (known: {known})")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise BytecanaryError(f"{where}: limit: expected a number of documents >= 1, got {self.limit!r}")
        if self.add_special_tokens is not None and not isinstance(self.add_special_tokens, bool):
            raise BytecanaryError(
                f"{where}: add_special_tokens: expected true, false or null, got {self.add_special_tokens!r}"
            )
        if self.include_path is not None and not Path(self.include_path).is_dir():
            raise BytecanaryError(f"{where}: include_path: {self.include_path}: no such folder")
        require_lm_eval(where)

    def items(self, limit: int | None = None) -> list[tuple[LmEvalItem, tuple[McqaItem, ...]]]:
        """(item, the few-shot documents its context holds) of every document of every task
        (the first ``limit`` of each, at most ``self.limit``)."""
        limits = [n for n in (limit, self.limit) if n is not None]
        n = min(limits) if limits else None
        if n not in self._built:
            self._built[n] = [
                pair
                for task in self.tasks.values()
                for pair in _task_items(task, self.language, n, self.add_special_tokens)
            ]
        return self._built[n]

    @functools.cached_property
    def tasks(self) -> dict[str, Any]:
        """The task objects (``_build``), loaded once."""
        return _build(self)

    def files(self) -> list[Path]:
        """What the items depend on: each task's YAML, the YAMLs it includes, the modules its
        ``!function``s name, and its local ``data_files``."""
        out: list[Path] = []
        for task in self.tasks.values():
            source = (task.config.metadata or {}).get("config_source", "")
            if source and Path(source).is_file():
                out += yaml_files(Path(source), set())
            out += data_files((task.config.dataset_kwargs or {}).get("data_files"))
        return list(dict.fromkeys(out))


def task_source(spec: Mapping[str, Any]) -> TaskSource | LmEvalSource:
    """A ``tasks:`` entry as its source: ``source: lm_eval`` an lm-eval task, else (``source:
    datasets``, the default) a benchmark through ``datasets`` with a schema."""
    spec = dict(spec)
    kind = spec.pop("source", "datasets")
    if kind == "datasets":
        return TaskSource(**spec)
    if kind != "lm_eval":
        raise BytecanaryError(
            f"task {spec.get('name')!r}: source: unknown source {kind!r} (known: datasets, lm_eval)"
        )
    accepted = [f.name for f in fields(LmEvalSource)]
    unknown = [key for key in spec if key not in accepted]
    if unknown or "name" not in spec:
        problem = f"unknown parameter {unknown[0]!r}" if unknown else "no name"
        raise BytecanaryError(
            f"task {spec.get('name')!r} (lm_eval): {problem}; lm-eval tasks take {', '.join(accepted)}"
        )
    return LmEvalSource(**spec)


@functools.lru_cache(maxsize=8)
def _manager(include_path: str | None) -> Any:
    """lm-eval's task index of ``include_path`` alone, or of its own registry (None); built
    once per process (the registry's takes seconds)."""
    from lm_eval.tasks import TaskManager

    if include_path is None:
        return TaskManager()
    return TaskManager(include_path=str(Path(include_path).resolve()), include_defaults=False)


def _find(src: LmEvalSource) -> tuple[Any, Any]:
    """(the task manager that knows ``src.name``, its index entry); an unknown name is one line naming
    the nearest known one. lm-eval's index skips an unparsable YAML silently, so a broken YAML in
    ``include_path`` that mentions the name is named instead.
    """
    broken = broken_yamls(Path(src.include_path), src.name) if src.include_path else []
    paths = ([src.include_path] if src.include_path else []) + [None]
    for path in paths:
        manager = _manager(path)
        if src.name in manager.task_index:
            return manager, manager.task_index[src.name]
        if broken and (broken[0].mentions_task or path is None):
            raise BytecanaryError(
                f"{broken[0].path}: invalid YAML: {broken[0].problem}; lm-eval skips the file, "
                f"so task {src.name!r} is not found"
            )
    known = [name for path in paths for name in _manager(path).all_tasks]
    near = difflib.get_close_matches(src.name, known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    where = f"{src.include_path} or " if src.include_path else ""
    raise BytecanaryError(f"lm-eval task {src.name!r}: not found in {where}lm-eval's registry{hint}")


def _check_type(name: str, output_type: Any) -> None:
    if output_type != "multiple_choice":
        raise BytecanaryError(
            f"lm-eval task {name!r}: output_type {output_type}; the mcqa probe scores multiple_choice only"
        )


def _build(src: LmEvalSource) -> dict[str, Any]:
    """The task objects ``src`` names (a group or tag: each of its tasks), checked to be
    multiple-choice tasks the probe can score; a task's type is checked before its data loads."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._index import Kind

    manager, entry = _find(src)
    if entry.kind is Kind.TASK:
        _check_type(src.name, (entry.cfg or {}).get("output_type", "generate_until"))
    with (
        one_line(f"lm-eval task {src.name!r}: cannot load"),
        no_progress_bars(True),
    ):  # YAML, template, dataset
        tasks = manager.load([src.name])["tasks"]
    for name, task in tasks.items():
        if not isinstance(task, ConfigurableTask):
            raise BytecanaryError(
                f"lm-eval task {name!r}: a Python task class ({type(task).__name__}), not a YAML task"
            )
        _check_type(name, task.config.output_type)
    return tasks


def _language(task: Any, given: str | None) -> str:
    """The task's language: its metadata's, else its ``dataset_name`` when that is a known
    language code, else ``given`` (the entry's, for the tasks that say none); one line where
    none is known."""
    name = task.task_name
    said = (task.config.metadata or {}).get("language")
    where = "metadata.language"
    if said is None and task.config.dataset_name in LANGUAGES:
        said, where = task.config.dataset_name, "dataset_name"
    if said is None and given is None:
        raise BytecanaryError(
            f"lm-eval task {name!r}: no language (neither metadata.language nor a dataset_name of "
            f"{', '.join(LANGUAGES)}): give one, {{name: {name}, source: lm_eval, language: ...}}"
        )
    if said is not None and said not in LANGUAGES:
        raise BytecanaryError(
            f"lm-eval task {name!r}: {where}: unknown language {said!r} (known: {', '.join(LANGUAGES)})"
        )
    return said if said is not None else given


def _fields(task: Any, doc: Mapping[str, Any], fewshot: Any, where: str) -> dict[str, Any]:
    """A document's question, choices and gold index as lm-eval reads them (``fewshot``: the
    task's few-shot formatting, for a few-shot document; None for an evaluated one)."""
    text, choice, target = (
        (fewshot.doc_to_text, fewshot.doc_to_choice, fewshot.doc_to_target) if fewshot else (None, None, None)
    )
    question, choices, gold = (
        task.doc_to_text(doc, text),
        task.doc_to_choice(doc, choice),
        task.doc_to_target(doc, target),
    )
    if not isinstance(question, str):  # empty: the choices hold the whole prompt (PAWS-X)
        raise BytecanaryError(f"{where}: doc_to_text gives {question!r}, not a prompt")
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise BytecanaryError(f"{where}: doc_to_choice gives {choices!r}, not a list of two or more texts")
    if isinstance(gold, list):
        raise BytecanaryError(
            f"{where}: doc_to_target gives several golds {gold!r}; the mcqa probe needs one"
        )
    answer = choices.index(gold) if isinstance(gold, str) and gold in choices else gold
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise BytecanaryError(f"{where}: doc_to_target gives {gold!r}, not one of its {len(choices)} choices")
    return {"question": question, "choices": tuple(choices), "answer": answer}


def _multiple_input_fields(task: Any, doc: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A multiple-input document as lm-eval reads it (Winogrande): its choices are the
    contexts, ``doc_to_text`` the gold's index, ``doc_to_target`` the continuation they share."""
    choices, gold, target = task.doc_to_choice(doc), task.doc_to_text(doc), task.doc_to_target(doc)
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise BytecanaryError(f"{where}: doc_to_choice gives {choices!r}, not a list of two or more texts")
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise BytecanaryError(f"{where}: doc_to_text gives {gold!r}, not one of its {len(choices)} choices")
    if not isinstance(target, str) or not target:
        raise BytecanaryError(
            f"{where}: doc_to_target gives {target!r}, not the continuation the choices share"
        )
    return {"question": "", "choices": tuple(choices), "answer": gold, "target": target}


def _recorded_draws(task: Any) -> list[dict[str, Any]]:
    """The few-shot documents the task's own sampler drew for the latest context: the
    letter prompts show the examples that cloze's context holds."""
    drawn: list[dict[str, Any]] = []
    sampler = getattr(task, "sampler", None)
    if sampler is not None:
        sample = sampler.sample

        def recording(*args: Any, **kwargs: Any) -> Any:
            docs = sample(*args, **kwargs)
            drawn[:] = docs
            return docs

        sampler.sample = recording
    return drawn


def _task_items(
    task: Any, given_language: str | None, limit: int | None, special_tokens: bool | None
) -> list[tuple[LmEvalItem, tuple[McqaItem, ...]]]:
    """(item, its few-shot documents) of the task's first ``limit`` documents, each context
    built by lm-eval in document order after seeding its sampler as ``simple_evaluate`` does."""
    name, language = task.task_name, _language(task, given_language)
    shots = task.config.num_fewshot or 0
    common = {
        "task": name,
        "language": language,
        "continuation": True,
        "delimiter": task.config.target_delimiter,
    }
    task.set_fewshot_seed(seed=FEWSHOT_SEED)
    drawn = _recorded_draws(task)
    out = []
    for doc_id, doc in task.doc_iterator(limit=limit):
        drawn.clear()
        where = f"lm-eval task {name!r} doc {doc_id}"
        with one_line(where):
            context = task.fewshot_context(doc=doc, num_fewshot=shots, gen_prefix=task.doc_to_prefix(doc))
            many = bool(task.multiple_input)  # a list of contexts, one per choice
            item = LmEvalItem(
                **common,
                **(_multiple_input_fields(task, doc, where) if many else _fields(task, doc, None, where)),
                item_id=str(doc_id),
                context="" if many else context,
                contexts=tuple(context) if many else (),
                doc_id=doc_id,
                task_version=task.VERSION,
                special_tokens=special_tokens,
            )
            examples = tuple(
                McqaItem(**common, **_fields(task, d, task.fewshot_cfg, f"{where}, a few-shot document"))
                for d in ([] if many else drawn)
            )
        out.append((item, examples))
    if not out:
        raise BytecanaryError(f"lm-eval task {name!r}: no documents")
    return out
