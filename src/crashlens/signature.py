"""Failure signatures: one key for "the same failure", whatever job, node or run it was in.

A signature is what a person would call the same crash (Sentry-style grouping): the cause class,
the exception type, the exception's message with everything that differs between occurrences
replaced by a placeholder (numbers, sizes, paths, hex addresses, ids, hosts and addresses), and
the user's frame (file name and function) where the traceback names one. Two jobs that died of
``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB`` and ``... 1.50 GiB``
on different nodes share it; a ``KeyError: 'labels'`` in ``collate`` and one in ``__getitem__``
do not.

The key is the first 16 hex digits of a SHA-256 over those four parts; it depends on nothing
else (not the rule id, the crashlens version, the order of the files), so a table's signatures
stay comparable across versions as long as the normalisation below is unchanged (it is
documented in docs/fleet.md; a change to it is a change of the fleet schema version).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath

from crashlens import lazyre
from crashlens.model import CUT_TRACEBACK, Cause, ExceptionInfo, Traceback, evidence_order

#: Characters of a normalised message kept in a signature (the rest rarely tells crashes apart).
MESSAGE_CHARS = 200

# Order matters: the longer, more specific shapes first, so a path's digits or an address's
# numbers are replaced once as a whole. (Compiled when a signature is first asked for: a
# report printed as text has none.)
_NORMALISE: tuple[tuple[re.Pattern[str], str], ...] = (
    # a launcher/console prefix: "[rank3]:", "[1,0]<stderr>:", "3: ", "[default0]:"
    (
        lazyre.compile(
            r"^(?:\[(?:rank|default)?\d+(?:,\d+)?\](?:<std(?:err|out)>)?:\s*|\d{1,5}: )+"
        ),
        "",
    ),
    # times and dates: ISO 8601, "23:28:07.821", glog's "W1126 23:28:07.821000 402381"
    (
        lazyre.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"
        ),
        "<time>",
    ),
    (lazyre.compile(r"^[IWEF]\d{4} (?=\d{2}:)"), ""),
    (lazyre.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (lazyre.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<id>"),
    (lazyre.compile(r"\b[a-z][\w+.-]*://\S+", re.I), "<url>"),
    # paths, absolute or relative, POSIX or Windows: two segments or more, one with a letter
    (
        lazyre.compile(
            r"(?<![\w.<>~-])(?=[^\s'\"]*[A-Za-z])(?:[A-Za-z]:|~)?[\w.@+~-]*(?:[\\/][\w.@+~-]+)+[\\/]?"
        ),
        "<path>",
    ),
    (lazyre.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (lazyre.compile(r"\[[0-9a-f:]{3,}\](?::\d+)?", re.I), "<ip>"),
    (lazyre.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (lazyre.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<hex>"),
    # host names: "gpu-node-17", "ip-10-0-3-7", "nid001234" (lower case, a hyphen or 3 digits)
    (lazyre.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b|\b[a-z]+\d{3,}\b"), "<host>"),
    # numbers, also inside identifiers ("torch_3230_2255679089_0", "step_12000")
    (lazyre.compile(r"(?<=_)\d+|\d+(?=_)"), "<n>"),
    (lazyre.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?\b", re.I), "<n>"),
    (lazyre.compile(r"\s+"), " "),
)


_ORIGINAL = lazyre.compile(r"^\s*Original Traceback \(most recent call last\):")
_RAISED = lazyre.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)): (?P<message>.*)$"
)


@dataclass(frozen=True, slots=True)
class Signature:
    """A failure's grouping key and the text it was made from."""

    key: str
    cls: str
    exception: str
    message: str
    frame: str

    @property
    def text(self) -> str:
        """``cuda_oom · torch.OutOfMemoryError: CUDA out of memory. Tried ... · train.py:step``."""
        head = f"{self.exception}: {self.message}" if self.exception else self.message
        parts = [self.cls, head.strip()]
        if self.frame:
            parts.append(f"at {self.frame}")
        return " · ".join(p for p in parts if p)


def normalise(message: str) -> str:
    """A message with what differs between occurrences of one failure replaced."""
    text = message.strip()
    for pattern, placeholder in _NORMALISE:
        text = pattern.sub(placeholder, text)
    return text.strip()[:MESSAGE_CHARS]


def signature(cause: Cause, tracebacks: list[Traceback] | tuple[Traceback, ...] = ()) -> Signature:
    """The signature of one ranked cause of a report (``tracebacks``: the report's)."""
    exception, message = _exception(cause, {tb.id: tb for tb in tracebacks})
    frame = cause.user_frame
    where = f"{_basename(frame.file)}:{frame.function}" if frame is not None else ""
    cls = cause.cls
    message = normalise(message)
    digest = hashlib.sha256("\0".join((cls, exception, message, where)).encode()).hexdigest()
    return Signature(digest[:16], cls, exception, message, where)


def _exception(cause: Cause, by_id: dict[int, Traceback]) -> tuple[str, str]:
    """The exception type and first message line a cause leads with (no type for a line)."""
    hits = sorted(cause.match.hits, key=evidence_order)
    for hit in hits:
        tb = by_id.get(hit.traceback_id) if hit.traceback_id is not None else None
        if tb is not None:
            return _type_and_message(tb.final)
    lead = hits[0].evidence.text if hits else cause.match.rule.title
    return "", lead.splitlines()[0] if lead else ""


def _type_and_message(exc: ExceptionInfo) -> tuple[str, str]:
    """The exception that was raised first: a DataLoader worker's original one, re-raised by
    the main process ("Caught KeyError in DataLoader worker process 3." + its traceback), is
    the failure; the wrapper's line is the same for every worker failure."""
    if exc.type == CUT_TRACEBACK:
        # where the log stops says nothing about which failure it was
        return "", "the log ends inside a traceback"
    lines = exc.message.splitlines()
    marker = next((i for i, x in enumerate(lines) if _ORIGINAL.match(x)), None)
    if marker is not None:
        raised = [m for m in map(_RAISED.match, lines[marker + 1 :]) if m]
        if raised:
            return raised[-1]["type"], raised[-1]["message"]
    first = next((x for x in lines if x.strip() and not set(x.strip()) <= set("=-")), "")
    return exc.type, first


def _basename(path: str) -> str:
    return (PureWindowsPath(path) if "\\" in path else PurePosixPath(path)).name
