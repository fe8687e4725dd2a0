"""Fabricated run directories whose answers are known: perplexity converges at 1e5 tokens,
Level 0 validity (greedy V_partial and strict, and expected validity p_valid) at 2e5 (or,
with ``validity="flat"``/``"rising"``, shows no change beyond noise / is still moving at the
end), each point off by seeded noise of the size the report assumes. With
``validity="flips"`` the run goes on to 4e6 tokens and, from 2e5 on, greedy validity flips
between two values from one checkpoint to the next in every language at once (as on the
tiny CPU run), while p_valid converges at 2e5 as usual. The MCQA numbers are seeded draws."""

import json
import math
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np

from bytecanary.data.evalsets import TIERS
from bytecanary.data.languages import LANGUAGES
from bytecanary.records import Record

TOKENS = [20_000 * k for k in range(1, 21)]  # 2e4 .. 4e5
FLIP_TOKENS = TOKENS + [round(400_000 * 10 ** (i / 20)) for i in range(1, 21)]  # .. 4e6
PPL_AT, VALIDITY_AT = 100_000, 200_000
FLIPS = {"partial": (0.6, 0.9), "strict": (0.45, 0.65)}  # greedy validity from VALIDITY_AT on
P_VALID_TOP = 0.8
TIER_GAP = 0.2  # common minus rare, in every metric
N = {"all": 4096, **dict.fromkeys(LANGUAGES, 1024)}  # Level 0 samples per language
TASKS = [f"{kind}_{lang}" for kind in ("wordcomp", "nonsenseqa") for lang in LANGUAGES]
FAMILIES = ("plain", "json", "structured", "structured_delim", "deliberate")
HEADLINE_KEY, P_VALID_KEY = "probe/level0/all/all/partial", "probe/level0/all/all/p_valid"
VALIDITY_KEYS = {
    f"probe/level0/{lang}/all/{m}" for lang in ("all", *LANGUAGES) for m in ("partial", "strict")
}
P_VALID_KEYS = {f"probe/level0/{lang}/all/p_valid" for lang in ("all", *LANGUAGES)}


def _normal(t: int, name: str) -> float:
    """A seeded standard normal draw per (tokens, curve): the same run every time."""
    return float(np.random.default_rng([t, zlib.crc32(name.encode())]).normal())


def ppl(t: int) -> float:
    """Falls as 1/t to 20 at ``PPL_AT``, then flat; 1% jitter between checkpoints."""
    clean = 20.0 if t >= PPL_AT else 20.0 + 3000.0 / (t / 20_000)
    return clean * math.exp(0.01 * _normal(t, "val/ppl"))


def clean_validity(t: int, top: float, shape: str) -> float:
    if shape == "flat":
        return top
    if shape == "rising":  # a tenth of the way up per decade of tokens, to the end
        return top - 0.3 + 0.1 * math.log10(t / TOKENS[0])
    return top if t >= VALIDITY_AT else top * t / (VALIDITY_AT + 20_000)


def validity(t: int, top: float, lang: str = "all", shape: str = "converges") -> float:
    """A validity point as a probe of ``N[lang]`` samples measures it (binomial noise)."""
    p = clean_validity(t, top, shape)
    return p + math.sqrt(p * (1 - p) / N[lang]) * _normal(t, f"{lang}/{top}")


def p_valid_se(t: int, lang: str, shape: str) -> float:
    """What the probe reports as p_valid's SE over its samples: half a binomial SE."""
    p = clean_validity(t, P_VALID_TOP, shape)
    return 0.5 * math.sqrt(p * (1 - p) / N[lang])


def greedy(t: int, top: float, lang: str, shape: str, metric: str) -> float:
    """A greedy validity point; with ``shape="flips"``, one of the two values of ``FLIPS``
    by the parity of the checkpoint from ``VALIDITY_AT`` on (the rise before as usual)."""
    if shape != "flips":
        return validity(t, top, lang, shape)
    if t < VALIDITY_AT:
        return validity(t, sum(FLIPS[metric]) / 2, lang)
    return FLIPS[metric][FLIP_TOKENS.index(t) % 2]


def level0(t: int, shape: str = "converges") -> dict[str, float]:
    m = {}
    expected = "converges" if shape == "flips" else shape  # p_valid is smooth and settles
    for lang in ("all", *LANGUAGES):
        m[f"probe/level0/{lang}/all/partial"] = greedy(t, 0.9, lang, shape, "partial")
        m[f"probe/level0/{lang}/all/strict"] = greedy(t, 0.6, lang, shape, "strict")
        m[f"probe/level0/{lang}/all/n"] = float(N[lang])
        se = p_valid_se(t, lang, expected)
        m[f"probe/level0/{lang}/all/p_valid"] = clean_validity(t, P_VALID_TOP, expected) + se * _normal(
            t, f"{lang}/p_valid"
        )
        m[f"probe/level0/{lang}/all/p_valid_se"] = se
        for i, tier in enumerate(TIERS):
            m[f"probe/level0/{lang}/{tier}/partial"] = validity(t, 0.95 - 0.1 * i) if lang != "all" else 0.0
        if lang != "en":  # en has no rare character, as on the embedded corpus
            m |= tier_gap(t, lang)
    return m


def tier_gap(t: int, lang: str) -> dict[str, float]:
    """Common minus rare as the probe records it: about ``TIER_GAP``, a CI of +-0.05."""
    out = {}
    for metric in ("partial", "strict", "p_valid"):
        value = TIER_GAP + 0.01 * _normal(t, f"{lang}/gap/{metric}")
        root = f"probe/level0/{lang}/all/tier_gap_{metric}"
        out |= {root: value, f"{root}_lo": value - 0.05, f"{root}_hi": value + 0.05}
    return out


