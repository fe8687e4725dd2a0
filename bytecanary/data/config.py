"""The data config (``configs/data/*.yaml``): every field documented, validated on load."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from bytecanary.data.languages import LANGUAGES
from bytecanary.io import one_folder


@dataclass
class SyntheticSource:
    """Seeded text sampled from ``wordfreq``'s ranked word lists by real word frequency."""

    megabytes: float = 5.0
    """UTF-8 megabytes of text to generate for this language."""
    vocabulary: int = 100_000
    """How many of the language's most frequent words to sample from (a longer list,
    a longer tail of rare characters)."""

    def __post_init__(self) -> None:
        for name in ("megabytes", "vocabulary"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)}")


@dataclass
class DatasetSource:
    """Any ``datasets`` source: a hub dataset, or local files through a builder."""

    path: str
    """Hub name (``HuggingFaceFW/fineweb``) or builder (``json``, ``parquet``, ``text``)."""
    name: str | None = None
    """Hub config name (e.g. a language subset)."""
    split: str = "train"
    data_files: list[str] | None = None
    """Local files for the ``json``/``parquet``/``text`` builders."""
    text_column: str = "text"
    streaming: bool = False
    revision: str | None = None
    max_documents: int | None = None
    max_megabytes: float | None = None
    builder_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``datasets.load_dataset`` (e.g. ``sample_by: paragraph``)."""


@dataclass
class DebianSource:
    """HTML pages inside Debian packages, e.g. LibreOffice's help (MPL-2.0, professionally
    translated, the same pages in every language): fetched with ``apt-get download`` and
    unpacked with ``dpkg-deb -x`` into a cache, nothing installed. One page is one document."""

    packages: list[str]
    """Package names (``libreoffice-help-ja``)."""
    paths: list[str]
    """Globs of the pages inside the unpacked packages
    (``usr/share/libreoffice/help/ja/text/**/*.html``). A page's key is its path below the
    glob's fixed folders (``swriter/guide/auto_off.html``), the same for every translation,
    and the key alone decides the page's split."""
    min_script_share: float = 0.5
    """Keep a line only when at least this share of its letters is in the language's script
    (drops untranslated English in the CJK pages)."""
    cache_dir: str | None = None
    """Where unpacked packages are kept (None: ``$XDG_CACHE_HOME/bytecanary/debian``, by
    default ``~/.cache/bytecanary/debian``)."""

    def __post_init__(self) -> None:
        for name in ("packages", "paths"):
            if not getattr(self, name):
                raise ValueError(f"{name}: must name at least one entry")
        if not 0 <= self.min_script_share <= 1:
            raise ValueError(f"min_script_share: must be in [0, 1], got {self.min_script_share}")


FILE_SUFFIXES = (".parquet", ".jsonl", ".json", ".jsonl.gz", ".json.gz")


@dataclass
class FilesSource:
    """A local folder of JSONL or Parquet files, such as a downloaded FineWeb: each file is
    one task of the corpus stage, so workers (or SLURM array tasks) read their own files."""

    path: str
    """The folder."""
    pattern: str = "**/*.parquet"
    """Glob of the files below ``path`` (``.parquet``, ``.jsonl``, ``.json``, ``.jsonl.gz``)."""
    text_column: str = "text"

    def __post_init__(self) -> None:
        if not any(self.pattern.endswith(s) for s in FILE_SUFFIXES):
            raise ValueError(f"pattern: must end in one of {', '.join(FILE_SUFFIXES)}")


@dataclass
class SourceConfig:
    """Where one language's text comes from: exactly one of ``synthetic``, ``dataset``,
    ``debian`` or ``files``."""

    language: str
    synthetic: SyntheticSource | None = None
    dataset: DatasetSource | None = None
    debian: DebianSource | None = None
    files: FilesSource | None = None

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            known = ", ".join(LANGUAGES)
            raise ValueError(f"language: unknown language {self.language!r} (known: {known})")
        if sum(s is not None for s in (self.synthetic, self.dataset, self.debian, self.files)) != 1:
            raise ValueError("give exactly one of 'synthetic', 'dataset', 'debian' or 'files'")


