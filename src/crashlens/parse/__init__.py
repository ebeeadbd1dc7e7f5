"""Parse stage: turn a file's lines into signals, tracebacks and launcher failure reports."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable
from pathlib import Path

from crashlens.ingest.prefixes import PrefixStyle, sniff_style, strip
from crashlens.ingest.read import Readable, cap_line, iter_lines
from crashlens.model import FileResult, Source
from crashlens.parse.matcher import LineMatcher
from crashlens.parse.scan import (
    MAX_LINE_BYTES,
    STRUCTURAL_TRIGGERS,
    TriggerScanner,
    iter_blocks,
)
from crashlens.parse.stream import FileParser
from crashlens.rulebase.schema import RuleSet

SNIFF_LINES = 200

__all__ = [
    "FileParser",
    "FileResult",
    "LineMatcher",
    "interleaved",
    "parse_binary",
    "parse_error_file",
    "parse_lines",
    "scan_block",
    "scanner_for",
]


def scanner_for(matcher: LineMatcher) -> TriggerScanner | None:
    """The fast-path scanner for a rule set, or None when a detector must see every line."""
    if matcher.always:
        return None
    return TriggerScanner([*matcher.by_literal, *STRUCTURAL_TRIGGERS], matcher.by_literal_ci)


def parse_binary(
    source: Source,
    stream: Readable,
    encoding: str,
    rules: RuleSet,
    matcher: LineMatcher,
    scanner: TriggerScanner | None,
    *,
    year: int,
    tb_ids: itertools.count[int],
) -> FileResult:
    """Parse a file's byte stream, on the fast path whenever the file allows it.

    The fast path needs UTF-8 text with one writer per file (no interleaving launcher
    prefixes): per-rank logs and torchrun ``--log-dir`` files, which is where the gigabytes
    are. Combined consoles, kernel logs and other encodings take the line-by-line path.
    """
    head = stream.read(256 * 1024) if encoding == "utf-8" else b""
    head_lines = head[: head.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()
    sample = head_lines[:SNIFF_LINES]
    style = sniff_style(sample) if sample else PrefixStyle()
    if (
        scanner is None
        or encoding != "utf-8"
        or source.kind == "kernel"
        or (source.rank is None and source.local_rank is not None)
        or interleaved(sample, style, source)
    ):
        lines = iter_lines(stream, encoding, head=head)
        return parse_lines(source, lines, rules, matcher, year=year, tb_ids=tb_ids)
    parser = FileParser(source, rules, matcher, year=year, style=style, tb_ids=tb_ids)
    lineno = 0
    for block in iter_blocks(stream, head):
        lineno = scan_block(parser, scanner, block, lineno)
    return parser.close()


def interleaved(sample: list[str], style: PrefixStyle, source: Source) -> bool:
    """Whether line prefixes name more than the file's own writer."""
    if style.srun or style.pdsh or style.stamped:
        return True
    for line in sample:
        if line.startswith("["):
            _, prefix = strip(line, style)
            if prefix.local_rank is not None or prefix.host is not None:
                return True
            if prefix.rank is not None and prefix.rank != source.rank:
                return True
    return False


def scan_block(parser: FileParser, scanner: TriggerScanner, block: bytes, lineno: int) -> int:
    starts = scanner.line_starts(block)
    i, pos, size = 0, 0, len(block)
    while pos < size:
        if parser.wants_lines():
            pos, lineno = _feed_one(parser, block, pos, lineno)
            continue
        while i < len(starts) and starts[i] < pos:
            i += 1
        nxt = starts[i] if i < len(starts) else size
        if nxt > pos:
            count = block.count(b"\n", pos, nxt)
            parser.skip(block, pos, nxt, count, lineno + count)
            lineno += count
            pos = nxt
        if pos < size:
            pos, lineno = _feed_one(parser, block, pos, lineno)
    return lineno


def _feed_one(parser: FileParser, block: bytes, pos: int, lineno: int) -> tuple[int, int]:
    end = block.find(b"\n", pos)
    if end < 0:
        end = len(block)
    text = block[pos : min(end, pos + MAX_LINE_BYTES)].decode("utf-8", "replace")
    text = cap_line(text)
    lineno += 1
    if "\r" in text:
        for part in text.split("\r"):
            if part:
                parser.feed(lineno, part)
    else:
        parser.feed(lineno, text)
    return end + 1, lineno


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
    stream: Readable,
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
