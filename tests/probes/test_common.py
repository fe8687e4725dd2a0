"""What every probe shares: sharding, merging, lookups, eval-set files, specs -> probes,
and the fingerprint that says which setup produced a record."""

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bytecanary.errors import BytecanaryError
from bytecanary.probes import PROBES, build_probes, get_probe, validate_specs
from bytecanary.probes.dist import merge_shards, shard_indices
from bytecanary.probes.evalsets import eval_set_files
from bytecanary.probes.level0 import Level0Probe
from bytecanary.probes.models import context_size, pad_id
from bytecanary.probes.registry import Probe


def test_batches_are_dealt_whole_to_ranks():
    assert shard_indices(10, 3, 0, 2).tolist() == [0, 1, 2, 6, 7, 8]
    assert shard_indices(10, 3, 1, 2).tolist() == [3, 4, 5, 9]
    assert shard_indices(2, 3, 1, 2).tolist() == []


def test_merged_shards_are_back_in_sample_order():
    rank0 = {
        "index": np.array([0, 1, 4]),
        "x": np.array([10.0, 11.0, 14.0]),
        "t": np.array([["a"], ["b"], ["e"]]),
    }
    rank1 = {"index": np.array([2, 3]), "x": np.array([12.0, 13.0]), "t": np.array([["c"], ["d"]])}
    merged = merge_shards([rank0, rank1])
    assert merged["index"].tolist() == [0, 1, 2, 3, 4] and merged["x"].tolist() == [10, 11, 12, 13, 14]
    assert merged["t"][:, 0].tolist() == list("abcde")


def test_context_size_and_pad_id(random_model, byte_fallback_tokenizer):
    assert context_size(random_model) == 64
    assert context_size(SimpleNamespace(config=SimpleNamespace(max_position_embeddings=128))) == 128
    assert context_size(SimpleNamespace(config=SimpleNamespace())) == 0  # unknown: no limit
    assert pad_id(byte_fallback_tokenizer) == byte_fallback_tokenizer.pad_token_id
    assert pad_id(SimpleNamespace(pad_token_id=None, eos_token_id=7)) == 7
    assert pad_id(SimpleNamespace(pad_token_id=None, eos_token_id=None)) == 0


def test_eval_set_files_given_found_or_one_clear_error(eval_dir, tmp_path):
    given = str(next((eval_dir / "evalsets").glob("level0_*.json")))
    assert eval_set_files([given], eval_dir, "level0_*.json") == [Path(given)]  # given: as is
    with pytest.raises(BytecanaryError, match=r"eval_sets: a\.json: no such file"):
        eval_set_files(["a.json"], eval_dir, "level0_*.json")
    found = eval_set_files(None, eval_dir, "level0_*.json")
    assert [f.name for f in found] == ["level0_ja.json", "level0_zh.json"]
    with pytest.raises(BytecanaryError, match=r"no eval sets \(level0_\*.json\); run `bytecanary prepare`"):
        eval_set_files(None, tmp_path, "level0_*.json")


SOURCE = "configs/x.yaml"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"name": "level0", "per_langauge": 8},
            "configs/x.yaml: probes: level0: per_langauge: unknown key (did you mean 'per_language'?)",
        ),
        (
            {"name": "level0", "per_language": "many"},
            "configs/x.yaml: probes: level0: per_language: expected int, got 'many'",
        ),
        (
            {"name": "mcqa", "languages": "en"},
            "configs/x.yaml: probes: mcqa: languages: expected list or null, got 'en'",
        ),
        (
            {"name": "levl0"},
            "configs/x.yaml: probes: unknown probe 'levl0' (did you mean 'level0'?); known: ",
        ),
        ({"per_language": 3}, "configs/x.yaml: probes: expected a {name: ..., <parameters>} mapping"),
    ],
)
def test_a_bad_spec_is_one_line_naming_file_probe_and_parameter(spec, message):
    for check in (validate_specs, build_probes):
        with pytest.raises(BytecanaryError) as err:
            check([spec], source=SOURCE)
        assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_constructor_checks_name_the_probe_too():
    with pytest.raises(BytecanaryError, match=r"^probes: mcqa: unknown protocols \['dashd'\]"):
        get_probe("mcqa", protocols=["dashd"])
    with pytest.raises(BytecanaryError, match=r"^probes: level0: bogus: unknown key$"):
        get_probe("level0", bogus=1)


def test_specs_come_back_with_every_default_and_build_the_same_probe():
    (spec,) = validate_specs([{"name": "level0", "per_language": 3}])
    assert spec["name"] == "level0" and spec["per_language"] == 3 and spec["batch_size"] == 256
    probe = build_probes([spec])[0]
    assert isinstance(probe, Level0Probe) and probe.params == get_probe("level0", per_language=3).params
    kept = Level0Probe(per_language=2)
    assert build_probes([kept])[0] is kept and kept.params["per_language"] == 2
    assert {"level0", "level1", "mcqa"} <= set(PROBES)


def test_a_probe_without_parameters_has_a_fingerprint_too():
    class Bare(Probe):
        name = "bare"

    assert Bare().params == {} and len(Bare().fingerprint(None)) == 12


def test_fingerprint_follows_parameters_and_eval_files_not_the_records_path(eval_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(eval_dir, data)
    base = get_probe("level0", per_language=3).fingerprint(data)
    assert get_probe("level0", per_language=3, records=str(tmp_path / "r.jsonl")).fingerprint(data) == base
    assert get_probe("level0", per_language=4).fingerprint(data) != base
    assert get_probe("level0", per_language=3).fingerprint(eval_dir) == base  # contents, not paths
    (data / "evalsets" / "level0_zh.json").write_text((data / "evalsets" / "level0_ja.json").read_text())
    assert get_probe("level0", per_language=3).fingerprint(data) != base
    assert get_probe("level1").fingerprint(data) == get_probe("level1").fingerprint(eval_dir)


def test_mcqa_fingerprint_reads_the_prepared_word_completion_items(tmp_path):
    probe = get_probe("mcqa", embedded_per_language=4, languages=["en"])
    empty = probe.fingerprint(tmp_path)  # no prepared items yet: parameters only
    (tmp_path / "evalsets").mkdir()
    items = tmp_path / "evalsets" / "mcqa_wordcomp_en.jsonl"
    items.write_text('{"q": 1}\n')
    first = probe.fingerprint(tmp_path)
    items.write_text('{"q": 2}\n')
    assert len({empty, first, probe.fingerprint(tmp_path)}) == 3
    none = get_probe("mcqa", embedded_per_language=0, languages=["en"])
    assert none.eval_files(tmp_path) == []
