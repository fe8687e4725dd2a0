"""The one place that checks a library's version where bytecanary relies on its private internals,
so a renamed override stops the run with one line instead of being silently never called
(docs/layout.md, "Private internals").
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from bytecanary.errors import BytecanaryError

# Upper bound: the next minor release, which may rename a private name. Run with lightning
# 2.6.6 and transformers 5.24.0, and in the GPU machine's image (transformers 5.17.0, torch
# 2.11.0), which `make test-slow` rehearses; the names are the same in lightning 2.5.0's and
# transformers 5.0.0's source (5.0 calls the KV cache argument ``past_key_values``, which the
# engine handles).
LIGHTNING = ">=2.5,<2.7"
TRANSFORMERS = ">=5.0,<5.25"
# datatrove 0.10.1: ``bytecanary prepare`` reads and clears its task folder's completion
# markers (``completions/<rank>``) to retry failed tasks
DATATROVE = ">=0.10,<0.11"
TESTED = {"lightning": LIGHTNING, "transformers": TRANSFORMERS, "datatrove": DATATROVE}


def installed(package: str) -> str | None:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def in_range(version: str | None, tested_range: str) -> bool:
    """Whether ``version`` is in ``tested_range``; development and release-candidate builds
    count by their number (``5.24.0.dev0`` is in ``<5.25``, ``5.25.0rc1`` is not)."""
    try:
        return version is not None and SpecifierSet(tested_range).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def require(package: str, tested_range: str, why: str) -> None:
    """Raise a one-line ``BytecanaryError`` unless the installed ``package`` is in ``tested_range``;
    ``why`` names what relies on it, as a noun phrase ("X's override of Y internals")."""
    version = installed(package)
    if not in_range(version, tested_range):
        raise BytecanaryError(
            f"{package} {version or '(not installed)'} is outside {package}{tested_range}, the range "
            f"tested for {why}: pip install '{package}{tested_range}'"
        )


def require_attrs(owner: object, names: Iterable[str], package: str, tested_range: str, why: str) -> None:
    """Raise a one-line ``BytecanaryError`` if ``owner`` (a class or an object) lacks one of
    ``names``, instead of an AttributeError later or an override that is never called."""
    for name in names:
        if not hasattr(owner, name):
            kind = owner if isinstance(owner, type) else type(owner)
            raise BytecanaryError(
                f"{package} {installed(package) or '(not installed)'} has no {kind.__name__}.{name}, "
                f"needed by {why} (tested with {package}{tested_range})"
            )
