"""Bad input is refused with one line before any work: a cut-off or altered shard, a
misconfigured probe, an out-of-range flag, an eval-set size of 0, an eval-set or MCQA task
file holding a bad value (checked before any model loads), a weights file of the wrong shape."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from bytecanary.cli import main
from bytecanary.probes import targets

from ..conftest import write_config
from .conftest import micro_config, one_error


def _first_shard(data, lang: str, split: str):
    index = json.loads((data / "shards" / "index.json").read_text())
    return data / "shards" / index["languages"][lang][split]["files"][0]["path"]


@pytest.fixture
def broken_data(small_data, tmp_path):
    """A copy of the prepared data whose ja training shard lost its second half."""
    data = shutil.copytree(small_data, tmp_path / "data")
    shard = _first_shard(data, "ja", "train")
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    return data


def test_a_truncated_shard_stops_training_and_verify(broken_data, tmp_path, capsys):
    shard = _first_shard(broken_data, "ja", "train")
    config = micro_config(tmp_path / "micro.yaml", broken_data, tmp_path / "runs")
    assert main(["train", "--config", str(config), "--run.name", "t"]) == 2
    one_error(capsys.readouterr().err, str(shard), "index.json says")
    assert not (tmp_path / "runs" / "t").exists()
    prepare = ["prepare", "--config", str(write_config(tmp_path / "small.yaml")), "--out", str(broken_data)]
    assert main([*prepare, "--verify=true"]) == 2
    one_error(capsys.readouterr().err, str(shard), "index.json says")


def test_verify_finds_a_shard_altered_in_place(small_data, tmp_path, capsys):
    data = shutil.copytree(small_data, tmp_path / "data")
    shard = _first_shard(data, "ko", "val")
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 0xFF
    shard.write_bytes(bytes(raw))
    prepare = ["prepare", "--config", str(write_config(tmp_path / "small.yaml")), "--out", str(data)]
    assert main([*prepare, "--verify=true"]) == 2
    one_error(capsys.readouterr().err, str(shard), "differ from index.json's hash")
    shard.write_bytes(bytes(raw[:100]) + bytes([raw[100] ^ 0xFF]) + bytes(raw[101:]))
    capsys.readouterr()
    assert main([*prepare, "--verify=true"]) == 0
    assert "[shards] verified 8 shard files" in capsys.readouterr().out


MISSING_TASK = {"name": "t", "schema": "mmlu", "path": "json", "language": "en", "data_files": ["gone.jsonl"]}
MISCONFIGURED = {
    "level0": ({"name": "level0", "eval_sets": ["gone.json"]}, "eval_sets: gone.json: no such file"),
    "mcqa": (
        {"name": "mcqa", "embedded_per_language": 0, "nonsense_per_language": 0, "tasks": [MISSING_TASK]},
        "task 't' (json): cannot load",
    ),
}


@pytest.mark.parametrize("name", sorted(MISCONFIGURED))
def test_a_misconfigured_probe_is_one_line_before_anything_trains(small_data, tmp_path, capsys, name):
    probe, problem = MISCONFIGURED[name]
    good = {"name": "level0", "per_language": 2}
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", [good, probe])
    assert main(["train", "--config", str(config), "--run.name", "p"]) == 2
    one_error(capsys.readouterr().err, f"{config}: probes: {name}: ", problem)
    assert not (tmp_path / "runs" / "p").exists()


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--model.optim.lr=-1", "model.optim.lr: must be > 0, got -1.0"),
        ("--data.batch_size=0", "data.batch_size: must be >= 1, got 0"),
        ("--model.arch.n_head=3", "model.arch.n_embd: must be divisible by n_head (3), got 64"),
        ("--run.keep_state_every=0", "run.keep_state_every: must be a positive number of steps, got 0"),
    ],
)
def test_an_out_of_range_flag_is_one_line_naming_it_before_the_run_folder(
    small_data, tmp_path, capsys, flag, message
):
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    assert main(["train", "--config", str(config), "--run.name", "f", flag]) == 2
    assert one_error(capsys.readouterr().err) == f"error: {message}"
    assert not (tmp_path / "runs" / "f").exists()


def test_an_eval_set_size_of_zero_is_refused(tmp_path, capsys):
    eval_cfg = {**yaml.safe_load(write_config(tmp_path / "ok.yaml").read_text())["eval"], "max_per_tier": 0}
    config = write_config(tmp_path / "small.yaml", eval=eval_cfg)
    assert main(["prepare", "--config", str(config), "--out", str(tmp_path / "data")]) == 2
    one_error(capsys.readouterr().err, str(config), "eval.max_per_tier: must be at least 1, got 0")
    assert not (tmp_path / "data").exists()


# --- eval-set and task files: every value checked before a model loads (issue classes 6, 8, 10) ---

GOOD_ROW = {"question": "2+2?", "choices": ["3", "4"], "answer": 1}


def _jsonl(*rows: dict) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _level0(*chars: str) -> bytes:
    """A Level 0 set; ``json.dumps`` writes a lone surrogate as its ``\\ud800`` escape."""
    return json.dumps({"char_frequencies": [{"char": c, "count": 0, "tier": "rare"} for c in chars]}).encode()


# probe, file name, its bytes, what the one line says after the file's path
BAD_EVAL_SETS = {
    "level0 lone surrogate": (
        "level0",
        "level0_ja.json",
        _level0("語", "\ud800"),
        ": char_frequencies[1]: 'char' holds a lone surrogate (U+D800), which no UTF-8 bytes encode",
    ),
    "level0 not UTF-8": ("level0", "level0_ja.json", b'{"char_frequencies": ["\xe8\xaa"]}', ": not UTF-8"),
    "level0 empty": ("level0", "level0_ja.json", b"\n", ": empty file (no JSON)"),
    "level0 a char twice in a tier": (
        "level0",
        "level0_ja.json",
        _level0("語", "鬱", "語"),
        ": char_frequencies[2]: 'char' '語' (U+8A9E, tier 'rare') repeats char_frequencies[0]",
    ),
    "level1 lone surrogate": (
        "level1",
        "level1.json",
        json.dumps([{"language": "ja", "term": "\udc00", "sentence_prompt": "今日は\udc00"}]).encode(),
        ": [0]: 'term' holds a lone surrogate (U+DC00), which no UTF-8 bytes encode",
    ),
    "level1 empty list": ("level1", "level1.json", b"[]", ": no samples (an empty list)"),
}


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: bad inputs must be refused before any model loads."""

    def load(self, target):
        pytest.fail(f"a model loaded ({target.path}) before the inputs were checked")

    monkeypatch.setattr(targets.Loader, "load", load)


