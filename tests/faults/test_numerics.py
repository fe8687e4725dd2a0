"""GPU numerics and memory, on CPU. ``--dtype``: auto is bf16 on CUDA only, bf16 on a CPU
without bf16 units says it will be slow, and records of each dtype are their own measurement
(float32's fingerprints are those of records from before ``--dtype``). Batches that do not
fit: a probe whose batch runs out of memory is tried again at half the size, on the real
error path (the CPU allocator's failure, or CUDA's ``OutOfMemoryError``), and gives what a
run at the smaller size gives from the start; the size that fit is kept for the next
checkpoint, and the record names it."""

import hashlib
import json

import pytest
import torch

from bytecanary.cli import main
from bytecanary.probes import batching, engine, numerics
from bytecanary.probes.mcqa.keys import SCORED_PROTOCOLS
from bytecanary.probes.numerics import is_oom, probe_dtype
from bytecanary.probes.pipeline import Computed, OutOfMemory, Pipeline, _settle
from bytecanary.probes.specs import build_probes
from bytecanary.probes.targets import Loader, data_dir_of, in_folder
from bytecanary.records import read as read_records

SPECS = [
    {"name": "level0", "trial": True, "per_language": 3, "batch_size": 8},
    {
        "name": "mcqa",
        "trial": True,
        "embedded_per_language": 3,
        "nonsense_per_language": 0,
        "protocols": list(SCORED_PROTOCOLS),  # one row per item view (generating, one per prompt)
        "batch_size": 8,
    },
]


class Squeeze:
    """A global forward hook: an embedding lookup over more than ``fits`` rows fails to
    allocate, as a GPU too small for the batch would (``cuda``: CUDA's error type)."""

    def __init__(self, fits: int, cuda: bool = False) -> None:
        self.fits, self.cuda, self.failures = fits, cuda, 0

    def __call__(self, module, inputs):
        if isinstance(module, torch.nn.Embedding) and inputs[0].shape[0] > self.fits:
            self.failures += 1
            if self.cuda:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            torch.empty(1 << 60, dtype=torch.uint8)  # the CPU allocator's own failure

    def __enter__(self):
        self.handle = torch.nn.modules.module.register_module_forward_pre_hook(self)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _probe(run, out, specs, squeeze=None):
    pipeline = Pipeline(build_probes(specs), out)
    loader = Loader("cpu")
    made = []
    for target in in_folder(run):
        if squeeze is None:
            made += pipeline.probe(loader, target, range(len(specs)))
        else:
            with squeeze:
                made += pipeline.probe(loader, target, range(len(specs)))
    return pipeline, made


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu-allocator", "cuda-oom"])
def test_out_of_memory_halves_the_batch_and_matches_a_run_at_that_size(trained, tmp_path, capsys, cuda):
    squeeze = Squeeze(fits=2, cuda=cuda)
    pipeline, halved = _probe(trained, tmp_path / "halved.jsonl", SPECS, squeeze)
    smaller = [{**spec, "batch_size": 2} for spec in SPECS]
    _, direct = _probe(trained, tmp_path / "direct.jsonl", smaller)

    assert [r.status for r in halved] == ["ok"] * 4 and [r.batch_size for r in halved] == [2] * 4
    for got, want in zip(halved, direct, strict=True):
        assert (got.checkpoint, got.probe) == (want.checkpoint, want.probe)
        assert got.metrics == pytest.approx(want.metrics, rel=1e-6, abs=1e-9, nan_ok=True)
    # 8 -> 4 -> 2 once per probe, on the first checkpoint; the second starts at the size that fit
    assert squeeze.failures == 4 and pipeline.batch_sizes == {0: 2, 1: 2}
    warned = [line for line in capsys.readouterr().err.splitlines() if "out of memory" in line]
    assert warned[:2] == [
        "warning: probe level0: out of memory at batch size 8; trying batch size 4",
        "warning: probe level0: out of memory at batch size 4; trying batch size 2",
    ]
    # the identity keeps the configured batch size: the same spec finds its pairs done
    configured = Pipeline(build_probes(SPECS), tmp_path / "halved.jsonl")
    assert configured.todo(in_folder(trained)) == []


