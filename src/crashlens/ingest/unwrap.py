"""Undo a terminal's hard wrap: a paste copied from a terminal (tmux, screen, a notebook cell)
cuts every line longer than the terminal at exactly its width, so ``Traceback (most recent
call last):``, an exception's type or a long path may be split over two lines.

A wrapped file is told by its line lengths: no line is longer than one width, and many lines
are exactly that long (a spike: lines one or two characters shorter are rare), far more than
lines of a log happen to share a length. Its lines of that length are then joined with the
line after them, as the terminal printed them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator

from crashlens import lazyre
from crashlens.ingest.read import strip_ansi

#: Narrower than this, a wrap would cut most lines of a log: not a terminal's width.
MIN_WIDTH = 60
#: Lines of exactly the width a wrapped sample holds at least (a share of its text lines and a
#: count), and how many times more of them than of lines one to three characters shorter.
MIN_SHARE = 0.05
MIN_LINES = 3
SPIKE = 3


def rejoined(text: str) -> str:
    """``text`` (an exception's message) with each line break that may be a hard wrap taken
    out: after a line of :data:`MIN_WIDTH` characters or more, between two characters that are
    not blanks (``... variable MASTE`` / ``R_ADDR expected, but not set``). For a paste too
    short to show its width (:func:`wrap_width`); read only where the text as printed matched
    nothing, so a message that really goes on on its next line keeps its reading."""
    if "\n" not in text:
        return text
    lines = text.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        before = out[-1]
        if len(before) >= MIN_WIDTH and line[:1].strip() and before[-1] != " ":
            out[-1] = before + line  # the joined line is longer still: a wrap may go on
        else:
            out.append(line)
    return "\n".join(out)


def wrap_width(lines: Iterable[str]) -> int | None:
    """The width ``lines`` (a file's first lines) were hard-wrapped at, or None."""
    raw = list(lines)
    texts = [line for line in raw if line.strip()]
    if len(texts) < MIN_LINES + 1:
        return None
    lengths = Counter(len(line) for line in texts)
    width = max(lengths)
    if width < MIN_WIDTH:
        return None
    at = lengths[width]
    if at < MIN_LINES or at < MIN_SHARE * len(texts):
        return None
    near = max(lengths.get(width - k, 0) for k in (1, 2, 3))
    if at < SPIKE * max(near, 1):
        return None
    # What follows a cut line goes on with it; lines that merely share a length (one message
    # per rank, a rich box's rows) are followed by records of their own.
    cut = [(a, b) for a, b in itertools.pairwise(raw) if len(a) == width]
    going_on = [a for a, b in cut if _goes_on(a, b)]
    if len(set(going_on)) < MIN_LINES or 3 * len(going_on) < 2 * len(cut):
        return None
    return width


def cut_width(lines: Iterable[str]) -> int | None:
    """The width a paste too short for :func:`wrap_width` may have been cut at, or None.

    A few lines cannot show a spike of one length, so this only names a candidate: the
    longest lines' length (at least :data:`MIN_WIDTH`), when a line that long is followed by
    one that goes on with it. Whether the paste was wrapped is then told by which reading
    finds more (``crashlens.parse._short_paste``).
    """
    raw = list(lines)
    width = max((len(line) for line in raw), default=0)
    if width < MIN_WIDTH:
        return None
    cut = [(a, b) for a, b in itertools.pairwise(raw) if len(a) == width]
    return width if any(_goes_on(a, b) for a, b in cut) else None


def _goes_on(line: str, after: str) -> bool:
    """Whether ``after`` reads as the rest of ``line`` cut at a terminal's width, not as a
    line of its own: not empty, no record, prefix, frame or box row of its own."""
    after = strip_ansi(after)
    rest = after.lstrip(" \t>")  # (a pasted block's margin: indentation, a quote's markers)
    return (
        bool(rest)
        and not line.endswith(_BOX)
        and not line.endswith("  ")  # padded to the width: a screen's copy, not a cut
        and _WHOLE_FRAME.match(line) is None  # a frame line is followed by its source line
        and _OWN_LINE.match(after) is None
        and _OWN_LINE.match(rest) is None
        # the next of many lines of one format (a per-thread assert, a per-rank message, a
        # log dict): the same start, digits aside
        and _shape(after[:_SAME_START]) != _shape(line[:_SAME_START])
    )


#: A traceback frame line that is whole: what follows it is its source line, wherever it ends.
_WHOLE_FRAME = lazyre.compile_regex(r'\s*File "[^"\n]+", line \d+, in \S+\s*$')


def _shape(text: str) -> str:
    return text.translate(_DIGITS)


_DIGITS = str.maketrans("123456789", "000000000")


#: A line that starts with this many characters of the one before it is one more of its kind.
_SAME_START = 12


#: Box-drawing rows (rich's tracebacks and tables) are as wide as the box, not wrapped.
_BOX = ("│", "┃", "║", "|", "┐", "┘", "╮", "╯")
#: What starts a line of its own: a bracketed prefix or level, a timestamp, glog's level and
#: date, a traceback's header and frames, an exception's type, a launcher or rank label, NCCL's
#: ``host:pid:tid [dev]``.
_OWN_LINE = lazyre.compile_regex(
    r"\[|\d{4}-\d\d-\d\d[ T_]|\d\d/\d\d/\d{4} |[IWEF]\d{4} |Traceback \(|(?:  )?File \"|"
    r"During handling|The above exception|[A-Za-z_][\w.]*(?:Error|Exception|Warning|Interrupt):|"
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b|[\w.-]+: (?:\[|\d{4}-)|\d+: |"
    r"[\w.-]+:\d+:\d+ \[\d+\] "
)


def unwrap(
    lines: Iterable[tuple[int, str]], width: int, margin: str = ""
) -> Iterator[tuple[int, str]]:
    """``(lineno, text)`` with every line ``width`` long joined to the line after it (the
    joined line keeps its first piece's number). ``margin``: a pasted block's indentation
    (:attr:`~crashlens.ingest.prefixes.PrefixStyle.margin`), which the paste put before every
    line, the pieces a wrap cut off included: a piece loses it when it is joined."""
    start: int | None = None
    pieces: list[str] = []
    for lineno, text in lines:
        if start is None:
            start = lineno
        elif margin and text.startswith(margin):
            text = text[len(margin) :]
        pieces.append(text)
        if len(text.rstrip("\r")) != width - (len(margin) if len(pieces) > 1 else 0):
            yield start, "".join(pieces)
            start, pieces = None, []
    if start is not None:
        yield start, "".join(pieces)
