"""Run one repro script in a throw-away sandbox and record what it really printed.

The fixtures under ``fixtures/repro/`` must be the logs a user would really hand to crashlens,
so the sandbox changes as little as possible about how a script runs: it only pins what makes a
run reproducible and harmless on a shared machine (loopback networking, one OpenMP thread, an
isolated HOME/TMPDIR/HF cache, offline Hugging Face) and makes sure nothing outlives the run
(own process group, killed on timeout and at the end). Standard library only, so the capture
machinery works wherever torch does.

torchrun starts each rank in a session of its own, so the launcher's process group alone does
not reach them. Every run therefore gets a marker in its environment (``CRASHLENS_REPRO_RUN``,
inherited by every descendant); at the end, and on timeout, the process group is terminated and
then every process still carrying the marker (found through ``/proc/<pid>/environ``) is killed.
:func:`marked_processes` lets a caller (or a test) check that nothing of a run is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Name of the combined stdout+stderr file of a single-process (``launcher=python``) run.
TRAIN_LOG = "train.log"
#: The name the repro script gets in the run directory (what users call theirs).
USER_SCRIPT = "train.py"
#: Name of the combined stdout+stderr file of the torchrun launcher (with ``[defaultN]:`` tees).
CONSOLE_LOG = "console.log"
#: How torchrun may lay its output out (torchrun's own options, nothing rewritten):
#: ``tee``: ``--log-dir`` tree and ``--tee 3`` (``[defaultN]:`` on the console); ``default``:
#: no options, every process writes the console unprefixed (tracebacks get c10d's
#: ``[rankN]:``); ``tee-console``: ``--tee 3`` without a tree; ``redirects``: ``--log-dir``
#: with ``--redirects 3``: per-rank ``stdout.log``/``stderr.log`` files, a near-silent console;
#: ``filtered-console``: the tree and ``--tee 3``, with ``--local-ranks-filter 0`` (the console
#: shows rank 0 alone, as many users keep it).
TORCHRUN_LAYOUTS = ("tee", "default", "tee-console", "redirects", "filtered-console")
#: A torchrun repro started by torch.multiprocessing.spawn instead (one console, no prefixes).
SPAWN_LAYOUT = "spawn"
#: Directory (inside the workdir) given to ``torchrun --log-dir``.
TORCHRUN_LOG_DIR = "torchrun_logs"
#: Where a run that records collectives (``fr=yes``) has its ranks write Flight Recorder dumps.
FLIGHT_RECORDER_DIR = "flight_recorder"
#: The file prefix of a dump: ProcessGroupNCCL's default name, the global rank appended.
FLIGHT_RECORDER_PREFIX = "comm_lib_trace_rank_"
#: The module (in ``scripts/``) that ``fr=yes`` scripts import to write their dumps.
FLIGHT_RECORDER_HELPER = "_flight_recorder.py"
#: The launcher of the ``spawn`` layout (torch.multiprocessing.spawn), copied beside the script.
SPAWN_LAUNCHER = "_spawn_launch.py"
#: Its name in the run directory: the user's own launch script.
SPAWN_SCRIPT = "launch.py"
#: Entries each rank's Flight Recorder keeps (``TORCH_FR_BUFFER_SIZE``).
FLIGHT_RECORDER_ENTRIES = 2000

#: Environment variable that marks every process of one run (see :func:`marked_processes`).
RUN_MARKER = "CRASHLENS_REPRO_RUN"

_TERM_GRACE_S = 3.0


class SandboxUnavailable(RuntimeError):
    """A run needs something this machine cannot provide (root for mount, a tmpfs, ...)."""


@dataclass(frozen=True)
class RunResult:
    """Outcome of one sandboxed run.

    ``exit_code`` is the launcher's return code as ``subprocess`` reports it (negative when it
    died from a signal, ``None`` only if it could not be reaped); ``signal_name`` names that
    signal. ``logs`` are the captured log files, relative to ``log_root`` (the workdir
    unless the caller put the logs elsewhere). ``pid`` is the launcher's pid, which is also the
    run's process group id; ``marker`` the value of :data:`RUN_MARKER` in the run's environment.
    """

    command: list[str]
    env: dict[str, str]
    workdir: Path
    exit_code: int | None
    signal_name: str | None
    timed_out: bool
    duration_s: float
    logs: list[Path] = field(default_factory=list)
    log_root: Path | None = None
    pid: int | None = None
    marker: str = ""
    #: Whether the run had a network namespace of its own (loopback only).
    network_isolated: bool = False

    @property
    def logs_dir(self) -> Path:
        """The directory ``logs`` are relative to."""
        return self.log_root if self.log_root is not None else self.workdir


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def occupied_port() -> Iterator[int]:
    """Hold a listening socket on a free 127.0.0.1 port for the duration of the block.

    This stands in for a leftover job (or a second job on the same node) that already owns the
    MASTER_PORT, so that torchrun's TCPStore really fails to bind. No SO_REUSEPORT is set, so
    the kernel refuses a second bind with EADDRINUSE.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port: int = sock.getsockname()[1]
        yield port
    finally:
        sock.close()


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (e.g. ``"1m"``) on ``path`` for the block, then unmount it.

    Used to make a real "No space left on device" happen without filling a real disk. Raises
    :class:`SandboxUnavailable` when the machine does not allow it (not root, no mount).
    """
    if os.geteuid() != 0:
        raise SandboxUnavailable("mounting a tmpfs needs root (euid is not 0)")
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SandboxUnavailable(f"mount -t tmpfs failed: {proc.stderr.strip() or proc.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True, check=False)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What :func:`prepared` set up for a run: the held port, and one line per arrangement."""

    master_port: int | None
    setup: tuple[str, ...]