class Batches:
    """Every batch the probes' engine computes, and the samples it computed before; an
    out-of-memory error injected at the ``fail_at``-th prefill (counted from 1), or with
    ``in_decode`` in that batch's decoding, after a draw of a sampled run."""

    def __init__(self, monkeypatch, fail_at: int, in_decode: bool = False) -> None:
        self.done: set[int] = set()
        self.twice, self.prefills, self.fail_at = 0, 0, fail_at
        real_each, real_prefill, real_decode = batching.each, engine._prefill, engine._decode

        def each(n, size, step, costs=None):
            def counted(lo, hi):
                step(lo, hi)
                self.twice += bool(self.done & set(range(lo, hi)))  # samples computed before
                self.done |= set(range(lo, hi))

            real_each(n, size, counted, costs)

        def prefill(*args, **kwargs):
            self.prefills += 1
            if self.prefills == self.fail_at and not in_decode:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return real_prefill(*args, **kwargs)

        def decode(model, pre, decoding, gen, *rest):
            if self.prefills == self.fail_at and in_decode:
                if gen is not None:
                    torch.rand(1, generator=gen)  # draws made before memory ran out
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return real_decode(model, pre, decoding, gen, *rest)

        monkeypatch.setattr(batching, "each", each)
        monkeypatch.setattr(engine, "_prefill", prefill)
        monkeypatch.setattr(engine, "_decode", decode)


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_out_of_memory_at_the_first_batch_is_retried_at_that_batch(
    trained, tmp_path, monkeypatch, capsys, sampled
):
    target = in_folder(trained)[:1]
    spec = [{**SPECS[0], "batch_size": 8, **({"temperature": 0.9, "seed": 5} if sampled else {})}]
    pipeline = Pipeline(build_probes(spec), tmp_path / "retried.jsonl")
    batches = Batches(monkeypatch, fail_at=1, in_decode=sampled)
    [record] = pipeline.probe(Loader("cpu"), target[0], [0])
    n = len(batches.done)
    assert record.status == "ok" and record.batch_size == 4 and n > 3 * 8
    assert batches.twice == 0 and batches.prefills == 1 + -(-n // 4)  # the failed one, then each once
    assert "out of memory at batch size 8; trying batch size 4" in capsys.readouterr().err
    monkeypatch.undo()
    direct = Pipeline(build_probes([{**spec[0], "batch_size": 4}]), tmp_path / "direct.jsonl")
    [want] = direct.probe(Loader("cpu"), target[0], [0])
    assert record.metrics == pytest.approx(want.metrics, rel=1e-6, abs=1e-9, nan_ok=True)


def test_ranks_settle_on_the_smallest_size_that_fit_or_half_of_one_that_did_not():
    fit_after_retry = Computed({}, 32, (64,))
    short_later = Computed(OutOfMemory("out of memory at batch size 64"), 64)
    assert _settle([fit_after_retry, short_later]) == (32, [64])
    assert _settle([Computed({}, 64), Computed(OutOfMemory("x"), 64)]) == (32, [64])
    assert _settle([Computed({}, 8), Computed({}, 8)]) == (8, [])
    assert _settle([Computed(OutOfMemory("x"), 1)]) == (1, [])  # nothing smaller to try


def test_out_of_memory_after_the_first_batch_runs_the_share_again(trained, tmp_path, monkeypatch):
    pipeline = Pipeline(build_probes([{**SPECS[0], "batch_size": 8}]), tmp_path / "again.jsonl")
    batches = Batches(monkeypatch, fail_at=3)
    [record] = pipeline.probe(Loader("cpu"), in_folder(trained)[0], [0])
    assert record.status == "ok" and record.batch_size == 4
    assert batches.twice == 4  # the two batches of 8 computed before, again as four of 4


def test_out_of_memory_at_batch_size_one_is_a_failed_record(trained, tmp_path):
    spec = [{**SPECS[0], "batch_size": 2}]
    _, made = _probe(trained, tmp_path / "p.jsonl", spec, Squeeze(fits=0))
    assert [r.status for r in made] == ["failed", "failed"]
    assert made[0].error == "out of memory at batch size 1" and made[0].batch_size == 1


def test_only_allocation_failures_count_as_out_of_memory():
    with pytest.raises(RuntimeError) as cpu:
        torch.empty(1 << 60, dtype=torch.uint8)
    assert (
        is_oom(cpu.value) and is_oom(torch.OutOfMemoryError("CUDA out of memory")) and is_oom(MemoryError())
    )
    assert not is_oom(RuntimeError("shape mismatch")) and not is_oom(ValueError("can't allocate memory"))


def test_auto_is_bfloat16_on_cuda_only_and_slow_bfloat16_on_a_cpu_says_so(monkeypatch, capsys):
    assert probe_dtype("auto", "cpu") == torch.float32 and probe_dtype("auto", "cuda:0") == torch.bfloat16
    assert probe_dtype("float32", "cuda") == torch.float32
    monkeypatch.setattr(numerics, "cpu_bf16_speed", lambda: 0.02)  # the EPYC of issue 24: 0.9 vs 54 GFLOP/s
    assert probe_dtype("bfloat16", "cpu") == torch.bfloat16
    assert capsys.readouterr().err.splitlines() == [
        "warning: --dtype bfloat16 on this CPU will be slow: its bf16 matmul runs at 0.02x its "
        "float32 rate (no bf16 units); --dtype float32 is faster here"
    ]
    monkeypatch.setattr(numerics, "cpu_bf16_speed", lambda: 4.5)  # a CPU with bf16 units
    assert probe_dtype("bfloat16", "cpu") == torch.bfloat16 and capsys.readouterr().err == ""
    assert probe_dtype("bfloat16", "cuda") == torch.bfloat16


def test_the_cpu_bf16_measurement_leaves_the_thread_count_alone():
    threads = torch.get_num_threads()
    assert numerics.cpu_bf16_speed.__wrapped__(size=64, repeats=1) > 0
    assert torch.get_num_threads() == threads


def test_each_dtype_is_its_own_measurement_and_float32_keeps_the_old_fingerprint(trained, tmp_path):
    probe = build_probes([SPECS[0]])[0]
    data_dir = data_dir_of(in_folder(trained)[0])
    files = [hashlib.sha256(f.read_bytes()).hexdigest() for f in probe.eval_files(data_dir)]
    params = {k: v for k, v in probe.params.items() if k != "records"}
    blob = json.dumps({"params": params, "files": files}, sort_keys=True, default=str)
    old = hashlib.sha256(blob.encode()).hexdigest()[:12]  # the fingerprint before --dtype
    assert files and probe.fingerprint(data_dir) == probe.fingerprint(data_dir, "float32") == old
    assert probe.fingerprint(data_dir, "bfloat16") != old

    out = tmp_path / "p.jsonl"
    for dtype in ("bfloat16", "float32", "bfloat16"):  # the last finds its pairs done
        args = [
            "probe",
            str(trained),
            "--probes",
            "[level0]",
            "--trial=true",
            "--wandb=false",
            "--dtype",
            dtype,
        ]
        assert main([*args, "--out", str(out)]) == 0
    rows = read_records(out)
    assert [(r.step, r.dtype) for r in rows] == [
        (4, "bfloat16"),
        (8, "bfloat16"),
        (4, "float32"),
        (8, "float32"),
    ]
    assert rows[0].fingerprint != rows[2].fingerprint and rows[0].metrics.keys() == rows[2].metrics.keys()
    loaded = Loader("cpu", torch.bfloat16).load(in_folder(trained)[0])
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
