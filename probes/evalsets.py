"""Where a probe finds its eval sets: the data folder's ``evalsets/``, or the files a spec names."""

from __future__ import annotations

from pathlib import Path

from bytecanary.errors import BytecanaryError

DEFAULT_DATA_DIR = Path("data/default")  # what `bytecanary prepare` writes for the default config


def evalsets_dir(data_dir: Path | None) -> Path:
    """Where `bytecanary prepare` put the eval sets of ``data_dir``."""
    return Path(data_dir or DEFAULT_DATA_DIR) / "evalsets"


def eval_set_files(eval_sets: list[str] | None, data_dir: Path | None, pattern: str) -> list[Path]:
    """The files given, else the data folder's eval sets matching ``pattern``."""
    if eval_sets:
        missing = [p for p in eval_sets if not Path(p).is_file()]
        if missing:
            raise BytecanaryError(f"eval_sets: {missing[0]}: no such file")
        return [Path(p) for p in eval_sets]
    folder = evalsets_dir(data_dir)
    files = sorted(folder.glob(pattern))
    if not files:
        raise BytecanaryError(
            f"{folder}: no eval sets ({pattern}); run `bytecanary prepare` or pass the eval-set files"
        )
    return files
