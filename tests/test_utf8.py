"""The DFA against CPython's own UTF-8 decoder, which serves as the independent reference."""

import codecs
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bytecanary import utf8

# --- reference: CPython's decoder, character by character ------------------------------

_ERRORS: list[tuple[int, int, str]] = []


def _record(err: UnicodeDecodeError) -> tuple[str, int]:
    _ERRORS.append((err.start, err.end, err.reason))
    return "\ufffd", err.end


codecs.register_error("bytecanary-test-record", _record)


def _needed(lead: int) -> int:
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def reference(data: bytes) -> tuple[float, float, float]:
    """(strict, soft, partial) from CPython: bytes not covered by a decode error are
    inside complete valid characters; an "unexpected end of data" error at the very end
    is the trailing incomplete but so-far-valid character."""
    if not data:
        return 1.0, 1.0, 1.0
    _ERRORS.clear()
    data.decode("utf-8", errors="bytecanary-test-record")
    tail = b""
    if _ERRORS and _ERRORS[-1][1] == len(data) and _ERRORS[-1][2] == "unexpected end of data":
        tail = data[_ERRORS.pop()[0] :]
    complete = len(data) - len(tail) - sum(end - start for start, end, _ in _ERRORS)
    try:
        data.decode("utf-8")
        strict = 1.0
    except UnicodeDecodeError:
        strict = 0.0
    credit = len(tail) ** 2 / _needed(tail[0]) if tail else 0.0
    return strict, complete / len(data), (complete + credit) / len(data)


def check(streams: list[bytes]) -> None:
    got = utf8.score_batch(streams)
    want = np.array([reference(s) for s in streams])
    np.testing.assert_array_equal(got.strict, want[:, 0])
    np.testing.assert_allclose(got.soft, want[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.partial, want[:, 2], rtol=0, atol=1e-12)


# --- exhaustive agreement with CPython ----------------------------------------------------


def test_every_one_and_two_byte_input():
    check([bytes([a]) for a in range(256)])
    check([bytes(p) for p in itertools.product(range(256), repeat=2)])


@pytest.mark.parametrize("lead", [0xE0, 0xED, 0xEF, 0xF0, 0xF4])
def test_every_three_byte_input_with_lead(lead):
    check([bytes((lead, b, c)) for b in range(256) for c in range(256)])


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=32), min_size=1, max_size=20))
def test_random_streams(streams):
    check(streams)


_utf8_heavy = st.lists(
    st.one_of(
        st.characters(min_codepoint=0x80).map(lambda c: c.encode("utf-8", "surrogatepass")),
        st.binary(max_size=3),
        st.sampled_from([b"\xe0\x80", b"\xed\xa0\x80", b"\xf4\x90", b"\xf5", b"\xc0\xaf"]),
    ),
    max_size=10,
).map(b"".join)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(st.lists(_utf8_heavy, min_size=1, max_size=10))
def test_streams_made_of_characters_and_near_misses(streams):
    check([s[:32] for s in streams])


# --- the paper's examples and the definitions ----------------------------------------------


