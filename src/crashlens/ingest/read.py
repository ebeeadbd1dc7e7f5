"""Turn a file's bytes into bounded text lines: decompress, sniff binary, decode, split.

Lines are produced from fixed-size chunks, never from ``readline``, so a file with one
100 MB line costs one chunk of memory and yields a truncated line instead of a huge string.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

CHUNK = 1 << 18
#: Longest line kept; the rest of an overlong line is dropped (and marked) before parsing.
MAX_LINE = 16 * 1024
_TRUNCATED = " …[line truncated by crashlens]"

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_OPENERS = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}
_BINARY_MAGIC = (b"\x7fELF", b"PK\x03\x04", b"\x89PNG", b"\x80\x02", b"\x80\x04", b"\x93NUMPY")


class Readable(Protocol):
    """Anything bytes can be read from (a file, a decompressor, :class:`Tolerant`)."""

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes; b"" at the end."""
        ...


class NotText(Exception):
    """The file is not a text log (a core dump, a checkpoint, an image...)."""


def sniff(head: bytes) -> tuple[str | None, str]:
    """Return ``(compression, encoding)`` for a file starting with ``head``.

    Raises:
        NotText: when the bytes are not text.
    """
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name, "utf-8"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return None, "utf-16"
    if head.startswith(_BINARY_MAGIC):
        raise NotText("binary file (known binary format)")
    return None, _text_encoding(head)


def _text_encoding(head: bytes) -> str:
    if not head:
        return "utf-8"
    nul = head.count(0)
    if nul:
        # UTF-16 without a BOM has a NUL in every other byte; anything else with NULs is binary.
        if nul * 2 >= len(head) * 0.9 and head[1::2].count(0) > len(head) * 0.4:
            return "utf-16-le"
        if nul > len(head) * 0.01:
            raise NotText("binary file (NUL bytes)")
    control = sum(1 for b in head if b < 9 or 13 < b < 32)
    if control > len(head) * 0.1:
        raise NotText("binary file (control bytes)")
    return "utf-8"


def open_binary(path: Path, stdin: BinaryIO | None = None) -> tuple[BinaryIO, str]:
    """Open ``path`` (or stdin) for reading decompressed bytes; returns the stream and encoding.

    Raises:
        NotText: when the content is not text.
        OSError: when the file cannot be opened.
    """
    raw: BinaryIO = stdin if stdin is not None else open(path, "rb")  # noqa: SIM115
    try:
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)  # type: ignore[type-var]
        head = buffered.peek(8192)[:8192]
        compression, encoding = sniff(head)
        if compression is None:
            return buffered, encoding
        inner: BinaryIO = _OPENERS[compression](buffered)  # type: ignore[operator]
        # Re-sniff the decompressed content: a compressed core dump is still binary.
        inner_buffered = io.BufferedReader(inner)  # type: ignore[type-var]
        _, encoding = sniff(inner_buffered.peek(8192)[:8192])
        return inner_buffered, encoding
    except Exception:
        raw.close()
        raise


def iter_lines(
    stream: Readable, encoding: str = "utf-8", head: bytes = b""
) -> Iterator[tuple[int, str]]:
    """Yield ``(physical_line_number, text)``; bare ``\\r`` (progress bars) splits lines too.

    ``head`` holds bytes already read from ``stream`` (to sniff it); they come first.

    Invalid bytes are decoded with U+FFFD; overlong lines are truncated to :data:`MAX_LINE`.
    """
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    lineno = 0
    pending = ""
    dropping = False
    # read1 returns what one underlying read produced, so a truncated compressed file loses
    # at most that last piece instead of a whole chunk.
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk, head = (head, b"") if head else (read(CHUNK), b"")
        text = decoder.decode(chunk, final=not chunk)
        if text:
            pieces = text.split("\n")
            pieces[0] = pending + pieces[0] if not dropping else pieces[0]
            pending = pieces.pop()
            for piece in pieces:
                lineno += 1
                if dropping:
                    dropping = False
                    continue
                yield from _split_cr(lineno, piece)
            if len(pending) > MAX_LINE:
                if not dropping:
                    lineno += 1
                    yield lineno, pending[:MAX_LINE] + _TRUNCATED
                    lineno -= 1  # the physical line ends later; count it once, at its newline
                dropping = True
                pending = ""
        if not chunk:
            break
    if pending and not dropping:
        lineno += 1
        yield from _split_cr(lineno, pending)


def _split_cr(lineno: int, piece: str) -> Iterator[tuple[int, str]]:
    if "\r" not in piece:
        yield lineno, piece
        return
    for part in piece.split("\r"):
        if part:
            yield lineno, part


def open_text(path: Path, stdin: BinaryIO | None = None) -> Iterator[tuple[int, str]]:
    """Open a file and yield its lines (see :func:`iter_lines`); the file is closed at the end."""
    stream, encoding = open_binary(path, stdin)
    try:
        yield from iter_lines(stream, encoding)
    finally:
        if stdin is None:
            stream.close()


class Tolerant:
    """A byte stream that ends, instead of raising, where the file is damaged.

    A truncated ``.gz`` or a file that vanished mid-read still yields everything before the
    damage; ``damage`` says what happened.
    """

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.damage: str | None = None

    def read(self, size: int = -1) -> bytes:
        """Like ``BinaryIO.read``; returns b"" from the point of damage on."""
        return self._guard(self.inner.read, size)

    def read1(self, size: int = -1) -> bytes:
        """Like ``BufferedReader.read1``; returns b"" from the point of damage on."""
        return self._guard(getattr(self.inner, "read1", self.inner.read), size)

    def _guard(self, fn: Callable[[int], bytes], size: int) -> bytes:
        if self.damage is not None:
            return b""
        try:
            return fn(size)
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            self.damage = str(exc) or type(exc).__name__
            return b""

    def close(self) -> None:
        """Close the underlying stream."""
        self.inner.close()
