"""Each rule's annotated fixtures: positives must match on the marked line, near misses must not."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from crashlens.rulebase import default_rules_dir, load_rules
from crashlens.ruletest import FixtureResult, fixture_files, run_fixture

RULES_DIR = default_rules_dir()
RULES = load_rules()
FILES = fixture_files(RULES_DIR)


@functools.cache
def _run(path: Path) -> FixtureResult:
    """Each fixture analysed once for all the tests below that read it."""
    return run_fixture(path, RULES)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(RULES_DIR)) for p in FILES])
def test_rule_fixture(path: Path) -> None:
    result = _run(path)
    assert result.expected or result.ok, "fixture has no #! ruleid / #! ok markers"
    assert result.problems() == []


def test_every_rule_has_a_positive_and_a_near_miss_fixture() -> None:
    positives: set[str] = set()
    near_misses: set[str] = set()
    for path in FILES:
        result = _run(path)
        positives |= set(result.expected)
        near_misses |= set(result.ok)
    missing = [
        rule.id for rule in RULES.rules if rule.id not in positives or rule.id not in near_misses
    ]
    assert missing == []


#: Detectors no fixture exercises yet: each still needs a real line (a thread as posted, a real
#: run, an upstream format) in its rule's folder. The list may only shrink.
UNEXERCISED = {
    ("no-gpu-visible", "no_device"),
    ("store-connect-failed", "host_not_found"),
    ("trainer-nan-loss", "detectron2"),
    ("launcher-exit-nonzero", "spawn_raised_legacy"),
}


def test_every_detector_is_exercised_by_a_fixture() -> None:
    # A detector's regex is only tested when some fixture line makes it fire (a `not:`
    # detector's hit counts: keeping its rule quiet is what it is for)
    fired: set[tuple[str, str]] = set()
    for path in FILES:
        fired |= _run(path).fired
    detectors = {(rule.id, d.name) for rule in RULES.rules for d in rule.detectors}
    assert sorted(detectors - fired - UNEXERCISED) == []
    # one that a fixture now exercises comes off the list
    assert sorted(UNEXERCISED & fired) == []
    assert detectors >= UNEXERCISED
