"""The ``mcqa`` probe: letter scoring under both space strategies, and cloze (seeds/000).

Protocols: ``letter_separate`` (``Answer:`` + space token, bare letter), ``letter_merged``
(``Answer:``, `` A``), ``cloze`` (each option's full text after ``Answer:`` with a space,
encoded as lm-evaluation-harness does; HellaSwag-style items continue their context).
Per task and protocol: ``acc``, ``ece``, ``brier`` (letters) or ``acc``, ``acc_norm``,
``acc_bytes`` (cloze); per task ``mcnemar_p`` between the two letter strategies on the
same items; with ``permutations`` the options are rotated cyclically and
``acc_perm_spread`` is the max - min accuracy over rotations. NonsenseQA tasks also
report ``chance_gap`` = acc - 1/choices. Keys: ``probe/mcqa/<task>/<protocol>/<metric>``.

Tasks: the embedded word completion (``wordcomp_<lang>``, from the data's held-out text),
NonsenseQA (``nonsenseqa_<lang>``) and any benchmark through ``datasets``. Still to come
(issue 6): Matched-and-Dashed and the prompt wrappers with FSI/PSI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bytecanary import stats
from bytecanary.bytecodec import ByteCodec
from bytecanary.data.languages import LANGUAGES
from probes.mcqa import metrics
from probes.mcqa.encoding import encode_pair, letter_merged, letter_separate
from probes.mcqa.prompts import labels, render, rotate
from probes.mcqa.scoring import score_continuations
from probes.mcqa.tasks import McqaItem, TaskSource, load_task, nonsense_items, word_completion_items
from probes.registry import Probe, register_probe
from probes.utf8_probe import my_batches

PROTOCOLS = ("letter_separate", "letter_merged", "cloze")


@dataclass(frozen=True)
class View:
    """One scored presentation of an item: its options rotated by ``rotation``."""

    item: McqaItem
    rotation: int
    encodings: dict[str, tuple[list[int], list[list[int]]]]  # protocol -> (prompt ids, continuations)


def _cloze(tokenizer: Any, item: McqaItem) -> tuple[list[int], list[list[int]]]:
    context = item.question if item.continuation else f"Question: {item.question}\nAnswer:"
    delimiter = item.delimiter if item.continuation else " "
    pairs = [encode_pair(tokenizer, context, f"{delimiter}{choice}") for choice in item.choices]
    wholes = [ctx + cont for ctx, cont in pairs]
    shared = len(pairs[0][0])
    for whole in wholes:  # the shared prompt: the context, unless a boundary merged differently
        while whole[:shared] != wholes[0][:shared]:
            shared -= 1
    return wholes[0][:shared], [whole[shared:] for whole in wholes]


@register_probe("mcqa")
class McqaProbe(Probe):
    version = 1
    higher_is_better: ClassVar[dict[str, bool]] = {
        "acc": True,
        "acc_norm": True,
        "acc_bytes": True,
        "ece": False,
        "brier": False,
    }

    def __init__(
        self,
        tasks: list[dict[str, Any]] | None = None,
        embedded_per_language: int = 64,
        nonsense_per_language: int = 64,
        languages: list[str] | None = None,
        protocols: list[str] | None = None,
        label_format: str = "A.",
        shots: int = 0,
        permutations: bool = False,
        batch_size: int = 32,
        seed: int = 0,
        trial: bool = True,
        records: str | None = None,
    ) -> None:
        """
        Args:
            tasks: benchmarks, each a ``TaskSource`` as a mapping (name, schema, language, path, ...).
            embedded_per_language: word-completion items per language from the data's held-out
                text (0: none; needs a prepared data folder).
            nonsense_per_language: NonsenseQA items per language (0: none).
            protocols: subset of letter_separate, letter_merged, cloze (default: all).
            label_format: "A.", "(A)" or "1.".
            shots: solved examples before each question (taken from the task's first items).
            permutations: also score every cyclic rotation of the options.
            trial: at most 256 items per task; False: all of them.
            records: append one JSON line per scored item view to this file.
        """
        self.protocols = list(protocols or PROTOCOLS)
        unknown = set(self.protocols) - set(PROTOCOLS)
        if unknown:
            raise ValueError(f"unknown protocols {sorted(unknown)}; known: {', '.join(PROTOCOLS)}")
        labels(label_format, 2)  # validates the format
        self.sources = [TaskSource(**t) for t in tasks or []]
        self.embedded, self.nonsense = embedded_per_language, nonsense_per_language
        self.languages = languages or list(LANGUAGES)
        self.label_format, self.shots, self.permutations = label_format, shots, permutations
        self.batch_size, self.seed, self.trial, self.records = batch_size, seed, trial, records

    def _items(self, data_dir: Path | None) -> list[tuple[McqaItem, tuple[McqaItem, ...]]]:
        """(item, its shots) for every task."""
        groups = [load_task(src) for src in self.sources]
        if self.embedded:
            folder = Path(data_dir or "data/default")
            groups += [
                word_completion_items(folder, lang, self.embedded, self.seed) for lang in self.languages
            ]
        groups += [nonsense_items(lang, self.nonsense, self.seed) for lang in self.languages if self.nonsense]
        out = []
        for items in groups:
            shots, rest = tuple(items[: self.shots]), items[self.shots :]
            out += [(item, shots) for item in (rest[:256] if self.trial else rest)]
        return out

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> list[View]:
        codec = ByteCodec.from_tokenizer(tokenizer)
        views = []
        for item, shots in self._items(data_dir):
            for r in range(len(item.choices) if self.permutations else 1):
                shown = rotate(item, r)
                prompt = render(shown, self.label_format, shots)
                names = labels(self.label_format, len(shown.choices))
                enc: dict[str, tuple[list[int], list[list[int]]]] = {}
                for protocol in self.protocols:
                    if protocol == "letter_separate":
                        e = letter_separate(tokenizer, codec, prompt, names)
                        enc[protocol] = (e.prompt_ids, e.continuations)
                    elif protocol == "letter_merged":
                        e = letter_merged(tokenizer, codec, prompt, names)
                        enc[protocol] = (e.prompt_ids, e.continuations)
                    else:
                        enc[protocol] = _cloze(tokenizer, shown)
                views.append(View(shown, r, enc))
        return views

    def compute(
        self, model: Any, tokenizer: Any, prepared: list[View], rank: int = 0, world: int = 1
    ) -> dict:
        idx = my_batches(len(prepared), self.batch_size, rank, world)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        width = max((len(v.item.choices) for v in prepared), default=1)
        out: dict[str, np.ndarray] = {"index": idx}
        n_ctx = getattr(model.config, "n_positions", None) or getattr(
            model.config, "max_position_embeddings", 0
        )
        for protocol in self.protocols:
            views = [prepared[i].encodings[protocol] for i in idx]
            # a prompt longer than the context keeps its end (the question and "Answer:")
            prompts = [p[-max(1, n_ctx - max(map(len, c))) :] if n_ctx else p for p, c in views]
            lls = score_continuations(model, prompts, [c for _, c in views], pad, self.batch_size)
            table = np.full((len(idx), width), np.nan)
            for row, ll in enumerate(lls):
                table[row, : len(ll)] = ll
            out[protocol] = table
        return out

    def aggregate(self, prepared: list[View], payloads: list[dict]) -> dict[str, float]:
        merged = {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}
        order = np.argsort(merged["index"], kind="stable")
        ll = {p: merged[p][order] for p in self.protocols}
        n_choices = [len(v.item.choices) for v in prepared]
        per_view = {p: [ll[p][i, :n] for i, n in enumerate(n_choices)] for p in self.protocols}
        if self.records:
            self._write_records(prepared, per_view)
        out: dict[str, float] = {}

        def protocol_metrics(protocol: str, views: list[int]) -> dict[str, float]:
            lls, answers = [per_view[protocol][i] for i in views], [prepared[i].item.answer for i in views]
            if protocol == "cloze":
                return metrics.cloze_metrics(lls, answers, [prepared[i].item.choices for i in views])
            return metrics.letter_metrics(lls, answers)

        for task in sorted({v.item.task for v in prepared}):
            by_rotation: dict[int, list[int]] = {}
            for i, v in enumerate(prepared):
                if v.item.task == task:
                    by_rotation.setdefault(v.rotation, []).append(i)
            base = by_rotation[0]
            answers = [prepared[i].item.answer for i in base]
            for p in self.protocols:
                m = protocol_metrics(p, base)
                if task.startswith("nonsenseqa"):
                    m["chance_gap"] = m["acc"] - float(np.mean([1 / n_choices[i] for i in base]))
                if self.permutations:
                    accs = [protocol_metrics(p, views)["acc"] for views in by_rotation.values()]
                    m["acc_perm_spread"] = float(max(accs) - min(accs))
                out.update({f"probe/mcqa/{task}/{p}/{k}": float(v) for k, v in m.items()})
            if {"letter_separate", "letter_merged"} <= set(self.protocols):
                a = metrics.letter_correct([per_view["letter_separate"][i] for i in base], answers)
                b = metrics.letter_correct([per_view["letter_merged"][i] for i in base], answers)
                out[f"probe/mcqa/{task}/mcnemar_p"] = stats.mcnemar_exact(a, b)
            out[f"probe/mcqa/{task}/n"] = float(len(base))
        return out

    def _write_records(self, prepared: list[View], per_view: dict[str, list[np.ndarray]]) -> None:
        with open(self.records, "a", encoding="utf-8") as f:
            for i, v in enumerate(prepared):
                row = {
                    "probe": self.name,
                    "task": v.item.task,
                    "language": v.item.language,
                    "rotation": v.rotation,
                    "answer": v.item.answer,
                    "choices": list(v.item.choices),
                }
                for p in self.protocols:
                    prompt_ids, conts = v.encodings[p]
                    row[p] = {
                        "ll": per_view[p][i].tolist(),
                        "continuation_ids": conts,
                        "prompt_tail_ids": prompt_ids[-3:],
                    }
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
