"""Parse stage: turn a file's lines into signals, tracebacks and launcher failure reports."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from crashlens.ingest.prefixes import PrefixStyle, sniff_style
from crashlens.model import Source
from crashlens.parse.matcher import LineMatcher
from crashlens.parse.stream import FileParser, FileResult
from crashlens.rulebase.schema import RuleSet

SNIFF_LINES = 200

__all__ = ["FileParser", "FileResult", "LineMatcher", "parse_error_file", "parse_lines"]


def parse_lines(
    source: Source,
    lines: Iterable[tuple[int, str]],
    rules: RuleSet,
    matcher: LineMatcher,
    *,
    year: int,
    tb_ids: itertools.count[int],
    time_override: float | None = None,
) -> FileResult:
    """Parse ``(lineno, text)`` pairs of one file into a :class:`FileResult`.

    The first lines are buffered to sniff ambiguous prefix styles (``srun --label``, pdsh)
    before anything is parsed.
    """
    it = iter(lines)
    head = list(itertools.islice(it, SNIFF_LINES))
    style = sniff_style(text for _, text in head) if head else PrefixStyle()
    parser = FileParser(
        source,
        rules,
        matcher,
        year=year,
        style=style,
        tb_ids=tb_ids,
        time_override=time_override,
    )
    for lineno, text in itertools.chain(head, it):
        parser.feed(lineno, text)
    return parser.close()


def parse_error_file(
    source: Source,
    stream: BinaryIO,
    rules: RuleSet,
    matcher: LineMatcher,
    *,
    tb_ids: itertools.count[int],
) -> FileResult:
    """Parse a torchelastic ``error.json`` (written by ``@record``).

    Its ``py_callstack`` is the traceback of the failed worker, stamped with the time the
    exception was recorded, which is what makes it precise evidence for the first failure.

    Raises:
        ValueError: when the file is not a torchelastic error file.
    """
    data = json.loads(stream.read(8 << 20).decode("utf-8", errors="replace"))
    if not isinstance(data, dict) or "message" not in data:
        raise ValueError("not a torchelastic error file")
    message = data["message"]
    when: float | None = None
    if isinstance(message, dict):
        extra = message.get("extraInfo", {}) or {}
        text = str(extra.get("py_callstack") or message.get("message", ""))
        stamp = extra.get("timestamp")
    else:
        text = str(message)
        stamp = data.get("timestamp")
    try:
        when = float(stamp) if stamp is not None else None
    except (TypeError, ValueError):
        when = None
    year = time.gmtime(when).tm_year if when else time.gmtime().tm_year
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1)]
    return parse_lines(source, lines, rules, matcher, year=year, tb_ids=tb_ids, time_override=when)


def file_year(path: Path | None) -> int:
    """The year to assume for year-less timestamps: the file's modification year."""
    try:
        mtime = path.stat().st_mtime if path is not None else time.time()
    except OSError:
        mtime = time.time()
    return time.gmtime(mtime).tm_year
