"""``crashlens run``: run a training command unchanged, tee its output with timestamps.

The wrapper sits in the launch line of every job, so it must cost nothing when the job is
healthy: output is moved in 64 KiB reads with one write per read to the terminal and one to
the log (never per line, never through Python's text layer), and the timestamp prefix is built
once per read. It must also not change how the job behaves: the command gets its own process
group (so a terminal Ctrl-C reaches it exactly once, through us), keeps stdin, and every
termination signal the wrapper receives is forwarded to the whole group, so torchrun and its
workers see what they would have seen without the wrapper.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

#: Name of the combined, timestamped stdout+stderr capture inside the log directory.
CONSOLE_LOG = "console.log"
#: Signals forwarded to the command's process group. SIGINT/SIGTERM/SIGHUP are what terminals,
#: schedulers (SLURM, Kubernetes) and users send; SIGQUIT and SIGUSR1/2 are forwarded too
#: because SLURM's ``--signal`` and py-spy style dumps rely on them reaching the job.
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
READ_SIZE = 1 << 16
#: An unterminated line longer than this is written out (prefixed once) instead of buffered,
#: so a program that prints a huge line without a newline cannot grow the wrapper's memory.
MAX_PARTIAL = 1 << 16
#: After the command exits, keep draining output its leftover children still write for this
#: long (idle) or at most ``DRAIN_MAX_S`` in total; a daemon holding the pipe must not hang us.
DRAIN_IDLE_S = 0.5
DRAIN_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class WrapResult:
    """How the wrapped command ended and where its output was captured.

    ``exit_code`` follows the shell convention: the command's status, or 128+N when signal N
    killed it. ``signal`` is N in that case, else None.
    """

    exit_code: int
    signal: int | None
    log_path: Path
    bytes_out: int
    duration_s: float

    @property
    def failed(self) -> bool:
        """Whether the command failed (non-zero exit or fatal signal)."""
        return self.exit_code != 0


def default_log_dir(now: dt.datetime | None = None, base: Path | None = None) -> Path:
    """``./crashlens-run-<YYYYmmdd-HHMMSS>/``, suffixed ``-2``, ``-3``... if it already exists."""
    stamp = (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    root = base or Path.cwd()
    candidate = root / f"crashlens-run-{stamp}"
    n = 2
    while candidate.exists():
        candidate = root / f"crashlens-run-{stamp}-{n}"
        n += 1
    return candidate


class _Stamper:
    """The python-logging prefix ``2024-05-01 03:14:00,123 `` for a time, cached per second.

    That format is the one the parser reads for python ``logging`` lines, so the capture lines up
    with any other log of the job without new parser code. Local time, like ``logging``.
    """

    def __init__(self) -> None:
        self._second = -1
        self._head = ""

    def prefix(self, now: float) -> bytes:
        second = int(now)
        if second != self._second:
            self._second = second
            self._head = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        millis = int((now - second) * 1000)
        return f"{self._head},{millis:03d} ".encode("ascii")


class _Tee:
    """One output stream of the command: passthrough to our fd, timestamped copy to the log."""

    def __init__(self, out_fd: int, log_fd: int, stamper: _Stamper) -> None:
        self.out_fd = out_fd
        self.log_fd = log_fd
        self.stamper = stamper
        self.partial = b""
        self.at_line_start = True
        self.passthrough = True

    def feed(self, data: bytes, now: float) -> None:
        if self.passthrough:
            try:
                _write_all(self.out_fd, data)
            except BrokenPipeError:
                # `crashlens run -- cmd | head`: the reader left; keep capturing, stop echoing.
                self.passthrough = False
            except OSError:
                self.passthrough = False
        data = self.partial + data if self.partial else data
        cut = data.rfind(b"\n") + 1
        complete, rest = data[:cut], data[cut:]
        out = b""
        if complete:
            prefix = self.stamper.prefix(now)
            lines = complete[:-1].split(b"\n")
            head = prefix if self.at_line_start else b""
            out = head + (b"\n" + prefix).join(lines) + b"\n"
            self.at_line_start = True
        if len(rest) > MAX_PARTIAL:
            head = self.stamper.prefix(now) if self.at_line_start else b""
            out += head + rest
            self.at_line_start = False
            rest = b""
        self.partial = rest
        if out:
            _write_all(self.log_fd, out)

    def flush(self, now: float) -> None:
        """Write an unterminated last line (with a newline, so the log stays line-based)."""
        if self.partial:
            head = self.stamper.prefix(now) if self.at_line_start else b""
            _write_all(self.log_fd, head + self.partial + b"\n")
            self.partial = b""
        elif not self.at_line_start:
            _write_all(self.log_fd, b"\n")
        self.at_line_start = True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def run_and_tee(
    command: Sequence[str],
    log_dir: Path,
    *,
    stdout_fd: int = 1,
    stderr_fd: int = 2,
    env: Mapping[str, str] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> WrapResult:
    """Run ``command`` in its own process group, echo and capture its output, return its status.

    ``PYTHONUNBUFFERED=1`` is added to the environment unless it is already set: through a pipe a
    Python program block-buffers stdout, which would make the output neither live nor in true
    order with stderr in the log. Nothing else about the command changes.

    Raises:
        OSError: when the log directory cannot be created or the command cannot be started
            (``FileNotFoundError`` for an unknown program).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / CONSOLE_LOG
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    pending: list[int] = []
    group: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if not group:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group[0], signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    started = time.monotonic()
    total = 0
    try:
        proc = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            # A new session makes the child the leader of its own process group (pgid = pid)
            # without a controlling terminal: terminal signals reach it only through us, once,
            # and reading the inherited stdin never stops it with SIGTTIN.
            start_new_session=True,
        )
        group.append(proc.pid)
        if on_start is not None:
            on_start(proc.pid)
        for signum in pending:
            forward(signum, None)
        assert proc.stdout is not None and proc.stderr is not None
        stamper = _Stamper()
        tees = {
            proc.stdout.fileno(): _Tee(stdout_fd, log_fd, stamper),
            proc.stderr.fileno(): _Tee(stderr_fd, log_fd, stamper),
        }
        total = _pump(proc, tees)
        now = time.time()
        for tee in tees.values():
            tee.flush(now)
        proc.stdout.close()
        proc.stderr.close()
        code = proc.wait()
        if code != 0:
            _write_all(log_fd, stamper.prefix(time.time()) + _trailer(command, code))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(log_fd)
    if code < 0:
        return WrapResult(128 - code, -code, log_path, total, time.monotonic() - started)
    return WrapResult(code, None, log_path, total, time.monotonic() - started)


