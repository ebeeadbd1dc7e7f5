"""Hostile and broken inputs (issue 8): crashlens never crashes, hangs or modifies what it reads.

Every bad input gets one line in the report (``report.inputs`` skipped reason or ``report.notes``)
and the analysis goes on with the rest; ``crashlens analyze`` exits 2 only when nothing at all was
readable. Tests marked ``xfail(strict=True)`` document known gaps in files this suite does not own
(see SECURITY.md, "Known gaps"); they turn into failures the day the gap is closed, so the mark
must then be removed.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import itertools
import json
import lzma
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import crashlens.api
import crashlens.ingest.read
from conftest import EVIL_RULE
from crashlens import analyze
from crashlens.cli import app
from crashlens.errors import NoInputError, RuleError
from crashlens.ingest.read import MAX_LINE, iter_lines
from crashlens.render import render
from crashlens.report import Report
from crashlens.rulebase import load_rules
from crashlens.rulebase.load import MAX_RULE_FILE, load_rule_file

runner = CliRunner()
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OOM = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
GOOD = f"2024-05-01 03:14:00,000 INFO train: step 7\n{OOM}\n"
#: The OOM as a logged record: a finding however much the file goes on after it (a bare
#: exception line followed by more training steps would read as survived).
LOGGED = f"2024-05-01 03:14:00,000 INFO train: step 7\n2024-05-01 03:14:00,001 ERROR train: {OOM}\n"
#: Far longer than any of these analyses needs; reaching it means a read blocked or looped.
HANG_S = 20.0


@pytest.fixture(scope="module")
def rules() -> Any:
    """The bundled rules, loaded once for the module (analyze accepts a RuleSet)."""
    return load_rules()


def _entry(report: Report, name: str) -> Any:
    found = [f for f in report.inputs if f.path.endswith(name)]
    assert len(found) == 1, (name, [f.path for f in report.inputs])
    return found[0]


def _reason(report: Report, name: str) -> str:
    """The one-line note the report gives for ``name`` (skipped reason or note)."""
    entry = _entry(report, name)
    reason = entry.skipped or entry.note
    assert reason, f"{name} got no note: {entry}"
    assert "\n" not in reason
    return str(reason)


def _found_oom(report: Report) -> bool:
    return any(c.match.rule.cls == "cuda_oom" for c in report.causes)


def _all_notes_one_line(report: Report) -> None:
    for note in report.notes:
        assert "\n" not in note and "\r" not in note, note


def _bounded(
    fn: Callable[[], Any], timeout: float = HANG_S, unblock: Callable[[], None] | None = None
) -> Any:
    """Run ``fn`` in a thread; fail (after unblocking it) if it has not returned in ``timeout``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    hung = thread.is_alive()
    if hung and unblock is not None:
        unblock()
        thread.join(5)
    assert not hung, f"did not finish within {timeout} s (a blocking read or an endless loop)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _release_fifo(path: Path) -> Callable[[], None]:
    """Open a FIFO for writing and close it, so a reader blocked in open() sees EOF."""

    def release() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    return release


# -- binary, encodings, NULs ----------------------------------------------------------------


def test_binaries_and_core_dumps_are_skipped_and_the_rest_is_analysed(
    tmp_path: Path, rules
) -> None:
    (tmp_path / "rank_0.log").write_text(GOOD)
    (tmp_path / "core").write_bytes(b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 4096 + b"x" * 4096)
    (tmp_path / "core.1234.gz").write_bytes(gzip.compress(b"\x7fELF\x02\x01\x01" + b"\x00" * 9000))
    (tmp_path / "random.dat").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    report = analyze([tmp_path], rules)
    assert _found_oom(report)
    assert "binary" in _reason(report, "core")
    assert "binary" in _reason(report, "core.1234.gz")
    assert "binary" in _reason(report, "random.dat")
    assert _entry(report, "model.pt").skipped  # a checkpoint is not a log (listed, not a note)
    _all_notes_one_line(report)


def test_invalid_utf8_is_decoded_with_replacement(tmp_path: Path, rules) -> None:
    (tmp_path / "rank_0.log").write_bytes(b"bad \xff\xfe\xc3( bytes\n" * 50 + GOOD.encode())
    report = analyze([tmp_path], rules)
    assert _found_oom(report)
    assert _entry(report, "rank_0.log").lines == 52


