"""Every fixture job under fixtures/ must get the diagnosis its expected.yaml states."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import FIXTURES
from crashlens import analyze

CASES = sorted(p.parent for p in FIXTURES.rglob("expected.yaml"))


@pytest.mark.parametrize("job", CASES, ids=[str(p.relative_to(FIXTURES)) for p in CASES])
def test_fixture_diagnosis(job: Path) -> None:
    expected = yaml.safe_load((job / "expected.yaml").read_text())
    if expected.get("xfail"):
        pytest.xfail(expected["xfail"])
    report = analyze([job])
    data = report.to_dict()
    causes = data["causes"]
    summary = [(c["class"], c["rule"], c["confidence"]) for c in causes]
    top_class = expected.get("top_class")
    if top_class is None:
        assert not causes, f"expected no failure, got {summary}"
        assert data["first_failure"] is None
    else:
        assert causes, "expected a diagnosis, got none"
        top = causes[0]
        assert top["class"] == top_class, f"top cause {summary}"
        if "top_rule" in expected:
            assert top["rule"] == expected["top_rule"], summary
        if "evidence" in expected:
            texts = [e["text"] for e in top["evidence"]]
            assert any(expected["evidence"] in t for t in texts), texts
        for cls in expected.get("symptom_classes") or []:
            assert cls not in [c["class"] for c in causes if c["kind"] == "cause"][:1]
            explained = [e["class"] for e in top["explains"]]
            others = [c["class"] for c in causes[1:]]
            assert cls in explained or cls in others, (cls, explained, others)
    if "first_failure_rank" in expected:
        ff = data["first_failure"]
        want = expected["first_failure_rank"]
        if want is None:
            assert ff is None or ff["rank"] is None, ff
        else:
            assert ff is not None and ff["rank"] == want, ff
    for host, offset in (expected.get("clock_skew") or {}).items():
        skew = data["clock_skew"][host]
        assert abs(skew["offset_s"] - offset) <= 0.5 and skew["applied"], skew
    assert expected.get("exit_code", 1) == (1 if report.failed else 0)
