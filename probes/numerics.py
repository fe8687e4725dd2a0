"""What the probes compute in (``--dtype auto``: bfloat16 on CUDA, float32 elsewhere, with a warning
for bf16 on a CPU without bf16 units) and how to tell an out-of-memory error from the rest
(docs/gpus.md, "Precision and memory").
"""

from __future__ import annotations

import functools
import time

import torch

from bytecanary.errors import BytecanaryError
from bytecanary.io import warn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# a CPU's bf16 matmul slower than this share of its fp32 rate has no bf16 units to speak of
SLOW_BF16 = 0.5


def probe_dtype(name: str, device: str | torch.device) -> torch.dtype:
    """The dtype ``name`` (auto, float32, bfloat16) means on ``device``; bf16 on a CPU that
    runs it slowly says so in one line."""
    kind = torch.device(device).type
    if name == "auto":
        return torch.bfloat16 if kind == "cuda" else torch.float32
    if name not in DTYPES:
        raise BytecanaryError(f"--dtype: expected auto, {' or '.join(DTYPES)}, got {name!r}")
    if DTYPES[name] == torch.bfloat16 and kind == "cpu":
        ratio = cpu_bf16_speed()
        if ratio < SLOW_BF16:
            warn(
                f"--dtype bfloat16 on this CPU will be slow: its bf16 matmul runs at {ratio:.2f}x "
                "its float32 rate (no bf16 units); --dtype float32 is faster here"
            )
    return DTYPES[name]


@functools.lru_cache(maxsize=1)
def cpu_bf16_speed(size: int = 256, repeats: int = 3) -> float:
    """This CPU's one-thread bf16 matmul rate as a share of its fp32 rate, measured: flags
    (``avx512_bf16``, ``amx_bf16``) say what the chip has, not what torch's kernels use."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds = {}
        for dtype in (torch.float32, torch.bfloat16):
            a = torch.randn(size, size).to(dtype)
            a @ a  # warm up
            start = time.perf_counter()
            for _ in range(repeats):
                a @ a
            seconds[dtype] = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    return seconds[torch.float32] / seconds[torch.bfloat16]


def label(dtype: torch.dtype) -> str:
    """``dtype`` as records and fingerprints name it: ``float32``, ``bfloat16``."""
    return str(dtype).removeprefix("torch.")


def dtype_name(model: torch.nn.Module) -> str:
    """What ``model`` computes in, by ``label``."""
    return label(next(model.parameters()).dtype)


def is_oom(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: CUDA's (or another accelerator's)
    ``OutOfMemoryError``, the CPU allocator's ``RuntimeError``, or Python's ``MemoryError``."""
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


def release(device: torch.device) -> None:
    """Give the cached blocks of a failed batch back before a smaller one is tried."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def devices_here() -> list[str]:
    """The devices this process can compute on."""
    cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu", *cuda, *(["mps"] if torch.backends.mps.is_available() else [])]


def check_device(device: str | None) -> None:
    """``--device`` names a device of this machine: else one line naming those it has, before
    any work."""
    if device is None:
        return
    here = devices_here()
    try:
        wanted = torch.device(device)
    except RuntimeError:
        raise BytecanaryError(
            f"probe: --device {device!r} is not a device; here: {', '.join(here)}"
        ) from None
    if wanted.type not in here and f"{wanted.type}:{wanted.index or 0}" not in here:
        raise BytecanaryError(f"probe: --device {device!r} is not on this machine; here: {', '.join(here)}")