@contextlib.contextmanager
def prepared(
    options: Mapping[str, str], workdir: Path, params: dict[str, str]
) -> Iterator[Prepared]:
    """What a repro's options ask to have in place while it runs: ``master_port: occupied``
    (a listening socket on the port torchrun is then told to use), ``tmpfs: <dir>:<size>`` (a
    small tmpfs on ``<workdir>/<dir>``, passed as ``--ckpt-dir``), ``shm: <size>`` (said here;
    :func:`run_script` gives the run its private /dev/shm). Each is described in ``setup``.

    Raises:
        SandboxUnavailable: this machine cannot set it up (nothing was started).
    """
    setup: list[str] = []
    with contextlib.ExitStack() as stack:
        master_port: int | None = None
        if options.get("master_port") == "occupied":
            master_port = stack.enter_context(occupied_port())
            setup.append(
                f"a listening TCP socket was opened on 127.0.0.1:{master_port} and held "
                "for the whole run (the port torchrun is then told to use)"
            )
        if "tmpfs" in options:
            subdir, _, size = options["tmpfs"].partition(":")
            stack.enter_context(mounted_tmpfs(workdir / subdir, size or "1m"))
            setup.append(f"a {size} tmpfs was mounted on `<workdir>/{subdir}`")
            params.setdefault("ckpt-dir", subdir)
        shm = options.get("shm")
        if shm is not None:
            setup.append(f"the run got a private {shm} /dev/shm (its own mount namespace)")
        yield Prepared(master_port, tuple(setup))


