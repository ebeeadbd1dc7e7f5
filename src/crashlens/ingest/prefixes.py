"""Strip the per-line prefixes launchers add, and keep the rank or host they name.

A combined file (torchrun ``--tee``, ``srun --label``, Open MPI ``--tag-output``, pdsh, kubectl
``--prefix``) interleaves several ranks line by line. Stripping the prefix *before* anything
else lets every later stage work per rank, so two ranks' tracebacks can never mix.
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from crashlens import lazyre

_BRACKET = lazyre.compile_regex(r"\[(?P<role>[A-Za-z_][\w\-]*?)(?P<n>\d+)\]:[ ]?")
_MPI = lazyre.compile_regex(r"\[\d+,(?P<n>\d+)\]<(?:stdout|stderr|stddiag)>:[ ]?")
_SRUN = lazyre.compile_regex(r" *(?P<n>\d{1,5}): ")
#: The labels a test harness's tee prints before each line of its child's streams.
_TEE_LABELS = ("stdout:", "stderr:")
#: A host name, not a (module-qualified) exception type: ``PIL.UnidentifiedImageError: ...``
#: ends in an exception word, which no host name does.
_NOT_EXCEPTION = r"(?<!Error)(?<!Exception)(?<!Warning)(?<!Exit)(?<!Interrupt)(?<!Iteration)"
_PDSH = lazyre.compile_regex(r"(?P<host>[A-Za-z][\w\-.]*)" + _NOT_EXCEPTION + r": ")
_KUBECTL = lazyre.compile_regex(r"\[pod/(?P<host>[^/\]\s]+)/[^\]\s]+\] ")
#: Determined's launcher (determined/launch/wrap_rank.py: ``f"[rank={rank}] {line}"``).
_WRAP_RANK = lazyre.compile_regex(r"\[rank=(?P<n>\d+)\] ")
#: A process label in parentheses, with its pid: Ray's worker and actor output
#: (``(RayTrainWorker pid=1234, ip=10.0.0.2)``, ``(pid=1234)``) and SkyPilot's per-node task
#: output (``(head, rank=0, pid=1113)``, ``(worker1, rank=1, pid=914, ip=10.0.0.2)``); the
#: rank, when given, is the node's rank in the task.
_LABEL_RE = (
    r"\((?:(?P<label>[A-Za-z_][\w.\-]{0,80})(?:, | ))?(?:rank=(?P<n>\d+), )?pid=(?P<pid>\d+)"
    r"(?:, ip=(?P<ip>[\w.:\-]{1,64}))?\) "
)
_LABEL = lazyre.compile_regex(_LABEL_RE)
#: What Ray's driver adds after a line its workers printed alike on several processes
#: (python/ray/_private/ray_logging: " [repeated 3x across cluster]"), the first time with a
#: notice of how to turn the deduplication off: not the program's text.
_RAY_REPEATED = lazyre.compile_regex(
    r" \[repeated \d{1,9}x across cluster\](?: \(Ray deduplicates logs by default\.[^\n]{0,300}"
    r"for more options\.\))?$"
)
#: A tool's stamp: RFC 3339 or ISO 8601 as ``kubectl logs --timestamps``, ``docker logs -t`` and
#: CI runners put it, or in brackets, as Jenkins' Timestamper does (``[2022-06-18T02:31:53.944Z]``).
_STAMP_RE = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
#: (a stamped blank line is the stamp alone once its trailing blank is gone)
_LEADING_STAMP = lazyre.compile_regex(rf"(?:{_STAMP_RE}|\[{_STAMP_RE}\])(?: |$)")
#: Stamps only a tool writes, never a logging library's default format: RFC 3339 in UTC with
#: nanoseconds (kubectl, docker), and Jenkins' bracketed ISO time in UTC.
_CONTAINER_STAMP = lazyre.compile_regex(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z |\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z\] "
)
#: An exception's final line, as Python prints it (bare: a logger puts its level first).
_BARE_EXCEPTION_RE = r"[A-Za-z_][\w.]{0,80}(?:Error|Exception|Interrupt|Exit):"
_BARE_EXCEPTION = lazyre.compile_regex(_BARE_EXCEPTION_RE)
#: After a leading stamp, text no program stamps itself: an indented line, a traceback, a launcher
#: prefix, a second stamp, a shell's own report (``/bin/bash: line 27: 318 Killed ...``), an
#: exception's final line (Python prints it bare; a logger puts its level first).
_NEEDS_STAMP_STRIP = lazyre.compile_regex(
    r"\s|Traceback \(|\[default\d|\[rank\d|\d{4}-\d\d-\d\d[ T]|\S{1,300}: line \d+: |"
    + _BARE_EXCEPTION_RE
)
#: A tqdm bar without a description: its percentage, right-aligned, then the bar.
_BAR_START = lazyre.compile_regex(r" {0,4}\d{1,3}%\|")
#: A word that names a file by its extension: a shared library, a source file, a log.
_FILE_NAME = lazyre.compile_regex(
    r"\.(?:so(?:\.\d+)*|py|pyc|pyx|c|cc|cpp|cu|cuh|h|hpp|log|txt|json|ya?ml|sh|pth?|bin)$"
)
#: A dotted name ending in a CamelCase class (``pyarrow.lib.ArrowInvalid``, ``zipfile.BadZipFile``,
#: ``queue.Empty``): an exception's qualified type, not a host label (hosts are lowercase).
_QUALIFIED_CLASS = lazyre.compile_regex(r"\.[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")
#: The deepest margin a pasted block (or a traceback header) may be indented by: deeper, the
#: lines are quoted inside something else.
MAX_MARGIN = 24
_NCCL_HOST = lazyre.compile_regex(r"(?P<host>[\w\-.]+):(?P<pid>\d+):(?P<tid>\d+) \[\d+\] ")


@dataclass(frozen=True, slots=True)
class Prefix:
    """What the prefixes of one line said about its writer."""

    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    #: A timestamp some tool put in front of every line (with its trailing space).
    stamp: str = ""


NO_PREFIX = Prefix()


@dataclass(frozen=True, slots=True)
class PrefixStyle:
    """Ambiguous prefix styles switched on for a file after sniffing its first lines.

    ``srun --label`` (`` 3: ``) and pdsh (``node-01: ``) look like ordinary text, so they are
    only stripped when most of the file's first lines carry them.
    """

    srun: bool = False
    pdsh: bool = False
    stamped: bool = False
    #: Leading spaces every line of the file's head carries: the file is a paste indented as
    #: a block (a list item, a quote), removed before anything else is read.
    margin: str = ""
    #: Every line of the head is followed by a blank one: a paste that doubled its line
    #: breaks (a web page's copy, CRLF read twice); the blank lines are not the log's.
    double_spaced: bool = False
    #: Lines start with a process label in parentheses (Ray's, SkyPilot's: :data:`_LABEL`).
    labelled: bool = False
    #: Lines start with the stream a test harness read them from: ``print(label, line)`` with
    #: ``stdout:``/``stderr:`` (the ``execute_subprocess_async`` of accelerate's and
    #: transformers' testing utilities, as ``accelerate test`` prints its child's output).
    teed: bool = False


def sniff_style(head: Iterable[str]) -> PrefixStyle:
    """Decide which ambiguous prefix styles a file uses from its first lines."""
    raw = list(head)
    lines = [line for line in raw if line.strip()]
    if not lines:
        return PrefixStyle()
    doubled = _double_spaced(raw)
    margin = _common_margin(lines)
    if margin:
        lines = [line[len(margin) :] for line in lines]
    stamps = [m for line in lines if (m := _LEADING_STAMP.match(line))]
    # Every line stamped, including ones a program never stamps itself (tracebacks, launcher
    # prefixes, lines that carry their own logging time): a tool added the stamps.
    # So is RFC 3339 with nanoseconds in UTC (``2024-05-01T03:14:00.123456789Z``): what
    # ``kubectl logs --timestamps`` and ``docker logs -t`` put there; no logging library's
    # default format, so most of the lines are enough (a paste's own first line, the command
    # that printed them, comes unstamped).
    stamped = (
        len(stamps) >= 0.8 * len(lines)
        and any(_NEEDS_STAMP_STRIP.match(m.string, m.end()) for m in stamps)
    ) or (
        len(stamps) > 0.5 * len(lines) and all(_CONTAINER_STAMP.match(m.group(0)) for m in stamps)
    )
    if stamped:
        lines = [line[m.end() :] if (m := _LEADING_STAMP.match(line)) else line for line in lines]
    srun = sum(1 for line in lines if _SRUN.match(line))
    hosts = Counter(m["host"] for line in lines if (m := _PDSH.match(line)))
    pdsh_hits = sum(n for host, n in hosts.items() if _looks_like_host(host))
    # a label with a pid reads as nothing else, so a share of the lines is enough (a Ray
    # driver's own lines come without one)
    labelled = sum(1 for line in lines if line[:1] == "(" and _LABEL.match(line))
    teed = sum(1 for line in lines if line.startswith(_TEE_LABELS))
    return PrefixStyle(
        srun=srun >= 0.6 * len(lines),
        pdsh=pdsh_hits >= 0.6 * len(lines),
        stamped=stamped,
        margin=margin,
        double_spaced=doubled,
        labelled=labelled >= max(2, 0.2 * len(lines)),
        teed=teed >= 0.6 * len(lines),
    )


def _double_spaced(raw: list[str]) -> bool:
    """Whether every line break of ``raw`` was doubled (at least 3 lines of text): each line
    of text but the last is followed by an odd number of blank lines (one, or three where
    the log had a blank line of its own, ...)."""
    text = [i for i, line in enumerate(raw) if line.strip()]
    if len(text) < 3:
        return False
    return all((b - a) % 2 == 0 for a, b in pairwise(text))


def _common_margin(lines: list[str]) -> str:
    """What every one of ``lines`` starts with when a paste indented or quoted the block: at
    least two spaces (one is a console's stray space), tabs, or a quote's ``> `` (an email's
    or Markdown's), at most ``MAX_MARGIN`` characters. A progress bar's own padding (tqdm
    right-aligns ``  7%|``) is not a paste's: bar lines are left out, and so are a quote's
    empty lines (``>`` alone)."""
    text = [
        line
        for line in lines
        if "\r" not in line and not _BAR_START.match(line) and line.strip(_MARGIN_CHARS)
    ]
    if not text:
        return ""
    leads = [line[: len(line) - len(line.lstrip(_MARGIN_CHARS))] for line in text]
    common = os.path.commonprefix(leads)  # noqa: RUF071 -- character by character is meant
    if len(common) > MAX_MARGIN:
        return ""
    if ">" in common or "\t" in common:
        return common
    return common if len(common) >= 2 else ""


#: What a paste's margin is made of: indentation and a quote's markers.
_MARGIN_CHARS = " \t>"


def _looks_like_host(word: str) -> bool:
    """A pdsh host label (``node-01``, ``gpu12.cluster``), not a file the line is about
    (``flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: ...``)."""
    if _FILE_NAME.search(word) or _QUALIFIED_CLASS.search(word):
        return False
    return any(c.isdigit() for c in word) or "." in word or "-" in word


def strip(text: str, style: PrefixStyle) -> tuple[str, Prefix]:
    """Remove launcher prefixes from ``text``; return the rest and what they said."""
    if not text:
        return text, NO_PREFIX
    if style.margin:
        if text.startswith(style.margin):
            text = text[len(style.margin) :]
        elif text.rstrip() == style.margin.rstrip():
            return "", NO_PREFIX  # a quote's empty line

    rank = local_rank = None
    host = None
    stamp = _tool_stamp(text, style)
    pos = len(stamp)
    if style.teed:
        pos = _after_tee_label(text, pos)
    if style.pdsh:
        m = _PDSH.match(text, pos)
        if m:
            host = m["host"]
            pos = m.end()
    task = None
    if style.srun:
        m = _SRUN.match(text, pos)
        if m:
            task = int(m["n"])
            pos = m.end()
    pid = None
    if style.labelled:
        if "across cluster]" in text:
            text = _RAY_REPEATED.sub("", text)
        m = _LABEL.match(text, pos) if text.startswith("(", pos) else None
        if m:
            rank = int(m["n"]) if m["n"] else None
            # a rank's label names its node (SkyPilot); else the label is a process's (a Ray
            # actor's class) and the ip names the node
            host = (m["label"] if rank is not None else None) or m["ip"] or m["label"] or host
            pid = int(m["pid"])
            pos = m.end()
    first = text[pos : pos + 1]
    if first == "[":
        # (each form's first characters checked before its regex runs)
        m = _KUBECTL.match(text, pos) if text.startswith("[pod/", pos) else None
        if m:
            host = m["host"]
            pos = m.end()
        m = _MPI.match(text, pos) if text[pos + 1 : pos + 2].isdigit() else None
        if m:
            rank = int(m["n"])
            pos = m.end()
            tag = text[m.start() : m.end()].rstrip(" ")
            if tag in text[pos:]:
                # --tag-output tags every write, and Python writes an exception's type and
                # its ": message" apart: ``RuntimeError[1,19]<stderr>:: NCCL ...``
                text = text[:pos] + text[pos:].replace(tag, "")
        # Prefixes stack: ``[default1]:[rank5]: ...`` names the local and the global rank.
        while (bracket := _bracket(text, pos)) is not None:
            role, n, end = bracket
            if role == "rank":
                rank = n
            elif role in ("E", "W", "I", "F"):
                break
            else:
                local_rank = n
            pos = end
        m = _WRAP_RANK.match(text, pos) if text.startswith("[rank=", pos) else None
        if m:
            rank = int(m["n"])
            pos = m.end()
    if pos == 0:
        return text, NO_PREFIX
    if task is not None and rank is None:
        if local_rank is None:
            # srun started each rank itself (one task per rank): its task id is the rank.
            rank = task
        elif host is None:
            # srun started a launcher per node (``srun torchrun``): its task id names that
            # node's agent, whose workers' local ranks follow; the global rank is not known.
            host = f"srun-task-{task}"
    return text[pos:], _prefix(rank, local_rank, host, pid, stamp)


def _after_tee_label(text: str, pos: int) -> int:
    """Where ``text`` goes on after a test harness's ``stdout:``/``stderr:`` label at ``pos``
    (``print(label, line)`` put one blank after it), or ``pos`` when none is there."""
    label = next((x for x in _TEE_LABELS if text.startswith(x, pos)), "")
    if not label:
        return pos
    pos += len(label)
    return pos + 1 if text.startswith(" ", pos) else pos


#: How far :func:`_bracket` looks for a tag's end.
_TAG_WINDOW = 64


def _bracket(text: str, pos: int) -> tuple[str, int, int] | None:
    """The ``[role<n>]:`` tag at ``pos`` of ``text`` (:data:`_BRACKET`'s match there), as its
    role, number and end; a job's lines carry a handful of tags, each read by the regex once."""
    if not text.startswith("[", pos):
        return None
    close = text.find("]:", pos, pos + _TAG_WINDOW)
    if close < 0:  # no tag, or one too long to remember
        m = _BRACKET.match(text, pos)
        return None if m is None else (m["role"], int(m["n"]), m.end())
    end = close + 3 if text.startswith(" ", close + 2) else close + 2
    known = _read_tag(text[pos:end])
    return None if known is None else (known[0], known[1], end)


@functools.lru_cache(maxsize=4096)
def _read_tag(tag: str) -> tuple[str, int] | None:
    """A whole tag's role and number (the regex cannot match past the first "]:", nor stop
    before it); None: not a launcher's tag."""
    m = _BRACKET.fullmatch(tag)
    return (m["role"], int(m["n"])) if m else None


@functools.lru_cache(maxsize=4096)
def _prefix(
    rank: int | None, local_rank: int | None, host: str | None, pid: int | None, stamp: str
) -> Prefix:
    """A :class:`Prefix` of these fields, shared by every line that has them (it is frozen)."""
    return Prefix(rank=rank, local_rank=local_rank, host=host, pid=pid, stamp=stamp)


def _tool_stamp(text: str, style: PrefixStyle) -> str:
    """The stamp a tool put at the start of ``text`` (with its blank), or ``""``."""
    if style.stamped:
        m = _LEADING_STAMP.match(text)
        if m is None:
            return ""
        # Stamps stack when one tool's log is shown by another (``kubectl logs --timestamps``
        # of a job whose runner stamped its lines): a second stamp goes too where it stands
        # before text no program stamps itself, or before a launcher's prefix.
        inner = _LEADING_STAMP.match(text, m.end())
        if inner and (
            text.startswith("[", inner.end()) or _NEEDS_STAMP_STRIP.match(text, inner.end())
        ):
            return text[: inner.end()]
        return str(m.group(0))
    if (text[:1].isdigit() or (text[:1] == "[" and text[1:2].isdigit())) and (
        # (no word an exception's type ends in: no final line, and no regex run)
        "Error" in text or "Exception" in text or "Interrupt" in text or "Exit" in text
    ):
        # A stamp before an exception's final line is a tool's, whatever the file's other
        # lines do (a short paste, continuation lines left unstamped): Python prints that
        # line bare, and a logger would have put its level first.
        m = _LEADING_STAMP.match(text)
        if m and _BARE_EXCEPTION.match(text, m.end()):
            return str(m.group(0))
    return ""


def nccl_origin(text: str) -> Prefix | None:
    """Host and pid from an NCCL debug line (``host:pid:tid [dev] NCCL INFO ...``)."""
    if " NCCL " not in text:
        return None
    m = _NCCL_HOST.search(text)
    if not m:
        return None
    return Prefix(host=m["host"], pid=int(m["pid"]))


# -- the fast path's demultiplexer: every line's prefix in one regex pass over bytes ------------
_B_STAMP = b"(?:(?:" + _STAMP_RE.encode() + rb"|\[" + _STAMP_RE.encode() + rb"\]) ){0,2}"
_B_PDSH = rb"(?:[A-Za-z][\w\-.]*" + _NOT_EXCEPTION.encode() + rb": )?"
_B_SRUN = rb"(?: *\d{1,5}: )?"
_B_TEE = rb"(?:std(?:out|err): ?)?"
_B_KUBECTL = rb"\[pod/[^/\]\s]+/[^\]\s]+\] "
_B_MPI = rb"\[\d+,\d+\]<(?:stdout|stderr|stddiag)>:[ ]?"
# Looser than _BRACKET (a key needs only to cover what strip() would take): strip() on the key
# then names the same writer as strip() on the whole line.
_B_BRACKET = rb"\[[A-Za-z_][^\]\n:]{0,40}\]:[ ]?"
_B_WRAP_RANK = rb"\[rank=\d+\] "
_B_LABEL = rb"(?:\([A-Za-z_][^()\n]{0,200}?\bpid=\d+(?:, ip=[\w.:\-]{1,64})?\) )?"
_B_ANY = b"(?:" + b"|".join((_B_KUBECTL, _B_MPI, _B_BRACKET, _B_WRAP_RANK)) + b")"


#: A line (after a block's first) that starts as every prefix :class:`PrefixKeys` reads
#: without an srun or pdsh label or a leading stamp does, for a scanner to report in the same
#: pass as its triggers: a block without one has no prefixed line but maybe its first.
PREFIX_MARKER = rb"\n\["


#: Lines of a block sampled to choose how its keys are read (:meth:`PrefixKeys.keys`).
DENSE_SAMPLE = 32


class PrefixKeys:
    """Reads the launcher prefix of every line of a block of bytes, as a key per line.

    Lines with the same key have the same writer (``strip`` of the key names it); the key of
    an unprefixed line is ``b""``. One compiled pattern per file's :class:`PrefixStyle`.
    """

    def __init__(self, style: PrefixStyle) -> None:
        # a pasted block's margin, then a tool's stamp and a test harness's tee label, come
        # before a launcher's prefix (none of them names the writer: outside the key)
        lead = b"(?:" + re.escape(style.margin.encode()) + b")?" if style.margin else b""
        stamp = lead + (_B_STAMP if style.stamped else b"") + (_B_TEE if style.teed else b"")
        body = (
            (_B_PDSH if style.pdsh else b"")
            + (_B_SRUN if style.srun else b"")
            + (_B_LABEL if style.labelled else b"")
            + b"(?:"
            + _B_KUBECTL
            + b")?(?:"
            + _B_MPI
            + b")?(?:"
            + _B_BRACKET
            + b")*(?:"
            + _B_WRAP_RANK
            + b")?"
        )
        self.every_line = style.srun or style.pdsh or style.labelled
        self._first = re.compile(stamp + b"(" + body + b")")
        self._rest = re.compile(b"\n" + stamp + b"(" + body + b")")
        self._any = re.compile(b"\n" + stamp + _B_ANY)
        #: Whether :data:`PREFIX_MARKER` finds every line this style can prefix.
        self.marked = not stamp
        #: Whether a prefix can only start with ``[`` at a line's start (no margin, stamp, srun
        #: or pdsh label before it): what a vectorised read of the keys needs.
        self.bracketed = self.marked and not self.every_line

    def single(self, block: bytes, start: int, end: int, mark: int | None = None) -> bool:
        """Whether no line of ``block[start:end]`` carries a prefix (one writer); ``mark``:
        where a scan of the same bytes first found :data:`PREFIX_MARKER` (-1: nowhere; None:
        not known)."""
        if self.every_line:
            return False
        first = self._first.match(block, start, end)
        if first is not None and first.end(1) > first.start(1):
            return False
        return self._any.search(block, self._after(start, end, mark), end) is None

    def _after(self, start: int, end: int, mark: int | None) -> int:
        """Where a search for a prefixed line after the first may begin (see :meth:`single`):
        at the first :data:`PREFIX_MARKER`, which every such line of this style starts with."""
        if mark is None or not self.marked:
            return start
        return max(start, mark) if mark >= 0 else end

    def keys(
        self,
        block: bytes,
        start: int,
        end: int,
        lines: int | None = None,
        mark: int | None = None,
    ) -> list[bytes]:
        """The key of each whole line of ``block[start:end]`` (which ends with a newline;
        ``lines``: its number of lines, when known; ``mark``: as for :meth:`single`)."""
        first = self._first.match(block, start, end)
        if not self.every_line and not self._dense(block, start, end):
            return self._sparse_keys(block, start, end, first, lines, mark)
        # No prefix but those the sparse search finds can match here (a key never spans
        # lines): the same keys, by one match per line.
        keys: list[bytes] = self._rest.findall(block, start, end - 1)
        keys.insert(0, first.group(1) if first is not None else b"")
        return keys

    def key_at(self, block: bytes, start: int, end: int) -> bytes:
        """The key of the one line ``block[start:end]`` (as :meth:`keys` has it)."""
        m = self._first.match(block, start, end)
        return m.group(1) if m is not None else b""

    def dense(self, block: bytes, start: int, end: int) -> bool:
        """Whether ``block[start:end]`` reads as a combined console (see :meth:`_dense`)."""
        return not self.every_line and self._dense(block, start, end)

    def _dense(self, block: bytes, start: int, end: int) -> bool:
        """Whether most of the first :data:`DENSE_SAMPLE` lines of ``block[start:end]``
        carry a prefix (a combined console): a match per line is then three times faster
        than searching for the prefixed lines (:meth:`_sparse_keys`)."""
        stop = start
        for _ in range(DENSE_SAMPLE):
            stop = block.find(b"\n", stop, end) + 1
            if not stop:
                return False  # a short block: either way is fast
        sample = self._rest.findall(block, start, stop - 1)
        return 2 * sum(1 for key in sample if key) > len(sample)

    def _sparse_keys(
        self,
        block: bytes,
        start: int,
        end: int,
        first: re.Match[bytes] | None,
        lines: int | None,
        mark: int | None = None,
    ) -> list[bytes]:
        """:meth:`keys` when only some lines can carry a prefix (no srun or pdsh label on
        every line): every line's key is empty but the lines a prefix starts, found by one
        search for prefixes instead of a match at every line (a rank's own file with a
        handful of ``[rank3]:`` lines)."""
        keys = [b""] * (block.count(b"\n", start, end) if lines is None else lines)
        if first is not None and keys:
            keys[0] = first.group(1)
        line, counted = 0, start
        for m in self._any.finditer(block, self._after(start, end - 1, mark), end - 1):
            newline = m.start()
            line += block.count(b"\n", counted, newline + 1)
            counted = newline + 1
            at = self._first.match(block, newline + 1, end)
            keys[line] = at.group(1) if at is not None else b""
        return keys


def key_pattern(style: PrefixStyle) -> PrefixKeys:
    """The demultiplexer for a file with prefix ``style`` (see :class:`PrefixKeys`)."""
    return PrefixKeys(style)
