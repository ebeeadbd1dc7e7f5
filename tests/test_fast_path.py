"""The fast path (skip quiet lines after one multi-literal scan) gives the same diagnosis."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from conftest import FIXTURES
from crashlens import analyze
from crashlens.parse.scan import (
    TriggerScanner,
    available_backends,
    iter_blocks,
    ramp_points,
)

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


def test_scanner_markers_index_blocks_as_the_python_searches_do() -> None:
    """The first NCCL line and a possibly prefixed line, reported by Hyperscan in the trigger
    scan, index every block as ``bytes.find`` and :meth:`PrefixKeys.single` alone do."""
    from crashlens.ingest.prefixes import PrefixStyle, key_pattern
    from crashlens.parse import index_block, scanner_for
    from crashlens.session import Session

    base = scanner_for(Session.configured().matcher)
    assert base is not None and base.markers
    if "hyperscan" not in available_backends():
        pytest.skip("Hyperscan is not installed")
    engines = [TriggerScanner(*base.literals, backend=b) for b in available_backends()]
    marked = TriggerScanner(*base.literals, markers=base.markers, backend="hyperscan")
    logs = [p.read_bytes() for p in sorted(FIXTURES.rglob("*.log"))]
    made = [
        b"[rank3]: Traceback (most recent call last)\n" + b"step 1\n" * 3000,
        b"step 1\n" * 3000 + b"[rank3]: x\n" + b"[INFO] y\n",
        b"[2024-05-01 01:00:00] INFO x\n" * 3000 + b"host:1:2 [0] NCCL INFO y\n",
        b"2024-05-01T01:00:00Z [rank1]: x NCCL \n" * 3000,
        b"a\n" * 3000 + b"[INFO] z\n" + b"b\n" * 3000 + b"[rank2]: y\n" + b"c\n" * 99,
        b"[rank0]: a\n" + b"b\n" * 5000,
    ]
    for data in (*logs, *made):
        block = data if data.endswith(b"\n") else data + b"\n"
        styles = (PrefixStyle(), PrefixStyle(stamped=True), PrefixStyle(srun=True))
        for style in (*styles, PrefixStyle(margin="  ")):
            prefixes = key_pattern(style)
            want = index_block(block, marked, prefixes)
            first = block.find(b" NCCL ")
            assert want.nccl == first
            for engine in engines:
                got = index_block(block, engine, prefixes)
                assert got.nccl is None
                assert (got.lines, got.triggers, got.trigger_lines) == (
                    want.lines,
                    want.triggers,
                    want.trigger_lines,
                )
                assert (got.keys, got.key_table) == (want.keys, want.key_table)


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


def _generator():
    import sys

    sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
    import generate

    return generate


def full_summary(path: Path, runner) -> dict[str, object]:
    """Everything the report says about causes, first failure and ranks (last words too)."""
    from crashlens.session import Session

    data = Session.configured(runner=runner).read_paths([path]).finish().to_dict()
    causes = [
        (c["rule"], c["confidence"], c["ranks"], [(e["file"], e["line"], e["time"], e["text"])
                                                   for e in c["evidence"]])
        for c in data["causes"]
    ]  # fmt: skip
    ranks = [
        (r["rank"], r["lines"], r["first_time"], r["last_time"], r["pids"], r.get("last_lines"))
        for r in data["ranks"]
    ]
    return {"causes": causes, "first": data["first_failure"], "ranks": ranks}


@pytest.mark.parametrize("style", ["rank", "default", "srun", "mpi", "pdsh", "kubectl", "stamped"])
def test_consoles_of_every_prefix_style_agree_with_the_line_by_line_path(
    tmp_path: Path, style: str
) -> None:
    """A combined console (ranks interleaved behind launcher prefixes, handled retries, one
    OOM) is demultiplexed on the fast path into exactly what the line-by-line path finds."""
    gen = _generator()
    ranks = 8 if style == "default" else 16  # torchrun --tee writes one node's console
    path = gen.console(tmp_path / "console.log", ranks, 1.2, style, retries=2, oom_rank=5)
    fast, slow = summary(path, fast=True), summary(path, fast=False)
    assert fast == slow
    assert fast["first"]["rank"] == 5 and fast["causes"][0][0] == "cuda-oom"
    assert len(fast["ranks"]) == ranks


def test_handled_tracebacks_followed_by_many_steps_agree_across_blocks(tmp_path: Path) -> None:
    """Retried exceptions spread over several 2 MB blocks stay handled on the fast path."""
    gen = _generator()
    gen.generate(tmp_path / "job", ranks=2, mb_per_rank=4.5, oom_rank=1, retries=8)
    fast, slow = summary(tmp_path / "job", True), summary(tmp_path / "job", False)
    assert fast == slow
    assert fast["first"]["rank"] == 1 and fast["causes"][0][0] == "cuda-oom"


def test_one_big_file_split_across_workers_gives_the_same_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers index byte ranges of one console while the parent parses it in order: the
    per-rank state crosses the seams, so the report equals the one-process read."""
    import crashlens.session as session
    from crashlens.session import ForkRunner, SequentialRunner

    gen = _generator()
    path = gen.console(tmp_path / "console.log", 16, 6.0, "rank", retries=3, oom_rank=5)
    monkeypatch.setattr(session, "RANGE_BYTES", 1 << 20)
    size = path.stat().st_size
    ramp = ramp_points(path, size, 64 << 10, 1 << 20)
    widths = [b - a for a, b in itertools.pairwise(ramp)]
    assert widths[0] < widths[1] < widths[2] < widths[3] <= (1 << 20) + 4096  # ramps up
    assert all(path.read_bytes()[p - 1 : p] == b"\n" for p in ramp[1:-1])  # line starts
    split = full_summary(path, ForkRunner(workers=2, min_bytes=0, split_bytes=1 << 20))
    whole = full_summary(path, SequentialRunner())
    assert split == whole
    assert split["first"]["rank"] == 5


