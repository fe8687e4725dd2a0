"""The probe callback: fires after each checkpoint, records failures with the probe's version
and fingerprint, refuses a bad spec before training, DDP equals 1 process."""

import lightning as L
import pytest
import torch
import yaml

from bytecanary.checkpoints import checkpoint_data_dir, load_gpt2, tokenizer_dir
from bytecanary.errors import BytecanaryError
from bytecanary.probes import get_probe
from bytecanary.probes.callback import ProbeCallback
from bytecanary.probes.pipeline import Pipeline
from bytecanary.probes.registry import Probe
from bytecanary.probes.runner import probe_targets
from bytecanary.probes.targets import Loader, Target, resolve
from bytecanary.records import read as read_records
from bytecanary.train.checkpointing import ScheduledCheckpoint
from bytecanary.train.datamodule import ShardDataModule
from bytecanary.train.loggers import JsonlLogger, read_metrics
from bytecanary.train.model import ArchConfig
from bytecanary.train.module import ByteLM

from ..conftest import DDP_2_CPU, assert_same_measurement, run_train


class Exploding(Probe):
    name = "exploding"

    def prepare(self, tokenizer, data_dir):
        return None

    def compute(self, model, tokenizer, prepared, rank=0, world=1):
        raise ValueError("boom")


def _fit(
    tmp_path,
    small_data,
    probes,
    strict=False,
    every_tokens=None,
    max_steps=4,
    every_n_steps=2,
    logger=False,
    dtype="auto",
):
    dm = ShardDataModule(str(small_data), batch_size=4, seq_len=32, val_tokens=256)
    module = ByteLM(ArchConfig(n_layer=1, n_head=2, n_embd=32, n_positions=32), vocab_size=dm.vocab_size)
    ckpt = ScheduledCheckpoint(tmp_path / "checkpoints", every_n_steps=every_n_steps, log_spaced_until=None)
    callback = ProbeCallback(probes, every_tokens=every_tokens, strict=strict, dtype=dtype)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        max_epochs=-1,
        limit_val_batches=0,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ckpt, callback],
    )
    trainer.fit(module, datamodule=dm)
    return trainer, module


def test_failing_probe_is_recorded_and_training_goes_on(tmp_path, small_data):
    trainer, module = _fit(
        tmp_path, small_data, [Exploding(), {"name": "level0", "trial": True, "per_language": 2}]
    )
    assert trainer.global_step == 4
    rows = read_records(tmp_path / "probes.jsonl")
    assert [(r.step, r.probe, r.status) for r in rows] == [
        (2, "exploding", "failed"),
        (2, "level0", "ok"),
        (4, "exploding", "failed"),
        (4, "level0", "ok"),
    ]
    assert rows[0].error == "ValueError: boom" and rows[0].metrics == {}
    level0 = get_probe("level0", trial=True, per_language=2)
    assert (rows[1].version, rows[1].fingerprint) == (level0.version, level0.fingerprint(small_data))
    assert rows[1].checkpoint == str((tmp_path / "checkpoints" / "step0000002.safetensors").resolve())
    assert rows[3].tokens_seen == 4 * 4 * 32
    assert module.model.training  # train mode restored


def test_a_bad_probe_spec_names_its_yaml_before_training():
    with pytest.raises(BytecanaryError) as err:
        ProbeCallback([{"name": "level0", "per_langauge": 2}], source="configs/x.yaml")
    assert str(err.value) == (
        "configs/x.yaml: probes: level0: per_langauge: unknown key (did you mean 'per_language'?)"
    )


def test_strict_makes_a_failing_probe_fatal(tmp_path, small_data):
    message = r"probe exploding failed at step 2 \(run\.probe_strict\): ValueError: boom"
    with pytest.raises(BytecanaryError, match=message):
        _fit(tmp_path, small_data, [Exploding()], strict=True)


PROBES = [
    {"name": "level0", "trial": True, "per_language": 6, "batch_size": 8},
    {"name": "level1", "trial": True, "per_language": 4, "batch_size": 8},
]


