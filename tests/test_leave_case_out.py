"""benchmarks/leave_case_out.py: a tune case scored without the rules that cite it."""

from __future__ import annotations

from conftest import ROOT, benchmark
from crashlens.rulebase import load_rules

loco = benchmark("leave_case_out")
#: ostris/ai-toolkit#266 (a diffusers without AutoencoderKLWan): api-version-mismatch names it
#: in its notes and holds its lines as a fixture.
CITED = "ostris-ai-toolkit-266"


def _case(case_id: str) -> object:
    (case,) = [c for c in loco.load_cases(ROOT / "corpus", ("tune",)) if c.id == case_id]
    return case


def test_a_case_is_cited_by_its_thread_and_its_corpus_id() -> None:
    case = _case(CITED)
    assert "ostris-ai-toolkit-266" in loco.case_keys(case)
    citations = {
        "by-thread": loco.cited_in("fixture of ostris/ai-toolkit#266 as posted"),
        "by-url": loco.cited_in("https://github.com/ostris/ai-toolkit/issues/266"),
        # another thread whose number starts with the same digits, another repository's #266
        "other": loco.cited_in("ostris/ai-toolkit#2660, a/b#266"),
        "by-id": loco.cited_in(f"corpus case tune/{CITED}"),
    }
    assert loco.citing(case, citations) == ["by-id", "by-thread", "by-url"]


def test_a_cited_case_is_scored_without_the_rules_written_from_it() -> None:
    rules = load_rules()
    case = _case(CITED)
    ((outcome, off),) = loco.run([case], rules)
    assert "api-version-mismatch" in off
    assert outcome.rule not in off
    # with every rule on, the rule written from the case answers it
    assert loco.score(case, loco.analyze([case.path], rules)).rule == "api-version-mismatch"
