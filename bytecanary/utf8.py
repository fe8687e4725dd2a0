"""Exact UTF-8 validity scores for byte streams ("Beyond Perplexity: UTF-8 Validity in Byte-aware LMs",
arXiv:2606.14122, section 3.2): strict, soft and partial from one DFA lookup per byte, so a batch of
streams advances a byte column at a time with numpy (docs/utf8-probes.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PAD = 256  # byte value meaning "no byte here" in padded arrays: leaves a stream untouched

# DFA states: bytes seen of the pending character, bytes it needs, and which
# continuation bytes it accepts next (lo, hi) and the state that follows them.
#                 name        seen need   lo    hi    next (None: character complete)
_STATES = [
    ("boundary", 0, 0, None, None, None),
    ("two_1", 1, 2, 0x80, 0xBF, None),
    ("e0_1", 1, 3, 0xA0, 0xBF, "three_2"),
    ("e1_1", 1, 3, 0x80, 0xBF, "three_2"),
    ("ed_1", 1, 3, 0x80, 0x9F, "three_2"),
    ("three_2", 2, 3, 0x80, 0xBF, None),
    ("f0_1", 1, 4, 0x90, 0xBF, "four_2"),
    ("f1_1", 1, 4, 0x80, 0xBF, "four_2"),
    ("f4_1", 1, 4, 0x80, 0x8F, "four_2"),
    ("four_2", 2, 4, 0x80, 0xBF, "four_3"),
    ("four_3", 3, 4, 0x80, 0xBF, None),
    ("invalid", 0, 0, None, None, None),  # a boundary reached by rejecting the last byte
]
_INDEX = {name: i for i, (name, *_rest) in enumerate(_STATES)}
BOUNDARY = 0
N_STATES = len(_STATES)


def _lead(byte: int) -> tuple[str, int]:
    """(next state, bytes completed) for a byte read at a character boundary."""
    if byte <= 0x7F:
        return "boundary", 1
    if 0xC2 <= byte <= 0xDF:
        return "two_1", 0
    if byte == 0xE0:
        return "e0_1", 0
    if byte == 0xED:
        return "ed_1", 0
    if 0xE1 <= byte <= 0xEF:
        return "e1_1", 0
    if byte == 0xF0:
        return "f0_1", 0
    if 0xF1 <= byte <= 0xF3:
        return "f1_1", 0
    if byte == 0xF4:
        return "f4_1", 0
    return "invalid", 0  # 80-BF, C0, C1, F5-FF can never start a character


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    """Flat (state * 257 + byte) tables: next state, bytes completed."""
    nxt = np.zeros((N_STATES, 257), dtype=np.int32)
    done = np.zeros((N_STATES, 257), dtype=np.int32)
    for s, (_name, _seen, need, lo, hi, follow) in enumerate(_STATES):
        for byte in range(256):
            if lo is not None and lo <= byte <= hi:
                nxt[s, byte] = _INDEX[follow] if follow else BOUNDARY
                done[s, byte] = 0 if follow else need
            else:  # boundary, or the pending character breaks: re-read the byte as a lead
                name, completed = _lead(byte)
                nxt[s, byte], done[s, byte] = _INDEX[name], completed
        nxt[s, PAD] = s  # padding: stay, complete nothing
    return nxt.ravel(), done.ravel()


_NEXT, _DONE = _build_tables()


def _build_breaks() -> np.ndarray:
    """Flat (state * 257 + byte) table: True where the byte breaks UTF-8, because it cannot
    continue the pending character or cannot start one."""
    breaks = np.zeros((N_STATES, 257), dtype=bool)
    for s, (_name, _seen, _need, lo, hi, _follow) in enumerate(_STATES):
        for byte in range(256):
            continues = lo is not None and lo <= byte <= hi
            breaks[s, byte] = not continues and (lo is not None or _lead(byte)[0] == "invalid")
    return breaks.ravel()


_BREAKS = _build_breaks()
PENDING = np.array([lo is not None for *_rest, lo, _hi, _follow in _STATES])
"""Per state: a character is pending (bytes of it seen, more needed)."""
_SEEN = np.array([s[1] for s in _STATES], dtype=np.float64)
_NEED = np.array([max(s[2], 1) for s in _STATES], dtype=np.float64)
_TAIL_CREDIT = _SEEN * _SEEN / _NEED  # p * b_i for the pending character of each state


@dataclass(frozen=True)
class Score:
    """UTF-8 scores of one byte stream."""

    strict: float
    soft: float
    partial: float


@dataclass(frozen=True)
class BatchScores:
    """UTF-8 scores of N byte streams, one entry each."""

    strict: np.ndarray
    soft: np.ndarray
    partial: np.ndarray


def pad_streams(streams: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """A list of byte strings as a (N, L) uint16 array padded with PAD, and their lengths."""
    lengths = np.fromiter(map(len, streams), dtype=np.int64, count=len(streams))
    width = int(lengths.max()) if len(streams) else 0
    padded = np.full((len(streams), width), PAD, dtype=np.uint16)
    padded[np.arange(width) < lengths[:, None]] = np.frombuffer(b"".join(streams), np.uint8)
    return padded, lengths


class StreamScorer:
    """DFA state of N byte streams, advanced chunk by chunk without rescanning: ``feed`` takes each
    stream's next bytes (e.g. one generated token), ``scores()`` scores each whole stream as it stands.
    """

    def __init__(self, n: int) -> None:
        self.state = np.zeros(n, dtype=np.int32)
        self.complete = np.zeros(n, dtype=np.int64)  # b_c
        self.length = np.zeros(n, dtype=np.int64)  # |B|

    def feed(self, chunk: np.ndarray, lengths: np.ndarray | None = None) -> None:
        """Advance by ``chunk`` (N, L) bytes; ``lengths`` or PAD entries mark its end."""
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[0] != len(self.state):
            raise ValueError(f"chunk must have shape ({len(self.state)}, L), got {chunk.shape}")
        cols = chunk.astype(np.int32)
        if lengths is not None:
            cols[np.arange(cols.shape[1]) >= np.asarray(lengths)[:, None]] = PAD
        state, complete = self.state, self.complete
        for col in cols.T:  # one vectorised table lookup per byte column
            idx = state * 257 + col
            state = _NEXT[idx]
            complete = complete + _DONE[idx]
        self.state, self.complete = state, complete
        self.length = self.length + (cols != PAD).sum(axis=1)

    def feed_bytes(self, chunks: Sequence[bytes]) -> None:
        """Advance stream i by ``chunks[i]``."""
        self.feed(*pad_streams(chunks))

    @property
    def at_boundary(self) -> np.ndarray:
        """True where the stream ends exactly after a complete, valid character."""
        return self.state == BOUNDARY

    def scores(self) -> BatchScores:
        length = self.length.astype(np.float64)
        empty = self.length == 0
        denom = np.where(empty, 1.0, length)
        soft = np.where(empty, 1.0, self.complete / denom)
        partial = np.where(empty, 1.0, (self.complete + _TAIL_CREDIT[self.state]) / denom)
        strict = (self.complete == self.length).astype(np.float64)
        return BatchScores(strict=strict, soft=soft, partial=partial)


def score_batch(streams: Sequence[bytes] | np.ndarray, lengths: np.ndarray | None = None) -> BatchScores:
    """Score N streams: a list of bytes, or an (N, L) byte array with per-row ``lengths``."""
    if isinstance(streams, np.ndarray):
        padded = streams
    else:
        padded, lengths = pad_streams(streams)
    scorer = StreamScorer(padded.shape[0])
    scorer.feed(padded, lengths)
    return scorer.scores()


def score(data: bytes) -> Score:
    """Score one byte stream."""
    s = score_batch([bytes(data)])
    return Score(strict=float(s.strict[0]), soft=float(s.soft[0]), partial=float(s.partial[0]))


@dataclass(frozen=True)
class TokenClasses:
    """Per DFA state and token: which tokens keep a stream valid and which complete its
    pending character, so the model's probability mass on each is one product with its
    distribution (arrays of shape (N_STATES, V))."""

    valid: np.ndarray
    """Reading the token from the state breaks nothing; a token without bytes (eos) ends
    the stream, valid only where no character is pending."""
    completes: np.ndarray
    """From a state with a pending character: the token is valid and ends exactly on a
    character boundary. False from the other states."""


def token_classes(table: np.ndarray, lengths: np.ndarray) -> TokenClasses:
    """``TokenClasses`` of a vocabulary given as its tokens' bytes, (V, L) padded with PAD
    (``ByteCodec.table``), and their byte counts (V,)."""
    state = np.repeat(np.arange(N_STATES, dtype=np.int64)[:, None], len(lengths), axis=1)
    intact = np.ones(state.shape, dtype=bool)
    for col in np.asarray(table, dtype=np.int64).T:  # one byte column of every token at once
        idx = state * 257 + col[None, :]
        intact &= ~_BREAKS[idx]
        state = _NEXT[idx]
    empty = np.asarray(lengths)[None, :] == 0
    valid = np.where(empty, ~PENDING[:, None], intact)
    completes = valid & ~empty & PENDING[:, None] & (state == BOUNDARY)
    return TokenClasses(valid=valid, completes=completes)


@dataclass(frozen=True)
class StepScores:
    """Per-step scores of N generations, arrays of shape (N, T): column t-1 scores Bytes(prompt +
    generated[:t]); ``cumulative`` is the running mean of ``partial``, ``ema`` its EMA (ema(1) = partial(1)).
    """

    partial: np.ndarray
    strict: np.ndarray
    soft: np.ndarray
    cumulative: np.ndarray
    ema: np.ndarray
    states: np.ndarray
    """The DFA state before each step: where step t's token is read from."""


