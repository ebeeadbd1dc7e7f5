"""Read torchelastic's ``ChildFailedError`` summary: which rank failed, where, how, when.

Template (torch/distributed/elastic/multiprocessing/errors/__init__.py)::

    Root Cause (first observed failure):
    [0]:
      time      : 2024-05-01_03:14:00
      host      : node-02
      rank      : 5 (local_rank: 1)
      exitcode  : 1 (pid: 4242)
      error_file: /tmp/torchelastic_x/none_y/attempt_0/1/error.json
      traceback : Traceback (most recent call last):
        ...

The agent's "first observed failure" is only the first *its node* noticed, so entries are
evidence for the ranking, never the verdict.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field

from crashlens import lazyre

_ENTRY = lazyre.compile_regex(r"\[(?P<idx>\d+)\]:\s*$")
_FIELD = lazyre.compile_regex(
    r"\s{2}(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<val>.*)"
)
_RANK = lazyre.compile_regex(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<local>-?\d+)\))?")
_EXIT = lazyre.compile_regex(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_TIME = lazyre.compile_regex(r"(\d{4})-(\d{2})-(\d{2})_(\d{2}):(\d{2}):(\d{2})")


@dataclass(slots=True)
class SummaryEntry:
    """One ``[idx]:`` block being read."""

    lineno: int
    root_cause: bool
    fields: dict[str, str] = field(default_factory=dict)
    message: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int | None:
        m = _RANK.match(self.fields.get("rank", ""))
        return int(m["rank"]) if m else None

    @property
    def local_rank(self) -> int | None:
        m = _RANK.match(self.fields.get("rank", ""))
        return int(m["local"]) if m and m["local"] else None

    @property
    def exitcode(self) -> int | None:
        m = _EXIT.match(self.fields.get("exitcode", ""))
        return int(m["code"]) if m else None

    @property
    def pid(self) -> int | None:
        m = _EXIT.match(self.fields.get("exitcode", ""))
        return int(m["pid"]) if m and m["pid"] else None

    @property
    def time(self) -> float | None:
        m = _TIME.match(self.fields.get("time", ""))
        if not m:
            return None
        parts = tuple(int(g) for g in m.groups())
        return float(calendar.timegm((*parts, 0, 0, 0)))


class SummaryReader:
    """Follows a ``ChildFailedError`` summary in a stream; finished entries land in ``done``."""

    def __init__(self) -> None:
        self.active = False
        self.root_section = False
        self.entry: SummaryEntry | None = None
        self.done: list[SummaryEntry] = []

    def feed(self, lineno: int, text: str) -> None:
        """Offer a line (prefixes stripped)."""
        stripped = text.strip()
        if stripped in ("Failures:", "Root Cause (first observed failure):"):
            self._flush()
            self.active = True
            self.root_section = stripped.startswith("Root")
            return
        if not self.active:
            return
        if stripped and set(stripped) <= {"=", "-"}:
            self._flush()
            if stripped[0] == "=":
                self.active = False
            return
        m = _ENTRY.match(stripped)
        if m:
            self._flush()
            self.entry = SummaryEntry(lineno=lineno, root_cause=self.root_section)
            return
        if self.entry is None:
            return
        f = _FIELD.match(text)
        if f:
            self.entry.fields[f["key"]] = f["val"].strip()
            if f["key"] == "traceback":
                self.entry.message.append(f["val"].strip())
        elif "traceback" in self.entry.fields and stripped:
            self.entry.message.append(stripped)

    def _flush(self) -> None:
        if self.entry is not None and self.entry.fields:
            self.done.append(self.entry)
        self.entry = None

    @property
    def current_rank(self) -> int | None:
        """Rank of the entry being read: lines inside it are about that rank."""
        return self.entry.rank if self.entry is not None else None

    def close(self) -> None:
        """End of stream."""
        self._flush()
        self.active = False
