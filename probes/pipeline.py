"""The one path from a checkpoint to a record, for training's callback and ``bytecanary probe``
alike: check each data folder's inputs once, load, prepare, compute (each rank its share),
aggregate on rank 0, append, publish; a probe that raises is a failed record."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from bytecanary import records
from bytecanary.errors import BytecanaryError
from bytecanary.io import warn
from bytecanary.probes import batching
from bytecanary.probes.claims import Claims
from bytecanary.probes.dist import broadcast, gather, rank0, rank_and_world
from bytecanary.probes.inputs import Inputs
from bytecanary.probes.numerics import dtype_name, is_oom, label, release
from bytecanary.probes.registry import Probe
from bytecanary.probes.targets import Loaded, Loader, Target, data_dir_of
from bytecanary.records import Context, Record


@dataclass(frozen=True)
class Failure:
    """A rank's payload when its share raised."""

    error: str


class OutOfMemory(Failure):
    """A rank's payload when a batch of its share did not fit in memory."""


@dataclass(frozen=True)
class Computed:
    """A rank's share: its payload (or why there is none), the batch size it ended at, and
    the sizes that ran out of memory at its first batch (``batching``)."""

    payload: Any
    size: int | None
    failed_at: tuple[int, ...] = ()


def _compute_share(probe: Probe, loaded: Loaded, samples: Any, rank: int, world: int) -> Computed:
    """This rank's payload of ``probe``, or why there is none: one probe must not stop the others."""
    with batching.share(probe.batch_size) as share:
        try:
            with torch.no_grad():
                payload = probe.compute(loaded.model, loaded.tokenizer, samples, rank, world)
        except Exception as err:
            short = f"out of memory at batch size {share.size if share is not None else probe.batch_size}"
            payload = OutOfMemory(short) if is_oom(err) else Failure(f"{type(err).__name__}: {err}")
    if share is None:
        return Computed(payload, None)
    return Computed(payload, share.size, tuple(share.failed_at))