def step_scores(
    prompts: Sequence[bytes],
    steps: Sequence[Sequence[bytes]] | None = None,
    *,
    chunks: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
    alpha: float = 0.1,
) -> StepScores:
    """Score every prefix of N generations, feeding each step's bytes once: ``steps[i][t]`` (token t of
    generation i; b"" for a special token or after it stopped) or, for the engine, ``chunks[t] =
    (bytes (N, L), lengths (N,))``.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if chunks is None:
        if steps is None or len(steps) != len(prompts):
            raise ValueError("give one list of step bytes per prompt (steps) or chunks")
        n_steps = max((len(s) for s in steps), default=0)
        columns = [[s[t] if t < len(s) else b"" for s in steps] for t in range(n_steps)]
        chunks = [pad_streams(col) for col in columns]
    scorer = StreamScorer(len(prompts))
    scorer.feed_bytes(prompts)
    per_step, states = [], []
    for chunk, lengths in chunks:
        states.append(scorer.state)
        scorer.feed(chunk, lengths)
        per_step.append(scorer.scores())
    n, t = len(prompts), len(per_step)

    def stacked(field: str) -> np.ndarray:  # (N, T)
        return np.stack([getattr(s, field) for s in per_step], axis=1) if t else np.zeros((n, 0))

    partial, strict, soft = stacked("partial"), stacked("strict"), stacked("soft")
    cumulative = np.cumsum(partial, axis=1) / np.arange(1, t + 1)
    ema = np.empty_like(partial)
    for i in range(t):
        ema[:, i] = partial[:, 0] if i == 0 else alpha * partial[:, i] + (1 - alpha) * ema[:, i - 1]
    before = np.stack(states, axis=1) if t else np.zeros((n, 0), dtype=np.int32)
    return StepScores(
        partial=partial, strict=strict, soft=soft, cumulative=cumulative, ema=ema, states=before
    )


def term_match_batch(
    prompts: Sequence[bytes], generated: Sequence[bytes], remainders: Sequence[bytes]
) -> np.ndarray:
    """Level 1 Term Match of N samples: the bytes right after each prompt are exactly its
    gold remainder, and the DFA is back at a character boundary (a character just
    completed validly) right after it."""
    starts = np.array([g.startswith(r) for g, r in zip(generated, remainders, strict=True)], dtype=bool)
    scorer = StreamScorer(len(prompts))
    scorer.feed_bytes([p + r for p, r in zip(prompts, remainders, strict=True)])
    return starts & scorer.at_boundary


def term_match(prompt: bytes, generated: bytes, remainder: bytes) -> bool:
    """Term Match of one sample (see ``term_match_batch``)."""
    return bool(term_match_batch([prompt], [generated], [remainder])[0])
