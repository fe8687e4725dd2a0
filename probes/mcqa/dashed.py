"""Matched-and-Dashed answer extraction (the Matched-and-Dashed (M&D) vs Select-and-Letter
paper, section 2.2): a rule hierarchy reduces an answer to text, matched to the most similar
option; no shared n-gram means no match, so a foreign answer never defaults to option A.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from bytecanary.errors import BytecanaryError

RULES = ("answer_is", "answer_colon", "option_text", "last_sentence", "none")
STOPS = ("\n\n", "\nQuestion:")  # the response ends at a blank line or a new question

# the paper's patterns: an occurrence with no later one on its line, then the last line's
_ANSWER_IS = re.compile(r"answer\s*is\s*:?[ \t]*(?!.*answer\s*is)(.+)", re.IGNORECASE)
_ANSWER_COLON = re.compile(r"[aA]nswer:\s*(?!.*[aA]nswer:)(.+)")
_LAST_SENTENCE = re.compile(r"([^.!?。！？\n]+[.!?。！？]*)\s*$")


def _last(pattern: re.Pattern, text: str) -> str | None:
    found = [m.group(1).strip() for m in pattern.finditer(text)]
    found = [f for f in found if f]
    return found[-1] if found else None


def extract(response: str, choices: Sequence[str]) -> tuple[str, str]:
    """(answer text, the rule that produced it)."""
    for rule, pattern in (("answer_is", _ANSWER_IS), ("answer_colon", _ANSWER_COLON)):
        text = _last(pattern, response)
        if text:
            return text, rule
    hits = [(response.find(c), -len(c), c) for c in choices if c and c in response]
    if hits:
        return min(hits)[2], "option_text"
    sentence = _last(_LAST_SENTENCE, response.strip())
    return (sentence, "last_sentence") if sentence else ("", "none")


def _ngrams(text: str, sizes: Sequence[int]) -> Counter:
    text = f" {text.lower()} "
    grams = (text[i : i + n] for n in sizes for i in range(len(text) - n + 1))
    return Counter(g for g in grams if g.strip())  # blanks alone say nothing


def tfidf_similarities(answer: str, choices: Sequence[str], sizes: Sequence[int] = (1, 2, 3)) -> np.ndarray:
    """Cosine of ``answer`` to each choice over character n-grams, TF-IDF weighted with the
    choices as the corpus (smooth idf, as scikit-learn: ln((1 + N) / (1 + df)) + 1)."""
    grams = [_ngrams(c, sizes) for c in choices]
    df = Counter(g for gs in grams for g in gs)
    idf = {g: math.log((1 + len(choices)) / (1 + d)) + 1 for g, d in df.items()}
    query = _ngrams(answer, sizes)
    q = {g: n * idf[g] for g, n in query.items() if g in idf}
    q_norm = math.sqrt(sum((n * idf.get(g, 1.0)) ** 2 for g, n in query.items()))
    out = np.zeros(len(choices))
    for i, gs in enumerate(grams):
        vec = {g: n * idf[g] for g, n in gs.items()}
        norm = math.sqrt(sum(v * v for v in vec.values())) * q_norm
        out[i] = sum(w * vec.get(g, 0.0) for g, w in q.items()) / norm if norm else 0.0
    return out


class Matcher:
    """Maps an extracted answer to an option index (-1: no match)."""

    def __init__(self, similarity: str = "tfidf") -> None:
        self.similarity = similarity
        self._model: Any = None
        if similarity != "tfidf":
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise BytecanaryError(
                    f"similarity: {similarity!r} needs sentence-transformers "
                    "(pip install sentence-transformers), or use 'tfidf'"
                ) from None
            try:
                self._model = SentenceTransformer(similarity)
            except Exception as err:  # any load failure means "this model is not usable here"
                raise BytecanaryError(f"similarity: cannot load {similarity!r}: {err}") from None

    def similarities(self, answer: str, choices: Sequence[str]) -> np.ndarray:
        if self._model is None:
            return tfidf_similarities(answer, choices)
        emb = self._model.encode([answer, *choices], normalize_embeddings=True)
        return np.asarray(emb[1:] @ emb[0], dtype=np.float64)

    def match(self, answer: str, choices: Sequence[str]) -> int:
        if not answer:
            return -1
        sims = self.similarities(answer, choices)
        if self._model is None and sims.max() <= 0:  # no shared n-gram: no match
            return -1
        return int(np.argmax(sims))