def test_paper_examples():
    char = "語".encode()
    assert [utf8.score(char[:k]).partial for k in (1, 2, 3)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert utf8.score(b"\xf0\xab\x9d\x80").strict == 1.0  # U+2B740
    assert utf8.score(b"\xf0\xab\xf0").strict == 0.0
    assert utf8.score(b"").partial == utf8.score(b"").strict == utf8.score(b"").soft == 1.0


def test_invalid_bytes_never_count_as_valid():
    # the paper's tool scored these 1.0; an invalid lead before a valid char is half the stream
    assert utf8.score(b"\x80A") == utf8.Score(strict=0.0, soft=0.5, partial=0.5)
    # credit for an incomplete character grows with every byte of it
    assert utf8.score(b"\xf0\x9f").partial < utf8.score(b"\xf0\x9f\x98").partial
    # F5-F7 are never leads
    assert utf8.score(b"\xf5\x80\x80\x80").soft == 0.0


@pytest.mark.parametrize(
    "bad",
    [
        b"\xc0\x80",
        b"\xc1\xbf",
        b"\xe0\x80\x80",
        b"\xe0\x9f\xbf",
        b"\xed\xa0\x80",
        b"\xed\xbf\xbf",
        b"\xf0\x80\x80\x80",
        b"\xf0\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80",
        b"\xf5\x80\x80\x80",
        b"\xbf",
    ],
)
def test_table_3_7_rejections_and_resync(bad):
    s = utf8.score(bad + "é".encode())
    assert s.strict == 0.0
    assert s.soft == pytest.approx(2 / (len(bad) + 2))  # the é after the error is still recognised


def test_array_input_with_lengths_equals_list_input():
    streams = [b"\xe8\xaa\x9e", b"A\xe8", b"", b"\xf0\xab\x9d\x80xyz"]
    padded, lengths = utf8.pad_streams(streams)
    garbage = padded.copy().astype(np.uint8)  # bytes past each length must be ignored
    garbage[garbage == 0] = 0x41
    a, b = utf8.score_batch(streams), utf8.score_batch(garbage, lengths)
    for field in ("strict", "soft", "partial"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


# --- step scores and Term Match ------------------------------------------------------------


def _random_bytes(rng: np.random.Generator, n: int, lo: int = 0, hi: int = 256) -> bytes:
    return rng.integers(lo, hi, n).astype(np.uint8).tobytes()


def test_step_scores_equal_rescoring_every_prefix():
    rng = np.random.default_rng(0)
    prompts = [_random_bytes(rng, rng.integers(0, 5)) for _ in range(50)]
    steps = [[_random_bytes(rng, rng.integers(0, 4)) for _ in range(5)] for _ in range(50)]
    alpha = 0.3
    got = utf8.step_scores(prompts, steps, alpha=alpha)
    for i, (prompt, toks) in enumerate(zip(prompts, steps, strict=True)):
        partials = []
        for t in range(1, 6):
            s = utf8.score(prompt + b"".join(toks[:t]))
            partials.append(s.partial)
            assert got.partial[i, t - 1] == pytest.approx(s.partial)
            assert got.strict[i, t - 1] == s.strict
            assert got.soft[i, t - 1] == pytest.approx(s.soft)
            assert got.cumulative[i, t - 1] == pytest.approx(np.mean(partials))
        ema = partials[0]
        for p in partials[1:]:
            ema = alpha * p + (1 - alpha) * ema
        assert got.ema[i, -1] == pytest.approx(ema)


def test_step_scores_after_generation_stops_score_the_stream_as_it_stands():
    got = utf8.step_scores([b"\xe8"], [[b"\xaa", b"\x9e", b"", b""]])
    np.testing.assert_allclose(got.partial[0], [2 / 3, 1.0, 1.0, 1.0])


def test_incremental_feed_matches_one_shot_scoring():
    rng = np.random.default_rng(1)
    streams = [_random_bytes(rng, 12, 0x80, 0xF5) for _ in range(200)]
    scorer = utf8.StreamScorer(len(streams))
    for start in range(0, 12, 3):
        scorer.feed_bytes([s[start : start + 3] for s in streams])
    whole = utf8.score_batch(streams)
    np.testing.assert_array_equal(scorer.scores().partial, whole.partial)


def test_term_match():
    char = "𫝀".encode()  # F0 AB 9D 80
    prefix, rest = char[:2], char[2:]
    assert utf8.term_match(b"ctx " + prefix, rest + b" more", rest)
    assert not utf8.term_match(b"ctx " + prefix, rest[:1], rest)  # stopped short
    assert not utf8.term_match(b"ctx " + prefix, b"\x9d\x81", rest)  # another valid character
    # the right bytes after a prefix that is not the character's prefix do not complete it
    assert not utf8.term_match(b"ctx \xf0\x80", rest, rest)


def _pending(data: bytes) -> bytes:
    """The pending character's bytes by CPython's incremental decoder (maximal subparts)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(data, final=False)
    return decoder.getstate()[0]


def _strict_after(pending: bytes, token: bytes) -> tuple[bool, bool]:
    """(valid, completes) of ``token`` after ``pending``, by CPython's strict decoder."""
    if not token:
        return pending == b"", False
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    try:
        decoder.decode(pending + token, final=False)
    except UnicodeDecodeError:
        return False, False
    tail = decoder.getstate()[0]
    return _completable(tail), bool(pending) and tail == b""


def _completable(tail: bytes) -> bool:
    """Whether buffered bytes can still become a character. CPython's incremental decoder
    buffers ED A0-BF (a surrogate's first two bytes) until the third byte arrives, so ask
    whether some continuation bytes complete it (one of 80, 90, A0 suits any second byte;
    80 any later one)."""
    fills = [bytes([first]) + b"\x80" * k for first in (0x80, 0x90, 0xA0) for k in (0, 1, 2)]
    return not tail or any(_decodes(tail + fill) for fill in fills)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.binary(max_size=6),
    tokens=st.lists(st.binary(max_size=5), min_size=1, max_size=12),
)
def test_token_classes_agree_with_cpythons_decoder(prefix, tokens):
    """Every token's class from the stream's DFA state equals what CPython's strict decoder
    says of the pending bytes followed by the token."""
    table, lengths = utf8.pad_streams(tokens)
    classes = utf8.token_classes(table, lengths)
    scorer = utf8.StreamScorer(1)
    scorer.feed_bytes([prefix])
    state = int(scorer.state[0])
    want = [_strict_after(_pending(prefix), t) for t in tokens]
    assert classes.valid[state].tolist() == [v for v, _ in want]
    assert classes.completes[state].tolist() == [c for _, c in want]
    assert bool(utf8.PENDING[state]) == bool(_pending(prefix))


def test_every_single_byte_from_every_state():
    """All 256 one-byte tokens from each DFA state, against CPython (one prefix per state)."""
    prefixes = [b"", b"\xc3", b"\xe0", b"\xe3", b"\xed", b"\xe3\x81", b"\xf0", b"\xf1", b"\xf4"]
    prefixes += [b"\xf0\x9f", b"\xf0\x9f\x98", b"\xff"]
    tokens = [bytes([b]) for b in range(256)] + [b""]
    classes = utf8.token_classes(*utf8.pad_streams(tokens))
    reached = set()
    for prefix in prefixes:
        scorer = utf8.StreamScorer(1)
        scorer.feed_bytes([prefix])
        state = int(scorer.state[0])
        reached.add(state)
        want = [_strict_after(_pending(prefix), t) for t in tokens]
        assert classes.valid[state].tolist() == [v for v, _ in want], prefix
        assert classes.completes[state].tolist() == [c for _, c in want], prefix
    assert reached == set(range(utf8.N_STATES))