def _step8(trained) -> str:
    return str(trained / "checkpoints" / "step0000008.safetensors")


def test_the_no_model_guard_stands_on_the_loading_path(trained, tmp_path, no_model):
    """Control: good inputs do reach the loader the guard replaces."""
    args = ["probe", _step8(trained), "--probes", "[level0]", "--trial=true", "--wandb=false"]
    with pytest.raises(pytest.fail.Exception, match="a model loaded"):
        main([*args, "--out", str(tmp_path / "p.jsonl")])


@pytest.mark.parametrize("case", sorted(BAD_EVAL_SETS))
def test_a_bad_eval_set_is_one_line_before_a_model_loads(trained, tmp_path, capsys, no_model, case):
    probe, name, content, problem = BAD_EVAL_SETS[case]
    bad = tmp_path / name
    bad.write_bytes(content)
    out = tmp_path / "p.jsonl"
    args = [
        "probe",
        _step8(trained),
        "--probes",
        f"[{probe}]",
        f"--eval_sets.{probe}",
        str(bad),
        "--wandb=false",
    ]
    assert main([*args, "--out", str(out)]) == 2
    line = one_error(capsys.readouterr().err, f"{bad}{problem}")
    assert line.startswith(f"error: probes: {probe}: {bad}: ")  # the probe's spec, then the file
    assert not out.exists()


def _mcqa_spec(config: str) -> dict:
    """The one probe spec of an ``_mcqa_config`` file."""
    return json.loads(Path(config).read_text())["probes"][0]


