"""Analysing the same inputs twice in one process gives the same report: no stage changes what
it was given (a second timeline of one session, a second session of the same files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from crashlens.rulebase import load_rules
from crashlens.session import SequentialRunner, Session

JOBS = sorted(p.parent for p in FIXTURES.rglob("expected.yaml"))
RULES = load_rules()


@pytest.mark.parametrize("job", JOBS, ids=[str(p.relative_to(FIXTURES)) for p in JOBS])
def test_a_session_finished_twice_says_the_same(job: Path) -> None:
    session = Session(RULES, runner=SequentialRunner()).read_paths([job])
    first = session.finish().to_dict()
    again = session.finish().to_dict()
    assert again == first


def test_skew_is_applied_once_however_often_the_timeline_is_made() -> None:
    job = FIXTURES / "forensics/skewed_nodes"
    for skew in ({}, {"node-02": 3.0}):  # estimated, then given
        session = Session(RULES, runner=SequentialRunner(), skew=skew).read_paths([job])
        one, two = session.timeline(), session.timeline()
        assert [r.first_time for r in one.ranks] == [r.first_time for r in two.ranks]
        assert [h.evidence.time for h in one.hits] == [h.evidence.time for h in two.hits]
        fresh = Session(RULES, runner=SequentialRunner(), skew=skew).read_paths([job])
        assert fresh.finish().to_dict() == session.finish().to_dict()
