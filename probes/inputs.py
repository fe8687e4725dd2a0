"""What a probe reads before any model runs: its inputs checked, its samples prepared, its
fingerprint taken, each once per probe and data folder (and tokenizer, dtype).

Training's callback fills an ``Inputs`` before the first step, so a bad eval set stops the
run before it trains; the ``Pipeline`` built at fit start reads the same one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import Any

from bytecanary.errors import BytecanaryError
from bytecanary.probes.registry import Probe
from bytecanary.probes.specs import spec_where


def check_inputs(probe: Probe, data_dir: Path | None, where: str) -> None:
    """The validation stage: ``probe.validate`` on ``data_dir``, once per probe and data folder,
    before any model loads, for the training callback and ``bytecanary probe`` alike; its
    one-line error is put after ``where`` (the spec's source and the probe)."""
    key = _key(data_dir)
    checked = probe.__dict__.setdefault("checked", set())  # data folders already read; clones share it
    if key in checked:
        return
    try:
        probe.validate(data_dir)
    except BytecanaryError as err:
        raise BytecanaryError(f"{where}: {err}") from None
    checked.add(key)


def _key(path: str | Path | None) -> str:
    return str(Path(path).resolve()) if path is not None else "-"


class Inputs:
    """The probes' prepared samples and fingerprints, cached; a missing, unreadable or empty
    eval set is one ``BytecanaryError`` naming the spec's ``source`` and the probe."""

    def __init__(self, probes: list[Probe], source: str | Path | None = None) -> None:
        self.probes, self.source = probes, source
        self._prepared: dict[tuple[int, str, str, str | None], Any] = {}
        self._fingerprints: dict[tuple[int, str, str], str] = {}

    def where(self, probe: Probe) -> str:
        return spec_where(self.source, probe.name)

    def prepare(self, index: int, tokenizer: Any, data_dir: Path | None, revision: str | None = None):
        """The prepared samples of probe ``index``; a missing, unreadable or empty eval set is
        one ``BytecanaryError`` naming the source and the probe."""
        key = (index, _key(data_dir), _key(tokenizer.name_or_path), revision)
        if key not in self._prepared:
            probe = self.probes[index]
            check_inputs(probe, data_dir, self.where(probe))
            with self._named(probe):
                prepared = probe.prepare(tokenizer, data_dir)
            samples = getattr(prepared, "samples", prepared)  # the UTF-8 probes' Prepared, or a list
            if isinstance(samples, Sized) and len(samples) == 0:
                where = self.where(probe)
                raise BytecanaryError(f"{where}: the eval set has no samples (data {data_dir})")
            self.fingerprint(index, data_dir, "float32")  # its eval files read now, not after a model ran
            self._prepared[key] = prepared
        return self._prepared[key]

    def fingerprint(self, index: int, data_dir: Path | None, dtype: str) -> str:
        """Probe ``index``'s fingerprint on ``data_dir``'s eval sets (read once) for a model
        computing in ``dtype``."""
        key = (index, _key(data_dir), dtype)
        if key not in self._fingerprints:
            probe = self.probes[index]
            with self._named(probe):
                self._fingerprints[key] = probe.fingerprint(data_dir, key[2])
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
