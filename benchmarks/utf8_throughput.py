"""UTF-8 scoring throughput: our batch DFA vs a Python loop of ``bytes.decode``.

The reference only answers valid/invalid; ours returns strict, soft and partial.
Streams: 4-16 bytes, half prefixes of valid CJK text, half random bytes.

    python benchmarks/utf8_throughput.py [--n 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from bytecanary import utf8


def make_streams(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 17, n)
    cjk = rng.integers(0x4E00, 0x9FFF, (n // 2, 6))  # 6 CJK chars = 18 bytes, cut to length
    valid = ["".join(map(chr, row)).encode()[:k] for row, k in zip(cjk, lengths[: n // 2], strict=True)]
    noise = rng.integers(0, 256, (n - n // 2, 16)).astype(np.uint8)
    rand = [row[:k].tobytes() for row, k in zip(noise, lengths[n // 2 :], strict=True)]
    return valid + rand


def decode_loop(streams: list[bytes]) -> int:
    valid = 0
    for s in streams:
        try:
            s.decode("utf-8")
            valid += 1
        except UnicodeDecodeError:
            pass
    return valid


def best_of(repeat: int, fn, *args) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    streams = make_streams(args.n)
    total = sum(map(len, streams))
    padded, lengths = utf8.pad_streams(streams)
    assert decode_loop(streams) == int(utf8.score_batch(streams).strict.sum())

    ref = best_of(args.repeat, decode_loop, streams)
    ours_list = best_of(args.repeat, utf8.score_batch, streams)
    ours_array = best_of(args.repeat, utf8.score_batch, padded, lengths)
    print(f"python {platform.python_version()}  numpy {np.__version__}  {platform.machine()}")
    print(f"{args.n:,} streams, {total / 1e6:.1f} MB, best of {args.repeat}")
    print(f"{'method':<52}{'MB/s':>10}{'ratio':>8}")
    print(f"{'bytes.decode loop (valid/invalid only)':<52}{total / ref / 1e6:>10.1f}{1.0:>8.2f}")
    for name, t in [
        ("score_batch(list of bytes)", ours_list),
        ("score_batch(array, lengths)", ours_array),
    ]:
        print(f"{name + ' (strict+soft+partial)':<52}{total / t / 1e6:>10.1f}{ref / t:>8.2f}")


if __name__ == "__main__":
    main()
