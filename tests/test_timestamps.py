"""Timestamp formats training jobs print, each read to the right POSIX time."""

from __future__ import annotations

import calendar

import pytest

from crashlens.parse.timestamps import monotonic_after_syslog, parse_timestamp


def ts(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: float = 0.0) -> float:
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + frac


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2024-05-01 12:00:00,123 INFO train: step 1", ts(2024, 5, 1, 12, 0, 0, 0.123)),
        ("2024-05-01T12:00:00.5Z hello", ts(2024, 5, 1, 12, 0, 0, 0.5)),
        ("2024-05-01T14:00:00+02:00 hello", ts(2024, 5, 1, 12, 0, 0)),
        ("2024-05-01T12:00:00.123456789Z kubectl line", ts(2024, 5, 1, 12, 0, 0, 0.123456789)),
        (
            "[2024-03-12 14:41:30,298] torch.distributed.elastic: [ERROR] x",
            ts(2024, 3, 12, 14, 41, 30, 0.298),
        ),
        (
            "[2024-05-01 12:00:00] host:1:2 [0] misc/socket.cc:58 NCCL WARN x",
            ts(2024, 5, 1, 12, 0, 0),
        ),
        ("I0501 12:00:00.123456 4242 train.py:10] msg", ts(2024, 5, 1, 12, 0, 0, 0.123456)),
        (
            "W0813 22:08:39.776000 2585 torch/distributed/elastic/api.py:898] x",
            ts(2024, 8, 13, 22, 8, 39, 0.776),
        ),
        # c10d: month*100+day is not zero padded and the 9-digit fraction is monotonic, dropped.
        ("[E710 18:00:32.089607123 ProcessGroupNCCL.cpp:629] x", ts(2024, 7, 10, 18, 0, 32)),
        ("[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] x", ts(2024, 12, 18, 20, 27, 21)),
        ("May  1 12:00:00 node-01 kernel: x", ts(2024, 5, 1, 12, 0, 0)),
        ("Jan 01 12:00:00 host kernel: x", ts(2024, 1, 1, 12, 0, 0)),
        ("[Wed May  1 12:00:00 2024] NVRM: Xid", ts(2024, 5, 1, 12, 0, 0)),
        (
            "kern  :warn  : 2025-01-21T04:26:49,803751+00:00 NVRM: x",
            ts(2025, 1, 21, 4, 26, 49, 0.803751),
        ),
        ("1714564800.25 epoch line", 1714564800.25),
        ("2024-05-01_03:14:00", ts(2024, 5, 1, 3, 14, 0)),
    ],
)
def test_formats(line: str, expected: float) -> None:
    stamp = parse_timestamp(line, 2024)
    assert stamp is not None
    assert not stamp.monotonic
    assert stamp.value == pytest.approx(expected, abs=1e-6)


def test_year_less_formats_take_the_given_year() -> None:
    a = parse_timestamp("May  1 12:00:00 node kernel: x", 2023)
    b = parse_timestamp("I0501 12:00:00.000000 1 f.py:1] x", 2023)
    assert a is not None and b is not None
    assert a.value == b.value == ts(2023, 5, 1, 12, 0, 0)
    assert not a.has_year and not b.has_year


def test_dmesg_monotonic_is_marked() -> None:
    stamp = parse_timestamp("[12345.678901] Out of memory: Killed process 1 (python)", 2024)
    assert stamp is not None and stamp.monotonic
    assert stamp.value == pytest.approx(12345.678901)


def test_kern_log_line_carries_both_clocks() -> None:
    line = "May  1 03:13:59 node-01 kernel: [412877.514241] NVRM: Xid (PCI:0000:86:00): 79"
    assert monotonic_after_syslog(line) == pytest.approx(412877.514241)


@pytest.mark.parametrize(
    "line",
    ["step 12 loss 0.5", "", "[rank0]: Traceback", "Mayday 1", "2024-13-45 99:99:99 bad", "12: x"],
)
def test_lines_without_a_timestamp(line: str) -> None:
    assert parse_timestamp(line, 2024) is None


def test_a_year_less_time_never_lands_after_the_file_was_written() -> None:
    from crashlens.parse.clock import Clock

    # torchrun's glog lines of December 31, in a file last written on January 1 (the year the
    # file's mtime gives): they are from the year before
    written = ts(2027, 1, 1, 0, 30, 0)
    clock = Clock(2027, ceiling=written)
    line = "W1231 23:59:58.101000 5230 torch/distributed/elastic/multiprocessing/api.py:1028] x"
    assert clock.stamp(line) == ts(2026, 12, 31, 23, 59, 58, 0.101)
    # a time just after the mtime (clock differences) keeps the file's year
    assert clock.stamp("W0101 01:10:00.000000 5230 api.py:1] y") == ts(2027, 1, 1, 1, 10, 0)
    # without a ceiling (stdin), the given year
    assert Clock(2027).stamp(line) == ts(2027, 12, 31, 23, 59, 58, 0.101)


def test_the_files_mtime_is_the_ceiling_end_to_end(tmp_path) -> None:
    import os

    from crashlens import analyze

    log = tmp_path / "rank0.log"
    log.write_text(
        "E1231 23:59:58.101000 5230 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: 1) local_rank: 0 (pid: 5232) of binary: /usr/bin/python\n"
    )
    written = ts(2027, 1, 1, 0, 30, 0)
    os.utime(log, (written, written))
    report = analyze([log])
    assert report.ranks and report.ranks[0].first_time == ts(2026, 12, 31, 23, 59, 58, 0.101)