@pytest.mark.parametrize(
    "encoding", ["utf-16", "utf-16-le-bom", "utf-16-be-bom", "utf-16-le"], ids=str
)
def test_utf16_logs_are_decoded(tmp_path: Path, rules, encoding: str) -> None:
    if encoding == "utf-16-le-bom":
        data = b"\xff\xfe" + GOOD.encode("utf-16-le")
    elif encoding == "utf-16-be-bom":
        data = b"\xfe\xff" + GOOD.encode("utf-16-be")
    else:
        data = GOOD.encode(encoding)
    (tmp_path / "rank_0.log").write_bytes(data)
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0.log").skipped is None
    assert _found_oom(report)


def test_utf16_be_without_bom_is_decoded(tmp_path: Path, rules) -> None:
    (tmp_path / "rank_0.log").write_bytes(GOOD.encode("utf-16-be"))
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0.log").skipped is None
    assert _found_oom(report)


def test_a_few_nul_bytes_inside_a_text_log_do_not_stop_it(tmp_path: Path, rules) -> None:
    body = b"2024-05-01 03:14:00,000 INFO ok\n" * 300
    (tmp_path / "rank_0.log").write_bytes(body + b"half\x00written\x00\n" + GOOD.encode())
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0.log").skipped is None
    assert _found_oom(report)
    assert "\x00" not in render(report, "text")


def test_a_hole_of_nul_bytes_in_a_text_log_keeps_its_text(tmp_path: Path, rules) -> None:
    head = b"2024-05-01 03:14:00,000 INFO ok\n" * 50
    (tmp_path / "rank_0.log").write_bytes(head + b"\x00" * 4096 + GOOD.encode())
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0.log").skipped is None
    assert _found_oom(report)


@pytest.mark.parametrize("line", ["0000-01-01 00:00:00,000 INFO x", "Jan  1 00:00:00 0000 x"])
def test_an_impossible_timestamp_does_not_hide_the_file(tmp_path: Path, rules, line: str) -> None:
    (tmp_path / "rank_0.log").write_text(f"{line}\n{OOM}\n")
    (tmp_path / "rank_1.log").write_text("2024-05-01 03:14:00,000 INFO ok\n")
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0.log").skipped is None
    assert _found_oom(report)


# -- one 100 MB line ------------------------------------------------------------------------

_BIG_LINE_PROBE = """
import json, resource, sys, time, tracemalloc

def hwm_kb():
    # VmHWM is this program's own peak; ru_maxrss would include the pytest process it was
    # forked from (the high-water mark survives exec).
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

from crashlens import analyze
from crashlens.rulebase import load_rules
rules = load_rules()
tracemalloc.start()
t0 = time.monotonic()
report = analyze([sys.argv[1]], rules)
elapsed = time.monotonic() - t0
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"elapsed": elapsed, "peak": peak, "lines": report.inputs[0].lines,
                  "oom": any(c.match.rule.cls == "cuda_oom" for c in report.causes),
                  "maxrss_kb": hwm_kb()}))
"""


def test_a_single_100_mb_line_costs_bounded_time_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "rank_0.log"
    with path.open("wb") as f:
        f.write(b"2024-05-01 03:14:00,000 INFO start\n")
        block = b"a" * (1 << 20)
        for _ in range(100):
            f.write(block)
        f.write(f"\n{OOM}\n".encode())
    proc = subprocess.run(
        [sys.executable, "-c", _BIG_LINE_PROBE, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["elapsed"] < 30
    # Python allocations while reading: chunks and one truncated line, never the 100 MB line.
    assert out["peak"] < 32 << 20, out
    assert out["maxrss_kb"] < 400 * 1024, out  # the interpreter, pandas and rules, not the line
    assert out["lines"] == 3 and out["oom"]


def test_the_overlong_line_is_truncated_to_max_line() -> None:
    lines = list(iter_lines(io.BytesIO(b"x" * (3 * MAX_LINE) + b"\nnext\n")))
    assert [n for n, _ in lines] == [1, 2]
    assert len(lines[0][1]) < MAX_LINE + 100


# -- compressed files ------------------------------------------------------------------------

_LOG_BYTES = (
    "".join(
        f"2024-05-01 03:14:{i % 60:02d},000 INFO step {i} loss {i * 0.37:.3f}\n"
        for i in range(20000)
    )
    + OOM
    + "\n"
).encode()


def test_a_truncated_gzip_keeps_what_was_read_with_a_note(tmp_path: Path, rules) -> None:
    data = gzip.compress(_LOG_BYTES)
    (tmp_path / "rank_0.log.gz").write_bytes(data[: len(data) // 2])
    (tmp_path / "rank_1.log").write_text(GOOD)
    report = analyze([tmp_path], rules)
    entry = _entry(report, "rank_0.log.gz")
    assert entry.skipped is None and entry.lines > 1000
    assert "stopped early" in _reason(report, "rank_0.log.gz")
    assert _found_oom(report)


def _corrupt_gzip() -> bytes:
    data = gzip.compress(_LOG_BYTES)
    return data[:10] + bytes(range(256)) * 4  # a valid header, then a broken deflate stream


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("rank_0.log.gz", _corrupt_gzip),
        ("rank_0.log.xz", lambda: b"\xfd7zXZ\x00" + bytes(range(7, 250)) * 2),
    ],
    ids=["deflate", "xz"],
)
def test_a_corrupt_compressed_file_is_skipped_and_the_rest_is_analysed(
    tmp_path: Path, rules, name: str, make: Callable[[], bytes]
) -> None:
    (tmp_path / name).write_bytes(make())
    (tmp_path / "rank_1.log").write_text(GOOD)
    report = analyze([tmp_path], rules)
    assert _reason(report, name)
    assert _found_oom(report)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("rank_0.log.gz", b"\x1f\x8b" + b"\xff" * 200),
        ("rank_0.log.bz2", b"BZh9" + b"\x00\x01\x02garbage" * 30),
    ],
    ids=["gz-header", "bz2"],
)
def test_a_file_with_a_compression_magic_and_garbage_is_skipped(
    tmp_path: Path, rules, name: str, data: bytes
) -> None:
    (tmp_path / name).write_bytes(data)
    (tmp_path / "rank_1.log").write_text(GOOD)
    report = analyze([tmp_path], rules)
    assert _entry(report, name).skipped
    assert _found_oom(report)


