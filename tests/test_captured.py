"""The capture matrix: every CPU repro's real run in every launch layout, re-diagnosed.

``fixtures/captured/<repro>/<layout>[-<param><rank>]/`` holds the logs of real runs
(``python -m crashlens.repro.capture --matrix``): torchrun's default console, ``--tee 3``,
``--tee 3`` with a ``--log-dir`` tree, ``--log-dir`` with ``--redirects 3``, the tree with a
console that shows rank 0 alone (``--local-ranks-filter 0``), the job started by
``torch.multiprocessing.spawn`` instead, and plain python;
multi-rank repros once for every rank they can be told to break. ``expected.yaml`` records
the class and the first failing rank from the injection (never from crashlens's output), the
layout, the command and the torch version.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crashlens import analyze

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
CASES = sorted(p.parent for p in CAPTURED.glob("*/*/expected.yaml"))


def test_the_matrix_covers_the_layouts_and_ranks() -> None:
    expected = [yaml.safe_load((c / "expected.yaml").read_text()) for c in CASES]
    assert len(CASES) >= 60
    assert {e["layout"] for e in expected} >= {
        "tee",
        "default",
        "tee-console",
        "redirects",
        "python",
        "spawn",
    }
    assert sum(e["first_failure_rank"] is not None for e in expected) >= 30
    assert all(e["torch"] and e["command"] for e in expected)


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_capture_is_diagnosed_as_its_injection(case: Path) -> None:
    expected = yaml.safe_load((case / "expected.yaml").read_text())
    report = analyze([case])
    if expected.get("xfail"):
        # a known gap, recorded beside the capture (docs/fixtures.md): it must still fail
        right = report.primary is not None and (
            report.primary.match.rule.cls == expected["top_class"]
            and (
                expected["first_failure_rank"] is None
                or (report.first_failure is not None
                    and report.first_failure.rank == expected["first_failure_rank"])
            )
        )  # fmt: skip
        assert not right, f"fixed: remove the xfail of {case}"
        pytest.xfail(expected["xfail"])
    assert report.primary is not None
    assert report.primary.match.rule.cls == expected["top_class"]
    want = expected["first_failure_rank"]
    if want is not None:
        assert report.first_failure is not None and report.first_failure.rank == want