def _mcqa_config(path, *tasks: dict) -> str:
    spec = {"name": "mcqa", "embedded_per_language": 0, "nonsense_per_language": 0}
    path.write_text(json.dumps({"probes": [{**spec, "protocols": ["letter_merged"], "tasks": list(tasks)}]}))
    return str(path)


def _task(name: str, file, builder: str = "json") -> dict:
    return {"name": name, "schema": "mmlu", "path": builder, "language": "en", "split": "train",
            "data_files": [str(file)]}  # fmt: skip


# file name, its bytes, what the one line says after "<file>: task 't' (<builder>)"
BAD_TASK_FILES = {
    "not UTF-8 (jsonl)": (
        "t.jsonl",
        _jsonl(GOOD_ROW) + b'{"question": "caf\xe9?", "choices": ["a", "b"], "answer": 0}\n',
        ": not UTF-8 (invalid continuation byte at byte 74, line 2)",
    ),
    "not UTF-8 (csv)": (
        "t.csv",
        b"question,A,B,C,D,Answer\ncaf\xe9?,a,b,c,d,A\n",
        ": not UTF-8 (invalid continuation byte at byte 27, line 2)",
    ),
    "lone surrogate": (
        "t.jsonl",
        _jsonl(GOOD_ROW, {**GOOD_ROW, "choices": ["3", "\ud800"]}),
        " row 1: 'choices'[1] holds a lone surrogate (U+D800), which no UTF-8 bytes encode",
    ),
    "empty": ("t.jsonl", b"", ": no rows (an empty file)"),
    "an empty list": ("t.json", b"[]", ": no rows"),
    "a header only": ("t.csv", b"question,A,B,C,D,Answer\n", ": no rows (a header at most)"),
    "duplicate ids": (
        "t.jsonl",
        _jsonl(*({**GOOD_ROW, "id": i} for i in ("q1", "q2", "q1"))),
        ": rows 0 and 2 have the same item id 'q1' (column 'id')",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TASK_FILES))
def test_a_bad_mcqa_task_file_is_one_line_before_a_model_loads(trained, tmp_path, capsys, no_model, case):
    name, content, problem = BAD_TASK_FILES[case]
    bad = tmp_path / name
    bad.write_bytes(content)
    builder = "csv" if name.endswith(".csv") else "json"
    task = {**_task("t", bad, builder), "schema": "cmmlu"} if builder == "csv" else _task("t", bad)
    config = _mcqa_config(tmp_path / "probes.yaml", task)
    out = tmp_path / "p.jsonl"
    assert main(["probe", _step8(trained), "--config", config, "--wandb=false", "--out", str(out)]) == 2
    line = one_error(capsys.readouterr().err)
    assert line == f"error: {config}: probes: mcqa: {bad}: task 't' ({builder}){problem}"
    assert not out.exists()


def test_an_item_id_twice_across_files_names_both_files_and_rows(
    trained, small_data, tmp_path, capsys, no_model
):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(_jsonl(*({**GOOD_ROW, "id": i} for i in ("q1", "q2"))))
    second.write_bytes(_jsonl(*({**GOOD_ROW, "id": i} for i in ("q3", "q2"))))
    both = {**_task("t", first), "data_files": [str(first), str(second)]}
    config = _mcqa_config(tmp_path / "probes.yaml", both)
    out = tmp_path / "p.jsonl"
    assert main(["probe", _step8(trained), "--config", config, "--wandb=false", "--out", str(out)]) == 2
    line = one_error(capsys.readouterr().err)
    problem = f"task 't' (json): row 1 has the item id 'q2' of {first} row 1 (column 'id')"
    assert line == f"error: {config}: probes: mcqa: {second}: {problem}"
    # two sources of one name make one task: their row indices (the ids) meet
    first.write_bytes(_jsonl(GOOD_ROW))
    second.write_bytes(_jsonl(GOOD_ROW))
    config = _mcqa_config(tmp_path / "probes.yaml", _task("t", first), _task("t", second))
    assert main(["probe", _step8(trained), "--config", config, "--wandb=false", "--out", str(out)]) == 2
    assert (
        one_error(capsys.readouterr().err)
        == f"error: {config}: probes: mcqa: tasks 't' and 't' both make task 't', item id '0' twice"
    )
    assert not out.exists()
    # training refuses the same spec in the same words, before its run folder exists
    train_config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", [_mcqa_spec(config)])
    assert main(["train", "--config", str(train_config), "--run.name", "p"]) == 2
    assert (
        one_error(capsys.readouterr().err)
        == f"error: {train_config}: probes: mcqa: tasks 't' and 't' both make task 't', item id '0' twice"
    )
    assert not (tmp_path / "runs" / "p").exists()


