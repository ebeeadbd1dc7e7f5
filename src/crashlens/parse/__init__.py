"""Parse stage: turn a file's lines into signals, tracebacks and launcher failure reports."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from crashlens.ingest.gutter import numbered, ungutter
from crashlens.ingest.prefixes import PrefixStyle, key_pattern, sniff_style
from crashlens.ingest.read import Readable, iter_lines
from crashlens.ingest.unwrap import cut_width, unwrap, wrap_width
from crashlens.model import CUT_TRACEBACK, FileResult, Source
from crashlens.parse.index import DENSE_LINES, BlockIndex, index_block, scanner_markers
from crashlens.parse.matcher import LineIndex, LineMatcher
from crashlens.parse.scan import BLOCK, STRUCTURAL_TRIGGERS, TriggerScanner, iter_blocks
from crashlens.parse.stream import FileParser
from crashlens.ruletypes import RuleSet

SNIFF_LINES = 200
#: What :func:`parse_binary` reads first to sniff a file (all of a short paste).
HEAD_BYTES = 256 * 1024

__all__ = [
    "BlockIndex",
    "FileParser",
    "FileResult",
    "IndexedBlocks",
    "LineIndex",
    "LineMatcher",
    "fast_path_ok",
    "index_block",
    "parse_binary",
    "parse_error_file",
    "parse_lines",
    "reads_as_console",
    "scan_block",
    "scanner_for",
]


def scanner_for(matcher: LineMatcher | LineIndex) -> TriggerScanner | None:
    """The fast-path scanner for a rule set, or None when a detector must see every line."""
    if matcher.always:
        return None
    triggers = [*matcher.by_literal, *STRUCTURAL_TRIGGERS]
    return TriggerScanner(triggers, matcher.by_literal_ci, markers=scanner_markers())


def fast_path_ok(source: Source, encoding: str, scanner: TriggerScanner | None) -> bool:
    """Whether a file is read on the fast path: UTF-8 text, a rule set with literal anchors
    for every detector, and not a kernel log (whose clock every line may teach)."""
    return scanner is not None and encoding == "utf-8" and source.kind != "kernel"


#: Blocks of a file with their indexes, made elsewhere (worker processes) for a prefix style.
IndexedBlocks = Callable[[PrefixStyle], Iterable[tuple[bytes, BlockIndex]]]


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
    progress: Callable[[int], None] | None = None,
    indexed: IndexedBlocks | None = None,
    ceiling: float | None = None,
) -> FileResult:
    """Parse a file's byte stream, on the fast path whenever the file allows it.

    Per-rank logs and combined consoles alike (launcher prefixes are demultiplexed per line
    on the fast path too); other encodings, kernel logs and rule sets with a detector that
    must see every line take the line-by-line path. ``indexed`` gives the file's blocks
    already indexed (in parallel) instead of indexing ``stream``'s here; ``progress`` is told
    the bytes of each block once it is parsed. ``ceiling`` is the file's modification time:
    no year-less timestamp is put after it (see :class:`~crashlens.parse.clock.Clock`).
    """
    head = stream.read(HEAD_BYTES) if encoding == "utf-8" else b""
    sample = _head_lines(head)
    if indexed is None and numbered(sample):
        # a paste that kept a viewer's line numbers: read without them
        lines = ungutter(iter_lines(stream, encoding, head=head))
        return parse_lines(source, lines, rules, matcher, year=year, tb_ids=tb_ids, ceiling=ceiling)
    # a paste a terminal hard-wrapped is read line by line, its wrapped lines joined again
    width = wrap_width(sample) if indexed is None else None
    if width is None and indexed is None and len(head) < HEAD_BYTES and sample:
        short = cut_width(sample)
        if short is not None:
            return _short_paste(
                source,
                list(iter_lines(stream, encoding, head=head)),
                short,
                rules,
                matcher,
                year=year,
                tb_ids=tb_ids,
                ceiling=ceiling,
            )
    if width is not None or not fast_path_ok(source, encoding, scanner):
        lines = iter_lines(stream, encoding, head=head)
        if width is not None:
            lines = unwrap(lines, width, sniff_style(sample).margin)
        return parse_lines(source, lines, rules, matcher, year=year, tb_ids=tb_ids, ceiling=ceiling)
    assert scanner is not None
    style = sniff_style(sample) if sample else PrefixStyle()
    parser = FileParser(
        source, rules, matcher, year=year, style=style, tb_ids=tb_ids, ceiling=ceiling
    )
    if indexed is not None:
        blocks = indexed(style)
    else:
        blocks = ((b, index_block(b, scanner, parser.prefixes)) for b in iter_blocks(stream, head))
    lineno = 0
    for block, index in blocks:
        lineno = parser.take(block, index, lineno)
        if progress is not None:
            progress(len(block))
    return parser.close()


def _short_paste(
    source: Source,
    lines: list[tuple[int, str]],
    width: int,
    rules: RuleSet,
    matcher: LineMatcher,
    *,
    year: int,
    tb_ids: itertools.count[int],
    ceiling: float | None,
) -> FileResult:
    """A paste too short to show whether a terminal wrapped it at ``width``
    (:func:`~crashlens.ingest.unwrap.cut_width`), read both ways: joined again when that
    reading finds more that rules recognise (a wrap cuts the words detectors look for), as
    printed otherwise."""
    printed = parse_lines(source, lines, rules, matcher, year=year, tb_ids=tb_ids, ceiling=ceiling)
    margin = sniff_style(text for _, text in lines[:SNIFF_LINES]).margin
    joined = parse_lines(
        source,
        unwrap(lines, width, margin),
        rules,
        matcher,
        year=year,
        tb_ids=tb_ids,
        ceiling=ceiling,
    )

    # what a rule recognised counts; a fallback only says that something escaped or was cut,
    # and a hit on a cut traceback reads the words crashlens wrote in place of its exception
    fallbacks = {r.id for r in rules.rules if r.fallback}

    def named(result: FileResult) -> int:
        cut = {tb.id for tb in result.tracebacks if tb.final.type == CUT_TRACEBACK}
        return sum(
            1 for h in result.hits if h.rule_id not in fallbacks and h.traceback_id not in cut
        )

    return joined if named(joined) > named(printed) else printed


def reads_as_console(path: Path) -> bool:
    """Whether the plain file at ``path`` starts as a combined console of ``[name]:``-prefixed
    lines, whose big blocks have their keys read with numpy (:func:`~crashlens.parse.index.
    dense_ids`): a runner imports numpy once before forking its workers, instead of in each.
    Not when its lines are so long (progress bars redrawn many times on each) that a block
    holds too few for numpy to read their keys: its blocks are then read without it, and
    its import would only hold up the parse (a block that does hold enough imports it)."""
    try:
        with path.open("rb") as f:
            head = f.read(256 * 1024)
    except OSError:
        return False
    sample = _head_lines(head)
    if not sample:
        return False
    prefixes = key_pattern(sniff_style(sample))
    end = head.rfind(b"\n") + 1
    if end <= 0 or head.count(b"\n", 0, end) * BLOCK <= DENSE_LINES * end:
        return False
    return prefixes.bracketed and prefixes.dense(head, 0, end)


def _head_lines(head: bytes) -> list[str]:
    """The first :data:`SNIFF_LINES` whole lines of ``head``, decoded only as far as they go
    (the lines before a newline split the same in any longer text)."""
    cut = -1
    for _ in range(SNIFF_LINES):
        cut = head.find(b"\n", cut + 1)
        if cut < 0:
            cut = head.rfind(b"\n")
            break
    return head[: cut + 1].decode("utf-8", "replace").splitlines()[:SNIFF_LINES]


def scan_block(parser: FileParser, scanner: TriggerScanner, block: bytes, lineno: int) -> int:
    """Index a block of whole lines and parse it on the fast path; return its last line's
    number."""
    return parser.take(block, index_block(block, scanner, parser.prefixes), lineno)


def parse_lines(
    source: Source,
    lines: Iterable[tuple[int, str]],
    rules: RuleSet,
    matcher: LineMatcher,
    *,
    year: int,
    tb_ids: itertools.count[int],
    time_override: float | None = None,
    ceiling: float | None = None,
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
        ceiling=ceiling,
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
    return time.gmtime(file_mtime(path)).tm_year


def file_mtime(path: Path | None) -> float:
    """When the file was last written (now for stdin or a file that cannot be stat'ed): no
    line of it can be later."""
    try:
        return path.stat().st_mtime if path is not None else time.time()
    except OSError:
        return time.time()
