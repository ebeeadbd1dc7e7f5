"""The real-world corpus: its split, its labels' provenance, and the accuracy ratchet.

``benchmarks/accuracy.py`` does the scoring; this module runs it once and fails when a part's
figures fall below ``corpus/baseline.json`` (raise it with ``--write-baseline`` after an
improvement), or when any crashed job would exit 0 or any healthy one exit 1.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import yaml

from conftest import ROOT, benchmark
from crashlens.render import render
from crashlens.report import Report
from crashlens.rulebase import load_rules

CORPUS = ROOT / "corpus"
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".jsonl"}


accuracy = benchmark("accuracy")
CASES = accuracy.load_cases(CORPUS)


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    """Every case analysed once, with the bundled rules loaded once: the figures and the
    per-case checks below read the same reports."""
    rules = load_rules()
    return {case.id: accuracy.analyze_case(case, rules) for case in CASES}


@pytest.fixture(scope="module")
def results(reports: dict[str, Report]) -> dict[str, Any]:
    return accuracy.run(CORPUS, report_of=lambda case: reports[case.id])


def test_the_corpus_has_the_promised_shape() -> None:
    assert len(CASES) >= 300
    assert sum(c.part == "validation" for c in CASES) >= 100
    assert sum(c.multi_rank for c in CASES) >= 60
    assert sum(c.cause == "none" for c in CASES) >= 25
    assert {c.cause for c in CASES} >= set(accuracy.CAUSE_CLASSES)


def test_each_case_lies_in_the_part_its_id_assigns() -> None:
    # The split is fixed by the case id (a hash), not chosen after seeing results.
    for case in CASES:
        assert case.part == accuracy.part_of(case.id), case.id
    parts = {p: sum(c.part == p for c in CASES) for p in accuracy.PARTS}
    assert parts["validation"] >= len(CASES) // 4


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.part}/{c.id}")
def test_each_case_names_its_source_and_evidence(case: Any) -> None:
    data = yaml.safe_load((case.path / "case.yaml").read_text(encoding="utf-8"))
    assert case.source.startswith("https://github.com/"), case.source
    owner_repo = case.source.split("/")[3:5]
    number = case.source.rstrip("/").rsplit("/", 1)[-1]
    assert case.id == f"{owner_repo[0]}-{owner_repo[1]}-{number}".lower()
    assert len(str(data.get("evidence", "")).split()) >= 8, "evidence must say who established it"
    logs = [p for p in case.path.iterdir() if p.suffix in LOG_SUFFIXES]
    assert logs and all(p.stat().st_size > 0 for p in logs)


def test_the_corpus_is_not_below_the_ratchet(results: dict[str, Any]) -> None:
    baseline = json.loads((CORPUS / "baseline.json").read_text(encoding="utf-8"))
    assert set(baseline) >= set(accuracy.PARTS)
    assert accuracy.regressions(results, baseline) == []


def test_no_crashed_job_exits_0_and_no_healthy_job_exits_1(results: dict[str, Any]) -> None:
    summary = results["all"]["summary"]
    silent = [o.id for p in accuracy.PARTS for o in results[p]["outcomes"] if o.silent]
    alarms = [o.id for p in accuracy.PARTS for o in results[p]["outcomes"] if o.false_alarm]
    assert (silent, alarms) == ([], [])
    assert summary["silent_crashes"] == summary["false_alarms"] == 0


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.cause != "none"], ids=lambda c: f"{c.part}/{c.id}"
)
def test_a_crashed_job_never_reads_no_failure_found(case: Any, reports: dict[str, Report]) -> None:
    report = reports[case.id]
    text = render(report, "text", color=False, width=100)
    assert report.failed
    assert "No failure found" not in text
    # a clause without its values is left out of the remediation
    assert not [c.rule_id for c in report.causes if "(unknown)" in c.remediation]
    assert report.primary is not None and report.primary.evidence


def _outcome(case_id: str, part: str, top1: bool, cause: str = "cuda_oom") -> Any:
    return accuracy.Outcome(
        id=case_id, part=part, cause=cause, predicted=(cause if top1 else "unknown",),
        rule=None, exit_code=1, top1=top1, top3=top1, first_rank=None, predicted_rank=None,
        rank_ok=None, silent=False, false_alarm=False,
    )  # fmt: skip


def _results(outcomes: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in accuracy.PARTS:
        mine = [o for o in outcomes if o.part == part]
        out[part] = {"summary": accuracy.summarize(mine), "outcomes": mine}
    out["validation (unseen)"] = out["validation"]
    out["all"] = {"summary": accuracy.summarize(outcomes)}
    return out


def test_the_ratchet_holds_every_case_and_every_right_diagnosis() -> None:
    before = _results([_outcome("a", "tune", True), _outcome("b", "validation", True)])
    baseline = accuracy.baseline_of(before)
    assert accuracy.regressions(before, baseline) == []
    # a new case that is diagnosed wrong lowers the figure but is no regression
    grown = _results([*before["tune"]["outcomes"], _outcome("b", "validation", True),
                      _outcome("c", "tune", False)])  # fmt: skip
    assert accuracy.regressions(grown, baseline) == []
    # a case that disappears, or one that was right and is now wrong, is
    shrunk = _results([_outcome("a", "tune", True)])
    assert any("b is in the baseline" in p for p in accuracy.regressions(shrunk, baseline))
    worse = _results([_outcome("a", "tune", False), _outcome("b", "validation", True)])
    assert any("tune/a: was diagnosed right" in p for p in accuracy.regressions(worse, baseline))


def test_a_loss_is_accepted_only_by_name_and_never_lowers_a_figure() -> None:
    before = _results([_outcome("a", "tune", True), _outcome("b", "tune", False)])
    baseline = accuracy.baseline_of(before)
    # a trades its place with b: named, the loss passes, the part's figure the same
    traded = _results([_outcome("a", "tune", False), _outcome("b", "tune", True)])
    assert accuracy.regressions(traded, baseline, frozenset({"tune/a"})) == []
    assert accuracy.regressions(traded, baseline, frozenset({"tune/b"})) != []
    # named, but the part falls: the figure still holds the line
    fallen = _results([_outcome("a", "tune", False), _outcome("b", "tune", False)])
    assert accuracy.regressions(fallen, baseline, frozenset({"tune/a"})) == [
        "tune: top1 0.0 < baseline 0.5",
        "tune: top3 0.0 < baseline 0.5",
    ]


def test_a_new_silent_crash_waits_for_its_record_and_a_recorded_case_may_not_go_silent() -> None:
    before = _results([_outcome("a", "tune", False), _outcome("b", "validation", True)])
    baseline = accuracy.baseline_of(before)
    silent_new = dataclasses.replace(_outcome("c", "validation", False), silent=True)
    grown = _results([*before["tune"]["outcomes"], *before["validation"]["outcomes"], silent_new])
    assert accuracy.regressions(grown, baseline) == []
    silent_old = dataclasses.replace(before["tune"]["outcomes"][0], silent=True)
    worse = _results([silent_old, *before["validation"]["outcomes"]])
    assert accuracy.regressions(worse, baseline) == ["tune: silent_crashes 1 > baseline 0"]


def test_seen_validation_cases_are_reported_apart(results: dict[str, Any]) -> None:
    seen = [c for c in CASES if c.seen]
    assert seen and all(c.part == "validation" for c in seen)
    unseen = results["validation (unseen)"]["summary"]
    assert unseen["cases"] == results["validation"]["summary"]["cases"] - len(seen)


def test_a_validation_thread_read_for_a_rule_is_marked_seen() -> None:
    # A rule written from (or tested on) a validation case's thread has seen that case: it is
    # reported apart, whoever wrote the rule and whenever.
    named: set[str] = set()
    for path in (ROOT / "rules").rglob("*"):
        if path.is_file():
            named |= accuracy.threads_named(path.read_text(encoding="utf-8", errors="replace"))
    unmarked = [c.id for c in CASES if c.part == "validation" and c.id in named and not c.seen]
    assert not unmarked, unmarked
