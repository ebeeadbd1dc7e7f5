"""Helpers for the fleet tests: job trees generated from the project's fixtures, and what
``crashlens analyze`` says about each fixture (the expected rows, computed independently)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from crashlens import analyze
from crashlens.rulebase import RuleSet, load_rules

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
#: Every fixture job (a directory with an expected.yaml), in a fixed order.
#: The hand-made and single-capture fixtures; the capture matrix (fixtures/captured) is
#: re-analysed by tests/test_captured.py and would only multiply the fleet runs here.
FIXTURE_JOBS = sorted(
    p.parent
    for p in FIXTURES.rglob("expected.yaml")
    if "captured" not in p.relative_to(FIXTURES).parts
)


@dataclass(frozen=True)
class Expected:
    """What one fixture's own analysis says (``crashlens analyze FIXTURE``)."""

    cause_class: str | None
    rule: str | None
    first_rank: int | None
    first_host: str | None
    n_files: int
    n_ranks: int
    nccl: str | None
    evidence: tuple[str, ...]
    signature: str | None = None
    hosts: tuple[str, ...] = ()


def expected_of(fixture: Path, rules: RuleSet | None = None) -> Expected:
    report = analyze([fixture], rules=rules or load_rules(), parallel=False)
    top = report.primary
    ff = report.first_failure
    return Expected(
        cause_class=top.match.rule.cls if top else None,
        rule=top.match.rule.id if top else None,
        first_rank=ff.rank if ff else None,
        first_host=ff.host if ff else None,
        n_files=sum(1 for f in report.inputs if f.skipped is None),
        n_ranks=len(report.ranks),
        nccl=report.environment.get("nccl"),
        evidence=tuple(e.text for e in top.evidence) if top else (),
        signature=report.signature(top).key if top else None,
        hosts=tuple(sorted({r.host for r in report.ranks if r.host})),
    )


def make_jobs(root: Path, count: int, start: int = 0) -> dict[str, Path]:
    """``count`` job directories under ``root``, copies of the fixtures in turn.

    Returns job id -> the fixture it was copied from.
    """
    root.mkdir(parents=True, exist_ok=True)
    made = {}
    for i in range(start, start + count):
        fixture = FIXTURE_JOBS[i % len(FIXTURE_JOBS)]
        job_id = f"job-{i:04d}"
        shutil.copytree(fixture, root / job_id)
        made[job_id] = fixture
    return made