def test_bad_probe_inputs_stop_training_before_the_run_folder(small_data, tmp_path, capsys):
    surrogate = tmp_path / "level0_ja.json"
    surrogate.write_bytes(_level0("\ud800"))
    twice = tmp_path / "t.jsonl"
    twice.write_bytes(_jsonl({**GOOD_ROW, "id": 7}, {**GOOD_ROW, "id": 7}))
    spec = {
        "name": "mcqa",
        "embedded_per_language": 0,
        "nonsense_per_language": 0,
        "tasks": [_task("t", twice)],
    }
    for probe, problem in [
        (
            {"name": "level0", "eval_sets": [str(surrogate)]},
            f"{surrogate}: char_frequencies[0]: 'char' holds",
        ),
        (spec, f"{twice}: task 't' (json): rows 0 and 1 have the same item id '7'"),
    ]:
        config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", [probe])
        assert main(["train", "--config", str(config), "--run.name", "p"]) == 2
        one_error(capsys.readouterr().err, f"{config}: probes: {probe['name']}: {problem}")
        assert not (tmp_path / "runs" / "p").exists()


def test_a_weights_file_of_the_wrong_shape_names_the_tensor_and_both_shapes(trained, tmp_path, capsys):
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(_step8(trained), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
    vocab, width = tensors["transformer.wte.weight"].shape
    tensors["transformer.wte.weight"] = torch.zeros(
        vocab, width // 2, dtype=tensors["transformer.wte.weight"].dtype
    )
    bad = tmp_path / "step0000008.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    expected = (
        f"error: {bad}: weights do not fit the GPT-2 config: transformer.wte.weight is "
        f"[{vocab}, {width // 2}] in the file, [{vocab}, {width}] in the config"
    )
    out = tmp_path / "p.jsonl"
    assert (
        main(["probe", str(bad), "--probes", "[level0]", "--trial=true", "--wandb=false", "--out", str(out)])
        == 2
    )
    assert one_error(capsys.readouterr().err) == expected
    assert main(["export", str(bad), str(tmp_path / "hf")]) == 2
    assert one_error(capsys.readouterr().err) == expected
    assert not out.exists() and not (tmp_path / "hf").exists()


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            {"name": "level0", "per_langauge": 2},
            "level0: per_langauge: unknown key (did you mean 'per_language'?)",
        ),
        ({"name": "levl0"}, "unknown probe 'levl0' (did you mean 'level0'?); known: "),
        (
            {"name": "level0", "per_language": "many"},
            "level0: per_language: expected int, got 'many'",
        ),
        ({"name": "mcqa", "protocols": ["clozee"]}, "mcqa: "),
    ],
    ids=["misspelt", "unknown probe", "mistyped", "bad value"],
)
def test_train_and_probe_refuse_a_bad_spec_in_the_same_words(
    trained, small_data, tmp_path, capsys, spec, problem
):
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", [spec])
    assert main(["train", "--config", str(config), "--run.name", "p"]) == 2
    from_train = one_error(capsys.readouterr().err)
    out = tmp_path / "p.jsonl"
    assert main(["probe", _step8(trained), "--config", str(config), "--wandb=false", "--out", str(out)]) == 2
    from_probe = one_error(capsys.readouterr().err)
    assert from_train == from_probe and from_train.startswith(f"error: {config}: probes: {problem}")
    assert not (tmp_path / "runs" / "p").exists() and not out.exists()