def build_env(workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Build a small, explicit environment for the run.

    Starts from almost nothing (PATH and locale only) so the captured logs do not depend on the
    caller's shell; pins loopback networking for gloo/TCPStore, one OpenMP thread (2-core CI
    machine), unbuffered Python (so interleaving in the combined log is the real order), and
    puts HOME, TMPDIR and the Hugging Face caches inside the workdir, offline.
    """
    env: dict[str, str] = {}
    for key in ("PATH", "LANG", "LC_ALL", "TZ"):
        if key in os.environ:
            env[key] = os.environ[key]
    home = workdir / "home"
    tmp = workdir / "tmp"
    hf_home = workdir / "hf_home"
    for d in (home, tmp, hf_home):
        d.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "MASTER_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HOME": str(hf_home),
            "HF_DATASETS_CACHE": str(hf_home / "datasets"),
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
    )
    if extra:
        env.update(extra)
    return env


def build_command(
    script: Path,
    *,
    launcher: str,
    ranks: int,
    master_port: int | None,
    log_dir: Path | None,
    params: Mapping[str, str],
    torchrun_args: Sequence[str] = (),
    layout: str = "tee",
) -> list[str]:
    """Return the argv that launches ``script`` the way users do.

    ``launcher="python"`` runs ``python script.py``. ``launcher="torchrun"`` runs
    ``python -m torch.distributed.run`` (what the ``torchrun`` entry point does) with
    ``--log-dir`` and ``--tee 3``, so that both artefacts users really have exist: the per-rank
    ``stdout.log``/``stderr.log`` tree and the ``[defaultN]:``-prefixed console output.
    ``params`` become ``--key value`` script arguments; ``torchrun_args`` are extra launcher
    options (e.g. ``--monitor-interval=5``).
    """
    script_args: list[str] = []
    for key, value in params.items():
        script_args += [f"--{key}", value]
    if launcher == "python":
        return [sys.executable, str(script), *script_args]
    if launcher == "torchrun":
        if master_port is None:
            raise ValueError("torchrun needs master_port")
        if layout == SPAWN_LAYOUT:
            # torchrun's job started by the user's own mp.spawn launcher instead
            launch = script.parent / SPAWN_SCRIPT
            return [sys.executable, str(launch), "--nprocs", str(ranks),
                    "--master-port", str(master_port), str(script), *script_args]  # fmt: skip
        if layout not in TORCHRUN_LAYOUTS:
            raise ValueError(f"unknown torchrun layout {layout!r}")
        if layout in ("tee", "redirects", "filtered-console") and log_dir is None:
            raise ValueError(f"layout {layout!r} needs log_dir")
        output: list[str] = []
        if layout in ("tee", "redirects", "filtered-console"):
            output += ["--log-dir", str(log_dir)]
        if layout in ("tee", "tee-console", "filtered-console"):
            output += ["--tee", "3"]
        if layout == "filtered-console":
            output += ["--local-ranks-filter", "0"]
        if layout == "redirects":
            output += ["--redirects", "3"]
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(ranks),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(master_port),
            *output,
            *torchrun_args,
            str(script),
            *script_args,
        ]
    raise ValueError(f"unknown launcher {launcher!r} (expected 'python' or 'torchrun')")


def _rlimit_setter(as_limit_bytes: int) -> Callable[[], None]:
    def _set() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (as_limit_bytes, as_limit_bytes))

    return _set


_CLONE_NEWNET = 0x40000000
_SIOCSIFFLAGS = 0x8914
_IFF_UP_LOOPBACK_RUNNING = 0x1 | 0x8 | 0x40


def _isolate_network() -> None:
    """In the child, before exec: a network namespace of its own with only loopback up.

    The repro can then reach 127.0.0.1 (rendezvous, gloo) and nothing else. Raises when the
    kernel refuses (no privilege for namespaces); the caller then runs without it and says so.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", _IFF_UP_LOOPBACK_RUNNING, b"\0" * 14)
        fcntl.ioctl(sock, _SIOCSIFFLAGS, request)


_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000


def _private_shm(size: str) -> Callable[[], None]:
    """In the child, before exec: a mount namespace of its own whose /dev/shm is a fresh tmpfs
    of ``size`` (Docker's 64 MB default, or smaller), leaving the machine's /dev/shm alone."""

    def _mount() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNS) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        # nothing mounted here may propagate back to the host's namespace
        if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        options = f"size={size}".encode()
        if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, options) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return _mount


def check_private_shm(size: str) -> None:
    """Raise :class:`SandboxUnavailable` unless a child can get a private /dev/shm here."""
    if os.geteuid() != 0:
        raise SandboxUnavailable("a private /dev/shm needs root (euid is not 0)")
    try:
        subprocess.run(
            [sys.executable, "-c", "pass"], preexec_fn=_private_shm(size), check=True,
            capture_output=True, timeout=30,
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError) as exc:
        raise SandboxUnavailable(f"cannot give the run a private /dev/shm: {exc}") from exc