def test_the_note_for_a_bad_compressed_file_says_why(tmp_path: Path, rules) -> None:
    (tmp_path / "rank_0.log.gz").write_bytes(b"\x1f\x8b" + b"\xff" * 200)
    (tmp_path / "rank_1.log").write_text(GOOD)
    report = analyze([tmp_path], rules)
    assert "None" not in _reason(report, "rank_0.log.gz")


@pytest.mark.parametrize("damage", ["bad-crc", "trailing-garbage"])
def test_a_gzip_with_a_damaged_trailer_keeps_its_lines(tmp_path: Path, rules, damage: str) -> None:
    data = gzip.compress(LOGGED.encode() * 200)
    data = data[:-8] + b"\0" * 8 if damage == "bad-crc" else data + b"garbage after the member"
    (tmp_path / "rank_0.log.gz").write_bytes(data)
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0.log.gz").lines > 0
    assert "stopped early" in _reason(report, "rank_0.log.gz")
    assert _found_oom(report)


def test_compressed_logs_of_each_kind_are_read(tmp_path: Path, rules) -> None:
    for i, compress in enumerate([gzip.compress, bz2.compress, lzma.compress]):
        (tmp_path / f"rank_{i}.log.z").write_bytes(compress(GOOD.encode()))
    report = analyze([tmp_path], rules)
    assert all(f.skipped is None and f.lines == 2 for f in report.inputs)


# -- a file being appended to ----------------------------------------------------------------


def test_a_file_appended_to_while_it_is_read(tmp_path: Path, rules) -> None:
    path = tmp_path / "rank_0.log"
    path.write_text(LOGGED)
    stop = threading.Event()

    def writer() -> None:
        with path.open("a") as f:
            for i in itertools.count():
                if stop.is_set() or i > 200_000:
                    return
                f.write(f"2024-05-01 03:15:00,000 INFO step {i}\n")
                if i % 100 == 0:
                    f.flush()
                    time.sleep(0.001)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.05)
        report = _bounded(lambda: analyze([path], rules))
    finally:
        stop.set()
        thread.join()
    assert _found_oom(report)
    assert _entry(report, "rank_0.log").lines >= 2


