"""A traceback a writer prints again and again (a retried, handled error) is parsed once and
recognised after that (crashlens.parse.repeat), and each handled round is folded into the
first one (``Traceback.repeats``): one traceback stands for the retry loop, with its first line
and time; one its writer did not survive stays its own and is fatal, on both paths alike."""

from __future__ import annotations

import calendar
import random
import time
from pathlib import Path

import pytest

from crashlens import analyze
from crashlens.model import FileResult
from retry_support import NCCL, ROUND, STEP, read, stamp

RETRIED = "{ts},002 WARNING train.data: shard fetch failed, retrying (attempt 1/5)\n" + ROUND
#: Lines of one retried traceback (its announcing record, then the traceback).
RETRIED_LINES = RETRIED.count("\n")
FATAL = (
    "Traceback (most recent call last):\n"
    '  File "/home/alice/llm/train.py", line 188, in main\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
    "capacity of 79.15 GiB of which 1.23 GiB is free.\n"
)


def _rank_lines(retries: int, seed: int, fatal: bool = True) -> list[str]:
    """A rank's log: steps, NCCL lines and ``retries`` retried connection resets, each one
    sometimes continued by an NCCL line (which its message then takes); a CUDA OOM last."""
    rng = random.Random(seed)
    out: list[str] = []
    sec = 0
    for n in range(1, retries + 1):
        for _ in range(rng.randrange(3, 30)):
            sec += 1
            out.append(STEP.format(ts=stamp(sec), ms=rng.randrange(1000), n=sec))
            if rng.random() < 0.3:
                out.append(NCCL.format(ch=rng.randrange(32)))
        out.extend(RETRIED.format(ts=stamp(sec)).splitlines(keepends=True))
        if n % 3 == 0:
            out.append(NCCL.format(ch=rng.randrange(32)))
    sec += 1
    out.append(STEP.format(ts=stamp(sec), ms=0, n=sec))
    if fatal:
        out.extend(FATAL.splitlines(keepends=True))
    return out


def _occurrences(result: FileResult) -> list[tuple[int | None, int, float | None, bool, str]]:
    return [
        (tb.rank, tb.start_line, tb.time, tb.fatal, tb.final.type)
        for tb in sorted(result.tracebacks, key=lambda t: (t.rank or -1, t.start_line))
    ]


def _hits(result: FileResult) -> list[tuple[str, int, float | None, bool | None, str]]:
    return sorted(
        (h.rule_id, h.evidence.line, h.evidence.time, h.fatal, h.evidence.text) for h in result.hits
    )


def _rounds(result: FileResult, exc_type: str) -> int:
    return sum(1 + tb.repeats for tb in result.tracebacks if tb.final.type == exc_type)


def test_a_retry_loop_is_one_traceback_that_counts_its_rounds(tmp_path: Path) -> None:
    retries = 300
    path = tmp_path / "rank_1.log"
    path.write_text("".join(_rank_lines(retries, seed=1)))
    fast, slow = read(path), read(path, fast=False)
    (resets,) = [tb for tb in fast.tracebacks if tb.final.type == "ConnectionResetError"]
    assert resets.repeats == retries - 1 and not resets.fatal  # handled: the writer went on
    # the first round's place: its header is the line after the first retry announcement
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines, 1) if "retrying" in line)
    announced = calendar.timegm(time.strptime(lines[first - 1][:19], "%Y-%m-%d %H:%M:%S"))
    assert resets.start_line == first + 1
    assert resets.time == pytest.approx(announced + 0.002)
    # NCCL's own debug lines after a round are records of their own, not the message's
    assert resets.final.message == "[Errno 104] Connection reset by peer"
    assert _occurrences(fast) == _occurrences(slow)
    assert [tb.repeats for tb in fast.tracebacks] == [tb.repeats for tb in slow.tracebacks]
    # the report's timeline has one row for the loop, saying how many more rounds it had
    events = analyze([path], parallel=False).timeline
    handled = events[events["kind"] == "handled_traceback"]
    assert list(handled["text"]) == [
        "ConnectionResetError: [Errno 104] Connection reset by peer (printed 299 more times)"
    ]
    assert _hits(fast) == _hits(slow)
    assert [tb.text for tb in fast.tracebacks] == [tb.text for tb in slow.tracebacks]
    # Recognised and folded, not fed: once the loop's first rounds are parsed, a round
    # announced as retried and ended by the next record is counted from its bytes alone.
    assert fast.fed_lines < retries // 5, fast.fed_lines


def test_repeats_in_an_interleaved_console_keep_each_rank_its_own(tmp_path: Path) -> None:
    logs = [_rank_lines(60, seed=r, fatal=r == 2) for r in range(4)]
    rng = random.Random(7)
    pos, out = [0] * 4, []
    while any(p < len(log) for p, log in zip(pos, logs, strict=True)):
        for r in rng.sample(range(4), 4):
            burst = logs[r][pos[r] : pos[r] + rng.randrange(1, 5)]
            pos[r] += len(burst)
            out.extend(f"[rank{r}]: {line}" for line in burst)
    path = tmp_path / "console.log"
    path.write_text("".join(out))
    fast, slow = read(path), read(path, fast=False)
    assert _occurrences(fast) == _occurrences(slow)
    assert _hits(fast) == _hits(slow)
    assert _rounds(fast, "ConnectionResetError") == 4 * 60
    # one traceback per rank stands for its retry loop
    assert sum(tb.final.type == "ConnectionResetError" for tb in fast.tracebacks) == 4
    assert [tb.rank for tb in fast.tracebacks if tb.fatal] == [2]
    assert fast.fed_lines < 4 * 60 * 2, fast.fed_lines
    assert [(r.rank, r.lines) for r in fast.ranks] == [(r.rank, r.lines) for r in slow.ranks]


