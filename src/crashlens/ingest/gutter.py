"""Take off the line numbers a paste kept from a viewer that numbers its lines.

A log copied out of an editor, a code viewer or ``cat -n`` keeps their gutter: every line
starts with its own number, counting up by one (`` 1  Traceback (most recent call last):``,
`` 2   File "train.py", line 13, in <module>``). Nothing in it then starts where a reader of
logs looks, so a traceback would go unseen. A file whose first lines are numbered so is read
with each line's number taken off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from crashlens import lazyre

#: At least this many lines, numbered one after another, make a gutter.
MIN_LINES = 3
#: A gutter's number (right-aligned or not) and what separates it from the line: one or two
#: blanks, or ``cat -n``'s tab; an empty line is its number alone.
_NUMBER = lazyre.compile_regex(r" {0,6}(\d{1,6})(?: {1,2}|\t|$)")


def numbered(lines: Iterable[str]) -> bool:
    """Whether each of ``lines`` (a file's first lines) starts with its line number, the numbers
    counting up by one, over :data:`MIN_LINES` lines or more."""
    expected: int | None = None
    count = 0
    for line in lines:
        m = _NUMBER.match(line)
        if m is None:
            return False
        number = int(m[1])
        if expected is not None and number != expected:
            return False
        expected = number + 1
        count += 1
    return count >= MIN_LINES


def ungutter(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """``(lineno, text)`` with each line's gutter number taken off (a line without one, past
    the sample :func:`numbered` judged, is kept as it is)."""
    for lineno, text in lines:
        m = _NUMBER.match(text)
        yield lineno, text if m is None else text[m.end() :]
