"""The contract every registered probe keeps, on the tiny model and the small prepared data:
built from a spec; prepare -> compute -> aggregate; two shards equal one process;
per-sample records on request; every key declared in the schema and under its probe;
a version and a fingerprint that ignores where records go."""

import json

import numpy as np
import pytest

from bytecanary import display
from bytecanary.probes import PROBES, build_probes
from bytecanary.probes.registry import NO_CONTEXT

# small settings per probe, to keep the battery fast; a new probe runs with its defaults
SMALL = {
    "level0": {"trial": True, "per_language": 2, "batch_size": 4},
    "level1": {"trial": True, "per_language": 2, "batch_size": 4},
    "mcqa": {
        "trial": True,
        "embedded_per_language": 3,
        "nonsense_per_language": 3,
        "languages": ["en", "zh"],
        "generative_per_task": 2,
        "max_new_tokens": 6,
        "batch_size": 3,
    },
    "ppl": {"bytes": 2000, "seq_len": 64, "batch_size": 4},
}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_contract(name, wide_model, byte_fallback_tokenizer, small_data, tmp_path):
    tok, records = byte_fallback_tokenizer, tmp_path / "records.jsonl"
    spec = {"name": name, **SMALL.get(name, {})}
    (probe,) = build_probes([{**spec, "records": str(records)}])
    assert probe.name == name and isinstance(probe.version, int)
    assert probe.fingerprint(small_data) == build_probes([spec])[0].fingerprint(small_data)

    prepared = probe.prepare(tok, small_data)
    single = probe.aggregate(prepared, [probe.compute(wide_model, tok, prepared)], NO_CONTEXT)
    rows = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["probe"] == name for r in rows)

    shards = [probe.compute(wide_model, tok, prepared, rank=r, world=2) for r in range(2)]
    np.testing.assert_equal(probe.aggregate(prepared, shards, NO_CONTEXT), single)  # nan == nan

    assert single, "at least one metric"
    assert all(k.startswith(f"probe/{name}/") for k in single)
    undeclared = sorted(k for k in single if display.metric(k) is None)
    assert not undeclared, f"declare these in a display's metrics: {undeclared[:5]}"
