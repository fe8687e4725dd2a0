"""Atomically written files and folders get the mode ``open()`` and ``mkdir`` would give them
(0o666 and 0o777 less the umask), not mkstemp's 0600 and mkdtemp's 0700: a colleague or a
sidecar under another uid on a shared cluster must be able to read a run."""

import os
import stat
from pathlib import Path

import pytest
import torch

from bytecanary import io
from bytecanary.checkpoints import save_weights
from bytecanary.io import atomic_dir, atomic_path, current_umask, write_json
from bytecanary.train.export import export


@pytest.fixture(params=[(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)], ids=["umask022", "umask077"])
def umask(request):
    """(file mode, folder mode) expected under the umask set for the test, restored after."""
    mask, file_mode, folder_mode = request.param
    old = os.umask(mask)
    yield file_mode, folder_mode
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writes_follow_the_umask(umask, tmp_path):
    file_mode, folder_mode = umask
    with atomic_path(tmp_path / "a.txt") as tmp:
        tmp.write_text("a")
    write_json(tmp_path / "b.json", {"b": 1})
    with atomic_dir(tmp_path / "folder") as tmp:
        (tmp / "inside.txt").write_text("c")
    assert _mode(tmp_path / "a.txt") == _mode(tmp_path / "b.json") == file_mode
    assert _mode(tmp_path / "folder") == folder_mode
    assert _mode(tmp_path / "folder" / "inside.txt") == file_mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json", "folder"]  # no temp left


def test_the_umask_is_read_without_proc_and_left_as_it_was(umask, tmp_path, monkeypatch):
    _, folder_mode = umask
    expected = 0o777 & ~folder_mode
    assert current_umask() == expected
    monkeypatch.setattr(io, "PROC_STATUS", tmp_path / "no-proc")  # as on macOS
    assert current_umask() == expected
    assert os.umask(expected) == expected  # what it read, it set back


def test_a_replaced_file_takes_the_umasks_mode_not_the_old_files(umask, tmp_path):
    file_mode, _ = umask
    (tmp_path / "c.json").write_text("{}")
    (tmp_path / "c.json").chmod(0o600 if file_mode != 0o600 else 0o644)
    write_json(tmp_path / "c.json", {"c": 2})
    assert _mode(tmp_path / "c.json") == file_mode


def test_a_weights_file_and_an_export_follow_the_umask(umask, trained, tmp_path):
    """The code paths that write a run's weights (safetensors into the temp file) and an
    export folder (save_pretrained into the temp folder)."""
    file_mode, folder_mode = umask
    tensors = {"model.transformer.wte.weight": torch.zeros(4, 2)}
    save_weights(tmp_path / "w.safetensors", tensors, {"gpt2_config": {}}, "float32")
    assert _mode(tmp_path / "w.safetensors") == file_mode
    hf = export(trained / "checkpoints" / "step0000004.safetensors", tmp_path / "hf")
    assert _mode(hf) == folder_mode
    assert {_mode(p) for p in hf.iterdir()} == {file_mode}
