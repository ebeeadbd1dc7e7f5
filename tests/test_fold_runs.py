"""Rounds of a retry loop folded in bulk on the fast path (issue 23): a one-writer block's run of
rounds at once (``FastPath._fold_run``), an interleaved console's rounds inside the quiet run
(``FastPath._fold_later``), a round ended by a progress bar folded and the bar fed
(``FileParser.fold_round(fed=True)``). Whatever is folded in bulk must give what the per-line
path gives: the rounds' count, each traceback's first line, time and handled-or-fatal verdict,
the writers' line counts and last lines, and the times later lines inherit."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from crashlens import analyze
from crashlens.model import FileResult
from crashlens.parse import keyed
from crashlens.parse.stream import FileParser
from retry_support import NCCL, ROUND, STEP, read, stamp

ANNOUNCE = "{ts},{ms:03d} WARNING train.data: shard fetch failed, retrying (attempt 1/5)\n"
UNANNOUNCED = "{ts},{ms:03d} ERROR train.data: shard fetch failed\n"
BAR = "".join(f"eval: {p:3d}%|{'#' * (p // 10):10s}| {p}/100 [00:01<00:10]\r" for p in (0, 50, 99))
PLAIN = "loading shard {n} of the eval set\n"  # no time, no step: it tells nothing
OOM = (
    "Traceback (most recent call last):\n"
    '  File "/home/alice/llm/train.py", line 188, in main\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)


def _writer(seed: int, rounds: int, *, ending: str, bars: bool = False) -> list[str]:
    """One writer's lines: ``rounds`` retried rounds a few quiet lines apart (so that many
    fall in one block), some unannounced rounds among them (decided by what follows), then
    ``ending``: ``"oom"`` (a CUDA OOM after untimed lines, whose time is inferred from the
    last stamped line), ``"unsurvived"`` (a last round not announced as retried: its
    writer's last words, fatal), ``"retried-last"`` (an announced round the log ends in) or
    ``"retried-then-step"`` (one more line after it)."""
    rng = random.Random(seed)
    out: list[str] = []
    sec = 0
    for n in range(1, rounds + 1):
        for _ in range(rng.randrange(1, 6)):
            sec += 1
            kind = rng.random()
            if kind < 0.5:
                out.append(STEP.format(ts=stamp(sec), ms=rng.randrange(1000), n=sec))
            elif kind < 0.8:
                out.append(NCCL.format(ch=rng.randrange(32)))
            else:
                out.append(PLAIN.format(n=sec))
        if bars and rng.random() < 0.3:
            out.append(BAR + "\n")
        sec += 1
        plain = n % 17 == 0  # decided by the lines after it, as any traceback
        out.append((UNANNOUNCED if plain else ANNOUNCE).format(ts=stamp(sec), ms=n % 1000))
        out.extend(ROUND.splitlines(keepends=True))
        if bars and rng.random() < 0.3:
            out.append(BAR + "\n")  # the round's message ends at the bar's first state
    if ending == "oom":
        sec += 1
        out.append(STEP.format(ts=stamp(sec), ms=0, n=sec))
        out.extend(PLAIN.format(n=sec + k) for k in range(40))  # more than a ring: untimed
        out.extend(OOM.splitlines(keepends=True))
    elif ending == "unsurvived":
        sec += 1
        out.append(UNANNOUNCED.format(ts=stamp(sec), ms=999))
        out.extend(ROUND.splitlines(keepends=True))
    elif ending in ("retried-last", "retried-then-step"):
        sec += 1
        out.append(ANNOUNCE.format(ts=stamp(sec), ms=998))
        out.extend(ROUND.splitlines(keepends=True))
        if ending == "retried-then-step":  # the round is among the writer's last lines
            out.append(STEP.format(ts=stamp(sec + 1), ms=0, n=sec + 1))
    return out


def _console(logs: list[list[str]], seed: int) -> list[str]:
    """Writers' lines interleaved in bursts behind ``[rankN]:`` prefixes."""
    rng = random.Random(seed)
    pos, out = [0] * len(logs), []
    while any(p < len(log) for p, log in zip(pos, logs, strict=True)):
        for r in rng.sample(range(len(logs)), len(logs)):
            burst = logs[r][pos[r] : pos[r] + rng.randrange(1, 5)]
            pos[r] += len(burst)
            out.extend(f"[rank{r}]: {line}" for line in burst)
    return out


def _seen(result: FileResult) -> dict[str, object]:
    """What the two paths must agree on."""
    tracebacks = sorted(
        (tb.rank or -1, tb.start_line, tb.time, tb.time_inferred, tb.fatal, tb.repeats, tb.text)
        for tb in result.tracebacks
    )
    hits = sorted(
        (h.rule_id, h.evidence.line, h.evidence.time, h.fatal, h.evidence.text) for h in result.hits
    )
    ranks = sorted(
        (r.rank or -1, r.lines, r.first_time, r.last_time, r.last_lineno, tuple(r.last_lines))
        for r in result.ranks
    )
    return {"tracebacks": tracebacks, "hits": hits, "ranks": ranks, "lines": result.lines}


class _Spy:
    """Counts what the bulk folds took."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs = self.run_rounds = self.later = self.fed = 0
        fold_run, fold_later, fold_round = (
            FileParser.fold_run,
            FileParser.fold_later,
            FileParser.fold_round,
        )
        spy = self

        def run(self: FileParser, stream, count, lineno, announce):  # type: ignore[no-untyped-def]
            done = fold_run(self, stream, count, lineno, announce)
            if done:
                spy.runs, spy.run_rounds = spy.runs + 1, spy.run_rounds + count
            return done

        def later(self: FileParser, *args):  # type: ignore[no-untyped-def]
            items = fold_later(self, *args)
            spy.later += items is not None
            return items

        def round_(self: FileParser, *args, fed=False):  # type: ignore[no-untyped-def]
            done = fold_round(self, *args, fed=fed)
            spy.fed += done and fed
            return done

        monkeypatch.setattr(FileParser, "fold_run", run)
        monkeypatch.setattr(FileParser, "fold_later", later)
        monkeypatch.setattr(FileParser, "fold_round", round_)


def _same(path: Path) -> tuple[FileResult, FileResult]:
    fast, slow = read(path, True), read(path, False)
    assert _seen(fast) == _seen(slow)
    return fast, slow


def _report(path: Path, fast: bool) -> str:
    data = analyze([path], parallel=False, fast=fast).to_dict()
    return json.dumps({k: data[k] for k in ("causes", "first_failure", "ranks")}, default=str)


@pytest.mark.parametrize("ending", ["oom", "unsurvived", "retried-last", "retried-then-step"])
def test_a_run_of_rounds_folds_at_once_as_line_by_line(
    ending: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = 400
    path = tmp_path / "rank_1.log"
    path.write_text("".join(_writer(1, rounds, ending=ending)))
    spy = _Spy(monkeypatch)
    fast, _ = _same(path)
    # most rounds were taken in runs, not one by one
    assert spy.runs > 0 and spy.run_rounds > rounds // 2, (spy.runs, spy.run_rounds)
    resets = [tb for tb in fast.tracebacks if tb.final.type == "ConnectionResetError"]
    # every round counted, whether it stands alone (an unannounced one the writer may not
    # have survived) or is folded into a loop
    expected = rounds + (ending != "oom")
    assert sum(1 + tb.repeats for tb in resets) == expected
    fatal = [(tb.final.type, tb.start_line) for tb in fast.tracebacks if tb.fatal]
    last_header = len(path.read_text().splitlines()) - ROUND.count("\n") + 1
    if ending == "oom":
        assert [t for t, _ in fatal] == ["torch.OutOfMemoryError"]
        (oom,) = [tb for tb in fast.tracebacks if tb.fatal]
        assert oom.time_inferred  # from the last stamped line, long before it
    elif ending == "unsurvived":
        assert fatal == [("ConnectionResetError", last_header)]
    else:
        assert fatal == []  # announced as retried: handled, even as the log's last words
    assert _report(path, True) == _report(path, False)


def test_a_round_in_the_middle_of_a_run_that_is_not_announced_ends_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an unannounced round whose writer then prints only untimed lines for a while: still
    # undecided when the next announced rounds come (they fold into the loop all the same)
    lines = _writer(2, 120, ending="oom")
    middle = next(
        i for i, line in enumerate(lines) if i > len(lines) // 2 and line.startswith("Traceback")
    )
    lines[middle - 1] = UNANNOUNCED.format(ts=stamp(100_000), ms=0)
    lines[middle + ROUND.count("\n") : middle + ROUND.count("\n")] = [
        PLAIN.format(n=k) for k in range(60)
    ]
    path = tmp_path / "rank_1.log"
    path.write_text("".join(lines))
    spy = _Spy(monkeypatch)
    fast, _ = _same(path)
    assert spy.runs >= 2
    # the unannounced round is decided by what follows (handled: its writer went on)
    assert not any(tb.fatal for tb in fast.tracebacks if tb.final.type == "ConnectionResetError")
    assert _report(path, True) == _report(path, False)


@pytest.mark.parametrize("numpy_keys", [False, True])
def test_rounds_of_interleaved_writers_fold_inside_the_quiet_run(
    numpy_keys: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if numpy_keys:
        monkeypatch.setattr(keyed, "SMALL_LINES", 0)
    endings = ["oom", "unsurvived", "retried-then-step", "unsurvived"]
    # rank 1 dies early (its last round unsurvived, in the middle of the others' rounds)
    logs = [_writer(10 + r, 30 if r == 1 else 150, ending=e) for r, e in enumerate(endings)]
    path = tmp_path / "console.log"
    path.write_text("".join(_console(logs, seed=5)))
    spy = _Spy(monkeypatch)
    fast, slow = _same(path)
    assert spy.later > 200, spy.later
    assert fast.fed_lines < slow.fed_lines // 10
    fatal = sorted((tb.rank, tb.final.type) for tb in fast.tracebacks if tb.fatal)
    assert fatal == [
        (0, "torch.OutOfMemoryError"),
        (1, "ConnectionResetError"),
        (3, "ConnectionResetError"),
    ]
    resets = [tb for tb in fast.tracebacks if tb.final.type == "ConnectionResetError"]
    assert sum(1 + tb.repeats for tb in resets) == 3 * 150 + 30 + 3  # and three last rounds
    assert _report(path, True) == _report(path, False)


@pytest.mark.parametrize("layout", ["tree", "console"])
def test_a_round_ended_by_a_progress_bar_folds_and_the_bar_isread(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if layout == "tree":
        text = "".join(_writer(3, 300, ending="oom", bars=True))
    else:
        logs = [_writer(20 + r, 100, ending="oom" if r == 2 else "retried-last", bars=True)
                for r in range(3)]  # fmt: skip
        text = "".join(_console(logs, seed=9))
    path = tmp_path / "job.log"
    path.write_text(text)
    spy = _Spy(monkeypatch)
    fast, _ = _same(path)
    assert spy.fed > 10, spy.fed
    assert [tb.final.type for tb in fast.tracebacks if tb.fatal] == ["torch.OutOfMemoryError"]
    assert _report(path, True) == _report(path, False)
