"""The plain per-byte reference DFA that the fast UTF-8 probes are checked against."""

import numpy as np

from bytecanary import utf8

from .reference import py_score


def test_python_reference_dfa_agrees_with_the_table_dfa():
    rng = np.random.default_rng(3)
    streams = [rng.integers(0x70, 0x100, rng.integers(0, 10)).astype(np.uint8).tobytes() for _ in range(3000)]
    got = utf8.score_batch(streams)
    want = np.array([py_score(s) for s in streams])
    np.testing.assert_allclose(np.stack([got.strict, got.soft, got.partial], 1), want, atol=1e-12)