@pytest.mark.slow
def test_ddp_probes_equal_a_single_process_run(micro, tmp_path):
    probes_yaml = tmp_path / "probes.yaml"
    probes_yaml.write_text(yaml.safe_dump({"probes": PROBES}))
    args = [
        "--config",
        str(probes_yaml),
        "--run.name",
        "ddp",
        "--trainer.max_steps",
        "4",
        "--run.wandb",
        "true",
    ]
    run_train(micro, *args, *DDP_2_CPU)
    run = tmp_path / "runs" / "ddp"
    rows = read_records(run / "probes.jsonl")
    assert [(r.step, r.probe, r.status) for r in rows] == [
        (4, "level0", "ok"),
        (4, "level1", "ok"),
    ]
    path = rows[0].checkpoint
    assert path.endswith("step0000004.safetensors")
    meta, model = load_gpt2(path)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir(meta, path)))
    for spec, row in zip(PROBES, rows, strict=True):
        params = {k: v for k, v in spec.items() if k != "name"}
        single = get_probe(spec["name"], **params).run(model, tok, data_dir=checkpoint_data_dir(meta))
        assert_same_measurement(row.metrics, single)  # two ranks and their threads against one process
    # the probe metrics sit beside val/ppl in metrics.jsonl and in the W&B offline run
    metrics = read_metrics(run / "metrics.jsonl")
    assert any("probe/level0/all/all/partial" in r and r["tokens_seen"] == 4 * 8 * 32 * 2 for r in metrics)
    from ..train.test_training import _wandb_history

    history = _wandb_history(next((run / "wandb").glob("offline-run-*")))
    assert any("probe/level1/all/term_match" in h and "tokens_seen" in h for h in history)
    assert any("val/ppl" in h for h in history)


def test_token_schedule_fires_between_checkpoints(tmp_path, small_data):
    _fit(tmp_path, small_data, [{"name": "level0", "trial": True, "per_language": 1}], every_tokens=128)
    rows = read_records(tmp_path / "probes.jsonl")
    assert [r.step for r in rows] == [1, 2, 3, 4]  # 128 tokens a step; checkpoints at 2 and 4
    assert [r.checkpoint is None for r in rows] == [True, False, True, False]


def test_fires_probe_the_weights_file_in_one_reused_model(tmp_path, small_data, monkeypatch):
    """The callback's numbers are those of the weights file just written (what ``bytecanary
    probe`` reads later), loaded into one probe model that every fire reuses."""
    models = []
    real = Loader.load

    def spy(self, target):
        loaded = real(self, target)
        models.append(loaded.model)
        return loaded

    monkeypatch.setattr(Loader, "load", spy)
    spec = {"name": "level0", "trial": True, "per_language": 2}
    _fit(tmp_path, small_data, [spec])
    assert len(models) == 2 and models[0] is models[1] and not models[0].training
    row = read_records(tmp_path / "probes.jsonl")[-1]
    monkeypatch.undo()
    pipeline = Pipeline([get_probe("level0", trial=True, per_language=2)], tmp_path / "again.jsonl")
    (again,) = pipeline.probe(Loader("cpu"), Target.file(row.checkpoint), [0])
    assert (again.step, again.tokens_seen, again.fingerprint) == (row.step, row.tokens_seen, row.fingerprint)
    assert (again.step, again.tokens_seen) == (4, 4 * 4 * 32)
    assert again.metrics == row.metrics


