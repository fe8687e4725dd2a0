"""``bytecanary export``: a run's checkpoint -> a ``save_pretrained`` folder that transformers loads
with no project code; it replaces nothing but a previous export, and a failed one leaves the target
as it was (docs/training.md#export)."""

from __future__ import annotations

import json
from pathlib import Path

from bytecanary.checkpoints import checkpoint_data_dir, load_gpt2, tokenizer_dir
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, check_output

MARKER = "bytecanary.json"  # written last; lists the files of the export


def written_by_export(folder: Path) -> set[str] | None:
    """The names a previous export wrote into ``folder`` (its marker included), or None when
    ``folder`` holds no export's marker."""
    try:
        info = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = info.get("files") if isinstance(info, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return {*files, MARKER}


def check_target(out_dir: str | Path, force: bool) -> Path:
    """``out_dir`` if export may write it; else one ``BytecanaryError`` saying why and what to do."""
    out = Path(out_dir)
    if out.is_symlink():
        raise BytecanaryError(
            f"{out}: a symbolic link; export writes only a real folder (give {out.resolve()})"
        )
    out = check_output(out, folder=True)
    if not out.exists() or not any(out.iterdir()):
        return out
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise BytecanaryError(f"{out}: the working directory is inside it; export never replaces it")
    wrote = written_by_export(out)
    if wrote is None:
        raise BytecanaryError(
            f"{out}: not empty and not a previous export (no {MARKER} listing its files); "
            "export replaces nothing else, even with --force: choose another folder"
        )
    foreign = sorted({p.name for p in out.iterdir()} - wrote)
    if foreign:
        raise BytecanaryError(
            f"{out}: a previous export plus files export did not write ({', '.join(foreign[:3])}); "
            "export never deletes those: choose another folder"
        )
    if not force:
        raise BytecanaryError(f"{out}: holds a previous export; pass --force to replace it")
    return out


def export(ckpt_path: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """A weights file or a full state -> ``out_dir`` (docs/training.md#export)."""
    from safetensors import SafetensorError
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    out = check_target(out_dir, force)
    meta, model = load_gpt2(ckpt_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir(meta, ckpt_path)))
    hf_logging.disable_progress_bar()  # one file: a bar on stderr says nothing
    with atomic_dir(out) as tmp:
        try:
            model.save_pretrained(str(tmp), safe_serialization=True)
        except SafetensorError as err:  # its I/O errors (disk full) arrive as SafetensorError
            raise BytecanaryError(f"{out / 'model.safetensors'}: {' '.join(str(err).split())}") from None
        tokenizer.save_pretrained(str(tmp))
        info = {k: meta.get(k) for k in ("step", "tokens_seen", "tokenizer_hash")}
        data_dir = checkpoint_data_dir(meta)
        info["data_dir"] = str(data_dir) if data_dir else None
        info["checkpoint"] = str(ckpt_path)
        info["files"] = sorted(p.name for p in tmp.iterdir())
        (tmp / MARKER).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return out
