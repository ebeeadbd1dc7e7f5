"""Read the timestamp at the start of a log line, in every format training jobs print.

Formats: python logging (``2024-05-01 12:00:00,123``; HF Transformers'
``11/30/2026 22:41:09``), ISO 8601 / RFC 3339 (kubectl ``--timestamps``, rsyslog,
NCCL >= 2.26 ``[2024-05-01 12:00:00]``), glog and c10d
(``I0501 12:00:00.123456``, ``[E501 12:00:00.123456789 ...]``), syslog / journal
(``May  1 12:00:00``), ``dmesg -T`` (``[Wed May  1 12:00:00 2024]``),
``dmesg -x --time-format iso``, dmesg monotonic seconds (``[12345.678901]``) and epoch seconds.

Times are POSIX seconds as floats. A time without a zone is taken as UTC: every clock in a job
is read the same way, so differences and order are right even if the absolute zone is not.
"""

from __future__ import annotations

import calendar
import functools
import re
from dataclasses import dataclass

from crashlens import lazyre

MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}

_ISO = lazyre.compile(
    r"\[?(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[ T_](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<f>\d{1,9}))?\s?(?P<z>Z|[+-]\d{2}:?\d{2}|UTC)?"
)
#: HF Transformers' examples, ``datefmt="%m/%d/%Y %H:%M:%S"``: ``11/30/2026 22:41:09 - INFO``.
_US = lazyre.compile(
    r"\[?(?P<mo>\d{2})/(?P<d>\d{2})/(?P<y>\d{4})[ ,](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<f>\d{1,9}))?"
)
_GLOG = lazyre.compile(
    r"\[?[IWEF](?P<mo>1[0-2]|0?[1-9])(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<f>\d{1,9}))?[\s\]]"
)
_SYSLOG = lazyre.compile(
    r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<d>\d{1,2}) "
    r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?(?: (?P<y>\d{4}))?\s"
)
_CTIME = lazyre.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>[A-Z][a-z]{2}) +(?P<d>\d{1,2}) "
    r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2}) (?P<y>\d{4})\]"
)
_MONO = lazyre.compile(r"\[ *(?P<sec>\d{1,9})\.(?P<f>\d{6})\]")
_EPOCH = lazyre.compile(r"\[?(?P<sec>1[5-9]\d{8}|20\d{8})(?:\.(?P<f>\d{1,9}))?\]?[\s:,]")
_DMESG_ISO_PREFIX = lazyre.compile(r"\w+\s*:\s*\w+\s*: ")


@dataclass(frozen=True, slots=True)
class Stamp:
    """A parsed timestamp; ``monotonic`` ones count seconds since boot, not wall time."""

    value: float
    monotonic: bool = False
    has_year: bool = True


def _frac(text: str | None) -> float:
    if not text:
        return 0.0
    return int(text) / float(10 ** len(text))


def _zone(text: str | None) -> int:
    if not text or text in ("Z", "UTC"):
        return 0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def _wall(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
    if not (1970 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60):
        return None
    if s >= 62:
        return None
    # calendar.timegm's arithmetic, with the month's first day looked up once.
    return float((((_month_days(y, mo) + d - 1) * 24 + h) * 60 + mi) * 60 + s)


@functools.lru_cache(maxsize=4096)
def _month_days(y: int, mo: int) -> int:
    """Days from the epoch to the first of month ``mo`` of year ``y``."""
    return calendar.timegm((y, mo, 1, 0, 0, 0, 0, 0, 0)) // 86400


def parse_timestamp(text: str, year: int) -> Stamp | None:
    """Return the timestamp that starts ``text`` (prefixes already stripped), or None.

    Args:
        text: the log line without rank/host prefixes.
        year: the year to assume for formats that print none (syslog, glog, c10d).
    """
    if not text:
        return None
    first = text[0]
    if first == "[" and len(text) > 1:
        second = text[1]
        if second.isdigit() or second == " ":
            return _iso(text) or _us(text) or _mono(text) or _epoch(text)
        if second in "IWEF" and text[2:3].isdigit():
            return _glog(text, year)
        return _ctime(text)
    if first.isdigit():
        return _iso(text) or _us(text) or _epoch(text)
    if first in "IWEF" and len(text) > 1 and text[1].isdigit():
        return _glog(text, year)
    if first in "ADFJMNOS":
        return _syslog(text, year)
    if first.islower():
        found = _DMESG_ISO_PREFIX.match(text)
        if found:
            return _iso(text[found.end() :])
    return None


def _iso(text: str) -> Stamp | None:
    return _dated(_ISO.match(text))


def _us(text: str) -> Stamp | None:
    return _dated(_US.match(text))


def _dated(m: re.Match[str] | None) -> Stamp | None:
    """A full date and time (``y mo d h mi s`` groups, optional ``f`` and zone ``z``)."""
    if not m:
        return None
    y, mo, d, h, mi, s = m.group("y", "mo", "d", "h", "mi", "s")
    value = _wall(int(y), int(mo), int(d), int(h), int(mi), int(s))
    if value is None:
        return None
    zone = m["z"] if "z" in m.re.groupindex else None
    return Stamp(value + _frac(m["f"]) - _zone(zone))


def _glog(text: str, year: int) -> Stamp | None:
    m = _GLOG.match(text)
    if not m:
        return None
    value = _wall(year, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
    if value is None:
        return None
    # c10d's 9-digit fraction comes from CLOCK_MONOTONIC, not from the wall clock: drop it.
    frac = m["f"]
    return Stamp(value + (0.0 if frac and len(frac) == 9 else _frac(frac)), has_year=False)


def _syslog(text: str, year: int) -> Stamp | None:
    m = _SYSLOG.match(text)
    if not m:
        return None
    y = int(m["y"]) if m["y"] else year
    value = _wall(y, MONTHS[m["mon"]], int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
    if value is None:
        return None
    return Stamp(value + _frac(m["f"]), has_year=bool(m["y"]))


def _ctime(text: str) -> Stamp | None:
    m = _CTIME.match(text)
    if not m or m["mon"] not in MONTHS:
        return None
    value = _wall(
        int(m["y"]), MONTHS[m["mon"]], int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"])
    )
    return Stamp(value) if value is not None else None


def _mono(text: str) -> Stamp | None:
    m = _MONO.match(text)
    if not m:
        return None
    return Stamp(int(m["sec"]) + _frac(m["f"]), monotonic=True)


def _epoch(text: str) -> Stamp | None:
    m = _EPOCH.match(text + " ")
    if not m:
        return None
    return Stamp(int(m["sec"]) + _frac(m["f"]))


def monotonic_after_syslog(text: str) -> float | None:
    """Seconds-since-boot printed after a syslog header (``... kernel: [123.456789] msg``).

    A kern.log line carrying both clocks lets a plain ``dmesg`` capture of the same host be
    converted to wall time.
    """
    idx = text.find("kernel: [")
    if idx < 0:
        return None
    m = _MONO.match(text, idx + 8)
    return int(m["sec"]) + _frac(m["f"]) if m else None
