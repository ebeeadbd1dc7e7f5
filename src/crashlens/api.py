"""The analyzer as a library: ``analyze(paths) -> Report`` chains every stage once."""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from crashlens import __version__
from crashlens.align import align, frame_of
from crashlens.config import Config
from crashlens.errors import NoInputError
from crashlens.ingest.discover import Candidate, attribute, discover
from crashlens.ingest.read import NotText, Tolerant, open_binary
from crashlens.match import match
from crashlens.model import InputFile
from crashlens.parse import (
    FileResult,
    LineMatcher,
    file_year,
    parse_binary,
    parse_error_file,
    scanner_for,
)
from crashlens.parse.scan import TriggerScanner
from crashlens.rank import rank
from crashlens.report import Report
from crashlens.rulebase import RuleSet, load_rules

Progress = Callable[[str, int], None]


def analyze(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    rules: RuleSet | Sequence[str | os.PathLike[str]] | None = None,
    *,
    skew: dict[str, float] | None = None,
    progress: Progress | None = None,
    fast: bool = True,
    disable: Sequence[str] = (),
    strict_rules: bool = False,
) -> Report:
    """Diagnose the crashed job whose logs are under ``paths``.

    Args:
        paths: files and directories (walked recursively); ``"-"`` reads stdin.
        rules: a loaded :class:`RuleSet`, or extra rule directories added to the bundled rules.
        skew: seconds each host's clock runs ahead of the reference clock (``{"node-02": 2.5}``).
        progress: called with each file's display path and size once it has been read.
        disable: rule ids to leave out (``disable:`` in ``crashlens.yaml``).
        strict_rules: an invalid rule file in ``rules`` is an error instead of a note.
        fast: use the multi-literal fast path where a file allows it; ``False`` feeds every
            line through the parser (same diagnosis, much slower; for tests and benchmarks).

    Returns:
        The :class:`Report`; ``render(report, "json")`` etc. produce the output formats.

    Raises:
        NoInputError: when not a single input file could be read.
        RuleError: when a rule file is invalid.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if isinstance(rules, RuleSet):
        ruleset = rules
    else:
        ruleset = load_rules([Path(p) for p in rules or []], strict=strict_rules)
    if disable:
        ruleset = Config(disable=tuple(disable)).apply(ruleset)
    matcher = LineMatcher(ruleset)
    scanner = scanner_for(matcher) if fast else None
    inputs: list[InputFile] = []
    results: list[FileResult] = []
    notes = [f"rule file left out: {problem}" for problem in ruleset.skipped]
    candidates = list(discover(paths))
    for result, record in _read_all(candidates, ruleset, matcher, scanner, progress):
        inputs.append(record)
        if result is not None:
            results.append(result)
            if record.note:
                notes.append(f"{record.path}: {record.note}")
        elif record.skipped and not record.skipped.startswith("not a log"):
            notes.append(f"skipped {record.path}: {record.skipped}")
    if not results:
        reasons = "; ".join(notes) if notes else "no files found"
        raise NoInputError(f"nothing readable in the given paths ({reasons})")
    sync = {rule.id: rule.sync for rule in ruleset.rules if rule.sync}
    timeline = align(results, skew, sync)
    matches = match(timeline.hits, ruleset, facts=timeline.facts)
    causes, first = rank(matches, timeline)
    notes.extend(f"detector {k} timed out and was skipped" for k in sorted(matcher.timeouts))
    return Report(
        causes=causes,
        first_failure=first,
        ranks=timeline.ranks,
        inputs=inputs,
        notes=notes,
        timeline_builder=functools.partial(frame_of, timeline),
        tracebacks=timeline.tracebacks,
        clock_skew=timeline.clock_skew,
        facts=timeline.facts,
        rules_loaded=len(ruleset.rules),
        tool_version=__version__,
    )


#: Below this much input, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
_WORKER_STATE: tuple[RuleSet, LineMatcher, TriggerScanner | None] | None = None


def _read_all(
    candidates: list[Candidate],
    rules: RuleSet,
    matcher: LineMatcher,
    scanner: TriggerScanner | None,
    progress: Progress | None,
) -> Iterator[tuple[FileResult | None, InputFile]]:
    """Read every candidate, in a pool of forked workers when the input is large.

    Files are independent until alignment, so they parse in parallel; results come back in
    input order so the report does not depend on scheduling. Traceback ids are made unique
    per file (``index * 1e6``) because each worker counts on its own.
    """
    workers = min(4, os.cpu_count() or 1)
    readable = [c for c in candidates if not c.skipped and c.display != "<stdin>"]
    total = sum(_size(c.path) for c in readable)
    methods = multiprocessing.get_all_start_methods()
    if workers < 2 or len(readable) < 2 or total < PARALLEL_MIN_BYTES or "fork" not in methods:
        for index, cand in enumerate(candidates):
            yield _read_one(cand, rules, matcher, scanner, _ids(index), progress)
        return
    global _WORKER_STATE
    _WORKER_STATE = (rules, matcher, scanner)  # inherited by the forked workers
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = []
            for index, cand in enumerate(candidates):
                futures.append(pool.submit(_read_in_worker, cand, index))
            for future in futures:
                result, record = future.result()
                if progress is not None and record.skipped is None:
                    progress(record.path, record.bytes)
                yield result, record
    finally:
        _WORKER_STATE = None


def _read_in_worker(cand: Candidate, index: int) -> tuple[FileResult | None, InputFile]:
    assert _WORKER_STATE is not None
    rules, matcher, scanner = _WORKER_STATE
    return _read_one(cand, rules, matcher, scanner, _ids(index), None)


def _ids(index: int) -> itertools.count[int]:
    return itertools.count((index + 1) * 1_000_000)


def _read_one(
    cand: Candidate,
    rules: RuleSet,
    matcher: LineMatcher,
    scanner: TriggerScanner | None,
    tb_ids: itertools.count[int],
    progress: Progress | None,
) -> tuple[FileResult | None, InputFile]:
    if cand.skipped:
        return None, InputFile(cand.display, 0, "unknown", skipped=cand.skipped)
    is_stdin = cand.display == "<stdin>"
    size = 0 if is_stdin else _size(cand.path)
    source = attribute(cand.display)
    try:
        stream, encoding = open_binary(cand.path, sys.stdin.buffer if is_stdin else None)
    except NotText as exc:
        return None, InputFile(cand.display, size, source.kind, skipped=str(exc))
    except OSError as exc:
        return None, InputFile(
            cand.display, size, source.kind, skipped=f"cannot read: {exc.strerror or exc}"
        )
    reader = Tolerant(stream)
    try:
        if source.kind == "errorfile":
            try:
                result = parse_error_file(source, reader, rules, matcher, tb_ids=tb_ids)
            except ValueError as exc:
                return None, InputFile(cand.display, size, source.kind, skipped=str(exc))
        else:
            year = file_year(None if is_stdin else cand.path)
            result = parse_binary(
                source, reader, encoding, rules, matcher, scanner, year=year, tb_ids=tb_ids
            )
    except (OSError, EOFError, ValueError) as exc:
        return None, InputFile(cand.display, size, source.kind, skipped=f"read error: {exc}")
    finally:
        if not is_stdin:
            stream.close()
    # Keep what was read before any damage (a truncated .gz, a file that vanished).
    note = f"read stopped early: {reader.damage}" if reader.damage else None
    if note is None and result.lines == 0:
        note = "empty file"
    if progress is not None:
        progress(cand.display, size)
    return result, InputFile(cand.display, size, source.kind, lines=result.lines, note=note)


def input_size(paths: Sequence[str | os.PathLike[str]]) -> int:
    """Total bytes of the files an analysis of ``paths`` would read (for progress bars)."""
    return sum(_size(c.path) for c in discover(paths) if not c.skipped and c.display != "<stdin>")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
