"""torch.multiprocessing.spawn: the parent's report of a child and the child's own traceback.

Real CPU runs in fixtures/spawn (see its SOURCE.md): spawn's ``ProcessRaisedException`` (and
torch < 1.5's bare ``Exception``) is a launcher's report, not the user's bug; the child's
traceback after "-- Process N terminated with the following error:" is process N's, whose
index is its local rank, the rank itself on one node.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import FIXTURES, ROOT
from crashlens import analyze
from crashlens.report import Report

SPAWN = FIXTURES / "spawn"


def matched(report: Report) -> set[str]:
    """Every rule that matched: the ranked causes and the symptoms they explain."""
    return {c.rule_id for c in report.causes} | {
        e.rule_id for c in report.causes for e in c.explains
    }


def test_the_childs_traceback_is_the_cause_and_names_its_rank() -> None:
    report = analyze([SPAWN / "child_error"])
    assert report.primary is not None
    assert report.primary.match.rule.cls == "file_not_found"
    ff = report.first_failure
    assert ff is not None and ff.rank == 1
    assert "FileNotFoundError" in ff.text  # the child's error, not spawn's re-raise
    # the parent's ProcessRaisedException is spawn's report: no "bug in your code" for it
    assert "launcher-exit-nonzero" in matched(report)
    assert "user-code-error" not in matched(report)
    assert sorted((tb.rank is None, tb.final.type) for tb in report.tracebacks) == [
        (False, "FileNotFoundError"),
        (True, "torch.multiprocessing.spawn.ProcessRaisedException"),
    ]
    assert [tb.rank for tb in report.tracebacks if tb.rank is not None] == [1]


def test_a_killed_child_is_named_by_spawns_report() -> None:
    report = analyze([SPAWN / "child_killed"])
    ff = report.first_failure
    assert ff is not None and ff.rank == 1
    assert "terminated with signal SIGKILL" in ff.text


def test_a_spawn_index_is_not_a_rank_when_the_logs_come_from_two_nodes(tmp_path: Path) -> None:
    # the same console from two nodes: process 1 of which node is not known
    for node in ("node-01", "node-02"):
        (tmp_path / node).mkdir()
        shutil.copy(SPAWN / "child_error" / "train.log", tmp_path / node / "train.log")
    report = analyze([tmp_path])
    assert report.primary is not None and report.primary.match.rule.cls == "file_not_found"
    assert report.first_failure is not None and report.first_failure.rank is None


def test_torch_1_x_spawn_raised_a_bare_exception_with_the_childs_traceback() -> None:
    # facebookresearch/detectron2#143 (verbatim, cut inside process 3's traceback)
    case = ROOT / "corpus" / "tune" / "facebookresearch-detectron2-143"
    report = analyze([case])
    assert "launcher-exit-nonzero" in matched(report)
    assert "user-code-error" not in matched(report)
    assert report.first_failure is not None and report.first_failure.rank == 3
