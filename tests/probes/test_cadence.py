"""Probe cadences: which planned checkpoints a probe fires at, and how a spec declares it."""

import math

import pytest

from bytecanary.errors import BytecanaryError
from bytecanary.probes import build_probes, validate_specs
from bytecanary.probes.cadence import Cadence

# configs/tiny.yaml's schedule: log-spaced to 64, then every 100 to 1000
TINY = [1, 2, 4, 8, 16, 32, 64, *range(100, 1001, 100)]


def _log_reference(schedule, base):
    """Straightforward: a checkpoint fires when some power of ``base`` lies in (previous, step]."""
    out, previous = set(), 0
    for step in schedule:
        powers = [base**k for k in range(0, 64) if base**k <= step]
        if any(p > previous for p in powers):
            out.add(step)
        previous = step
    return out | {schedule[-1]}


def test_default_fires_everywhere():
    assert Cadence().always and Cadence().steps(TINY) == set(TINY)


def test_every_nth_counts_checkpoints_and_keeps_the_last():
    assert Cadence(every=4).steps(TINY) == {1, 16, 200, 600, 1000}
    assert Cadence(every=5).steps(TINY) == {1, 32, 400, 900, 1000}  # 1000 added: the last
    assert Cadence(every=100).steps(TINY) == {1, 1000}
    assert not Cadence(every=2).always


@pytest.mark.parametrize("base", [2, 3, 4, 10, 1.5])
def test_log_spaced_matches_reference(base):
    assert Cadence(log_base=base).steps(TINY) == _log_reference(TINY, base)


def test_log_base_4_on_tiny():
    assert Cadence(log_base=4).steps(TINY) == {1, 4, 16, 64, 300, 1000}


def test_schedule_order_and_duplicates_do_not_matter():
    assert Cadence(every=3).steps(list(reversed(TINY)) + TINY) == Cadence(every=3).steps(TINY)
    assert Cadence(every=3).steps([]) == set()


def test_fires_are_fewer_with_a_thinner_cadence():
    counts = [len(Cadence(log_base=b).steps(TINY)) for b in (2, 4, 16)]
    assert counts == sorted(counts, reverse=True) and counts[-1] < len(TINY)
    assert len(Cadence(log_base=16).steps(range(1, 100_001))) == math.floor(math.log(100_000, 16)) + 2


@pytest.mark.parametrize(
    "value, message",
    [
        ({"every": 0}, "every must be an integer >= 1"),
        ({"every": "often"}, "every: expected int, got 'often'"),
        ({"log_base": 1}, "log_base must be a number > 1"),
        ({"every": 2, "log_base": 4}, "choose one of every and log_base"),
        ({"evry": 2}, r"evry: unknown key \(did you mean 'every'\?\)"),
        (4, "expected a mapping"),
    ],
)
def test_bad_cadence_is_one_line(value, message):
    with pytest.raises(BytecanaryError, match=rf"^conf.yaml: probes: level0: cadence: .*{message}"):
        validate_specs([{"name": "level0", "cadence": value}], source="conf.yaml")


def test_spec_cadence_is_kept_on_the_probe_and_not_in_its_fingerprint(small_data):
    plain, thin = build_probes([{"name": "level0"}, {"name": "level0", "cadence": {"log_base": 4}}])
    assert plain.cadence == Cadence() and thin.cadence == Cadence(log_base=4)
    assert plain.params == thin.params and plain.fingerprint(small_data) == thin.fingerprint(small_data)
    (spec,) = validate_specs([{"name": "level0", "cadence": {"every": 2}}])
    assert spec["cadence"] == {"every": 2, "log_base": None}
    assert build_probes([spec])[0].cadence == Cadence(every=2)
