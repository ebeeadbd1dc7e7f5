"""What every renderer needs of a report's text, whatever its format: control characters made
visible, rank lists, sizes, messages cut at a word. Plain strings in, plain strings out; each
renderer escapes the result for its own format."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crashlens.model import plural

if TYPE_CHECKING:
    from crashlens.model import Resemblance

_CONTROL = {c: f"\\x{c:02x}" for c in range(32) if c not in (9, 10)}
_CONTROL[127] = "\\x7f"


def clean(text: str) -> str:
    """Neutralise control characters but newlines (ESC sequences become visible ``\\x1b``)."""
    return text.translate(_CONTROL)


def rank_list(ranks: list[int]) -> str:
    """Ranks for a report line: all of up to 8, else the first 6 and how many (``-``: none)."""
    if not ranks:
        return "-"
    if len(ranks) <= 8:
        return ", ".join(map(str, ranks))
    return f"{', '.join(map(str, ranks[:6]))}, … ({len(ranks)} ranks)"


def on_ranks(ranks: list[int] | tuple[int, ...]) -> str:
    """`` on rank 3`` / `` on ranks 0, 1`` / ``""`` (no ranks known)."""
    if not ranks:
        return ""
    return f" on {'rank' if len(ranks) == 1 else 'ranks'} {rank_list(list(ranks))}"


def human_bytes(n: int) -> str:
    """``512 bytes``, ``12.3 KB``, ``4.1 MB``, ``2.0 GB`` (never ``0.0 MB``)."""
    if n < 1000:
        return plural(n, "byte")
    for unit, size in (("KB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if n < size * 1000 or unit == "GB":
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"  # pragma: no cover - the loop always returns


def cut_words(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a word boundary, with an ellipsis."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + " …"


def resembles(r: Resemblance) -> str:
    """What a resembled class is worth, in words: ``known reports of corrupt_data (such a
    guess was right for 7 of 44 held-out reports)``; the record is what a reader can weigh,
    the likelihood share only where no record was kept."""
    if r.record is not None:
        right, of = r.record
        worth = f"such a guess was right for {right} of {plural(of, 'held-out report')}"
    else:
        worth = f"{r.share:.0%} of the likelihood"
    return f"known reports of {r.cls} ({worth})"