def _preexec(
    as_limit_bytes: int | None, isolate: bool, shm_size: str | None = None
) -> Callable[[], None] | None:
    steps: list[Callable[[], None]] = []
    if shm_size is not None:
        steps.append(_private_shm(shm_size))
    if isolate:
        steps.append(_isolate_network)
    if as_limit_bytes is not None:
        steps.append(_rlimit_setter(as_limit_bytes))
    if not steps:
        return None

    def run_all() -> None:
        for step in steps:
            step()

    return run_all


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(
    pgid: int, grace_s: float = _TERM_GRACE_S, leader: subprocess.Popen[bytes] | None = None
) -> None:
    """SIGTERM the whole process group, wait up to ``grace_s``, then SIGKILL what is left.

    The run's children (DataLoader workers, torchrun's ranks, datasets pool processes) can
    outlive the launcher; they all share its session/process group, so this leaves nothing
    running. ``leader`` (the launcher's Popen) is reaped while waiting: a dead but unreaped
    leader is a zombie that still counts as a member of the group.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def marked_processes(marker: str) -> list[int]:
    """Pids of the live processes whose environment holds ``RUN_MARKER=marker`` (Linux /proc).

    Zombies (already dead, not yet reaped) have an empty environment and are not listed.
    Processes of other users cannot be read and are skipped: a run only starts its own.
    """
    needle = f"{RUN_MARKER}={marker}".encode()
    found: list[int] = []
    proc = Path("/proc")
    if not marker or not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def kill_marked(marker: str, grace_s: float = _TERM_GRACE_S) -> None:
    """SIGTERM every process of the run (by marker), then SIGKILL those left after ``grace_s``."""
    pids = marked_processes(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = marked_processes(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)


def _collect_logs(log_root: Path, main_log: Path) -> list[Path]:
    logs = [main_log.relative_to(log_root)]
    for sub in (TORCHRUN_LOG_DIR, FLIGHT_RECORDER_DIR):
        if (log_root / sub).is_dir():
            logs += sorted(
                p.relative_to(log_root) for p in (log_root / sub).rglob("*") if p.is_file()
            )
    return logs


def run_script(
    script: Path,
    *,
    workdir: Path,
    launcher: str,
    ranks: int,
    timeout_s: float,
    params: Mapping[str, str] | None = None,
    as_limit_bytes: int | None = None,
    master_port: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    log_root: Path | None = None,
    torchrun_args: Sequence[str] = (),
    isolate_network: bool = True,
    shm_size: str | None = None,
    layout: str = "tee",
    flight_recorder: bool = False,
) -> RunResult:
    """Run ``script`` in ``workdir`` (copied there as ``train.py``) and capture its logs there.

    stdout and stderr go to one file (``train.log`` for ``python``, ``console.log`` for
    ``torchrun``), as a user's ``2>&1 | tee`` or a scheduler's output file holds them. The run
    gets its own session, so on timeout and again at the end the whole process group is
    terminated. ``as_limit_bytes`` caps the address space (RLIMIT_AS) of the launcher and its
    children. For torchrun a free ``master_port`` is picked unless one is given (the
    port-in-use repro passes an occupied one). ``log_root`` (default ``workdir``) is where the
    main log and torchrun's ``--log-dir`` go, so that the logs can be kept apart from what the
    script writes in its working directory. ``shm_size`` gives the run a private /dev/shm of
    that size (raises :class:`SandboxUnavailable` where the machine does not allow it).
    ``flight_recorder`` turns on the Flight Recorder (``TORCH_FR_BUFFER_SIZE``) and points the
    dumps' prefix (``TORCH_FR_DUMP_TEMP_FILE``) into ``<log_root>/flight_recorder/``, which is
    collected with the logs. On return no process of the run is left.
    """
    if shm_size is not None:
        check_private_shm(shm_size)  # SandboxUnavailable before anything is created
    workdir.mkdir(parents=True, exist_ok=True)
    # The job's script is the user's ``train.py`` in the run directory, as in a real job:
    # wherever crashlens is installed (a wheel's site-packages), its frames are the user's.
    script = Path(shutil.copy2(script, workdir / USER_SCRIPT))
    if flight_recorder:
        # The scripts that write Flight Recorder dumps share the helper that writes them.
        shutil.copy2(Path(__file__).parent / "scripts" / FLIGHT_RECORDER_HELPER, workdir)
    if launcher == "torchrun" and layout == SPAWN_LAYOUT:
        shutil.copy2(Path(__file__).parent / "scripts" / SPAWN_LAUNCHER, workdir / SPAWN_SCRIPT)
    log_root = log_root if log_root is not None else workdir
    log_root.mkdir(parents=True, exist_ok=True)
    log_dir: Path | None = None
    if launcher == "torchrun":
        log_dir = (
            log_root / TORCHRUN_LOG_DIR
            if layout in ("tee", "redirects", "filtered-console")
            else None
        )
        if master_port is None:
            master_port = free_port()
    main_log = log_root / (CONSOLE_LOG if launcher == "torchrun" else TRAIN_LOG)
    command = build_command(
        script,
        launcher=launcher,
        ranks=ranks,
        master_port=master_port,
        log_dir=log_dir,
        params=params or {},
        torchrun_args=torchrun_args,
        layout=layout,
    )
    marker = uuid.uuid4().hex
    env = build_env(workdir, extra_env)
    env[RUN_MARKER] = marker
    if flight_recorder:
        env["TORCH_FR_BUFFER_SIZE"] = str(FLIGHT_RECORDER_ENTRIES)
        env["TORCH_FR_DUMP_TEMP_FILE"] = str(
            log_root / FLIGHT_RECORDER_DIR / FLIGHT_RECORDER_PREFIX
        )
    with short_tmpdir(Path(env["TMPDIR"]), marker) as tmp:
        env["TMPDIR"] = str(tmp)
        return _run(command, workdir, env, main_log, log_root, marker, timeout_s,
                    as_limit_bytes, isolate_network, shm_size)  # fmt: skip


#: Longest TMPDIR that leaves room for multiprocessing's ``pymp-*/listener-*`` socket names
#: under the AF_UNIX limit (108 bytes on Linux), as DataLoader workers create them.
MAX_SOCKET_TMPDIR = 60


@contextlib.contextmanager
def short_tmpdir(tmp: Path, marker: str) -> Iterator[Path]:
    """``tmp``, or a short symlink to it under the system temp directory while the run lasts
    when ``tmp`` is too long a path for the sockets processes create in it (a deep ``--out``)."""
    if len(str(tmp)) <= MAX_SOCKET_TMPDIR:
        yield tmp
        return
    link = Path("/tmp") / f"crashlens-{marker[:12]}"
    link.symlink_to(tmp, target_is_directory=True)
    try:
        yield link
    finally:
        link.unlink(missing_ok=True)


def _run(
    command: list[str],
    workdir: Path,
    env: dict[str, str],
    main_log: Path,
    log_root: Path,
    marker: str,
    timeout_s: float,
    as_limit_bytes: int | None,
    isolate_network: bool,
    shm_size: str | None = None,
) -> RunResult:
    timed_out = False
    start = time.monotonic()
    isolated = isolate_network
    with main_log.open("wb") as out:

        def launch(isolate: bool) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                command,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_preexec(as_limit_bytes, isolate=isolate, shm_size=shm_size),
            )

        try:
            proc = launch(isolate_network)
        except (subprocess.SubprocessError, OSError):
            # No network namespace here (no privilege): run loopback-configured, and say so.
            isolated = False
            proc = launch(False)
        try:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            duration = time.monotonic() - start
            if timed_out:
                kill_group(proc.pid, leader=proc)
                try:
                    proc.wait(timeout=_TERM_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            # Also on KeyboardInterrupt or any error while waiting: nothing may outlive the run.
            kill_group(proc.pid, leader=proc)  # leftover children (workers, ranks)
            kill_marked(marker)  # ranks torchrun started in sessions of their own
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    code = proc.returncode
    sig_name: str | None = None
    if code is not None and code < 0:
        try:
            sig_name = signal.Signals(-code).name
        except ValueError:
            sig_name = f"signal {-code}"
    return RunResult(
        command=command,
        env=env,
        workdir=workdir,
        exit_code=code,
        signal_name=sig_name,
        timed_out=timed_out,
        duration_s=duration,
        logs=_collect_logs(log_root, main_log),
        log_root=log_root,
        pid=proc.pid,
        marker=marker,
        network_isolated=isolated,
    )
