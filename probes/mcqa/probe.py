"""The ``mcqa`` probe: four scoring protocols over the same items (seeds/000-002).

Scored by likelihood: ``letter_separate`` (``Answer:`` + space token, bare letter),
``letter_merged`` (``Answer:``, `` A``), ``cloze`` (each option's full text, encoded as
lm-evaluation-harness does; HellaSwag-style items continue their context). Metrics:
``acc``, ``ece``, ``brier`` (letters) or ``acc``, ``acc_norm``, ``acc_bytes`` (cloze); per
task ``mcnemar_p`` between the two letter strategies on the same items; with
``permutations`` the options are rotated cyclically and ``acc_perm_spread`` is the
max - min accuracy over rotations.

Scored by generation (greedy, or ``seeds`` sampled runs at temperature 0.6 / top-k 20):
``dashed`` (Matched-and-Dashed: ``acc`` and how often each extraction rule fired,
``rule_<name>``) and ``wrapper_<family>`` for the five wrappers (``acc``, ``parsable``,
their ``_normalised`` variants, ``prompt_tokens``), with per task ``fsi``, ``psi``,
``nfsi`` and their bootstrap CIs (``_lo``, ``_hi``), the same on the token-matched subset
(``fsi_matched``, ``psi_matched``, ``matched_share``), ``delta_tok_median``, and
``wrapper_<family>/win``; ``probe/mcqa/all/...`` averages FSI/PSI over tasks and counts
wins. NonsenseQA tasks report ``chance_gap`` = acc - 1/choices and ``chance_distance``
= its absolute value for every protocol. Keys: ``probe/mcqa/<task>/<protocol>/<metric>``.

Tasks: the embedded word completion (``wordcomp_<lang>``, from the data's held-out text),
NonsenseQA (``nonsenseqa_<lang>``) and any benchmark through ``datasets``.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bytecanary import stats
from bytecanary.bytecodec import ByteCodec
from bytecanary.data.languages import LANGUAGES
from probes.engine import Sampling, generate
from probes.mcqa import metrics, wrappers
from probes.mcqa.dashed import Matcher, extract
from probes.mcqa.encoding import encode_pair, letter_merged, letter_separate
from probes.mcqa.prompts import dashed, labels, render, rotate
from probes.mcqa.scoring import score_continuations
from probes.mcqa.tasks import McqaItem, TaskSource, load_task, nonsense_items, word_completion_items
from probes.registry import Probe, register_probe
from probes.utf8_probe import my_batches

SCORED = ("letter_separate", "letter_merged", "cloze")
GENERATED = ("dashed", *(f"wrapper_{f}" for f in wrappers.FAMILIES))
PROTOCOLS = SCORED + GENERATED


@dataclass(frozen=True)
class View:
    """One presentation of an item: its options rotated by ``rotation``. Generative
    protocols run on the unrotated view only (``prompts`` is empty for the others)."""

    item: McqaItem
    rotation: int
    encodings: dict[str, tuple[list[int], list[list[int]]]]  # protocol -> (prompt ids, continuations)
    prompts: dict[str, list[int]] = field(default_factory=dict)  # generative protocol -> prompt ids


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


def _generative_prompt(protocol: str, item: McqaItem) -> str:
    return dashed(item) if protocol == "dashed" else wrappers.wrap(item, protocol.removeprefix("wrapper_"))


def _context_size(model: Any) -> int:
    return getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 0)


@register_probe("mcqa")
class McqaProbe(Probe):
    version = 2
    higher_is_better: ClassVar[dict[str, bool]] = {
        "acc": True,
        "acc_norm": True,
        "acc_bytes": True,
        "acc_normalised": True,
        "parsable": True,
        "parsable_normalised": True,
        "ece": False,
        "brier": False,
        "fsi": False,
        "psi": False,
        "nfsi": False,
        "chance_distance": False,
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
        max_new_tokens: int = 24,
        seeds: int = 0,
        temperature: float = 0.6,
        top_k: int = 20,
        similarity: str = "tfidf",
        generative_per_task: int | None = None,
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
            protocols: subset of letter_separate, letter_merged, cloze, dashed and
                wrapper_<plain|json|structured|structured_delim|deliberate> (default: all).
            label_format: "A.", "(A)" or "1." (letter scoring).
            shots: solved examples before each question (letter scoring and cloze).
            permutations: also score every cyclic rotation of the options.
            max_new_tokens: generation length of the dashed and wrapper protocols.
            seeds: 0: one greedy generation per prompt; n: n sampled runs (seeds 0..n-1)
                at ``temperature`` / ``top_k``, treated as repeats.
            generative_per_task: the generative protocols run on the first this many items
                of each task (None: 32 with ``trial``, else all); a generated answer costs
                far more than a scored one.
            similarity: how M&D matches an answer to an option: "tfidf" (character n-grams)
                or a sentence-transformers model name or path.
            trial: at most 256 items per task; False: all of them.
            records: append one JSON line per scored item view to this file.
        """
        self.protocols = list(protocols or PROTOCOLS)
        unknown = set(self.protocols) - set(PROTOCOLS)
        if unknown:
            raise ValueError(f"unknown protocols {sorted(unknown)}; known: {', '.join(PROTOCOLS)}")
        labels(label_format, 2)  # validates the format
        if seeds < 0 or max_new_tokens < 1:
            raise ValueError("seeds must be >= 0 and max_new_tokens >= 1")
        self.sources = [TaskSource(**t) for t in tasks or []]
        self.embedded, self.nonsense = embedded_per_language, nonsense_per_language
        self.languages = languages or list(LANGUAGES)
        self.label_format, self.shots, self.permutations = label_format, shots, permutations
        self.max_new_tokens, self.seeds = max_new_tokens, seeds
        self.temperature, self.top_k, self.similarity = temperature, top_k, similarity
        self.generative_per_task = generative_per_task
        self._matcher_cache: Matcher | None = None
        self.batch_size, self.seed, self.trial, self.records = batch_size, seed, trial, records

    @property
    def scored(self) -> list[str]:
        return [p for p in self.protocols if p in SCORED]

    @property
    def generated(self) -> list[str]:
        return [p for p in self.protocols if p in GENERATED]

    def _matcher(self) -> Matcher:
        """Built once per probe: an embedding model is loaded once, not at every checkpoint."""
        if self._matcher_cache is None:
            self._matcher_cache = Matcher(self.similarity)
        return self._matcher_cache

    def _samplings(self) -> list[Sampling]:
        if self.seeds == 0:
            return [Sampling()]
        return [Sampling(self.temperature, self.top_k, seed=self.seed * 1000 + s) for s in range(self.seeds)]

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
        seen: dict[str, int] = {}
        for item, shots in self._items(data_dir):
            seen[item.task] = seen.get(item.task, 0) + 1
            limit = self.generative_per_task or (32 if self.trial else None)
            generative = self.generated if limit is None or seen[item.task] <= limit else []
            for r in range(len(item.choices) if self.permutations else 1):
                shown = rotate(item, r)
                prompt = render(shown, self.label_format, shots)
                names = labels(self.label_format, len(shown.choices))
                enc: dict[str, tuple[list[int], list[list[int]]]] = {}
                for protocol in self.scored:
                    if protocol == "letter_separate":
                        e = letter_separate(tokenizer, codec, prompt, names)
                        enc[protocol] = (e.prompt_ids, e.continuations)
                    elif protocol == "letter_merged":
                        e = letter_merged(tokenizer, codec, prompt, names)
                        enc[protocol] = (e.prompt_ids, e.continuations)
                    else:
                        enc[protocol] = _cloze(tokenizer, shown)
                gen = {
                    p: list(tokenizer.encode(_generative_prompt(p, shown), add_special_tokens=False))
                    for p in (generative if r == 0 else [])
                }
                views.append(View(shown, r, enc, gen))
        return views

    def compute(
        self, model: Any, tokenizer: Any, prepared: list[View], rank: int = 0, world: int = 1
    ) -> dict:
        idx = my_batches(len(prepared), self.batch_size, rank, world)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        width = max((len(v.item.choices) for v in prepared), default=1)
        out: dict[str, np.ndarray] = {"index": idx}
        n_ctx = _context_size(model)
        for protocol in self.scored:
            views = [prepared[i].encodings[protocol] for i in idx]
            # a prompt longer than the context keeps its end (the question and "Answer:")
            prompts = [p[-max(1, n_ctx - max(map(len, c))) :] if n_ctx else p for p, c in views]
            lls = score_continuations(model, prompts, [c for _, c in views], pad, self.batch_size)
            table = np.full((len(idx), width), np.nan)
            for row, ll in enumerate(lls):
                table[row, : len(ll)] = ll
            out[protocol] = table
        if self.generated:
            out["generated"] = self._generate(model, tokenizer, [prepared[i] for i in idx], pad, n_ctx)
        return out

    def _generate(self, model: Any, tokenizer: Any, views: list[View], pad: int, n_ctx: int) -> np.ndarray:
        """(views, generative protocols, seeds) decoded text; "" for rotated views. Each
        batch samples with its own seed, so DDP shards draw what one process draws."""
        codec = ByteCodec.from_tokenizer(tokenizer)
        keep = max(1, n_ctx - self.max_new_tokens) if n_ctx else None
        texts = np.full((len(views), len(self.generated), len(self._samplings())), "", dtype=object)
        for s, sampling in enumerate(self._samplings()):
            for vlo in range(0, len(views), self.batch_size):  # the view batches my_batches dealt
                rows = range(vlo, min(vlo + self.batch_size, len(views)))
                batch = [(v, p) for v in rows for p in views[v].prompts]  # every protocol at once
                if not batch:
                    continue
                first = views[batch[0][0]].item
                key = f"{sampling.seed}|{first.task}|{first.question}".encode()
                seeded = Sampling(sampling.temperature, sampling.top_k, seed=zlib.crc32(key))
                prompts = [views[v].prompts[p][-keep:] if keep else views[v].prompts[p] for v, p in batch]
                gen = generate(
                    model,
                    prompts,
                    self.max_new_tokens,
                    tokenizer.eos_token_id,
                    pad,
                    len(batch),
                    seeded,
                    score_prompt=False,
                )
                for row, (v, p) in enumerate(batch):
                    ids = gen.tokens[row, : gen.lengths[row]].tolist()
                    if ids and ids[-1] == tokenizer.eos_token_id:
                        ids = ids[:-1]
                    texts[v, self.generated.index(p), s] = codec.decode(ids).decode("utf-8", errors="replace")
        return texts

    def aggregate(self, prepared: list[View], payloads: list[dict]) -> dict[str, float]:
        merged = {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}
        order = np.argsort(merged["index"], kind="stable")
        ll = {p: merged[p][order] for p in self.scored}
        n_choices = [len(v.item.choices) for v in prepared]
        per_view = {p: [ll[p][i, :n] for i, n in enumerate(n_choices)] for p in self.scored}
        graded = self._grade(prepared, merged["generated"][order]) if self.generated else {}
        if self.records:
            self._write_records(prepared, per_view, graded)
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
            chance = float(np.mean([1 / n_choices[i] for i in base]))
            per_protocol: dict[str, dict[str, float]] = {}
            for p in self.scored:
                per_protocol[p] = protocol_metrics(p, base)
                if self.permutations:
                    accs = [protocol_metrics(p, views)["acc"] for views in by_rotation.values()]
                    per_protocol[p]["acc_perm_spread"] = float(max(accs) - min(accs))
            generated = [i for i in base if prepared[i].prompts]
            if generated:
                per_protocol.update(generative_metrics(graded, prepared, generated, self.generated))
            for p, m in per_protocol.items():
                if task.startswith("nonsenseqa"):
                    m["chance_gap"] = m["acc"] - chance
                    m["chance_distance"] = abs(m["chance_gap"])
                out.update({f"probe/mcqa/{task}/{p}/{k}": float(v) for k, v in m.items()})
            if {"letter_separate", "letter_merged"} <= set(self.scored):
                a = metrics.letter_correct([per_view["letter_separate"][i] for i in base], answers)
                b = metrics.letter_correct([per_view["letter_merged"][i] for i in base], answers)
                out[f"probe/mcqa/{task}/mcnemar_p"] = stats.mcnemar_exact(a, b)
            families = [p for p in self.generated if p.startswith("wrapper_")]
            if len(families) > 1 and generated:
                out.update(wrapper_indices(graded, prepared, generated, families, task, self.seed))
            out[f"probe/mcqa/{task}/n"] = float(len(base))
        out.update(across_tasks(out))
        return out

    def _grade(self, prepared: list[View], texts: np.ndarray) -> dict[str, np.ndarray]:
        """Per (view, seed): predicted option (-1: none) of every generative protocol,
        the strict and normalised predictions of wrappers, the M&D rule, token counts."""
        matcher = self._matcher()
        n, seeds = len(prepared), texts.shape[2]
        graded: dict[str, np.ndarray] = {"text": texts}
        for j, p in enumerate(self.generated):
            pred = np.full((n, seeds), -1)
            norm = np.full((n, seeds), -1)
            rule = np.full((n, seeds), "", dtype=object)
            for i, view in enumerate(prepared):
                if not view.prompts:
                    continue
                choices = view.item.choices
                for s in range(seeds):
                    if p == "dashed":
                        answer, rule[i, s] = extract(texts[i, j, s], choices)
                        pred[i, s] = norm[i, s] = matcher.match(answer, choices)
                    else:
                        family = p.removeprefix("wrapper_")
                        text = wrappers.response(family, texts[i, j, s])
                        pred[i, s] = wrappers.extract_strict(family, text, len(choices))
                        norm[i, s] = wrappers.extract_normalised(family, text, choices)
            graded[p], graded[f"{p}/normalised"], graded[f"{p}/rule"] = pred, norm, rule
            graded[f"{p}/tokens"] = np.array([len(v.prompts.get(p, ())) for v in prepared])
        return graded

    def _write_records(
        self, prepared: list[View], per_view: dict[str, list[np.ndarray]], graded: dict[str, np.ndarray]
    ) -> None:
        with open(self.records, "a", encoding="utf-8") as f:
            for i, v in enumerate(prepared):
                row: dict[str, Any] = {
                    "probe": self.name,
                    "task": v.item.task,
                    "language": v.item.language,
                    "rotation": v.rotation,
                    "answer": v.item.answer,
                    "choices": list(v.item.choices),
                }
                for p in self.scored:
                    prompt_ids, conts = v.encodings[p]
                    row[p] = {
                        "ll": per_view[p][i].tolist(),
                        "continuation_ids": conts,
                        "prompt_tail_ids": prompt_ids[-3:],
                    }
                for j, p in enumerate(self.generated if v.prompts else []):
                    row[p] = {
                        "generated": list(graded["text"][i, j]),
                        "prediction": graded[p][i].tolist(),
                        "prediction_normalised": graded[f"{p}/normalised"][i].tolist(),
                        "prompt_tokens": len(v.prompts[p]),
                    }
                    if p == "dashed":
                        row[p]["rule"] = list(graded[f"{p}/rule"][i])
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def generative_metrics(
    graded: dict[str, np.ndarray], prepared: list[View], base: list[int], generated: list[str]
) -> dict[str, dict[str, float]]:
    answers = np.array([prepared[i].item.answer for i in base])
    out = {}
    for p in generated:
        if p == "dashed":
            out[p] = metrics.generated_metrics(graded[p][base], answers, rules=graded[f"{p}/rule"][base])
        else:
            out[p] = metrics.generated_metrics(
                graded[p][base], answers, normalised=graded[f"{p}/normalised"][base]
            )
            out[p]["prompt_tokens"] = float(graded[f"{p}/tokens"][base].mean())
    return out


