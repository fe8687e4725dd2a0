"""Every YAML in configs/ validates; bad configs fail with the file and field named, once;
``bytecanary prepare`` reads the same config, with its fields as flags."""

import dataclasses
import json
from pathlib import Path

import pytest

from bytecanary import cli
from bytecanary.config import ConfigError, load_config
from bytecanary.data.config import DataConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "data").glob("*.yaml")), ids=lambda p: p.name)
def test_every_data_config_validates(path):
    cfg = load_config(DataConfig, path)
    assert cfg.name == path.stem
    assert sum(cfg.mixture.values()) == pytest.approx(1.0)


def test_default_is_real_text_and_synthetic_stays():
    default = load_config(DataConfig, ROOT / "configs" / "data" / "default.yaml")
    assert default.mixture == {"en": 0.1, "ja": 0.3, "ko": 0.3, "zh": 0.3}
    packages = [s.debian.packages for s in default.sources if s.debian is not None]
    assert packages == [[f"libreoffice-help-{x}"] for x in ("en-us", "ja", "ko", "zh-cn")]
    synthetic = load_config(DataConfig, ROOT / "configs" / "data" / "synthetic.yaml")
    assert synthetic.mixture == default.mixture and all(s.synthetic is not None for s in synthetic.sources)


def test_paper_config_is_the_paper_setup():
    cfg = load_config(DataConfig, ROOT / "configs" / "data" / "paper.yaml")
    assert cfg.mixture == {"en": 0.1, "ja": 0.3, "ko": 0.3, "zh": 0.3}
    assert cfg.tokenizer.kind == "byte_fallback" and cfg.tokenizer.vocab_size == 8192
    assert all(s.dataset is not None and s.dataset.streaming for s in cfg.sources)


BASE = """
name: x
mixture: {en: 0.5, ja: 0.5}
sources:
  - {language: en, synthetic: {megabytes: 1}}
  - {language: ja, synthetic: {megabytes: 1}}
"""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("megabytes: 1}}\n  - {language: ja", "megabytes: big}}\n  - {language: ja"),
            r"sources\[0\]\.synthetic\.megabytes: expected float, got 'big'",
        ),
        (
            ("name: x", "name: x\ntokenizr: {}"),
            r"tokenizr: unknown key \(did you mean 'tokenizer'\?\)",
        ),
        (("ja: 0.5}", "ja: 0.4}"), r"mixture: weights sum to 0.9, not 1"),
        (
            ("megabytes: 1}}\n", "megabytes: 1}, debian: {packages: [p], paths: ['*']}}\n"),
            r"sources\[0\]: give exactly one of 'synthetic', 'dataset', 'debian' or 'files'",
        ),
        (
            ("ja, synthetic: {megabytes: 1}}", "ja, debian: {packages: [], paths: [x]}}"),
            r"sources\[1\]\.debian\.packages: must name at least one entry$",
        ),
        (("language: ja", "language: jp"), r"sources\[1\]\.language: unknown language 'jp'"),
        (("name: x\n", ""), r"name: missing required key"),
        (
            ("name: x", "name: x\ntokenizer: {kind: sentencepiece}"),
            r"tokenizer\.kind: expected one of .byte_fallback., .gpt2., .bytes., got .sentencepiece.",
        ),
        (("name: x", "name: [x"), r"invalid YAML"),
        (
            ("name: x", "name: x\ntokenizer: {character_coverage: 2}"),
            r": tokenizer\.character_coverage: must be in \(0, 1\], got 2\.0$",
        ),
        (
            ("megabytes: 1}}\n", "megabytes: 0}}\n"),
            r": sources\[0\]\.synthetic\.megabytes: must be positive, got 0\.0$",
        ),
        (
            ("name: x", "name: x\neval: {wordcomp_per_language: 0}"),
            r"eval\.wordcomp_per_language: must be at least 1, got 0$",
        ),
    ],
)
def test_bad_configs_name_file_and_field(tmp_path, edit, message):
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace(*edit))
    with pytest.raises(ConfigError, match=message) as info:
        load_config(DataConfig, path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_non_utf8_config(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(BASE.encode() + b"# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(DataConfig, path)


def test_quoted_scalars_stay_as_written_and_errors_name_the_item(tmp_path):
    """A quoted ``"2023"`` or ``"null"`` is a string (what the corpus stage hashes and hands to
    ``load_dataset``), and an item of a list or mapping is named down to its index or key."""
    path = tmp_path / "ds.yaml"
    source = (
        "{language: en, dataset: {path: json, name: 'null', builder_kwargs: {data_dir: '2023', x: 'on'}}}"
    )
    path.write_text(BASE.replace("{language: en, synthetic: {megabytes: 1}}", source))
    (dataset,) = [s.dataset for s in load_config(DataConfig, path).sources if s.dataset is not None]
    assert dataset.builder_kwargs == {"data_dir": "2023", "x": "on"} and dataset.name == "null"
    for edit, message in [
        (
            ("name: x", "name: x\neval: {snapshot_tokens: [1, many]}"),
            "eval.snapshot_tokens[1]: expected int, got 'many'",
        ),
        (("en: 0.5,", "en: half,"), "mixture.en: expected float, got 'half'"),
        (
            ("megabytes: 1}}\n  - {language: ja", "megabytes: '1'}}\n  - {language: ja"),
            "expected float, got '1'",
        ),
    ]:
        path.write_text(BASE.replace(*edit))
        with pytest.raises(ConfigError) as info:
            load_config(DataConfig, path)
        assert str(info.value).endswith(message), str(info.value)


def _strict(value):
    """A value with every type spelt out, so 12 and 12.0 (which hash apart) differ."""
    if dataclasses.is_dataclass(value):
        return type(value).__name__, _strict(vars(value))
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value).__name__, [_strict(v) for v in value]
    return type(value).__name__, value


def _prepared(argv: list[str]) -> DataConfig:
    """The DataConfig ``bytecanary prepare ARGV`` hands to the data stage."""
    command, kwargs = cli._parse(["prepare", *argv])
    assert command is cli.prepare
    return kwargs["data"]


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "data").glob("*.yaml")), ids=lambda p: p.name)
def test_prepare_reads_each_data_config_as_load_config_does(path):
    """Same values of the same types: what each stage hashes is unchanged, so no data folder
    prepared before is rebuilt."""
    cfg = _prepared(["--config", str(path)])
    assert _strict(cfg) == _strict(load_config(DataConfig, path))
    stages = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
    assert stages == json.dumps(dataclasses.asdict(load_config(DataConfig, path)), sort_keys=True)


def test_prepare_flags_override_the_file_and_keep_its_scalars(tmp_path):
    path = tmp_path / "ds.yaml"
    source = "{language: en, dataset: {path: json, name: 'null', builder_kwargs: {data_dir: '2023'}}}"
    path.write_text(BASE.replace("{language: en, synthetic: {megabytes: 1}}", source))
    cfg = _prepared(["--config", str(path), "--tokenizer.vocab_size=2048", "--eval.snapshot_tokens=[5, 7]"])
    dataset = cfg.sources[0].dataset
    assert (dataset.name, dataset.builder_kwargs) == ("null", {"data_dir": "2023"})
    assert (cfg.tokenizer.vocab_size, cfg.eval.snapshot_tokens, cfg.name) == (2048, [5, 7], "x")
    assert _prepared(["--config", str(path)]).tokenizer.vocab_size == 8192
    with pytest.raises(ConfigError, match=rf"^{path}: mixture: weights sum to 0.5, not 1$"):
        _prepared(["--config", str(path), "--mixture={en: 0.25, ja: 0.25}"])
