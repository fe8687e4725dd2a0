"""A small data config, prepared once per session (seconds, not minutes)."""

from pathlib import Path

import pytest
import yaml

SMALL = {
    "name": "small",
    "seed": 3,
    "mixture": {"en": 0.1, "ja": 0.3, "ko": 0.3, "zh": 0.3},
    "val_fraction": 0.05,
    "sources": [
        {"language": "en", "synthetic": {"megabytes": 0.15}},
        {"language": "ja", "synthetic": {"megabytes": 0.4}},
        {"language": "ko", "synthetic": {"megabytes": 0.4}},
        {"language": "zh", "synthetic": {"megabytes": 0.4}},
    ],
    "tokenizer": {"vocab_size": 1200, "character_coverage": 0.995},
    "eval": {"max_per_tier": 40, "snapshot_tokens": [50000], "level1_per_language": 16},
}


def write_config(path: Path, **overrides) -> Path:
    cfg = {**SMALL, **overrides}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def small_data(tmp_path_factory) -> Path:
    from bytecanary.data.prepare import prepare

    root = tmp_path_factory.mktemp("small")
    return prepare(write_config(root / "small.yaml"), root / "data")