def test_progress_advances_while_one_big_file_is_read(tmp_path: Path) -> None:
    from crashlens.session import SequentialRunner, Session

    gen = _generator()
    path = gen.console(tmp_path / "console.log", 8, 7.0, "rank", oom_rank=5)
    told: list[int] = []
    Session.configured(runner=SequentialRunner()).read_paths(
        [path], progress=lambda _p, n: told.append(n)
    )
    assert len(told) >= 3  # one per 2 MB block, not one at the end
    assert sum(told) == path.stat().st_size


def test_re2_holds_the_bundled_rules_literals_in_its_dfa(capfd: pytest.CaptureFixture[str]) -> None:
    """Without Hyperscan (a plain ``pip install crashlens``) RE2 scans for the rules' literals:
    its automaton must fit its memory budget, or RE2 falls back to a search hundreds of times
    slower and logs "DFA out of memory" to the terminal on every block."""
    from crashlens.parse import scanner_for
    from crashlens.session import Session

    if "re2" not in available_backends():
        pytest.skip("google-re2 is not installed")
    base = scanner_for(Session.configured().matcher)
    assert base is not None
    # every fixture log once, in one block: the varied text a job's lines walk the DFA through
    block = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in sorted(FIXTURES.rglob("*.log")))
    assert len(block) > 1_000_000
    capfd.readouterr()
    found = TriggerScanner(*base.literals, backend="re2").line_starts(block)
    assert "DFA out of memory" not in capfd.readouterr().err
    assert found == TriggerScanner(*base.literals, backend="re").line_starts(block)


def test_a_last_exception_line_no_trigger_flags_is_read_on_the_fast_path(tmp_path: Path) -> None:
    """A process whose output ends in a final exception line standing alone, of a class
    named without "Error" (requests' ``ConnectTimeout``, as novitalabs/sd-webui-cleaner#15
    posted it), after lines the fast path only skims: both paths read it as the ending."""
    posted = (FIXTURES.parent / "rules/env/svc-http-host-unreachable/threads.log").read_text()
    ending = [line for line in posted.splitlines() if not line.startswith("#")][:2]
    assert ending[1].startswith("requests.exceptions.ConnectTimeout: ")
    steps = [f"step {i} loss {1 / (i + 1):.4f}" for i in range(200_000)]
    path = tmp_path / "train.log"
    path.write_text("\n".join([*steps, *ending]) + "\n")
    fast, slow = summary(path, fast=True), summary(path, fast=False)
    assert fast == slow
    assert fast["causes"][0][0] == "svc-http-host-unreachable"
    assert fast["first"]["line"] == len(steps) + 2