def mcqa(t: int, rng: np.random.Generator) -> dict[str, float]:
    m = {}
    for task in TASKS:
        p = f"probe/mcqa/{task}"
        for protocol in ("letter_separate", "letter_merged", "cloze", "dashed"):
            m[f"{p}/{protocol}/acc"] = float(rng.choice([0.25, 0.5, 0.75]))  # ties on purpose
        for family in FAMILIES:
            parsable = float(rng.uniform())
            m[f"{p}/wrapper_{family}/parsable"] = parsable
            m[f"{p}/wrapper_{family}/acc"] = float(0.5 * parsable + rng.normal(scale=0.05))
        m |= {f"{p}/fsi": 0.1 + t / 4e6, f"{p}/psi": 0.2, f"{p}/n": 32}
    m["probe/mcqa/all/fsi"] = 0.5  # the probe's own average: not a task
    return m


def record(t: int, probe: str, metrics: dict, status: str = "ok") -> Record:
    return Record(
        checkpoint=f"/runs/x/checkpoints/step{t // 4096:07d}.ckpt",
        step=t // 4096,
        tokens_seen=t,
        probe=probe,
        version=1,
        fingerprint="p",
        status=status,
        error=None if status == "ok" else "RuntimeError: boom",
        seconds=1.0,
        threads=1,
        metrics=metrics,
    )


def write_jsonl(path: Path, rows: list[dict | Record]) -> None:
    lines = (r.to_json() if isinstance(r, Record) else json.dumps(r) for r in rows)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def make_run(root: Path, probes: bool = True, validity: str = "converges") -> Path:
    run = root / "run"
    run.mkdir()
    tokens = FLIP_TOKENS if validity == "flips" else TOKENS
    metrics = []
    for t in tokens:
        metrics.append({"step": t // 4096, "train/loss": 3.0, "tokens_seen": t})
        metrics.append({"step": t // 4096, "val/loss": math.log(ppl(t)), "val/ppl": ppl(t), "tokens_seen": t})
    write_jsonl(run / "metrics.jsonl", metrics)
    if probes:
        rng = np.random.default_rng(0)
        rows = [record(t, "level0", level0(t, validity)) for t in tokens]
        rows += [record(t, "mcqa", mcqa(t, rng)) for t in tokens]
        rows.append(record(tokens[-1], "level0", {"probe/level0/all/all/partial": 0.0}, status="failed"))
        write_jsonl(run / "probes.jsonl", rows)
    finished = {"step": tokens[-1] // 4096, "tokens_seen": tokens[-1]}  # as training marks its end
    (run / "finished.json").write_text(json.dumps(finished), encoding="utf-8")
    (run / "config.yaml").write_text(
        "data: {data_dir: data/default}\nrun: {name: run, wandb_project: bytecanary}\n"
        "probes:\n- {name: level0, trial: true}\n- {name: mcqa, trial: true}\n",
        encoding="utf-8",
    )
    return run


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def assert_one_sync_of_every_offline_run(printed: str, run: Path, n: int) -> None:
    """``printed`` holds one ``wandb sync`` line, and W&B's own dry run of that command would
    upload the run's ``n`` offline runs (training and reports)."""
    (line,) = [x for x in printed.splitlines() if "wandb sync" in x]
    command = line.split("wandb sync ", 1)[1].split()
    wandb_bin = Path(sys.executable).parent / "wandb"
    dry = subprocess.run(
        [str(wandb_bin), "sync", "--dry-run", *command], capture_output=True, text=True, check=True
    )
    listed = {Path(x.split()[-1]).resolve().parent for x in dry.stderr.splitlines() if x.endswith(".wandb")}
    assert listed == set((run / "wandb").glob("offline-run-*")) and len(listed) == n, dry.stderr


HUB_MODEL = "EleutherAI/pythia-160m"
HUB_TOKENS_PER_STEP = 20  # the hub series' step t // 20 holds the curves of ``make_run`` at tokens t


def hub_records(tokens_per_step: int | None = None, mcqa_records: bool = False) -> list[Record]:
    """A hub-like series: revisions ``step1000`` .. ``step20000`` of one model with the ``ppl``
    probe's held-out perplexity and Level 0 records, shaped as ``make_run``'s curves (perplexity
    converges at step 5,000, validity at 10,000); tokens_seen null unless ``tokens_per_step``
    (as ``bytecanary probe --tokens_per_step`` writes them)."""
    rng = np.random.default_rng(1)
    rows = []
    for t in TOKENS:
        step = t // HUB_TOKENS_PER_STEP
        held_out = {"probe/ppl/val/all/ppl": ppl(t), "probe/ppl/val/all/bpb": math.log2(ppl(t)) / 4}
        probes = [("ppl", held_out), ("level0", level0(t))] + (
            [("mcqa", mcqa(t, rng))] if mcqa_records else []
        )
        for probe, metrics in probes:
            rows.append(
                Record(
                    checkpoint=f"{HUB_MODEL}@step{step}",
                    step=step,
                    tokens_seen=step * tokens_per_step if tokens_per_step else None,
                    probe=probe,
                    version=1,
                    fingerprint="p",
                    status="ok",
                    error=None,
                    seconds=1.0,
                    threads=1,
                    metrics=metrics,
                )
            )
    return rows
