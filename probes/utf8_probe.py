"""The UTF-8 probes' common ground: byte-prefix prompts, decoding, scoring with the incremental
DFA at every step, and expected validity (``p_valid``, ``p_complete``) along the greedy path
("Beyond Perplexity: UTF-8 Validity in Byte-aware LMs", arXiv 2606.14122; docs/utf8-probes.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bytecanary import utf8
from bytecanary.bytecodec import ByteCodec
from bytecanary.data.evalsets import Level0Set
from bytecanary.probes.dist import merge_shards, shard_indices
from bytecanary.probes.engine import Decoding, Sampling, generate
from bytecanary.probes.evalsets import eval_set_files
from bytecanary.probes.models import context_size, output_size, pad_id
from bytecanary.probes.params import Checked, GenerationSettings, PerSample, Sizes, at_least, within
from bytecanary.probes.registry import Probe
from bytecanary.probes.utf8_results import SampleResults, group_metrics, tier_gaps, write_records
from bytecanary.records import Context

SPACE = "▁"
PREFIXES = ("eos", "bos", "none", "byte_space")  # what stands before every prompt
BYTE_SPACE = "byte_space"


@dataclass(frozen=True)
class Utf8Sample:
    language: str
    char: str
    k: int  # prompt holds the first k bytes of ``char``
    tier: str | None
    item_id: str  # the eval-set entry: ``<lang>:U+XXXX`` (Level 0), ``<file>[<index>]`` (Level 1)
    prompt_ids: tuple[int, ...]
    prompt_bytes: bytes
    gold_ids: tuple[int, ...]  # the remainder as byte tokens (empty when k = len)
    remainder: bytes

    @property
    def k_label(self) -> str:
        return "kfull" if not self.remainder else f"k{self.k}"


@dataclass
class Prepared:
    samples: list[Utf8Sample]
    codec: ByteCodec
    eos_id: int | None
    pad_id: int
    classes: np.ndarray
    """(V, 2 x N_STATES) 0/1: per token, the DFA states it keeps valid, then those whose pending
    character it completes (``utf8.token_classes``): ``generate``'s token classes."""


@dataclass(frozen=True)
class Utf8Prompts(Checked):
    """Which eval-set entries become prompts, and what stands before each."""

    per_language: int = 256
    """With ``trial``: M characters (Level 1: sentences) per language."""
    eval_sets: list[str] | None = None
    """Eval-set files (Level 0: published format; Level 1: JSON lists); None: the data's evalsets/."""
    languages: list[str] | None = None
    """Keep only these languages; None: every language of the eval sets."""
    prefix: str = "eos"
    """Before each prompt: "eos" (the document separator), "bos", "none", or "byte_space" (the
    paper tool's byte token for 0x20, no separator)."""

    def __post_init__(self) -> None:
        at_least("per_language", self.per_language, 1)
        if self.prefix not in PREFIXES:
            raise ValueError(f"prefix must be one of {', '.join(PREFIXES)}, got {self.prefix!r}")
        super().__post_init__()


@dataclass(frozen=True)
class Utf8Config(Utf8Prompts, GenerationSettings, Sizes, PerSample):
    """The Level 0 and Level 1 probes' parameters (a flat spec: ``{name: level0, trial: true, ...}``)."""

    top_p: float = 1.0
    """Sample from the smallest set of tokens whose probability reaches p; 1: all of them."""
    alpha: float = 0.1
    """EMA weight of V_ema."""

    def __post_init__(self) -> None:
        within("top_p", self.top_p, 0, 1, low_open=True)
        within("alpha", self.alpha, 0, 1, low_open=True)
        super().__post_init__()

    @property
    def sampling(self) -> Sampling:
        """Greedy unless ``temperature`` > 0; ``seed`` seeds the draws."""
        return Sampling(self.temperature, self.top_k, self.top_p, self.seed)


def prefix_ids(tokenizer: Any, codec: ByteCodec, prefix: str) -> list[int]:
    """The ids before every prompt: the document separator (eos, bos), nothing, or the byte
    token for 0x20 (``byte_space``, the paper tool's convention)."""
    if prefix == BYTE_SPACE:
        return codec.encode_bytes(b" ")
    token_id = {"eos": tokenizer.eos_token_id, "bos": tokenizer.bos_token_id, "none": None}[prefix]
    return [] if token_id is None else [int(token_id)]


def leading_space_ids(tokenizer: Any, codec: ByteCodec) -> list[int]:
    """The tokenizer's own leading-space token, when encoding prepends one."""
    if not codec.adds_leading_space:
        return []
    space = tokenizer.convert_tokens_to_ids(SPACE)
    return [int(space)] if space is not None and space != tokenizer.unk_token_id else codec.encode_bytes(b" ")


