"""The validation stage: a probe's inputs checked and fingerprinted once per data folder, its
samples prepared once per tokenizer, before any model runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import Any

from bytecanary.errors import BytecanaryError
from bytecanary.probes.registry import Probe
from bytecanary.probes.specs import spec_where


def _key(path: str | Path | None) -> str:
    return str(Path(path).resolve()) if path is not None else "-"


class Inputs:
    """The probes' checked data folders, prepared samples and fingerprints: what the training
    callback fills before its first step and hands its ``Pipeline``. A missing, unreadable or
    empty eval set is one ``BytecanaryError`` naming the spec's ``source`` and the probe."""

    def __init__(self, probes: list[Probe], source: str | Path | None = None, dtype: str = "float32") -> None:
        self.probes, self.source, self.dtype = probes, source, dtype
        self._checked: set[str] = set()
        self._prepared: dict[tuple[int, str, str, str | None], Any] = {}
        self._fingerprints: dict[tuple[int, str, str], str] = {}

    def where(self, probe: Probe) -> str:
        return spec_where(self.source, probe.name)

    def check(self, data_dir: Path | None) -> None:
        """Validate every probe's inputs on ``data_dir`` and fingerprint them (in ``dtype``),
        once per data folder: bad inputs fail before any model loads."""
        folder = _key(data_dir)
        if folder in self._checked:
            return
        for probe in self.probes:
            with self._named(probe):
                probe.validate(data_dir)
        for index in range(len(self.probes)):
            self._fingerprint(index, data_dir, self.dtype)
        self._checked.add(folder)

    def prepare(self, index: int, tokenizer: Any, data_dir: Path | None, revision: str | None = None):
        """The prepared samples of probe ``index`` for ``tokenizer``, on a checked ``data_dir``;
        an eval set without samples is an error."""
        key = (index, _key(data_dir), _key(tokenizer.name_or_path), revision)
        if key not in self._prepared:
            self.check(data_dir)
            probe = self.probes[index]
            with self._named(probe):
                prepared = probe.prepare(tokenizer, data_dir)
            samples = getattr(prepared, "samples", prepared)  # the UTF-8 probes' Prepared, or a list
            if isinstance(samples, Sized) and len(samples) == 0:
                where = self.where(probe)
                raise BytecanaryError(f"{where}: the eval set has no samples (data {data_dir})")
            self._prepared[key] = prepared
        return self._prepared[key]

    def fingerprint(self, index: int, data_dir: Path | None, dtype: str) -> str:
        """Probe ``index``'s fingerprint on a checked ``data_dir`` for a model computing in ``dtype``."""
        self.check(data_dir)
        return self._fingerprint(index, data_dir, dtype)

    def _fingerprint(self, index: int, data_dir: Path | None, dtype: str) -> str:
        """The fingerprint, its eval files read once per data folder and dtype."""
        key = (index, _key(data_dir), dtype)
        if key not in self._fingerprints:
            probe = self.probes[index]
            with self._named(probe):
                self._fingerprints[key] = probe.fingerprint(data_dir, dtype)
        return self._fingerprints[key]

    @contextlib.contextmanager
    def _named(self, probe: Probe) -> Iterator[None]:
        """A probe's error, or an unreadable file, as one ``BytecanaryError`` after its spec's place."""
        try:
            yield
        except BytecanaryError as err:
            raise BytecanaryError(f"{self.where(probe)}: {err}") from None
        except OSError as err:
            raise BytecanaryError(f"{self.where(probe)}: {err.filename}: {err.strerror}") from None