def test_a_read_stops_at_the_size_the_file_had_when_opened(
    tmp_path: Path, rules, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rank_0.log"
    path.write_text(GOOD * 10)
    line = b"2024-05-01 03:15:00,000 INFO still going\n"

    class Growing(io.FileIO):
        """A file whose writer appends as much as every read takes: the reader never catches up."""

        appended = 0

        def readinto(self, buffer: Any) -> int | None:
            if Growing.appended < 16 << 20:
                with path.open("ab") as out:
                    out.write(line * (len(buffer) // len(line) + 1))
                Growing.appended += len(buffer)
            return super().readinto(buffer)

    def growing_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if Path(file) == path and mode == "rb":
            return io.BufferedReader(Growing(file, "rb"))
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(crashlens.ingest.read, "open", growing_open, raising=False)
    report = _bounded(lambda: analyze([path], rules))
    assert _entry(report, "rank_0.log").lines < 1000


# -- empty things, many things ---------------------------------------------------------------


def test_empty_files_and_directories(tmp_path: Path, rules) -> None:
    (tmp_path / "empty_dir" / "nested_empty").mkdir(parents=True)
    (tmp_path / "rank_0.log").write_text("")
    (tmp_path / "rank_1.log").write_text(GOOD)
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0.log").lines == 0
    assert _found_oom(report)
    only_dirs = tmp_path / "empty_dir"
    with pytest.raises(NoInputError, match="nothing readable"):
        analyze([only_dirs], rules)
    result = runner.invoke(app, ["analyze", str(only_dirs)])
    assert result.exit_code == 2
    assert "nothing readable" in result.output and "Traceback" not in result.output


def test_an_empty_file_gets_a_note(tmp_path: Path, rules) -> None:
    (tmp_path / "rank_0.log").write_text("")
    (tmp_path / "rank_1.log").write_text(GOOD)
    report = analyze([tmp_path], rules)
    assert "empty" in _reason(report, "rank_0.log")


def test_twenty_thousand_tiny_files(tmp_path: Path, rules) -> None:
    root = tmp_path / "job"
    for d in range(20):
        sub = root / f"node-{d:02d}"
        sub.mkdir(parents=True)
        for i in range(1000):
            (sub / f"rank_{d * 1000 + i}.log").write_text("2024-05-01 03:14:00,000 INFO ok\n")
    (root / "node-00" / "rank_0.log").write_text(GOOD)
    t0 = time.monotonic()
    report = _bounded(lambda: analyze([root], rules), timeout=90)
    elapsed = time.monotonic() - t0
    assert len(report.inputs) == 20_000
    assert _found_oom(report)
    assert elapsed < 60, f"20,000 tiny files took {elapsed:.1f} s"
    render(report, "text")


# -- symlinks ---------------------------------------------------------------------------------


def test_symlinks_outside_broken_and_looping(tmp_path: Path, rules) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("TOPSECRET line\n" + GOOD)
    root = tmp_path / "job"
    (root / "node-01").mkdir(parents=True)
    (root / "node-01" / "rank_0.log").write_text("2024-05-01 03:14:00,000 INFO ok\n")
    os.symlink(outside / "secret.log", root / "escape.log")
    os.symlink(outside, root / "escape_dir")
    os.symlink(tmp_path / "missing.log", root / "broken.log")
    os.symlink("self.log", root / "self.log")
    os.symlink("ping.log", root / "pong.log")
    os.symlink("pong.log", root / "ping.log")
    os.symlink("..", root / "node-01" / "up")  # a directory loop to an ancestor
    os.symlink(root, root / "node-01" / "root")
    report = _bounded(lambda: analyze([root], rules))
    assert not _found_oom(report), "a symlink led the analysis outside the input tree"
    assert "outside" in _reason(report, "escape.log")
    assert "outside" in _reason(report, "escape_dir")
    assert "broken" in _reason(report, "broken.log")
    for name in ("self.log", "ping.log", "pong.log", "node-01/up", "node-01/root"):
        assert "loop" in _reason(report, name), name
    assert [f.path for f in report.inputs if f.skipped is None] == [f"{root}/node-01/rank_0.log"]
    assert "TOPSECRET" not in json.dumps(report.to_dict())
    _all_notes_one_line(report)


def test_a_symlink_to_a_file_inside_the_tree_is_read(tmp_path: Path, rules) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "rank_0.log").write_text(GOOD)
    os.symlink(tmp_path / "real" / "rank_0.log", tmp_path / "rank_0_link.log")
    report = analyze([tmp_path], rules)
    assert _entry(report, "rank_0_link.log").skipped is None
    assert _found_oom(report)


# -- FIFOs, sockets, devices ------------------------------------------------------------------


def test_fifos_sockets_and_devices_are_skipped_and_never_opened(tmp_path: Path, rules) -> None:
    root = tmp_path / "job"
    root.mkdir()
    (root / "rank_0.log").write_text(GOOD)
    fifo = root / "rank_1.log"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(root / "rank_2.log"))
        os.symlink("/dev/null", root / "rank_3.log")
        os.symlink("/dev/zero", root / "rank_4.log")
        os.symlink("rank_1.log", root / "fifo_link.log")  # inside the tree, to the FIFO
        report = _bounded(lambda: analyze([root], rules), unblock=_release_fifo(fifo))
        # Special files named directly on the command line are refused the same way.
        direct = _bounded(
            lambda: analyze([fifo, "/dev/null", "/dev/zero", root / "rank_0.log"], rules),
            unblock=_release_fifo(fifo),
        )
    finally:
        sock.close()
    assert _found_oom(report) and _found_oom(direct)
    assert "not a regular file" in _reason(report, "rank_1.log")
    assert "not a regular file" in _reason(report, "rank_2.log")
    assert "not a regular file" in _reason(report, "fifo_link.log")
    for name in ("rank_3.log", "rank_4.log"):
        assert _entry(report, name).skipped  # outside the tree, and not regular anyway
    for name in ("rank_1.log", "/dev/null", "/dev/zero"):
        assert "not a regular file" in _reason(direct, name)


def test_a_file_swapped_for_a_fifo_after_discovery_does_not_block(
    tmp_path: Path, rules, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Discovery saw a regular file; by the time it is opened a FIFO has taken its place.
    path = tmp_path / "rank_1.log"
    os.mkfifo(path)
    (tmp_path / "rank_0.log").write_text(GOOD)
    from crashlens.ingest.discover import Candidate

    def stale_discover(paths: Any) -> Any:
        yield Candidate(path=path, display=str(path))
        yield Candidate(path=tmp_path / "rank_0.log", display=str(tmp_path / "rank_0.log"))

    monkeypatch.setattr("crashlens.session.discover", stale_discover)
    report = _bounded(lambda: analyze([tmp_path], rules), timeout=5, unblock=_release_fifo(path))
    assert "not a regular file" in (_entry(report, "rank_1.log").skipped or "")
    assert _found_oom(report)


# -- unreadable files and directories ---------------------------------------------------------


def test_an_unreadable_file_is_noted_and_the_rest_is_analysed(
    tmp_path: Path, rules, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests run as root here, where chmod 000 does not stop a read: make open() refuse instead.
    locked = tmp_path / "rank_1.log"
    locked.write_text(GOOD)
    (tmp_path / "rank_0.log").write_text(GOOD)
    real_open = os.open

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(file) == locked:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(crashlens.ingest.read.os, "open", guarded_open)
    report = analyze([tmp_path], rules)
    assert "Permission denied" in _reason(report, "rank_1.log")
    assert _found_oom(report)


def test_an_unlistable_directory_is_noted(
    tmp_path: Path, rules, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "node-02"
    locked.mkdir()
    (locked / "rank_1.log").write_text(GOOD)
    (tmp_path / "rank_0.log").write_text(GOOD)
    real_scandir = os.scandir

    def guarded_scandir(path: Any = ".") -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", guarded_scandir)
    report = analyze([tmp_path], rules)
    assert "Permission denied" in _reason(report, "node-02")
    assert _found_oom(report)


@pytest.mark.skipif(IS_ROOT, reason="root reads a chmod 000 file anyway; emulated above")
def test_chmod_000_file_and_directory(tmp_path: Path, rules) -> None:
    (tmp_path / "rank_0.log").write_text(GOOD)
    locked_file = tmp_path / "rank_1.log"
    locked_file.write_text(GOOD)
    locked_dir = tmp_path / "node-02"
    locked_dir.mkdir()
    locked_file.chmod(0)
    locked_dir.chmod(0)
    try:
        report = analyze([tmp_path], rules)
    finally:
        locked_dir.chmod(0o755)
        locked_file.chmod(0o644)
    assert "Permission denied" in _reason(report, "rank_1.log")
    assert "Permission denied" in _reason(report, "node-02")


# -- everything at once: never written, exit codes --------------------------------------------


def _hostile_tree(root: Path) -> None:
    root.mkdir()
    (root / "rank_0.log").write_text(GOOD)
    (root / "core").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 5000)
    (root / "bad_utf8.log").write_bytes(b"\xff\xfe\xc3 x\n" * 10)
    (root / "u16.log").write_bytes(GOOD.encode("utf-16"))
    (root / "nul.log").write_bytes(b"ok\n" * 500 + b"a\x00b\n")
    (root / "trunc.log.gz").write_bytes(gzip.compress(_LOG_BYTES)[:3000])
    (root / "empty.log").write_bytes(b"")
    (root / "empty_dir").mkdir()
    os.symlink("/etc/hostname", root / "outside.log")
    os.symlink(root / "nowhere", root / "broken.log")
    os.symlink(".", root / "loop")
    os.symlink("/dev/null", root / "devnull.log")
    os.mkfifo(root / "fifo.log")


def _fingerprint(root: Path) -> dict[str, tuple[Any, ...]]:
    """sha256, size, mtime and mode of every entry (links and special files by lstat)."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            digest = None
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(path)
            out[str(path)] = (digest, st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def test_inputs_are_never_written_moved_or_deleted(tmp_path: Path, rules) -> None:
    root = tmp_path / "job"
    _hostile_tree(root)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(root / "sock.log"))
        before = _fingerprint(root)
        report = _bounded(lambda: analyze([root], rules), unblock=_release_fifo(root / "fifo.log"))
        for fmt in ("text", "json", "html", "markdown"):
            render(report, fmt)
        after = _fingerprint(root)
    finally:
        sock.close()
    assert after == before
    assert _found_oom(report)
    for name in (
        "core",
        "outside.log",
        "broken.log",
        "loop",
        "devnull.log",
        "fifo.log",
        "sock.log",
    ):
        assert _reason(report, name)
    _all_notes_one_line(report)


def test_exit_2_only_when_nothing_at_all_was_readable(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "core").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 5000)
    (junk / "empty_dir").mkdir()
    os.symlink(tmp_path / "nowhere", junk / "broken.log")
    os.mkfifo(junk / "fifo.log")
    result = runner.invoke(app, ["analyze", str(junk)])
    assert result.exit_code == 2, result.output
    assert "nothing readable" in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1
    (junk / "rank_0.log").write_text(GOOD)
    result = runner.invoke(app, ["analyze", str(junk)])
    assert result.exit_code == 1, result.output
    assert "CUDA out of memory" in result.stdout


# -- rules --------------------------------------------------------------------------------------

_RULE = """id: user-rule
title: A user rule
class: unknown
severity: low
detectors:
  marker:
    regex: 'USER MARKER (?P<n>\\d+)'
"""


def _rule_dir(tmp_path: Path, text: str, name: str = "user-rule.yaml") -> Path:
    d = tmp_path / "rules"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


def _rule_error(path: Path) -> RuleError:
    with pytest.raises(RuleError) as info:
        load_rule_file(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return info.value


def test_python_tags_are_rejected_naming_file_and_line(tmp_path: Path) -> None:
    d = _rule_dir(
        tmp_path, _RULE + "description: !!python/object/apply:os.system ['touch PWNED']\n"
    )
    err = _rule_error(d / "user-rule.yaml")
    assert err.line == 8 and "python/object" in str(err)
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()
    d2 = _rule_dir(tmp_path, "!!python/object:collections.OrderedDict {}\n", "obj.yaml")
    assert _rule_error(d2 / "obj.yaml").line == 1


@pytest.mark.parametrize(
    ("extra", "line", "words"),
    [
        ("condition:\n  any: [nope]\n", 9, "unknown detector"),
        ("condition:\n  any: [marker]\n  within: .nan\n", 9, "within"),
        ("condition:\n  any: [marker]\n  same: [rank]\n", 9, "same"),
    ],
)
def test_schema_errors_name_file_and_line(
    tmp_path: Path, extra: str, line: int, words: str
) -> None:
    d = _rule_dir(tmp_path, _RULE + extra)
    err = _rule_error(d / "user-rule.yaml")
    assert err.line == line and words in str(err)


def test_schema_errors_in_nested_detectors_name_their_line(tmp_path: Path) -> None:
    text = _RULE + "  other:\n    regex: '(unclosed'\n"
    err = _rule_error(_rule_dir(tmp_path, text) / "user-rule.yaml")
    assert err.line == 9 and "invalid regex" in str(err)


@pytest.mark.parametrize(
    "pattern",
    ["(" * 5000 + "a" + ")" * 5000, "(?u)(?a)x", "a{99999999999}"],
    ids=["deeply-nested-groups", "incompatible-flags", "huge-repeat"],
)
def test_a_pathological_regex_is_a_rule_error(tmp_path: Path, pattern: str) -> None:
    text = _RULE.replace("'USER MARKER (?P<n>\\d+)'", json.dumps(pattern))
    err = _rule_error(_rule_dir(tmp_path, text) / "user-rule.yaml")
    assert "regex" in str(err)


def test_a_huge_rule_file_is_rejected(tmp_path: Path) -> None:
    text = _RULE + "description: '" + "x" * MAX_RULE_FILE + "'\n"
    err = _rule_error(_rule_dir(tmp_path, text) / "user-rule.yaml")
    assert "too large" in str(err)


def test_billion_laughs_is_rejected_quickly(tmp_path: Path) -> None:
    levels = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    text = _RULE + "tags: [" + ", ".join(levels) + "]\ntitle: *l9\n"
    d = _rule_dir(tmp_path, text.replace("title: A user rule\n", ""))
    t0 = time.monotonic()
    err = _rule_error(d / "user-rule.yaml")
    assert time.monotonic() - t0 < 2
    assert "alias" in str(err) and err.line is not None


@pytest.mark.parametrize("style", ["flow-lists", "flow-maps", "block-lists"])
def test_deep_nesting_is_rejected_cleanly(tmp_path: Path, style: str) -> None:
    if style == "flow-lists":
        nested = "[" * 10_000 + "]" * 10_000
    elif style == "flow-maps":
        nested = "{a: " * 10_000 + "1" + "}" * 10_000
    else:
        nested = "\n" + "".join(" " * (2 * i) + "-\n" for i in range(200))
    d = _rule_dir(tmp_path, _RULE + f"tags: {nested}\n")
    t0 = time.monotonic()
    err = _rule_error(d / "user-rule.yaml")
    assert time.monotonic() - t0 < 5
    assert "nest" in str(err)


def test_a_bad_rule_file_is_one_line_and_exit_2_on_the_cli(tmp_path: Path) -> None:
    levels = "[" * 10_000 + "]" * 10_000
    d = _rule_dir(tmp_path, _RULE + f"tags: {levels}\n")
    (tmp_path / "rank_0.log").write_text(GOOD)
    args = ["analyze", str(tmp_path / "rank_0.log"), "--rules", str(d)]
    for result, code in (
        (runner.invoke(app, args), 1),
        (runner.invoke(app, [*args, "--strict-rules"]), 2),
    ):
        # left out with a one-line note (the bundled rules still find the OOM), or refused
        assert result.exit_code == code
        assert len([t for t in result.output.splitlines() if "user-rule.yaml" in t]) == 1
        assert "Traceback" not in result.output
        assert "RecursionError" not in result.output and "MemoryError" not in result.output


def _evil_job(tmp_path: Path, lines: int) -> tuple[Path, Path]:
    rules_dir = _rule_dir(tmp_path, EVIL_RULE, "evil.yaml")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.log").write_text(("a" * 3000 + "b\n") * lines + GOOD)
    return logs, rules_dir


def test_a_catastrophic_user_regex_cannot_hang_a_run(tmp_path: Path) -> None:
    logs, rules_dir = _evil_job(tmp_path, lines=3)
    t0 = time.monotonic()
    report = _bounded(lambda: analyze([logs], [rules_dir]), timeout=60)
    assert time.monotonic() - t0 < 20
    assert _found_oom(report)  # the other rules still ran


def test_a_timed_out_detector_is_reported(tmp_path: Path) -> None:
    logs, rules_dir = _evil_job(tmp_path, lines=3)
    report = _bounded(lambda: analyze([logs], [rules_dir]), timeout=60)
    assert any("evil-backtrack.evil" in n and "timed out" in n for n in report.notes), report.notes


def test_a_timed_out_detector_is_not_retried_on_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("crashlens.parse.matcher.REGEX_TIMEOUT", 0.02)
    logs, rules_dir = _evil_job(tmp_path, lines=120)
    t0 = time.monotonic()
    report = _bounded(lambda: analyze([logs], [rules_dir]), timeout=60)
    assert time.monotonic() - t0 < 2
    assert _found_oom(report)


# -- output safety (terminal) --------------------------------------------------------------------

_MARKUP = "[bold red]x[/bold red] [link=http://evil]y[/link]"
_ANSI = "\x1b[31mRED\x1b[0m \x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \x07\x08"


def _hostile_report(tmp_path: Path, rules, name: str = "rank_0.log", prefix: str = "") -> Report:
    (tmp_path / name).write_text(
        f"{prefix}2024-05-01 03:14:00,000 INFO {_MARKUP}\n{prefix}{OOM} {_MARKUP} {_ANSI}\n"
    )
    return analyze([tmp_path], rules)


def test_rich_markup_in_a_log_prints_literally(tmp_path: Path, rules) -> None:
    report = _hostile_report(tmp_path, rules)
    assert _found_oom(report)
    for color in (False, True):
        out = render(report, "text", color=color, width=400)
        assert "[bold red]x[/bold red]" in out
        assert "[link=http://evil]y[/link]" in out
    assert "\x1b]8;;http://evil" not in render(report, "text", color=True, width=400)


def test_ansi_escapes_from_a_log_are_neutralised(tmp_path: Path, rules) -> None:
    report = _hostile_report(tmp_path, rules)
    plain = render(report, "text", color=False, width=400)
    assert "\x1b" not in plain and "\x07" not in plain and "\x08" not in plain
    # Colour codes are dropped when the log is read (they are terminal markup, not text);
    # the text they coloured stays.
    assert "\\x1b[31m" not in plain and "RED" in plain
    colored = render(report, "text", color=True, width=400)
    assert "\x1b]8;;http://evil" not in colored
    assert "\x1b[31mRED" not in colored


@pytest.mark.parametrize("where", ["file-name", "kubectl-host"])
def test_escapes_in_file_names_and_hosts_are_neutralised(tmp_path: Path, rules, where: str) -> None:
    if where == "file-name":
        report = _hostile_report(tmp_path, rules, name="rank_0\x1b[31mRED\x1b[0m.log")
    else:
        report = _hostile_report(tmp_path, rules, prefix="[pod/\x1b[31mevil/c] ")
    assert _found_oom(report)
    assert "\x1b" not in render(report, "text", color=False, width=400)


def test_a_timed_out_detector_in_a_worker_process_is_reported(tmp_path: Path) -> None:
    # The diagnostics of forked workers come back with their results.
    from crashlens.session import ForkRunner, Session

    logs, rules_dir = _evil_job(tmp_path, lines=3)
    (logs / "rank_1.log").write_text(GOOD)
    session = Session.configured([rules_dir], runner=ForkRunner(workers=2, min_bytes=0))
    report = _bounded(lambda: session.read_paths([logs]).finish(), timeout=60)
    assert any("evil-backtrack.evil" in n and "timed out" in n for n in report.notes), report.notes


def test_stdin_is_read_by_the_parent_when_files_go_to_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashlens.session import ForkRunner, Session

    for r in (1, 2):
        (tmp_path / f"rank_{r}.log").write_text("2024-05-01 03:13:00,000 INFO train: step 6\n")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(GOOD.encode())))
    session = Session.configured(runner=ForkRunner(workers=2, min_bytes=0))
    report = session.read_paths([tmp_path / "rank_1.log", tmp_path / "rank_2.log", "-"]).finish()
    assert _found_oom(report)
    assert _entry(report, "<stdin>").lines == 2


def test_only_empty_input_exits_2_with_a_clear_line(tmp_path: Path, rules) -> None:
    """A log that was never written (or empty stdin) must not pass a CI gate as no failure."""
    (tmp_path / "rank_0.log").write_text("")
    (tmp_path / "rank_1.log").write_text("")
    with pytest.raises(NoInputError, match="nothing to analyse: 2 inputs read, all empty"):
        analyze([tmp_path], rules)
    result = runner.invoke(app, ["analyze", str(tmp_path)])
    assert result.exit_code == 2
    assert "all empty" in result.output and "No failure found" not in result.output
    piped = runner.invoke(app, ["analyze", "-"], input="")
    assert piped.exit_code == 2 and "all empty" in piped.output


def test_a_detector_timed_out_in_one_analysis_still_runs_in_the_next_on_the_same_pack(
    tmp_path: Path,
) -> None:
    from crashlens.session import SequentialRunner, Session

    logs, rules_dir = _evil_job(tmp_path, lines=3)
    first = Session.configured([rules_dir], runner=SequentialRunner())
    first.read_paths([logs])
    assert any(key.startswith("evil-backtrack.evil") for key in first.matcher.timeouts)
    assert first.pack is not None
    # a fleet worker's next job: the same compiled pack, a state of its own
    second = Session(first.rules, runner=SequentialRunner(), pack=first.pack)
    assert second.matcher.index is first.matcher.index and not second.matcher.disabled
    quick = tmp_path / "quick"
    quick.mkdir()
    (quick / "rank_0.log").write_text("aaaaaa\n")
    second.read_paths([quick])
    assert [h.rule_id for r in second.results for h in r.hits] == ["evil-backtrack"]


def test_analyses_of_the_same_rule_set_share_its_compiled_pack(tmp_path: Path) -> None:
    from crashlens.rulebase import load_rules
    from crashlens.session import KEEP_PACKS, SequentialRunner, Session

    rules = load_rules()
    first = Session(rules, runner=SequentialRunner())
    second = Session(rules, runner=SequentialRunner())
    # compiled once, each analysis with a matcher state of its own
    assert second.pack is first.pack and second.matcher is not first.matcher
    # a slow path asked for gets its own pack; another rule set (even an equal one) too
    assert Session(rules, fast=False, runner=SequentialRunner()).pack is not first.pack
    other = load_rules()
    assert Session(other, runner=SequentialRunner()).pack is not first.pack
    # only the last few are kept, each holding its rules
    for _ in range(KEEP_PACKS):
        Session(load_rules(), runner=SequentialRunner())
    assert Session(rules, runner=SequentialRunner()).pack is not first.pack
