"""Turn a file's bytes into bounded text lines: decompress, sniff binary, decode, split.

Lines are produced from fixed-size chunks, never from ``readline``, so a file with one
100 MB line costs one chunk of memory and yields a truncated line instead of a huge string.
"""

from __future__ import annotations

import bz2
import codecs
import fcntl
import io
import lzma
import os
import re
import stat
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

from crashlens import lazyre


def _read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged (compressed) file raises: zstandard's error only once a .zst
    input has imported zstandard (none can be raised before)."""
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error, lzma.LZMAError)
    module = sys.modules.get("zstandard")
    return (*errors, module.ZstdError) if module is not None else errors


CHUNK = 1 << 18
#: Longest line kept; the rest of an overlong line is dropped (and marked) before parsing.
MAX_LINE = 16 * 1024
#: A terminal's colour, cursor and OSC sequences: markup that takes no column, not log text.
_ANSI = lazyre.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def strip_ansi(raw: str) -> str:
    """``raw`` without ANSI colour and OSC sequences (terminal markup, not log text)."""
    return _ANSI.sub("", raw) if "\x1b" in raw else raw


_TRUNCATED = " …[line truncated by crashlens]"


def cap_line(text: str) -> str:
    """``text`` cut to :data:`MAX_LINE` characters, marked when cut (the one place lines are)."""
    return text if len(text) <= MAX_LINE else text[:MAX_LINE] + _TRUNCATED


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)


_OPENERS: dict[str, Callable[[BinaryIO], Any]] = {
    "gzip": lambda raw: Gunzip(raw),
    "bzip2": bz2.open,
    "xz": lzma.open,
    "zstd": lambda raw: Unzstd(raw),
}
#: Decompressed bytes of one file past which a ratio over :data:`BOMB_RATIO` is a bomb...
BOMB_MIN_BYTES = 256 << 20
BOMB_RATIO = 200
#: ... and the most decompressed bytes read from any one file.
MAX_DECOMPRESSED = 16 << 30
#: Seconds one compressed file may take to decompress and parse.
MAX_FILE_SECONDS = 300.0
_BINARY_MAGIC = (b"\x7fELF", b"PK\x03\x04", b"\x89PNG", b"\x80\x02", b"\x80\x04", b"\x93NUMPY")


def compressed(head: bytes) -> bool:
    """Whether bytes starting with ``head`` are compressed (a format crashlens decompresses)."""
    return any(head.startswith(magic) for magic, _ in _MAGIC)


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
    encoding = _text_encoding(head)
    written = report_format(head)
    if written is not None:
        raise NotText(f"a {written} report crashlens wrote, not a log")
    return None, encoding


#: How each crashlens report begins (render/): re-analysing a directory must not cite them.
_REPORT_HEADS = (
    ("json", lazyre.compile(rb'\A\{\s*"schema_version": \d+,\s*"tool": \{\s*"name": "crashlens"')),
    ("junit", lazyre.compile(rb"\A<\?xml[^>]*>\s*<testsuites name=\"crashlens\"")),
    ("html", lazyre.compile(rb"\A<!DOCTYPE html>.{0,2000}?<title>crashlens report: ", re.S)),
    ("markdown", lazyre.compile(rb"\A## \S+ crashlens: ")),
    ("text", lazyre.compile(rb"\Acrashlens: [^\n]*\n(?:The process|Rank \d+|No failure found)")),
)


def report_format(head: bytes) -> str | None:
    """The format of the crashlens report ``head`` begins, if it is one."""
    for name, pattern in _REPORT_HEADS:
        if pattern.match(head):
            return name
    return None


def _text_encoding(head: bytes) -> str:
    if not head:
        return "utf-8"
    nul = head.count(0)
    if nul:
        # UTF-16 without a BOM has a NUL in every other byte (odd bytes for LE, even for BE).
        if nul * 2 >= len(head) * 0.9 and nul < len(head) * 0.9:
            # ... and text in the other half (a run of zeros is not UTF-16).
            if head[1::2].count(0) > len(head) * 0.4:
                return "utf-16-le"
            if head[0::2].count(0) > len(head) * 0.4:
                return "utf-16-be"
        # A block of NULs in a text log (a file extended but never flushed when the node died)
        # is a hole, not a binary: judge the bytes around it.
        rest = head.replace(b"\0", b"")
        if nul > len(head) * 0.01 and (
            not rest or _control_ratio(rest) > 0.1 or nul_runs(head) > 8
        ):
            raise NotText("binary file (NUL bytes)")
        head = rest
    if _control_ratio(head) > 0.1:
        raise NotText("binary file (control bytes)")
    return "utf-8"


#: Control bytes no text has (tab, newline, vertical tab, form feed, carriage return are fine).
_CONTROL = bytes((*range(9), *range(14, 32)))


def _control_ratio(data: bytes) -> float:
    return (len(data) - len(data.translate(None, _CONTROL))) / max(1, len(data))


def nul_runs(data: bytes) -> int:
    """How many separate runs of NUL bytes ``data`` has (holes are one run, binaries many)."""
    return sum(1 for part in data.split(b"\0") if part) - 1 if b"\0" in data else 0


class _Bounded(io.RawIOBase):
    """A file read only up to the size it had when opened.

    A log still being appended to (the job or a ``tee`` is alive) would otherwise be read
    forever by a reader that never catches up with its writer.
    """

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self.raw, self.left = raw, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            return 0
        view = memoryview(buffer)[: self.left]
        n = self.raw.readinto(view)  # type: ignore[attr-defined]
        self.left -= n or 0
        return n or 0

    def close(self) -> None:
        self.raw.close()
        super().close()


def _open_regular(path: Path) -> BinaryIO:
    """Open a regular file without ever blocking (a FIFO swapped in after discovery)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotText("not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        raw = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(_Bounded(raw, st.st_size), buffer_size=1 << 16)


def open_binary(path: Path, stdin: BinaryIO | None = None) -> tuple[BinaryIO, str]:
    """Open ``path`` (or stdin) for reading decompressed bytes; returns the stream and encoding.

    Raises:
        NotText: when the content is not text (or a compressed file is corrupt from the start).
        OSError: when the file cannot be opened.
    """
    raw: BinaryIO = stdin if stdin is not None else _open_regular(path)
    try:
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)  # type: ignore[type-var]
        head = buffered.peek(8192)[:8192]
        compression, encoding = sniff(head)
        if compression is None:
            return buffered, encoding
        # The decompressor is used as is (it has peek and read1): wrapping it in another
        # buffer would throw away a whole buffer of good lines when a damaged tail raises.
        inner: BinaryIO = _OPENERS[compression](buffered)
        try:
            _, encoding = sniff(inner.peek(8192)[:8192])  # type: ignore[attr-defined]
        except _read_errors() as exc:
            raise NotText(f"corrupt {compression} data ({exc or type(exc).__name__})") from None
        size = os.stat(path).st_size if stdin is None else 0
        # Capped has the reading half of BinaryIO that every reader here uses.
        return cast(BinaryIO, Capped(inner, size)), encoding
    except BaseException:
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
                yield from _split_cr(lineno, cap_line(piece))
            if len(pending) > MAX_LINE:
                if not dropping:
                    lineno += 1
                    yield lineno, cap_line(pending)
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


