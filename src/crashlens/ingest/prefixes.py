"""Strip the per-line prefixes launchers add, and keep the rank or host they name.

A combined file (torchrun ``--tee``, ``srun --label``, Open MPI ``--tag-output``, pdsh, kubectl
``--prefix``) interleaves several ranks line by line. Stripping the prefix *before* anything
else lets every later stage work per rank, so two ranks' tracebacks can never mix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import regex

_BRACKET = regex.compile(r"\[(?P<role>[A-Za-z_][\w\-]*?)(?P<n>\d+)\]:[ ]?")
_MPI = regex.compile(r"\[\d+,(?P<n>\d+)\]<(?:stdout|stderr|stddiag)>:[ ]?")
_SRUN = regex.compile(r" *(?P<n>\d{1,5}): ")
_PDSH = regex.compile(r"(?P<host>[A-Za-z][\w\-.]*): ")
_KUBECTL = regex.compile(r"\[pod/(?P<host>[^/\]\s]+)/[^\]\s]+\] ")
_LEADING_STAMP = regex.compile(
    r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? "
)
_NEEDS_STAMP_STRIP = regex.compile(r"\s|Traceback \(|\[default\d|\[rank\d|\d{4}-\d\d-\d\d[ T]")
_NCCL_HOST = regex.compile(r"(?P<host>[\w\-.]+):(?P<pid>\d+):(?P<tid>\d+) \[\d+\] ")


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


def sniff_style(head: Iterable[str]) -> PrefixStyle:
    """Decide which ambiguous prefix styles a file uses from its first lines."""
    lines = [line for line in head if line.strip()]
    if not lines:
        return PrefixStyle()
    stamps = [m for line in lines if (m := _LEADING_STAMP.match(line))]
    # Every line stamped, including ones a program never stamps itself (tracebacks, launcher
    # prefixes, lines that carry their own logging time): a tool added the stamps.
    stamped = len(stamps) >= 0.8 * len(lines) and any(
        _NEEDS_STAMP_STRIP.match(m.string, m.end()) for m in stamps
    )
    if stamped:
        lines = [line[m.end() :] if (m := _LEADING_STAMP.match(line)) else line for line in lines]
    srun = sum(1 for line in lines if _SRUN.match(line))
    hosts = Counter(m["host"] for line in lines if (m := _PDSH.match(line)))
    pdsh_hits = sum(n for host, n in hosts.items() if _looks_like_host(host))
    return PrefixStyle(
        srun=srun >= 0.6 * len(lines), pdsh=pdsh_hits >= 0.6 * len(lines), stamped=stamped
    )


def _looks_like_host(word: str) -> bool:
    return any(c.isdigit() for c in word) or "." in word or "-" in word


def strip(text: str, style: PrefixStyle) -> tuple[str, Prefix]:
    """Remove launcher prefixes from ``text``; return the rest and what they said."""
    if not text:
        return text, NO_PREFIX
    rank = local_rank = None
    host = None
    pos = 0
    stamp = ""
    if style.stamped:
        m = _LEADING_STAMP.match(text)
        if m:
            stamp = m.group(0)
            pos = m.end()
    if style.pdsh:
        m = _PDSH.match(text, pos)
        if m:
            host = m["host"]
            pos = m.end()
    if style.srun:
        m = _SRUN.match(text, pos)
        if m:
            rank = int(m["n"])
            pos = m.end()
    first = text[pos : pos + 1]
    if first == "[":
        m = _KUBECTL.match(text, pos)
        if m:
            host = m["host"]
            pos = m.end()
        m = _MPI.match(text, pos)
        if m:
            rank = int(m["n"])
            pos = m.end()
        # Prefixes stack: ``[default1]:[rank5]: ...`` names the local and the global rank.
        while (m := _BRACKET.match(text, pos)) is not None:
            if m["role"] == "rank":
                rank = int(m["n"])
            elif m["role"] in ("E", "W", "I", "F"):
                break
            else:
                local_rank = int(m["n"])
            pos = m.end()
    if pos == 0:
        return text, NO_PREFIX
    return text[pos:], Prefix(rank=rank, local_rank=local_rank, host=host, stamp=stamp)


def nccl_origin(text: str) -> Prefix | None:
    """Host and pid from an NCCL debug line (``host:pid:tid [dev] NCCL INFO ...``)."""
    if " NCCL " not in text:
        return None
    m = _NCCL_HOST.search(text)
    if not m:
        return None
    return Prefix(host=m["host"], pid=int(m["pid"]))
