"""The prefilter is sound: a line a detector matches always contains one of its literals.

The fast path hands a line to a detector's regex only when the line holds one of the
detector's literals (derived from the regex, or given as ``contains:``). If a detector could
match a line without any of them, the fast path would silently miss it. Hypothesis generates
strings each regex matches and checks the literals are there.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashlens.rulebase import load_rules

DETECTORS = [
    (rule, det)
    for rule in load_rules().rules
    for det in rule.detectors
    if det.scope == "line" and det.literals
]


def _stdlib(pattern: str) -> re.Pattern[str] | None:
    """The regex in the stdlib's dialect for hypothesis, if it is expressible there."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


@pytest.mark.parametrize(("rule", "det"), DETECTORS, ids=lambda x: getattr(x, "id", None) or x.name)
def test_every_match_contains_a_literal(rule, det) -> None:
    compiled = _stdlib(det.pattern.pattern)
    if compiled is None:
        pytest.skip("pattern uses syntax of the regex module only")
    flags = re.IGNORECASE if det.ignore_case else 0
    pattern = re.compile(compiled.pattern, compiled.flags | flags)

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(st.from_regex(pattern))
    def check(line: str) -> None:
        if det.pattern.search(line) is None:
            return  # the stdlib and regex dialects differ on this one
        hay = line.lower() if det.ignore_case else line
        lits = [lit.lower() for lit in det.literals] if det.ignore_case else det.literals
        assert any(lit in hay for lit in lits), (rule.id, det.name, line, det.literals)

    check()


@pytest.mark.parametrize(
    ("regex_text", "line"),
    [
        # a leading inline flag: the prefilter must be case-insensitive too
        ("(?i)cuda out of memory", "RuntimeError: CUDA OUT OF MEMORY"),
        # coded escapes are the character they code, not their letters
        (r"\x41BCD error", "ABCD error at step 3"),
        (r"caf\u00e9 noir", "café noir"),
        (r"(ab)\1 done", "abab done"),
    ],
)
def test_the_prefilter_finds_lines_its_detector_matches(
    tmp_path, regex_text: str, line: str
) -> None:
    from crashlens.parse import LineMatcher

    (tmp_path / "t.yaml").write_text(
        "id: t\ntitle: t\nclass: unknown\nseverity: low\n"
        f"detectors:\n  d:\n    regex: '{regex_text}'\nremediation: r\n",
        encoding="utf-8",
    )
    rules = load_rules([tmp_path], include_default=False, strict=True)
    [det] = rules.rules[0].detectors
    assert det.pattern.search(line)
    matcher = LineMatcher(rules)
    assert [d.name for _, d, _ in matcher.match(line, "worker")] == ["d"]


def test_a_counted_repeat_of_a_group_or_class_is_not_a_literal() -> None:
    from crashlens.rulebase.literals import required_literals

    assert required_literals(r"foo[^\n]{0,80}barbaz") == ("barbaz",)
    assert required_literals(r"(ab){2,3}cdef") == ("cdef",)
    assert required_literals(r"Error: [^\n]{0,80}?\bwith\b") == ("Error: ",)


def test_exception_detectors_skip_texts_without_their_literals() -> None:
    """The exception and traceback detectors use the literals too; a detector whose every
    match holds a literal is not run on a traceback without one (and still matches with it)."""
    from crashlens.parse.hits import _holds_literal
    from crashlens.rulebase import load_rules

    det = load_rules().by_id["dist-env-missing"].detector("environ_lookup")
    assert det.scope == "exception" and det.literals
    assert _holds_literal(det, "KeyError: 'LOCAL_RANK'")
    assert det.pattern.search("KeyError: 'LOCAL_RANK'")
    assert not _holds_literal(det, "ValueError: bad value")