class DecompressionCapped(OSError):
    """A compressed file decompressed past a cap (a decompression bomb, or too slow)."""


class Capped:
    """A decompressing stream that stops at the caps: a bomb-like ratio past
    :data:`BOMB_MIN_BYTES`, :data:`MAX_DECOMPRESSED` bytes, :data:`MAX_FILE_SECONDS` seconds.

    Stopping raises :class:`DecompressionCapped`, which :class:`Tolerant` turns into the
    file's note, keeping every line read before it.
    """

    def __init__(self, inner: BinaryIO, compressed_size: int) -> None:
        self.inner = inner
        self.limit = MAX_DECOMPRESSED
        self.why = f"more than {MAX_DECOMPRESSED >> 30} GiB"
        bomb = max(BOMB_MIN_BYTES, compressed_size * BOMB_RATIO)
        if compressed_size and bomb < self.limit:
            self.limit = bomb
            self.why = f"over {BOMB_RATIO}x its compressed size: a decompression bomb?"
        self.read_bytes = 0
        self.deadline = time.monotonic() + MAX_FILE_SECONDS

    def peek(self, size: int = 1) -> bytes:
        """Bytes available without consuming them."""
        return self.inner.peek(size)  # type: ignore[attr-defined, no-any-return]

    def read1(self, size: int = -1) -> bytes:
        """Up to ``size`` decompressed bytes, until a cap is reached."""
        return self._count(getattr(self.inner, "read1", self.inner.read)(size))

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` decompressed bytes, until a cap is reached."""
        return self._count(self.inner.read(size))

    def _count(self, data: bytes) -> bytes:
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise DecompressionCapped(
                f"decompression stopped at {self.limit >> 20} MiB ({self.why}); "
                "the rest of the file is left out"
            )
        if time.monotonic() > self.deadline:
            raise DecompressionCapped(
                f"decompression stopped after {MAX_FILE_SECONDS:.0f} s; the rest of the file "
                "is left out"
            )
        return data

    def close(self) -> None:
        """Close the underlying stream."""
        self.inner.close()


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
        except _read_errors() as exc:
            self.damage = str(exc) or type(exc).__name__
            return b""

    def close(self) -> None:
        """Close the underlying stream."""
        self.inner.close()


class Gunzip:
    """Streaming gzip reader that hands out every byte before reporting damage.

    ``gzip.GzipFile`` checks the CRC in the same call that returns a member's last bytes, so a
    bad trailer (or garbage after it) loses them. Here the last 8 input bytes (the trailer) are
    held back until the end, and an error is raised only once the good data is consumed.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.decomp = zlib.decompressobj(31)
        self.buf = b""
        self.held = b""
        self.done = False
        self.error: Exception | None = None

    def _fill(self, want: int) -> None:
        while len(self.buf) < want and not self.done:
            chunk = self.raw.read(1 << 16)
            data = self.held + chunk
            self.held, data = (data[-8:], data[:-8]) if chunk else (b"", data)
            try:
                self.buf += self.decomp.decompress(data)
            except zlib.error as exc:
                self.error, self.done = exc, True
                return
            if self.decomp.eof:
                rest = self.decomp.unused_data + self.held
                self.held = b""
                if rest.startswith(b"\x1f\x8b"):  # a concatenated member
                    self.decomp = zlib.decompressobj(31)
                    self.held = rest
                elif rest.strip(b"\0"):
                    self.error, self.done = OSError("garbage after the gzip data"), True
                    return
                elif not chunk:
                    self.done = True
            elif not chunk:
                self.error = EOFError("compressed file ended before the end of the data")
                self.done = True

    def peek(self, size: int = 1) -> bytes:
        """Bytes available without consuming them."""
        self._fill(max(size, 1))
        if not self.buf and self.error is not None:
            raise self.error
        return self.buf

    def read1(self, size: int = -1) -> bytes:
        """Up to ``size`` decompressed bytes."""
        want = size if size > 0 else 1 << 20
        self._fill(min(want, 1 << 16))
        if not self.buf and self.error is not None:
            error, self.error = self.error, None
            raise error
        out, self.buf = self.buf[:want], self.buf[want:]
        return out

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` decompressed bytes (all of them for a negative size)."""
        parts: list[bytes] = []
        total = 0
        while size < 0 or total < size:
            try:
                part = self.read1(size - total if size > 0 else -1)
            except (OSError, EOFError, zlib.error) as exc:
                if not parts:
                    raise
                self.error = exc  # report it on the next read, after these good bytes
                break
            if not part:
                break
            parts.append(part)
            total += len(part)
        return b"".join(parts)

    def close(self) -> None:
        """Close the underlying file."""
        self.raw.close()


class Unzstd(Gunzip):
    """Streaming zstd reader with :class:`Gunzip`'s promise: every byte before the damage,
    then the error. zstandard's own stream reader ends a cut-off frame silently; here the
    input ending inside a frame is reported, and concatenated frames are read in turn."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard  # only a .zst input pays for it

        super().__init__(raw)
        self.zstd = zstandard
        self.frame = zstandard.ZstdDecompressor().decompressobj()
        self.between = True  # no frame begun yet, or the last one ended

    def _fill(self, want: int) -> None:
        while len(self.buf) < want and not self.done:
            data = self.raw.read(1 << 16)
            if not data:
                if not self.between:
                    self.error = EOFError("compressed file ended before the end of the zstd frame")
                self.done = True
                return
            while data:
                self.between = False
                try:
                    self.buf += self.frame.decompress(data)
                except self.zstd.ZstdError as exc:
                    self.error, self.done = exc, True
                    return
                if not self.frame.eof:
                    break
                data = self.frame.unused_data
                self.frame = self.zstd.ZstdDecompressor().decompressobj()
                self.between = True
