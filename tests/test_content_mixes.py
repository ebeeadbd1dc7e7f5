"""The fast path's cost does not depend on what the logs say: on every content mix of
benchmarks/generate.py, lines take the per-line path only as trigger lines, in the
neighbourhood open state needs around them, or in the bounded probe for a first timestamp."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from crashlens.ingest.prefixes import PrefixStyle, key_pattern
from crashlens.parse.index import index_block
from crashlens.parse.scan import iter_blocks
from crashlens.rulebase import load_rules
from crashlens.session import SequentialRunner, Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import generate

RULES = load_rules()
#: Lines one trigger may pull through the per-line path: a traceback's frames and exception
#: line, and the lines after it that decide whether it was handled.
NEIGHBOURHOOD = 24
#: Lines probed for a first timestamp in a file that has none.
PROBE = 256


@pytest.mark.parametrize("mix", generate.MIXES)
def test_only_triggers_and_their_neighbourhoods_take_the_per_line_path(
    mix: str, tmp_path: Path
) -> None:
    path = tmp_path / "rank_1.log"
    rng = random.Random(1)
    path.write_text("".join(generate.rank_lines(1, 2_000_000, rng, mix=mix)))
    session = Session(RULES, runner=SequentialRunner())
    session.read_paths([path])
    (result,) = session.results
    assert session.scanner is not None
    prefixes = key_pattern(PrefixStyle())
    with path.open("rb") as f:
        triggers = sum(
            len(index_block(b, session.scanner, prefixes).triggers) for b in iter_blocks(f)
        )
    beyond = result.fed_lines - triggers * NEIGHBOURHOOD - PROBE
    assert beyond <= result.lines // 100, (result.fed_lines, triggers, result.lines)
    # and the verdict is the same as on every other mix: the rank's own watchdog timeout
    report = session.finish()
    assert report.primary is not None and report.primary.rule_id == "nccl-watchdog-timeout"


@pytest.mark.parametrize("mix", generate.MIXES)
def test_no_detector_literal_is_in_the_ordinary_lines_of_a_mix(mix: str) -> None:
    # A literal that ordinary lines hold (``python``, in every frame's path) makes each of them
    # a trigger line the per-line path takes: a rule must anchor on its message's own words.
    from crashlens.parse.matcher import LineMatcher

    rng = random.Random(2)
    lines = list(generate.rank_lines(1, 400_000, rng, mix=mix))
    matcher = LineMatcher(RULES)
    common = []
    for lit, dets in [*matcher.by_literal.items(), *matcher.by_literal_ci.items()]:
        folded = lit in matcher.by_literal_ci
        n = sum(1 for line in lines if lit in (line.lower() if folded else line))
        if n > len(lines) // 100:
            common.append((lit, n, sorted({f"{rule.id}.{det.name}" for rule, det in dets})))
    assert common == [], (len(lines), common)