def wrapper_indices(
    graded: dict[str, np.ndarray],
    prepared: list[View],
    base: list[int],
    families: list[str],
    task: str,
    seed: int,
) -> dict[str, float]:
    """FSI / PSI / nFSI of one task (strict, normalised, token-matched) and wrapper wins."""
    answers = np.array([prepared[i].item.answer for i in base])[:, None, None]
    strict = np.stack([graded[f][base] for f in families], axis=1)  # (items, wrappers, seeds)
    normalised = np.stack([graded[f"{f}/normalised"][base] for f in families], axis=1)
    tokens = np.stack([graded[f"{f}/tokens"][base] for f in families], axis=1)
    m = wrappers.sensitivity(strict == answers, strict >= 0, seed=seed)
    loose = wrappers.sensitivity(normalised == answers, normalised >= 0, n_resamples=0)
    m.update({f"{k}_normalised": loose[k] for k in ("fsi", "psi", "nfsi")})
    dtok = wrappers.delta_tok(tokens)
    matched = dtok <= 0.05
    m["delta_tok_median"], m["matched_share"] = float(np.median(dtok)), float(matched.mean())
    if matched.any():  # the token-matched subset (Delta_tok <= 5%), with its own CIs
        sub = wrappers.sensitivity((strict == answers)[matched], (strict >= 0)[matched], seed=seed)
        m.update({k.replace("fsi", "fsi_matched").replace("psi", "psi_matched"): v for k, v in sub.items()})
    out = {f"probe/mcqa/{task}/{k}": float(v) for k, v in m.items()}
    acc = (strict == answers).mean(axis=(0, 2))
    for f, a in zip(families, acc, strict=True):
        out[f"probe/mcqa/{task}/{f}/win"] = float(a == acc.max())
    return out


def across_tasks(out: dict[str, float]) -> dict[str, float]:
    """``probe/mcqa/all/...``: FSI / PSI / nFSI averaged over tasks (bootstrap CI across
    tasks, as the seed's table 2) and how many tasks each wrapper won."""
    agg: dict[str, float] = {}
    for name in ("fsi", "psi", "nfsi"):
        values = [v for k, v in out.items() if k.endswith(f"/{name}") and k.count("/") == 3]
        if values:
            agg[f"probe/mcqa/all/{name}"] = float(np.mean(values))
            agg[f"probe/mcqa/all/{name}_lo"], agg[f"probe/mcqa/all/{name}_hi"] = stats.bootstrap_ci(values)
    for k, v in out.items():
        if k.endswith("/win"):
            key = f"probe/mcqa/all/{k.split('/')[3]}/wins"
            agg[key] = agg.get(key, 0.0) + v
    return agg