def byte_prefix_sample(
    codec: ByteCodec,
    head_ids: list[int],
    head_bytes: bytes,
    language: str,
    char: str,
    k: int,
    tier: str | None,
    item_id: str,
) -> Utf8Sample:
    data = char.encode("utf-8")
    return Utf8Sample(
        language=language,
        char=char,
        k=k,
        tier=tier,
        item_id=item_id,
        prompt_ids=(*head_ids, *codec.encode_bytes(data[:k])),
        prompt_bytes=head_bytes + data[:k],
        gold_ids=tuple(codec.encode_bytes(data[k:])),
        remainder=data[k:],
    )


def prepared_for(tokenizer: Any, samples: list[Utf8Sample], codec: ByteCodec) -> Prepared:
    """Samples sorted by full sequence (prompt + gold): batches carry little padding, and
    the prefixes of one character sit together and share one prefill."""
    samples = sorted(
        samples, key=lambda s: (len(s.prompt_ids) + len(s.gold_ids), s.prompt_ids + s.gold_ids, s.k)
    )
    classes = class_rows(codec.table, codec.lengths)
    return Prepared(samples, codec, tokenizer.eos_token_id, pad_id(tokenizer), classes)


def class_rows(table: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(ids, 2 x N_STATES) float32: per id, the DFA states it keeps valid, then those whose
    pending character it completes (``utf8.token_classes``), as ``generate`` takes them."""
    classes = utf8.token_classes(table, lengths)
    return np.concatenate([classes.valid, classes.completes]).T.astype(np.float32)


def fit_context(samples: list[Utf8Sample], model: Any, room: int, codec: ByteCodec) -> list[Utf8Sample]:
    """Cut prompts from the left so prompt + ``room`` new tokens fit the model's context
    (long Level 1 sentences on small models); the scored bytes follow the cut."""
    n_ctx = context_size(model)
    if not n_ctx:
        return samples
    keep = n_ctx - room
    return [
        s
        if len(s.prompt_ids) <= keep
        else replace(s, prompt_ids=s.prompt_ids[-keep:], prompt_bytes=codec.decode(s.prompt_ids[-keep:]))
        for s in samples
    ]


def trial_subset(s: Level0Set, m: int, seed: int) -> list:
    """M entries spread evenly over the tiers (seeded); all of them when fewer."""
    rng = np.random.default_rng(seed)
    by_tier: dict[str, list] = {}
    for e in s.entries:
        by_tier.setdefault(e.tier, []).append(e)
    queues = {t: [es[i] for i in rng.permutation(len(es))] for t, es in sorted(by_tier.items())}
    chosen: list = []
    while len(chosen) < m and any(queues.values()):
        for t in sorted(queues):
            if queues[t] and len(chosen) < m:
                chosen.append(queues[t].pop())
    return chosen


def decode_and_score(
    model: Any, prep: Prepared, config: Utf8Config, rank: int = 0, world: int = 1
) -> SampleResults:
    """Per-sample results of this rank's share (``index`` into the samples)."""
    idx = shard_indices(len(prep.samples), config.batch_size, rank, world)
    samples = fit_context([prep.samples[i] for i in idx], model, config.max_new_tokens, prep.codec)
    prompts = [list(s.prompt_ids) for s in samples]
    golds = [list(s.gold_ids) for s in samples]
    decoding = Decoding(config.max_new_tokens, prep.eos_id, prep.pad_id, config.batch_size, config.sampling)
    n_vocab = output_size(model)
    codec = prep.codec.padded(n_vocab)  # ids past the tokenizer's: no bytes
    gen = generate(model, prompts, decoding, golds, classes=_vocab_rows(prep.classes, codec, n_vocab))
    steps = np.arange(gen.tokens.shape[1])
    live_NT = steps[None, :] < gen.lengths[:, None]  # generated before (and including) the end
    chunks = []
    for t in steps:
        chunk, lengths = codec.chunk(gen.tokens[:, t])
        chunks.append((chunk, np.where(live_NT[:, t], lengths, 0)))
    scores = utf8.step_scores([s.prompt_bytes for s in samples], chunks=chunks, alpha=config.alpha)
    p_valid, p_complete = _expected_validity(gen.mass, scores.states, live_NT)
    gold_ll = gen.gold_logprob
    gen_ll = gen.logprobs.sum(axis=1)
    carries = live_NT & (codec.lengths[gen.tokens] > 0)  # generated tokens that add bytes
    pure = carries.any(axis=1) & ~(carries & ~codec.is_byte_token[gen.tokens]).any(axis=1)
    gen_bytes = [codec.decode(row[:n]) for row, n in zip(gen.tokens, gen.lengths, strict=True)]
    remainders = [s.remainder for s in samples]
    term = utf8.term_match_batch([s.prompt_bytes for s in samples], gen_bytes, remainders)
    term &= np.array([bool(r) for r in remainders], dtype=bool)
    return SampleResults(
        index=idx,
        partial=scores.partial,
        strict=scores.strict,
        soft=scores.soft,
        cumulative=scores.cumulative,
        ema=scores.ema,
        gold_ll=gold_ll,
        gen_ll=gen_ll,
        nll_sum=-(gen.prompt_logprob + gen_ll),
        nll_count=(gen.prompt_scored + gen.lengths).astype(np.float64),
        pure=pure,
        term_match=term,
        p_valid=p_valid,
        p_complete=p_complete,
        tokens=gen.tokens,
        lengths=gen.lengths,
    )


def _vocab_rows(classes: np.ndarray, codec: ByteCodec, n_vocab: int) -> np.ndarray:
    """``classes`` with a row per id of the model's output layer (``n_vocab``; ``codec``
    padded to it): ids beyond the tokenizer's (a padded embedding) are tokens with no bytes,
    as its special ones."""
    n = len(classes)
    if n_vocab <= n:
        return classes[:n_vocab]
    return np.concatenate([classes, class_rows(codec.table[n:], codec.lengths[n:])])


def _expected_validity(
    mass: np.ndarray, states: np.ndarray, live: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(p_valid, p_complete), each (N, T): the masses of the classes of the DFA state each
    step's token is read from; nan after a row's end, and p_complete nan where no character
    is pending."""
    n_states = mass.shape[2] // 2
    rows = np.arange(len(states))[:, None]
    steps = np.arange(states.shape[1])[None, :]
    p_valid = np.where(live, mass[rows, steps, states], np.nan)
    pending = live & utf8.PENDING[states]
    return p_valid, np.where(pending, mass[rows, steps, n_states + states], np.nan)


class Utf8Probe(Probe):
    """What Level 0 and Level 1 share: the knobs, decoding, scoring, aggregation and records.
    A subclass builds its samples (``prepare``) and names the groups it reports (``groups``)."""

    term_match: ClassVar[bool] = False  # report Term Match: the exact remainder, then a boundary
    tier_gap: ClassVar[bool] = False  # report common minus rare characters (``tier_gaps``)
    eval_set_pattern: ClassVar[str] = ""  # the probe's eval-set files in <data_dir>/evalsets/
    read_eval_set: ClassVar[Callable[[Path], list]]  # one eval-set file, checked entry by entry
    Config = Utf8Config  # built as ``Level0Probe(Utf8Config(...))`` or ``Level0Probe(trial=True, ...)``
    config: Utf8Config

    def measures(self) -> dict[str, Any]:
        """Its eval sets decide its characters and terms; sizes, prefixes and decoding do not."""
        return {"eval_sets": sorted(self.config.eval_sets or [])}

    def eval_files(self, data_dir: Path | None) -> list[Path]:
        return eval_set_files(self.config.eval_sets, data_dir, self.eval_set_pattern)

    def validate(self, data_dir: Path | None) -> None:
        """Read every eval set, so a missing or malformed file stops a run (one line naming
        the file and field) before any model is loaded."""
        for path in self.eval_files(data_dir):
            self.read_eval_set(path)

    def groups(self, samples: list[Utf8Sample]) -> Iterator[tuple[Callable[[str], str], np.ndarray]]:
        """(metric name -> key, mask) of every reported group of samples."""
        raise NotImplementedError

    def compute(self, model: Any, tokenizer: Any, prepared: Prepared, rank: int = 0, world: int = 1):
        return decode_and_score(model, prepared, self.config, rank, world).payload()

    def aggregate(
        self, prepared: Prepared, payloads: list[dict[str, np.ndarray]], context: Context
    ) -> dict[str, float]:
        r = SampleResults(**merge_shards(payloads))
        if self.config.records:
            write_records(self.config.records, self.name, prepared.samples, r, context.fields())
        out: dict[str, float] = {}
        for key, mask in self.groups(prepared.samples):
            out.update({key(m): v for m, v in group_metrics(r, mask, self.term_match).items()})
        if self.tier_gap:
            out.update(tier_gaps(prepared.samples, r, self.config.seed))
        return out
