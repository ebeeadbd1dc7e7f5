"""A file's clock: timestamps to wall time, the year of year-less formats, inferred times.

A line without a timestamp takes the nearest earlier one of its writer (inferred, a lower
bound); a finding with none before it waits for the next one (an upper bound). Kernel logs in
seconds since boot get wall time once a line carries both clocks.
"""

from __future__ import annotations

import time

from crashlens.parse.state import Stream
from crashlens.parse.timestamps import Stamp, monotonic_after_syslog, parse_timestamp

#: Lines to wait for a timestamp to give to findings that had none before them.
UNTIMED_PATIENCE = 2000
#: How far past the file's modification time a year-less timestamp may land (clocks of the
#: writer and the file system differ, local time printed as if UTC) before it is taken to be
#: from the year before.
CEILING_SLACK_S = 2 * 86400.0


class Clock:
    """Reads the time of a file's lines; one per file."""

    def __init__(
        self,
        year: int,
        *,
        kernel: bool = False,
        override: float | None = None,
        ceiling: float | None = None,
    ):
        self.year = year
        #: The file's modification time: a year-less timestamp cannot be later (a log of
        #: December 31 written to on January 1 is last year's).
        self.ceiling = ceiling
        #: Whether a dated line told the year (else ``year`` was assumed).
        self.year_known = False
        self.kernel = kernel
        #: Seconds to add to a kernel's seconds-since-boot to get wall time, once learnt.
        self.mono_offset: float | None = None
        #: Every line's time (a torchelastic error file's single timestamp).
        self.override = override

    def stamp(self, text: str) -> float | None:
        """The wall time at the start of ``text``, if it has one."""
        if self.override is not None:
            return self.override
        stamp = parse_timestamp(text, self.year)
        if stamp is None:
            return None
        if stamp.has_year and not stamp.monotonic and not self.year_known:
            # Year-less formats elsewhere in this file take the year of its dated lines.
            self.year = time.gmtime(stamp.value).tm_year
            self.year_known = True
        elif self._in_future(stamp):
            earlier = parse_timestamp(text, self.year - 1)
            stamp = earlier if earlier is not None else stamp
        return self._wall(stamp)

    def _in_future(self, stamp: Stamp) -> bool:
        """A year-less time, with the assumed year, after the file was last written."""
        return (
            not stamp.has_year
            and not stamp.monotonic
            and not self.year_known
            and self.ceiling is not None
            and stamp.value > self.ceiling + CEILING_SLACK_S
        )

    def _wall(self, stamp: Stamp) -> float | None:
        if stamp.monotonic:
            return None if self.mono_offset is None else stamp.value + self.mono_offset
        return stamp.value

    def uptime(self, text: str) -> float | None:
        """A kernel line's seconds since boot, while they cannot be put on the wall clock."""
        if not self.kernel or self.mono_offset is not None:
            return None
        stamp = parse_timestamp(text, self.year)
        return stamp.value if stamp is not None and stamp.monotonic else None

    def learn(self, text: str) -> None:
        """Learn the boot time from a kernel line that carries both clocks."""
        if not self.kernel or self.mono_offset is not None:
            return
        mono = monotonic_after_syslog(text)
        if mono is None:
            return
        stamp = parse_timestamp(text, self.year)
        if stamp is not None and not stamp.monotonic:
            self.mono_offset = stamp.value - mono

    def time_of(self, stream: Stream, lineno: int, text: str) -> tuple[float | None, bool]:
        """The line's own time, else the nearest earlier time in its stream (inferred)."""
        own = self.stamp(text)
        if own is not None:
            stream.last_stamp = (lineno, own)
            return own, False
        floor = stream.last_stamp[0] if stream.last_stamp else -1
        for prev_no, prev in reversed(stream.ring):
            if prev_no <= floor:
                break
            found = self.stamp(prev)
            if found is not None:
                stream.last_stamp = (prev_no, found)
                return found, True
        if stream.last_stamp is not None:
            return stream.last_stamp[1], True
        return None, True

    def hit_time(
        self, stream: Stream, lineno: int, text: str, in_tb: bool
    ) -> tuple[float | None, bool]:
        """A finding's time; inside a traceback, the traceback's (its lines carry none)."""
        current = stream.assembler.current
        if in_tb and current is not None and current.stamp is not None:
            own = self.stamp(text)
            return (own, False) if own is not None else (current.stamp[0], True)
        return self.time_of(stream, lineno, text)

    def settle(self, stream: Stream, text: str) -> None:
        """Give untimed findings the first later timestamp of their stream (an upper bound).

        A rank that never logged a timestamp before dying (only rank 0 logs steps) still gets
        the time of the first stamped line after its traceback, e.g. c10d's teardown warning.
        Findings wait :data:`UNTIMED_PATIENCE` lines at most.
        """
        later = self.stamp(text)
        if later is not None:
            for settle in stream.untimed:
                settle(later)
            stream.untimed.clear()
            stream.untimed_wait = 0
        stream.untimed_wait += 1
        if stream.untimed_wait > UNTIMED_PATIENCE:
            stream.untimed.clear()

    def last_time(self, stream: Stream) -> float | None:
        """The time of a stream's last timestamped line (its last words)."""
        for _, text in reversed(stream.ring):
            found = self.stamp(text)
            if found is not None:
                return found
        return stream.last_stamp[1] if stream.last_stamp is not None else None