def _trailer(command: Sequence[str], code: int) -> bytes:
    """The last line of a failed run's capture: how the command ended, as launchers log it.

    A command killed by a signal often prints nothing about it (SIGKILL from the OOM killer,
    a segfault without faulthandler); the status is then the only evidence, so it is written in
    torchelastic's ``exitcode: -N`` wording, which the signal rules already match.
    """
    name = Path(command[0]).name if command else "command"
    why = ""
    if code < 0:
        try:
            why = f", {signal.Signals(-code).name}"
        except ValueError:
            why = ""
    return f"crashlens run: {name} failed (exitcode: {code}{why})\n".encode()


def _pump(proc: subprocess.Popen[bytes], tees: dict[int, _Tee]) -> int:
    """Move output until both pipes close (or the command is gone and its pipes go quiet)."""
    total = 0
    sel = selectors.DefaultSelector()
    for fd in tees:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    exited_at: float | None = None
    last_data = time.monotonic()
    try:
        while sel.get_map():
            events = sel.select(timeout=0.2)
            clock = time.monotonic()
            if events:
                now = time.time()
                for key, _ in events:
                    fd = key.fd
                    assert isinstance(fd, int)
                    try:
                        data = os.read(fd, READ_SIZE)
                    except BlockingIOError:
                        continue
                    if not data:
                        sel.unregister(fd)
                        continue
                    total += len(data)
                    last_data = clock
                    tees[fd].feed(data, now)
            if exited_at is None:
                if proc.poll() is not None:
                    exited_at = clock
            elif clock - last_data > DRAIN_IDLE_S or clock - exited_at > DRAIN_MAX_S:
                break
    finally:
        sel.close()
    return total