def test_checkpoint_fires_compute_in_the_probe_dtype_and_live_fires_in_the_modules(tmp_path, small_data):
    """``run.probe_dtype``: the weights files are probed in bf16 (what ``bytecanary probe
    --dtype bfloat16`` gives later, so a sidecar finds them done), the live module in its own
    fp32; each record's fingerprint and ``dtype`` say which."""
    spec = {"name": "level0", "trial": True, "per_language": 1}
    _fit(tmp_path, small_data, [spec], every_tokens=128, dtype="bfloat16")
    rows = read_records(tmp_path / "probes.jsonl")
    assert [(r.step, r.dtype) for r in rows] == [
        (1, "float32"),
        (2, "bfloat16"),
        (3, "float32"),
        (4, "bfloat16"),
    ]
    probe = get_probe("level0", trial=True, per_language=1)
    data_dir = checkpoint_data_dir(load_gpt2(rows[1].checkpoint)[0])
    assert {rows[0].fingerprint, rows[1].fingerprint} == {
        probe.fingerprint(data_dir),
        probe.fingerprint(data_dir, "bfloat16"),
    }
    later = Pipeline([probe], tmp_path / "probes.jsonl", dtype=torch.bfloat16)
    assert later.todo(resolve([str(tmp_path / "checkpoints")])) == []
    (again,) = Pipeline([probe], tmp_path / "again.jsonl", dtype=torch.bfloat16).probe(
        Loader("cpu", torch.bfloat16), Target.file(rows[3].checkpoint), [0]
    )
    assert (again.fingerprint, again.dtype, again.metrics) == (
        rows[3].fingerprint,
        "bfloat16",
        rows[3].metrics,
    )


def test_the_callback_and_bytecanary_probe_fail_a_probe_alike(tmp_path, small_data):
    """One failure policy: the same raising probe gives the same failed record in training
    and from ``bytecanary probe``'s path on the same weights file."""
    _fit(tmp_path, small_data, [Exploding()])
    in_training = read_records(tmp_path / "probes.jsonl")[-1]
    pipeline = Pipeline([Exploding()], tmp_path / "after.jsonl")
    (after,) = probe_targets(pipeline, Loader("cpu"), resolve([in_training.checkpoint]))
    assert after.status == in_training.status == "failed"
    same = (
        "checkpoint",
        "step",
        "tokens_seen",
        "probe",
        "version",
        "fingerprint",
        "error",
        "metrics",
        "schema",
    )
    assert [getattr(after, f) for f in same] == [getattr(in_training, f) for f in same]
    assert read_records(tmp_path / "after.jsonl") == [after]


def test_a_cadence_picks_its_checkpoints_in_training_and_in_catch_up(tmp_path, small_data):
    every = {"name": "level0", "trial": True, "per_language": 2}
    thin = {"name": "level0", "trial": True, "per_language": 1, "cadence": {"every": 2}}
    logger = JsonlLogger(tmp_path / "metrics.jsonl")
    trainer, _ = _fit(tmp_path, small_data, [every, thin], max_steps=6, every_n_steps=1, logger=logger)
    rows = read_records(tmp_path / "probes.jsonl")
    assert all(r.status == "ok" for r in rows)
    fired = [(r.step, r.fingerprint) for r in rows]
    plain, sparse = (get_probe("level0", trial=True, per_language=n).fingerprint(small_data) for n in (2, 1))
    # planned checkpoints 1..6: every 2nd from the first (1, 3, 5) and always the last (6)
    assert [s for s, p in fired if p == plain] == [1, 2, 3, 4, 5, 6]
    assert [s for s, p in fired if p == sparse] == [1, 3, 5, 6]
    # one cost row per checkpoint: both entries' seconds summed under the probe's name
    cost = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "perf/probe_seconds/level0" in r]
    assert [r["step"] for r in cost] == [1, 2, 3, 4, 5, 6]
    for r in cost:
        want = sum(x.seconds for x in rows if x.step == r["step"])
        assert r["perf/probe_seconds/level0"] == pytest.approx(want, abs=1e-3)
        assert r["tokens_seen"] == r["step"] * 4 * 32
    # a restart catches up only what the cadence asks for
    (tmp_path / "probes.jsonl").unlink()
    callback = next(c for c in trainer.callbacks if isinstance(c, ProbeCallback))
    missing = {target.step_hint: indices for target, indices in callback.missing(tmp_path / "checkpoints")}
    assert missing == {1: [0, 1], 2: [0], 3: [0, 1], 4: [0], 5: [0, 1], 6: [0, 1]}
