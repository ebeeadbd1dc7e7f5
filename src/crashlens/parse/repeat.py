"""Tracebacks a writer prints again and again (a retried, handled error) are parsed once.

The first time a traceback's lines go through the per-line path, its parser keeps them (raw,
as in the file) and what the assembler made of them (:class:`Repeat`). When a later header
line of the same file is the same bytes and so are the writer's next lines, the fast path
gives the assembler that state at once (:func:`fast_forward`) instead of feeding the lines one
by one: the state machine depends on the lines alone, so the state is the one those lines
would have given. Only lines that change nothing else are taken this way (no timestamp, no
training step, no NCCL pid, no fact, no finding that is not capped already): their effects are
line counts and the writer's ring. A repeat covers a traceback up to its final exception's
first line; what follows (the message's next lines, the line that ends it) is fed as usual,
so where it ends, and whether it was handled, is decided as for any other.

A retry loop goes further. Each handled round that prints a traceback its writer already
survived is folded into that one (``Traceback.repeats``, on both paths: see
``FileParser._settle_fold``). When a round is announced as retried by the line before it
(so handled whatever follows) and the line after it is another record (so its message ends
there), the fast path folds it from its bytes alone (``FileParser.fold_round``, with the
traceback it would have become: :attr:`Repeat.closed`): nothing is assembled or fed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crashlens.parse.traceback import PartialTraceback, Printed, State, TracebackAssembler

#: Longest traceback kept as a repeat: lines, bytes of one line, bytes in all (memory stays
#: bounded however long a writer's lines are).
MAX_REPEAT_LINES = 64
MAX_REPEAT_LINE_BYTES = 2048
MAX_REPEAT_BYTES = 16 * 1024
#: Repeats kept per file, and per header line (different tracebacks under the same header).
MAX_REPEATS = 128
PER_HEADER = 8


@dataclass(frozen=True, slots=True)
class Repeat:
    """A traceback's first lines, as parsed once: its header, then ``lines[1:]``."""

    #: The lines as they are in the file (launcher prefix included), the header first.
    lines: tuple[bytes, ...]
    #: The header line as the ring keeps it (prefix stripped).
    header: str
    #: ``lines[1:]`` joined as they follow the header in a one-writer block.
    rest: bytes
    #: ``lines[1:]`` as the ring keeps them (prefix stripped).
    texts: tuple[str, ...]
    #: The assembler after the last line: the traceback (its header at line 1) and state.
    tb: PartialTraceback
    state: State
    blank_run: int
    #: Line detectors that match some of its lines: a repeat is taken only once each has its
    #: findings capped for the writer (the lines then add none).
    detectors: tuple[tuple[str, str], ...]
    #: No line carries a launcher prefix (only such a repeat is looked for in a block of
    #: one writer: its lines are that writer's).
    bare: bool
    #: The traceback as it is once a line that starts another record ends it right after
    #: these lines (its text, and each exception's type, message and frames): what a round
    #: of a retry loop is compared with. None when such a line would not end it there.
    closed: Closed | None = None


@dataclass(frozen=True, slots=True)
class Closed:
    """A repeat's traceback when the line after it ends it (see :attr:`Repeat.closed`)."""

    printed: Printed
    #: Its final exception's type.
    final: str


class RepeatMemo:
    """A file's repeats, by header line."""

    def __init__(self) -> None:
        self._by_header: dict[bytes, list[Repeat]] = {}
        self.size = 0

    def get(self, header: bytes) -> list[Repeat] | None:
        """The repeats whose header line is ``header`` (raw)."""
        return self._by_header.get(header)

    def wants(self, lines: Sequence[bytes]) -> bool:
        """Whether a traceback of these raw lines would be a new repeat."""
        if self.size >= MAX_REPEATS or len(lines) < 2 or sum(map(len, lines)) > MAX_REPEAT_BYTES:
            return False
        known = self._by_header.get(lines[0], [])
        if len(known) >= PER_HEADER:
            return False
        return not any(tuple(lines[: len(r.lines)]) == r.lines for r in known)

    def add(self, repeat: Repeat) -> None:
        self._by_header.setdefault(repeat.lines[0], []).append(repeat)
        self.size += 1


