"""Expand the user's paths into log files, and learn rank, host and kind from each path.

Real jobs leave trees such as ``node-02/rank_3.log``, torchrun ``--log-dir`` trees
(``<run_id>/attempt_0/3/stderr.log``), ``slurm-<job>_<task>.out`` or ``dmesg`` captures. The path
is often the only place a rank or host is written, so it is read once, here.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from crashlens import lazyre
from crashlens.model import Skip, SkipKind, Source, SourceKind

_RANK_IN_NAME = lazyre.compile_regex(r"(?i)(?:^|[^a-z])rank[_\-.]?(\d+)(?!\d)")
_TORCHRUN_TREE = lazyre.compile_regex(r"attempt_\d+/(\d+)/(?:stdout|stderr|error)\.(?:log|json)$")
_SLURM_TASK = lazyre.compile_regex(r"slurm-\d+_(\d+)\.(?:out|err|log)$")
_HOST_DIR = lazyre.compile_regex(r"(?i)^(?:node|host|worker|gpu|compute|nid)[\w\-]*?\d+[\w\-]*$")
_HOST_IN_NAME = lazyre.compile_regex(
    r"(?i)(?:^|[_\-.])((?:node|host|worker|nid)[\-_]?\d+)(?=$|[_\-.])"
)
_KERNEL_NAME = lazyre.compile_regex(
    r"(?i)(?:^|[_\-.])(dmesg|kern\.log|kernel|syslog|messages|journal)"
)
_ERROR_JSON = lazyre.compile_regex(r"(?i)error[\w\-]*\.json$")
#: A Flight Recorder dump saved with a suffix: the prefix, the rank, ``.pkl`` / ``.pickle``.
_FLIGHT_DUMP = lazyre.compile_regex(r"(?i)(?:trace|fr|flight)[\w\-]*?\d+\.(?:pkl|pickle)$")
_SCHEDULER_NAME = lazyre.compile_regex(r"(?i)^(?:slurmd|slurmctld|slurmstepd|kubelet|events)")
#: Files a job directory holds that are not logs: docs, configs, code, weights, images.
NOT_LOG_SUFFIXES = frozenset(
    [
        ".md",
        ".rst",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".py",
        ".ipynb",
        ".sh",
        ".pt",
        ".pth",
        ".bin",
        ".safetensors",
        ".ckpt",
        ".npy",
        ".npz",
        ".pkl",
        ".pickle",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".svg",
        ".pdf",
        ".html",
        ".css",
        ".js",
        ".parquet",
        ".arrow",
    ]
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A path to read, or a note saying why it was not read."""

    path: Path
    display: str
    skipped: Skip | None = None
    #: Who wrote the file when something other than its path says so (a scheduler's task id
    #: for a file it named); else :func:`attribute` reads it from ``display``.
    source: Source | None = None


def discover(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Candidate]:
    """Yield every regular file under ``paths`` (directories walked recursively, sorted).

    Symlinks are followed only when they point at a regular file inside an input tree;
    FIFOs, sockets and devices are reported, never opened, so a read can never block.
    """
    for raw in paths:
        root = Path(raw)
        if str(raw) == "-":
            yield Candidate(path=root, display="<stdin>")
            continue
        if not root.exists() and not root.is_symlink():
            yield Candidate(
                path=root,
                display=str(raw),
                skipped=Skip(SkipKind.MISSING, "no such file or directory"),
            )
            continue
        if root.is_dir():
            yield from _walk(root, str(raw))
        else:
            yield _check_file(root, str(raw))


def _walk(root: Path, shown_root: str) -> Iterator[Candidate]:
    try:
        real_root = root.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        yield Candidate(
            path=root,
            display=shown_root,
            skipped=Skip(SkipKind.UNREADABLE, f"cannot resolve: {_reason(exc)}"),
        )
        return
    seen_dirs: set[tuple[int, int]] = set()
    errors: list[OSError] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=errors.append, followlinks=False):
        yield from _listing_errors(errors, root, shown_root)
        try:
            st = os.stat(dirpath)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add(key)
        dirnames.sort()
        # os.walk lists a symlink to a directory with the directories but never enters it:
        # it is reported (a loop, outside the tree, or a duplicate of a walked directory).
        linked_dirs = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d not in linked_dirs]
        for name in sorted([*filenames, *linked_dirs]):
            path = Path(dirpath) / name
            display = _display(path, root, shown_root)
            if name in linked_dirs:
                yield Candidate(
                    path=path,
                    display=display,
                    skipped=Skip(SkipKind.LINK, _dir_link_reason(path, real_root)),
                )
                continue
            if path.is_symlink():
                reason = _file_link_reason(path, real_root)
                if reason is not None:
                    yield Candidate(path=path, display=display, skipped=Skip(SkipKind.LINK, reason))
                    continue
            yield _check_file(path, display)
    yield from _listing_errors(errors, root, shown_root)