@pytest.mark.parametrize("ending", ["oom-last", "repeat-last"])
def test_the_last_repeat_is_fatal_only_when_nothing_follows_it(ending: str, tmp_path: Path) -> None:
    lines = _rank_lines(40, seed=3, fatal=ending != "repeat-last")
    if ending == "repeat-last":
        # the same traceback, not announced as retried, and the writer's last words
        last = RETRIED.replace("WARNING", "ERROR").replace(", retrying (attempt 1/5)", "")
        lines.extend(last.format(ts=stamp(10_000)).splitlines(keepends=True))
    path = tmp_path / "rank_1.log"
    path.write_text("".join(lines))
    fast_report = analyze([path], parallel=False).to_dict()
    slow_report = analyze([path], parallel=False, fast=False).to_dict()
    assert fast_report["causes"] == slow_report["causes"]
    assert fast_report["first_failure"] == slow_report["first_failure"]
    fast = read(path)
    assert _occurrences(fast) == _occurrences(read(path, fast=False))
    fatal = [tb.final.type for tb in fast.tracebacks if tb.fatal]
    expected = "ConnectionResetError" if ending == "repeat-last" else "torch.OutOfMemoryError"
    assert fatal == [expected]


def test_different_tracebacks_under_the_same_header_are_told_apart(tmp_path: Path) -> None:
    other = RETRIED.replace("ConnectionResetError: [Errno 104] Connection reset by peer",
                            "TimeoutError: [Errno 110] Connection timed out")  # fmt: skip
    out = []
    for n in range(1, 120):
        out.append(STEP.format(ts=stamp(n), ms=0, n=n))
        out.extend((RETRIED if n % 2 else other).format(ts=stamp(n)).splitlines(keepends=True))
    out.append(STEP.format(ts=stamp(200), ms=0, n=200))
    path = tmp_path / "rank_1.log"
    path.write_text("".join(out))
    fast = read(path)
    # two retry loops taking turns: each is one traceback counting its own rounds
    assert sorted((tb.final.type, tb.repeats) for tb in fast.tracebacks) == [
        ("ConnectionResetError", 59),
        ("TimeoutError", 58),
    ]
    assert _occurrences(fast) == _occurrences(read(path, fast=False))
    assert _hits(fast) == _hits(read(path, fast=False))


def test_a_traceback_too_long_to_keep_is_parsed_as_any_other(tmp_path: Path) -> None:
    long = RETRIED.replace("Connection reset by peer", "Connection reset by peer " + "x" * 3000)
    out = []
    for n in range(1, 60):
        out.append(STEP.format(ts=stamp(n), ms=0, n=n))
        out.extend(long.format(ts=stamp(n)).splitlines(keepends=True))
    out.append(STEP.format(ts=stamp(100), ms=0, n=100))
    path = tmp_path / "rank_1.log"
    path.write_text("".join(out))
    fast, slow = read(path), read(path, fast=False)
    # not kept as a repeat: every line of every round is fed; the rounds still fold
    assert fast.fed_lines >= 59 * RETRIED_LINES
    assert [tb.repeats for tb in fast.tracebacks] == [58]
    assert _occurrences(fast) == _occurrences(slow)
    assert _hits(fast) == _hits(slow)


@pytest.mark.parametrize("announced", ["every", "none", "alternate"])
def test_rounds_fold_alike_whether_or_not_the_retry_is_announced(
    announced: str, tmp_path: Path
) -> None:
    unannounced = RETRIED.replace("WARNING", "ERROR").replace(", retrying (attempt 1/5)", "")
    out = []
    for n in range(1, 150):
        out.append(STEP.format(ts=stamp(n), ms=0, n=n))
        plain = announced == "none" or (announced == "alternate" and n % 2 == 0)
        out.extend((unannounced if plain else RETRIED).format(ts=stamp(n)).splitlines(True))
    out.append(STEP.format(ts=stamp(200), ms=0, n=200))
    path = tmp_path / "rank_1.log"
    path.write_text("".join(out))
    fast, slow = read(path), read(path, fast=False)
    # one traceback for the loop: the rounds after it went on (a later step) are handled too
    assert [(tb.final.type, tb.repeats, tb.fatal) for tb in fast.tracebacks] == [
        ("ConnectionResetError", 148, False)
    ]
    assert _occurrences(fast) == _occurrences(slow)
    assert [tb.repeats for tb in fast.tracebacks] == [tb.repeats for tb in slow.tracebacks]
    assert _hits(fast) == _hits(slow)
