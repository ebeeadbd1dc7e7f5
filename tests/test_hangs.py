"""Hangs: the rank the others wait for, from real two-rank torchrun (gloo) runs on CPU.

tests/captures/hangs/ (``python tests/captures/make.py hangs``): rank 0 works alone (prepares
data, computes a plan) while rank 1 waits in a barrier or on a c10d store key, and times out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashlens import analyze
from crashlens.remediation import fill

HANGS = Path(__file__).parent / "captures" / "hangs"


@pytest.mark.parametrize(
    ("capture", "rule", "timeout"),
    [
        ("barrier_wait", "gloo-timeout", "5 seconds"),
        ("store_wait", "store-wait-timeout", "4 seconds"),
    ],
)
def test_the_rank_the_others_wait_for_is_named(capture: str, rule: str, timeout: str) -> None:
    report = analyze([HANGS / f"{capture}.log"])
    first = report.first_failure
    assert first is not None and first.kind == "hang"
    assert first.rank == 0
    assert first.file.endswith(f"{capture}.log") and first.line > 0
    assert report.primary is not None and report.primary.rule_id == rule
    # advice about the timeout starts from the one the job had
    assert f"above the {timeout} it had" in report.primary.remediation


def test_a_store_wait_timeout_is_a_symptom_not_the_users_bug() -> None:
    report = analyze([HANGS / "store_wait.log"])
    assert "user_code_error" not in {c.match.rule.cls for c in report.causes if c.kind == "cause"}


@pytest.mark.parametrize(
    ("ms", "words", "double_min"),
    [("1800000", "30 minutes", "60"), ("600000", "10 minutes", "20"), ("4500", "4500 ms", "1")],
)
def test_a_logged_timeout_in_words(ms: str, words: str, double_min: str) -> None:
    from crashlens.remediation import _derived

    values = _derived({"timeout_ms": ms})
    assert values["timeout"] == words
    assert values["double_timeout_min"] == double_min
    text = fill("raise it above the {timeout} it had (to {double_timeout_min} min)", values)
    assert words in text