def _display(path: Path, root: Path, shown_root: str) -> str:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
    if rel == ".":
        return shown_root
    return f"{shown_root.rstrip('/')}/{rel}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, RuntimeError):  # pathlib's "Symlink loop from ..." (Python < 3.13)
        return "symlink loop"
    return str(exc) or type(exc).__name__


def _listing_errors(errors: list[OSError], root: Path, shown_root: str) -> Iterator[Candidate]:
    """Directories ``os.walk`` could not list (no permission, vanished): one note each."""
    while errors:
        exc = errors.pop(0)
        where = Path(exc.filename) if exc.filename else root
        yield Candidate(
            path=where,
            display=_display(where, root, shown_root),
            skipped=Skip(SkipKind.UNREADABLE, f"cannot list directory: {_reason(exc)}"),
        )


def _file_link_reason(path: Path, real_root: Path) -> str | None:
    """Why a symlink found in the tree is not read (None: it points at a file inside the tree)."""
    try:
        target = path.resolve(strict=True)
    except RuntimeError:
        return "symlink loop"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        return "broken symlink"
    if real_root not in target.parents and target != real_root:
        return "symlink points outside the input tree"
    return None


def _dir_link_reason(path: Path, real_root: Path) -> str:
    """Why a symlink to a directory is not walked (it never is: its target is reported)."""
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return "symlink loop"
    if (
        target == real_root
        or target in path.parent.resolve().parents
        or target == (path.parent.resolve())
    ):
        return "symlink loop (points to an ancestor directory); not followed"
    if real_root not in target.parents:
        return "symlink points outside the input tree"
    return "symlink to a directory inside the input tree; not followed (its target is read)"


def _check_file(path: Path, display: str) -> Candidate:
    try:
        st = path.stat()
    except OSError as exc:
        return Candidate(
            path=path,
            display=display,
            skipped=Skip(SkipKind.UNREADABLE, f"cannot stat: {exc.strerror}"),
        )
    if not stat.S_ISREG(st.st_mode):
        return Candidate(
            path=path, display=display, skipped=Skip(SkipKind.NOT_A_FILE, "not a regular file")
        )
    if (
        path.suffix.lower() in NOT_LOG_SUFFIXES
        and not _ERROR_JSON.search(path.name)
        and not _FLIGHT_DUMP.search(path.name)
    ):
        return Candidate(
            path=path,
            display=display,
            skipped=Skip(SkipKind.NOT_A_LOG, f"not a log ({path.suffix} file)"),
        )
    return Candidate(path=path, display=display)


def attribute(display: str) -> Source:
    """Read kind, rank, local rank and host from a file's path (its display form)."""
    parts = display.replace("\\", "/").split("/")
    name = parts[-1]
    kind: SourceKind = "worker"
    rank: int | None = None
    local_rank: int | None = None
    if _ERROR_JSON.search(name):
        kind = "errorfile"
    elif _KERNEL_NAME.search(name):
        kind = "kernel"
    elif _SCHEDULER_NAME.search(name):
        kind = "scheduler"
    tree = _TORCHRUN_TREE.search(display)
    if tree:
        local_rank = int(tree.group(1))
    slurm = _SLURM_TASK.search(name)
    if slurm:
        rank = int(slurm.group(1))
    if rank is None:
        for part in reversed(parts):
            found = _RANK_IN_NAME.search(part)
            if found:
                rank = int(found.group(1))
                break
    host = _host_from_parts(parts)
    if rank is None and local_rank is not None and host is None:
        # A single-node torchrun log tree: local rank and global rank coincide.
        rank = local_rank
    return Source(path=display, kind=kind, rank=rank, local_rank=local_rank, host=host)


def _host_from_parts(parts: list[str]) -> str | None:
    for part in reversed(parts[:-1]):
        if _HOST_DIR.match(part):
            return part
    stem = parts[-1].rsplit(".", 1)[0]
    found = _HOST_IN_NAME.search(stem)
    return found.group(1) if found else None
