"""The one exception type the command line turns into a one-line message, and the boundary
that turns what a library raises into it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class BytecanaryError(Exception):
    """Bad input a user can fix (config, file, checkpoint): the message names what and where."""


@contextlib.contextmanager
def one_line(where: str) -> Iterator[None]:
    """Anything a library raises inside (transformers, lm-eval, datasets, torch: a missing
    file, a template, a pickle ``weights_only`` refuses) as one ``BytecanaryError`` line
    prefixed with ``where``; our own errors pass as they are."""
    try:
        yield
    except BytecanaryError:
        raise
    except Exception as err:
        raise BytecanaryError(f"{where}: {described(err)}") from None


def described(err: BaseException) -> str:
    """An error's type and first line, then its root cause's, where a library wrapped one
    (``datasets``' "An error occurred while generating the dataset" hides what it was)."""
    root, seen = err, {id(err)}
    while (inner := root.__cause__ or root.__context__) is not None and id(inner) not in seen:
        root = inner
        seen.add(id(root))
    text = [f"{type(e).__name__}: {_ends(str(e))}" for e in (err, root)]
    return text[0] if root is err else f"{text[0]} (caused by {text[1]})"


def _ends(message: str) -> str:
    """A message's first line, and its last where it has several (``datasets``' cast errors
    put the schemas between "Couldn't cast" and "because column names don't match")."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()] or [""]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