def _settle(computed: list[Computed]) -> tuple[int, list[int]]:
    """(the batch size every rank runs at next, the sizes that ran out of memory, largest
    first): the smallest of the sizes the ranks ended at, a rank that ran out of memory after
    its first batch counting half its size (down to 1)."""
    short = [c.size for c in computed if isinstance(c.payload, OutOfMemory)]
    tried = {size for c in computed for size in c.failed_at} | {size for size in short if size > 1}
    fit = [c.size for c in computed if not isinstance(c.payload, OutOfMemory)]
    return min(fit + [max(size // 2, 1) for size in short]), sorted(tried, reverse=True)


def nonfinite(model: Any) -> str | None:
    """The first parameter holding NaN or inf, as ``<name> holds NaN``; None when all are finite."""
    for name, tensor in model.named_parameters():
        if not torch.isfinite(tensor).all():
            kind = "NaN" if torch.isnan(tensor).any() else "inf"
            return f"{name} holds {kind}"
    return None


class Pipeline:
    """Probes ``probes`` into the records file ``out``, so training's callback and ``bytecanary probe``
    share one path; ``publish`` hears of each appended record (rank 0), ``claims`` makes it one of
    several workers, ``strict`` names the setting that makes a failure fatal (None: a record).
    """

    def __init__(
        self,
        probes: list[Probe],
        out: str | Path,
        strict: str | None = None,
        source: str | Path | None = None,
        publish: Callable[[Record], None] | None = None,
        claims: Claims | None = None,
        dtype: torch.dtype = torch.float32,
        inputs: Inputs | None = None,
    ) -> None:
        self.probes, self.out, self.strict, self.source = probes, Path(out), strict, source
        self.publish = publish or (lambda record: None)
        self.claims = claims
        self.dtype = label(dtype)
        """What the models compute in, by name (``float32``): part of each fingerprint."""
        self.batch_sizes: dict[int, int] = {}
        """Per probe index, the batch size that fit after running out of memory at its own."""
        self.attempted: set[tuple[str, int]] = set()
        """(checkpoint key, probe index) of every pair this process measured or failed."""
        self.inputs = inputs or Inputs(probes, source, self.dtype)
        """Each probe's checked data folders, prepared samples and fingerprints (training's callback
        passes those it prepared before the pipeline existed)."""
        self._tally = records.Tally(self.out)

    @property
    def worker(self) -> str | None:
        return self.claims.worker if self.claims is not None else None

    def check(self, data_dir: Path | None) -> None:
        """The validation stage (``Inputs.check``): every probe's inputs on ``data_dir`` validated
        and fingerprinted, once per data folder, before any model loads."""
        self.inputs.check(data_dir)

    def prepare(self, index: int, tokenizer: Any, data_dir: Path | None, revision: str | None = None):
        """The prepared samples of probe ``index`` (``Inputs.prepare``)."""
        return self.inputs.prepare(index, tokenizer, data_dir, revision)

    def fingerprint(self, index: int, data_dir: Path | None, dtype: str | None = None) -> str:
        """Probe ``index``'s fingerprint on ``data_dir`` for a model computing in ``dtype``
        (None: the pipeline's)."""
        return self.inputs.fingerprint(index, data_dir, dtype or self.dtype)

    def finished(self) -> set[records.Identity]:
        """The identities of the successful records in ``out`` as it is now: the one place
        that decides whether a (checkpoint, probe) pair is done."""
        return self._tally.done()

    def todo(
        self, targets: Iterable[Target], due: Callable[[Target], Iterable[int]] | None = None
    ) -> list[tuple[Target, list[int]]]:
        """(target, indices of its due probes without a successful record) of each target
        with any. A target's data folder (for the fingerprint) is read only when it has
        records at all."""
        finished = self.finished()
        probed = {checkpoint for checkpoint, *_ in finished}
        out = []
        for target in targets:
            indices = list(due(target) if due else range(len(self.probes)))
            if {target.id, target.key} & probed:
                data_dir, context = data_dir_of(target), target.context(None, None)
                indices = [i for i in indices if not self._done(context, i, data_dir, finished)]
            out += [(target, indices)] if indices else []
        return out

    def _done(
        self,
        context: Context,
        index: int,
        data_dir: Path | None,
        finished: set[records.Identity],
        dtype: str | None = None,
    ) -> bool:
        """Whether probe ``index`` succeeded on the checkpoint of ``context`` (in ``dtype``,
        None: the pipeline's): known by its id, or by its path in a record written before
        checkpoints had ids."""
        wheres = {context.checkpoint_id, context.checkpoint} - {None} or {None}
        return any(self._identity(w, context.step, index, data_dir, dtype) in finished for w in wheres)

    def _identity(
        self, where: str | None, step: int | None, index: int, data_dir: Path | None, dtype: str | None = None
    ) -> records.Identity:
        probe = self.probes[index]
        return records.identity(
            where, step, probe.name, probe.version, self.fingerprint(index, data_dir, dtype)
        )

    def probe(
        self,
        loader: Loader,
        target: Target,
        indices: Iterable[int],
        unloadable: Literal["raise", "skip", "fail"] = "raise",
    ) -> list[Record]:
        """Load ``target`` and measure the probes ``indices`` on it (with claims, only those held; nothing
        loads when none is). A target that does not load raises, is skipped with a warning (a file still
        being written comes again) or gets a failed record per probe, so a series goes on past it.
        """
        indices = list(indices)
        pairs = self._pairs(target, indices) if self.claims is not None else None
        if pairs is None:
            return self._probe(loader, target, indices, unloadable)
        held = self.claims.claim(pairs)
        mine = [(i, pair) for i, pair, ok in zip(indices, pairs, held, strict=True) if ok]
        if not mine:
            return []
        with self.claims.holding([pair for _, pair in mine]):
            return self._probe(loader, target, [i for i, _ in mine], unloadable)

    def _pairs(self, target: Target, indices: list[int]) -> list[records.Identity] | None:
        """The identities of ``target``'s pairs, to claim; None when its metadata does not
        read (it fails or is skipped without a claim)."""
        try:
            data_dir = data_dir_of(target)
        except BytecanaryError:
            return None
        return [self._identity(target.id or target.key, None, i, data_dir) for i in indices]

    def _probe(
        self, loader: Loader, target: Target, indices: list[int], unloadable: Literal["raise", "skip", "fail"]
    ) -> list[Record]:
        self.attempted |= {(target.key, i) for i in indices}
        try:
            loaded: Loaded = loader.load(target)
        except BytecanaryError as err:
            if unloadable == "raise":
                raise
            if unloadable == "skip":
                if rank0():
                    warn(f"{err}; not probed now, tried again later")
                return []
            context = target.context(target.step_hint if target.step_hint >= 0 else None, None)
            return self._append([self._failed(self.probes[i], None, context, str(err)) for i in indices])
        return self.measure(loaded, indices, target.context(loaded.step, loaded.tokens_seen), target.revision)

    def measure(
        self, loaded: Loaded, indices: Iterable[int], context: Context, revision: str | None = None
    ) -> list[Record]:
        """The probes ``indices`` on a loaded model (every rank its share); returns the records appended
        on rank 0. Non-finite weights fail every probe with a record naming the tensor rather than
        measuring argmaxes of NaN; fingerprints hold the dtype the model computes in.
        """
        indices = list(indices)
        prepared = [self.prepare(i, loaded.tokenizer, loaded.data_dir, revision) for i in indices]
        dtype = dtype_name(loaded.model)
        broken: str | bool | None = False  # looked at once, before the first pair that runs
        appended = []
        for index, samples in zip(indices, prepared, strict=True):
            probe, fingerprint = self.probes[index], self.fingerprint(index, loaded.data_dir, dtype)
            done = self._done(context, index, loaded.data_dir, self.finished(), dtype) if rank0() else None
            if broadcast(done):
                continue  # another process finished it meanwhile
            if broken is False:
                broken = nonfinite(loaded.model)
            if broken:
                record = self._failed(probe, fingerprint, context, f"non-finite weights: {broken}", dtype)
            else:
                record = self._measure_one(index, loaded, samples, fingerprint, context)
            appended += self._append([record])
            self._check_strict(probe, context, record)
        return appended

    def _append(self, made: list[Record | None]) -> list[Record]:
        """Append each record (rank 0 holds them), publish it, warn of a failure; returns
        those appended."""
        appended = []
        for record in made:
            if record is not None and records.append(self.out, record):
                appended.append(record)
                self.publish(record)
                if record.error:
                    where = f"step {record.step}" if record.checkpoint is None else record.checkpoint
                    warn(f"probe {record.probe} on {where} failed: {record.error}")
        return appended

    def _failed(
        self, probe: Probe, fingerprint: str | None, context: Context, error: str, dtype: str | None = None
    ) -> Record | None:
        """A failed record of ``probe`` that did not run (rank 0; None elsewhere)."""
        if not rank0():
            return None
        return Record.of(context, probe, fingerprint, None, error=error, **self._how(probe, 0.0, None, dtype))

    def _how(self, probe: Probe, seconds: float, batch_size: int | None, dtype: str | None) -> dict[str, Any]:
        threads = torch.get_num_threads()
        how = {"seconds": seconds, "threads": threads, "worker": self.worker, "dtype": dtype or self.dtype}
        how["measure"] = probe.measure()
        return how | ({"batch_size": batch_size} if batch_size is not None else {})

    def _measure_one(
        self, index: int, loaded: Loaded, samples: Any, fingerprint: str, context: Context
    ) -> Record | None:
        """Probe ``index`` on the loaded model; rank 0 returns its record."""
        start = time.perf_counter()
        probe, payloads = self._compute(index, loaded, samples)
        if not rank0():
            return None
        failed = [p for p in payloads if isinstance(p, Failure)]
        metrics, error = None, failed[0].error if failed else None
        if not failed:
            try:
                metrics = probe.aggregate(samples, payloads, context)
            except Exception as err:
                error = f"{type(err).__name__}: {err}"
        how = self._how(probe, time.perf_counter() - start, probe.batch_size, dtype_name(loaded.model))
        return Record.of(context, self.probes[index], fingerprint, metrics, error=error, **how)

    def _compute(self, index: int, loaded: Loaded, samples: Any) -> tuple[Probe, list[Any]]:
        """(the probe as it ran, every rank's payload). A batch that does not fit in memory runs again
        at half the size (``batching``), down to 1, on every rank alike, so the shares stay those of one
        batch size (docs/faults.md).
        """
        rank, world = rank_and_world()
        probe = self.probes[index]
        if index in self.batch_sizes:
            probe = probe.resized(self.batch_sizes[index])
        while True:
            computed = gather(_compute_share(probe, loaded, samples, rank, world))
            start = probe.batch_size
            size, tried = _settle(computed) if start is not None else (start, [])
            for failed in tried if rank == 0 else []:
                why = f"out of memory at batch size {failed}"
                warn(f"probe {probe.name}: {why}; trying batch size {failed // 2}")
            if size != start:
                release(next(loaded.model.parameters()).device)
                probe = probe.resized(size)
                self.batch_sizes[index] = size
            done = all(c.size == size and not isinstance(c.payload, OutOfMemory) for c in computed)
            if done or size == start:
                return probe, [c.payload for c in computed]

    def _check_strict(self, probe: Probe, context: Context, record: Record | None) -> None:
        error = broadcast(record.error if record is not None else None)
        if error is not None and self.strict:
            first = str(error).strip().splitlines()[0] if str(error).strip() else "failed"
            raise BytecanaryError(
                f"probe {probe.name} failed at step {context.step} ({self.strict}): {first}"
            )