def build(
    lines: Sequence[bytes],
    texts: Sequence[str],
    inert: Callable[[str], bool],
    detectors: Callable[[str], tuple[tuple[str, str], ...]],
    *,
    bare: bool,
) -> Repeat | None:
    """The repeat of a traceback's raw ``lines`` (``texts``: prefix stripped; ``bare``: they
    had none), up to its final exception's first line; None when the lines are not all taken
    by one Python traceback from its header, or when one of them is not ``inert``."""
    end = _final_exception_line(texts)
    if end is None or end < 2:
        return None
    if not all(inert(text) for text in texts[:end]):
        return None
    scratch = TracebackAssembler()
    for lineno, text in enumerate(texts[:end], 1):
        scratch.feed(lineno, text)
    tb = scratch.current
    assert tb is not None
    found: dict[tuple[str, str], None] = {}
    for text in texts[:end]:
        found.update(dict.fromkeys(detectors(text)))
    return Repeat(
        closed=_closed(texts[:end]) if scratch.state is State.MESSAGE else None,
        lines=tuple(lines[:end]),
        header=texts[0],
        rest=b"".join(line + b"\n" for line in lines[1:end]),
        texts=tuple(texts[1:end]),
        tb=tb,
        state=scratch.state,
        blank_run=scratch.blank_run,
        detectors=tuple(found),
        bare=bare,
    )


def _closed(texts: Sequence[str]) -> Closed | None:
    """The traceback of ``texts`` ended by the next line (another record), if it is one
    process's and was printed without a margin."""
    scratch = TracebackAssembler()
    for lineno, text in enumerate(texts, 1):
        scratch.feed(lineno, text)
    tb = scratch.current
    assert tb is not None
    if tb.margin or tb.twins or len(tb.exc_message) != 1:
        return None
    scratch.close()  # as the next record ends it: in its message, nothing else is done
    (done,) = scratch.done
    return Closed(done.printed(), done.exceptions[-1].type)


def _final_exception_line(texts: Sequence[str]) -> int | None:
    """How many of ``texts`` lead to the last exception line of the one traceback they start
    (every one taken by it); None when they are not such a traceback."""
    scratch = TracebackAssembler()
    if not scratch.feed(1, texts[0]) or scratch.state is not State.FRAMES:
        return None
    tb = scratch.current
    assert tb is not None
    if tb.headerless:
        return None
    end = None
    for lineno, text in enumerate(texts[1:], 2):
        if not scratch.feed(lineno, text) or scratch.current is not tb or scratch.done:
            break
        if tb.twins or tb.twin_exceptions:
            return None  # another process's traceback interleaved: not one writer's
        if tb.exc_line == lineno and tb.exc_type is not None:
            end = lineno
    return end


def fast_forward(repeat: Repeat, assembler: TracebackAssembler, at: Sequence[int]) -> None:
    """Give ``assembler``, which has just taken ``repeat``'s header, the state its next lines
    lead to; ``at`` holds the line numbers of the header and of those lines."""
    cur, t = assembler.current, repeat.tb
    assert cur is not None and cur.line_count == 1
    cur.exceptions = [dataclasses.replace(e, lineno=at[e.lineno - 1]) for e in t.exceptions]
    cur.frames = list(t.frames)
    cur.text = list(t.text)
    cur.line_count = t.line_count
    cur.exc_type = t.exc_type
    cur.exc_message = list(t.exc_message)
    cur.exc_line = at[t.exc_line - 1]
    cur.noise = t.noise
    cur.code_next = t.code_next
    assembler.state = repeat.state
    assembler.blank_run = repeat.blank_run