@dataclass
class TokenizerConfig:
    """The tokenizer trained on the training split (HF ``tokenizers``)."""

    kind: Literal["byte_fallback", "gpt2", "bytes"] = "byte_fallback"
    """``byte_fallback``: BPE + 256 <0xNN> tokens, Metaspace whitespace (the paper's);
    ``gpt2``: GPT-2 byte-level BPE; ``bytes``: 256 byte tokens and nothing else."""
    vocab_size: int = 8192
    character_coverage: float = 0.9995
    """Share of character occurrences the kept alphabet must cover (SentencePiece's
    knob); rarer characters are spelled with byte-fallback tokens."""
    train_megabytes: float | None = 12.0
    """Train on at most this much of the training split (None: all of it)."""
    max_token_length: int = 16

    def __post_init__(self) -> None:
        if not 0 < self.character_coverage <= 1:
            raise ValueError(f"character_coverage: must be in (0, 1], got {self.character_coverage}")
        if self.kind != "bytes" and self.vocab_size < 300:
            raise ValueError(
                f"vocab_size: must be at least 300 (256 byte tokens + merges), got {self.vocab_size}"
            )


@dataclass
class EvalSetConfig:
    """Character snapshot, the Level 0 / Level 1 eval sets and the embedded MCQA pool."""

    tier_mass: tuple[float, float] = (0.5, 0.9)
    """Seen characters sorted by count: ``common`` make the first 50% of occurrences,
    ``uncommon`` up to 90%, ``rare`` the last 10%."""
    max_per_tier: int = 500
    snapshot_tokens: list[int] = field(default_factory=list)
    """Extra snapshots at these training-token budgets (the full split is always saved)."""
    tier_budget: int | None = None
    """Which snapshot defines the tiers: a budget from ``snapshot_tokens``, or None for all."""
    level1_per_language: int = 256
    min_context_chars: int = 4
    """Level 1 sentences need at least this many characters before the target."""
    wordcomp_per_language: int = 256
    """Embedded word-completion MCQA items per language: the pool a probe takes its first
    items from, so at least the largest ``embedded_per_language`` a probe will ask for."""
    heldout_megabytes: float = 8.0
    """Held-out text per language the Level 1 and word-completion sets are drawn from (the
    first documents of the split), so their cost does not grow with the corpus."""

    def __post_init__(self) -> None:
        lo, hi = self.tier_mass
        if not 0 < lo < hi < 1:
            raise ValueError(
                f"tier_mass: must be two shares with 0 < first < second < 1, got {self.tier_mass}"
            )
        if self.tier_budget is not None and self.tier_budget not in self.snapshot_tokens:
            raise ValueError(f"tier_budget: must be one of snapshot_tokens, got {self.tier_budget}")
        if self.heldout_megabytes <= 0:
            raise ValueError(f"heldout_megabytes: must be positive, got {self.heldout_megabytes}")
        for name in ("max_per_tier", "level1_per_language", "wordcomp_per_language"):
            if getattr(self, name) < 1:  # 0 would write empty eval sets
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")


@dataclass
class DataConfig:
    """Everything ``bytecanary prepare`` needs; each stage hashes the part it reads."""

    name: str
    """The data folder's name: ``prepare`` writes ``data/<name>`` unless given ``--out``."""
    mixture: dict[str, float]
    """Share of training tokens per language (the paper: en 0.1, ja/ko/zh 0.3)."""
    sources: list[SourceConfig]
    seed: int = 0
    val_fraction: float = 0.02
    """Share of documents held out for validation and Level 1; never trained on. Documents
    with a key (``debian`` pages) are held out by a hash of the seed and the key, so a page
    and its translations always share a split."""
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    eval: EvalSetConfig = field(default_factory=EvalSetConfig)
    encode_batch: int = 512
    """Documents per ``encode_batch`` call when writing shards."""
    chunk_megabytes: float = 256.0
    """Text per corpus chunk, the unit of parallel work and of resume in the shard stage
    (a chunk's shard is about half its size in tokens)."""

    def __post_init__(self) -> None:
        if not one_folder(self.name):
            raise ValueError(f"name: must name one folder under data/, got {self.name!r}")
        unknown = [lang for lang in self.mixture if lang not in LANGUAGES]
        if unknown:
            raise ValueError(f"mixture: unknown language {unknown[0]!r}")
        if any(w <= 0 for w in self.mixture.values()):
            raise ValueError("mixture: every weight must be positive")
        if not math.isclose(sum(self.mixture.values()), 1.0, abs_tol=1e-6):
            raise ValueError(f"mixture: weights sum to {sum(self.mixture.values()):g}, not 1")
        covered = {s.language for s in self.sources}
        if set(self.mixture) - covered:
            raise ValueError(f"sources: no source for {sorted(set(self.mixture) - covered)}")
        if covered - set(self.mixture):
            raise ValueError(f"mixture: no weight for {sorted(covered - set(self.mixture))}")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction: must be in (0, 1), got {self.val_fraction}")
        if self.chunk_megabytes <= 0:
            raise ValueError(f"chunk_megabytes: must be positive, got {self.chunk_megabytes}")
