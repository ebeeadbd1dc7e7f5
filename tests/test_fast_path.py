"""The fast path (skip quiet lines after one multi-literal scan) gives the same diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from crashlens import analyze
from crashlens.parse.scan import TriggerScanner, available_backends, iter_blocks

JOBS = sorted(p.parent for p in FIXTURES.rglob("expected.yaml"))


def summary(path: Path, fast: bool) -> dict[str, object]:
    data = analyze([path], fast=fast).to_dict()
    causes = [
        (
            c["rule"],
            c["confidence"],
            c["ranks"],
            [(e["file"], e["line"], e["time"]) for e in c["evidence"]],
        )
        for c in data["causes"]
    ]
    ranks = [
        (r["rank"], r["lines"], r["first_time"], r["last_time"], r["pids"]) for r in data["ranks"]
    ]
    return {"causes": causes, "first": data["first_failure"], "ranks": ranks}


@pytest.mark.parametrize("job", JOBS, ids=[str(p.relative_to(FIXTURES)) for p in JOBS])
def test_fast_and_line_by_line_paths_agree_on_fixtures(job: Path) -> None:
    assert summary(job, fast=True) == summary(job, fast=False)


def test_fast_path_agrees_on_a_generated_multi_rank_tree(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
    from generate import OOM_RANK, generate

    generate(tmp_path / "job", ranks=8, mb_per_rank=0.3, oom_rank=OOM_RANK % 8)
    fast, slow = summary(tmp_path / "job", True), summary(tmp_path / "job", False)
    assert fast == slow
    assert fast["first"]["rank"] == OOM_RANK % 8


@pytest.mark.parametrize("backend", available_backends())
def test_trigger_scanner_finds_line_starts(backend: str) -> None:
    scanner = TriggerScanner(["CUDA out of memory", "memory x"], ["killed process"], backend)
    block = b"a\nb CUDA out of memory x CUDA out of memory\nc\nOut of memory: KILLED PROCESS 1\n"
    assert scanner.line_starts(block) == [2, 46]
    assert scanner.line_starts(b"CUDA out of memory") == [0]
    assert scanner.line_starts(b"nothing here\n") == []


def test_every_scanner_backend_finds_the_same_lines() -> None:
    """Hyperscan, RE2 and the stdlib engine agree on the real rule set over real logs."""
    from crashlens.parse import scanner_for
    from crashlens.session import Session

    matcher = Session.configured().matcher
    base = scanner_for(matcher)
    assert base is not None
    literals = base.literals
    data = b"".join(p.read_bytes() for p in sorted(FIXTURES.rglob("*.log")))
    found = {
        b: TriggerScanner(*literals, backend=b).line_starts(data) for b in available_backends()
    }
    assert len(found["re"]) > 100
    assert all(starts == found["re"] for starts in found.values()), {
        b: len(v) for b, v in found.items()
    }


class Trickle:
    """A stream handing out at most 64 KiB per read, like a pipe or a slow disk."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read1(self, size: int = -1) -> bytes:
        chunk = self.data[self.pos : self.pos + min(size, 1 << 16)]
        self.pos += len(chunk)
        return chunk

    read = read1


def test_blocks_end_on_line_boundaries_and_cut_overlong_lines() -> None:
    data = b"one\n" + b"x" * (3 << 20) + b"\ntwo\nthree"
    blocks = list(iter_blocks(Trickle(data)))  # type: ignore[arg-type]
    joined = b"".join(blocks)
    assert all(b.endswith(b"\n") for b in blocks)
    assert joined.startswith(b"one\n") and joined.endswith(b"two\nthree\n")
    assert joined.count(b"\n") == 4
    assert len(joined) < 200_000
