"""Batches from the prepared token shards in an order that is a pure function of (seed, sample index),
a hash with no RNG state, so ranks read disjoint samples and a resumed run sees exactly the batches an
uninterrupted one would (docs/training.md#data-order-and-resume)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lightning as L
import numpy as np
import torch

from bytecanary.data.shards import TokenSeries, open_split
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_json, warn

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a well-spread 64-bit hash of each uint64."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def sample_windows(
    seed: int, indices: np.ndarray, cum_weights: np.ndarray, sizes: np.ndarray, span: int
) -> tuple[np.ndarray, np.ndarray]:
    """(language index, start offset) of each global sample index: pure in (seed, index)."""
    base = _mix64(np.uint64(seed) + np.asarray(indices, dtype=np.uint64) * np.uint64(2))
    u = (_mix64(base) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    lang = np.minimum(np.searchsorted(cum_weights, u, side="right"), len(sizes) - 1)
    starts = _mix64(base ^ np.uint64(0x5DEECE66D)) % (sizes[lang] - span).astype(np.uint64)
    return lang, starts.astype(np.int64)


class ShardBatches:
    """Endless training batches of one rank of ``share`` = (rank, world size), starting at
    batch ``start``. With ``pin_memory`` (training on CUDA) they are page-locked: a copy from
    pageable memory waits for the GPU."""

    def __init__(
        self,
        shards: list[TokenSeries] | list[np.ndarray],
        weights: list[float] | np.ndarray,
        seq_len: int,
        batch_size: int,
        seed: int,
        share: tuple[int, int] = (0, 1),
        start: int = 0,
        pin_memory: bool = False,
    ) -> None:
        self.shards, self.seq_len, self.batch_size = shards, seq_len, batch_size
        self.pin_memory = pin_memory
        (self.rank, self.world), self.seed, self.start = share, seed, start
        self.cum_weights = np.cumsum(weights) / np.sum(weights)
        self.sizes = np.array([len(s) for s in shards], dtype=np.int64)

    def batch(self, k: int) -> dict[str, torch.Tensor]:
        first = (k * self.world + self.rank) * self.batch_size
        idx = np.arange(first, first + self.batch_size)
        span = self.seq_len + 1
        lang, starts = sample_windows(self.seed, idx, self.cum_weights, self.sizes, span)
        rows = [self.shards[li][s : s + span] for li, s in zip(lang, starts, strict=True)]
        ids_BT = torch.from_numpy(np.stack(rows).astype(np.int64))
        batch = {"input_ids": ids_BT, "lang": torch.from_numpy(lang.astype(np.int64))}
        return {k: v.pin_memory() for k, v in batch.items()} if self.pin_memory else batch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        k = self.start
        while True:
            yield self.batch(k)
            k += 1


# a language read this much more often than the average binds the data budget: below it, the
# mixture is the shards' own shares up to the document cut (prepare's mixture_cut)
LOPSIDED = 1.1


def _count(tokens: float) -> str:
    """4.92B, 0.85M: a token count a reader takes in at a glance."""
    return f"{tokens / 1e9:.2f}B" if tokens >= 1e9 else f"{tokens / 1e6:.2f}M"


class Batches:
    """A fixed sequence of batches (Lightning reads a bare list as several loaders)."""

    def __init__(self, batches: list[dict[str, torch.Tensor]]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class ShardDataModule(L.LightningDataModule):
    """Training and validation batches over ``bytecanary prepare``'s shards."""

    def __init__(
        self,
        data_dir: str = "data/default",
        batch_size: int = 16,
        seq_len: int = 256,
        mixture: dict[str, float] | None = None,
        val_tokens: int = 32768,
        seed: int = 0,
        max_repeats: float | None = 10.0,
    ) -> None:
        """
        Args:
            data_dir: folder written by ``bytecanary prepare`` (holds shards/, tokenizer/).
            batch_size: sequences per batch on each device.
            seq_len: tokens per sequence (linked to the model's context length).
            mixture: sampling weight per language; None samples by the prepared shares.
            val_tokens: validation tokens per language (split across ranks).
            seed: seed of the sample order (a pure function of seed and sample index).
            max_repeats: most times training may read each training token on average (the planned
                tokens over the data's); more is refused before training, more than once warns;
                None: no check.
        """
        super().__init__()
        for name, value in (("batch_size", batch_size), ("seq_len", seq_len), ("val_tokens", val_tokens)):
            if value < 1:
                raise BytecanaryError(f"data.{name}: must be >= 1, got {value}")
        if max_repeats is not None and max_repeats <= 0:
            raise BytecanaryError(f"data.max_repeats: must be > 0 or null (no limit), got {max_repeats}")
        self.data_dir = Path(data_dir)
        index_path = self.data_dir / "shards" / "index.json"
        if not index_path.exists():
            raise BytecanaryError(
                f"data.data_dir: no prepared data at {self.data_dir} (missing {index_path}); "
                "run `bytecanary prepare --config configs/data/<name>.yaml` first (it writes data/<name>), "
                "or point --data.data_dir at a prepared folder"
            )
        self.index = read_json(index_path)
        self.languages = list(self.index["languages"])
        weights = mixture or {lang: e["train"]["share"] for lang, e in self.index["languages"].items()}
        unknown = set(weights) - set(self.languages)
        if unknown:
            raise BytecanaryError(f"data.mixture: no shards for {sorted(unknown)} in {self.data_dir}")
        self.weights = np.array([weights.get(lang, 0.0) for lang in self.languages])
        self.vocab_size = int(self.index["vocab_size"])
        self.eos_token_id = int(self.index["eos_id"])
        self.tokenizer_dir = self.data_dir / "tokenizer"
        self.batch_size, self.seq_len = batch_size, seq_len
        self.val_tokens, self.seed, self.max_repeats = val_tokens, seed, max_repeats
        train = self._open("train")  # a cut-off shard is an error now, not half the data later
        self._open("val")
        # the training tokens of the languages the mixture samples: what check_repeats divides by
        self.train_tokens = sum(len(shard) for shard, w in zip(train, self.weights, strict=True) if w > 0)
        self.language_tokens = {lang: len(shard) for lang, shard in zip(self.languages, train, strict=True)}

    def _open(self, split: str) -> list[TokenSeries]:
        shards = [
            open_split(self.data_dir / "shards", e[split], self.index["dtype"])
            for e in self.index["languages"].values()
        ]
        for lang, shard in zip(self.languages, shards, strict=True):
            if len(shard) <= self.seq_len + 1:
                raise BytecanaryError(f"{self.data_dir}: {lang} {split} shard has only {len(shard)} tokens")
        return shards

    def check_repeats(self, trainer: L.Trainer) -> None:
        """Refuse a plan that reads the training tokens (a mixture's most read language's, where it
        binds) more than ``max_repeats`` times, and warn (rank 0) above once: a preset left on a
        small corpus would train on copies of it. Takes the built trainer: its world size."""
        if self.max_repeats is None or trainer.max_steps < 0:  # no limit, or no planned end
            return
        steps, accumulate, world = trainer.max_steps, trainer.accumulate_grad_batches, trainer.world_size
        planned = steps * accumulate * self.batch_size * self.seq_len * world
        repeats = planned / self.train_tokens
        lang, most = self._most_repeated(planned)
        lopsided = most > LOPSIDED * repeats  # a mixture far from the shards' own shares: one language binds
        binding = most if lopsided else repeats
        if binding <= 1:
            return
        accumulated = f" x {accumulate} accumulated" if accumulate > 1 else ""
        devices = f"{world} device{'s' if world > 1 else ''}"
        plan = f"{steps:,} steps{accumulated} x {self.batch_size} x {self.seq_len} x {devices}"
        counts = (
            f"the plan trains {_count(planned)} tokens ({plan}), {repeats:,.1f} times "
            f"{self.data_dir}'s {_count(self.train_tokens)} training tokens"
        )
        if lopsided:
            share = self.weights[self.languages.index(lang)] / self.weights.sum()
            tokens = _count(self.language_tokens[lang])
            counts += f"; {lang}, {share:.0%} of the mixture, is read {most:,.1f} times its {tokens} tokens"
        if binding > self.max_repeats:
            raise BytecanaryError(
                f"data.max_repeats: {counts}, above the limit of {self.max_repeats:g}; prepare more data "
                "(configs/data/paper.yaml) or raise --data.max_repeats (null: no limit)"
            )
        if trainer.is_global_zero:
            warn(f"data.max_repeats: {counts}; within the limit of {self.max_repeats:g}: the data repeats")

    def _most_repeated(self, planned: int) -> tuple[str, float]:
        """The language the mixture reads most often over and how often: the sampler draws
        languages by weight, so a language given more than its share of the tokens repeats first."""
        shares = self.weights / self.weights.sum()
        times = {
            lang: planned * w / self.language_tokens[lang]
            for lang, w in zip(self.languages, shares, strict=True)
            if w > 0
        }
        lang = max(times, key=times.__getitem__)
        return lang, times[lang]

    def train_dataloader(self) -> ShardBatches:
        trainer = self.trainer
        start = trainer.global_step * trainer.accumulate_grad_batches if trainer else 0
        rank, world = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        return ShardBatches(
            self._open("train"),
            self.weights,
            self.seq_len,
            self.batch_size,
            self.seed,
            (rank, world),
            start,
            pin_memory=trainer is not None and trainer.strategy.root_device.type == "cuda",
        )

    def val_dataloader(self) -> Batches:
        """Consecutive windows from the start of each language's held-out shard, dealt
        round-robin to the ranks."""
        span = self.seq_len + 1
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        shards = self._open("val")
        windows = []
        for li, shard in enumerate(shards):
            n = min(self.val_tokens, len(shard) - 1) // self.seq_len
            windows += [(li, i * self.seq_len) for i in range(max(n, 1))]
        mine = windows[rank::world]
        batches = []
        for lo in range(0, len(mine), self.batch_size):
            chunk = mine[lo : lo + self.batch_size]
            rows = [shards[li][s : s + span] for li, s in chunk]
            batches.append(
                {
                    "input_ids": torch.from_numpy(np.stack(rows).astype(np.int64)),
                    "lang": torch.tensor([li for li, _ in chunk]),
                }
            )
        return Batches(batches)
