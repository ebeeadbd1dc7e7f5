"""Read PyTorch Flight Recorder dumps: each rank's record of its recent collectives.

ProcessGroupNCCL writes one file per rank when a collective times out
(``TORCH_NCCL_DUMP_ON_TIMEOUT``; buffer ``TORCH_FR_BUFFER_SIZE``, formerly
``TORCH_NCCL_TRACE_BUFFER_SIZE``), named by a prefix
(``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``; ``comm_lib_trace_rank_``,
``nccl_trace_rank_`` by default) and the global rank. The file is a pickle of plain containers;
``torch._C._distributed_c10d._dump_fr_trace_json()`` gives the same content as JSON. Both are read.

A pickle is untrusted input: it is read by an unpickler that resolves no global name, so it can
only build plain data (dicts, lists, tuples, strings, numbers); a dump that names any Python
object (``os.system``, a class) is refused with a note, before anything of it runs.
"""

from __future__ import annotations

import functools
import io
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import regex

from crashlens import lazyre
from crashlens.model import CollectiveCall, FlightDump, Frame
from crashlens.provenance import is_user_path

#: Bytes a dump may have (a 20 000-entry record with stacks is a few tens of MB).
MAX_DUMP_BYTES = 256 << 20
#: The newest format version this reader knows (torch 2.13 writes "2.10").
KNOWN_VERSION = (2, 10)

_RANK_SUFFIX = lazyre.compile_regex(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
_JSON_HEAD = lazyre.compile_regex(
    rb'^\s*\{\s*"(?:version|entries|pg_config|pg_status|comm_lib_version)"'
)


class DumpRefused(ValueError):
    """A file that looks like a dump but is not read (unsafe, too big, malformed)."""


def looks_like_dump(head: bytes) -> bool:
    """Whether a file's first bytes are a pickle or a JSON object with a dump's keys."""
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    return bool(_JSON_HEAD.match(head))


def rank_of(name: str) -> int | None:
    """The global rank a dump's file name ends in (the prefix plus the rank), if any."""
    found = _RANK_SUFFIX.search(name)
    return int(found.group(1)) if found else None


def read_dump(path: Path, display: str) -> FlightDump:
    """Read one dump file.

    Raises:
        DumpRefused: with a one-line reason, for an unsafe, oversized or malformed dump.
        OSError: when the file cannot be read.
    """
    size = path.stat().st_size
    if size > MAX_DUMP_BYTES:
        raise DumpRefused(f"Flight Recorder dump of {size >> 20} MiB is over the limit")
    data = path.read_bytes()
    rank = rank_of(Path(display).name)
    if data[:1] == b"\x80":
        raw, fmt = _safe_unpickle(data), "pickle"
    else:
        try:
            raw, fmt = json.loads(data.decode("utf-8")), "json"
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DumpRefused(f"not a readable Flight Recorder dump: {exc}") from None
    if not isinstance(raw, dict) or "entries" not in raw:
        raise DumpRefused("not a Flight Recorder dump (no 'entries')")
    if rank is None:
        raise DumpRefused("a Flight Recorder dump whose name does not end in its rank")
    return parse_dump(raw, display, rank, fmt)


def _safe_unpickle(data: bytes) -> Any:
    try:
        return _NoNames(io.BytesIO(data)).load()
    except _NamesObject as exc:
        raise DumpRefused(
            f"refused a pickle that names a Python object ({exc}): a Flight Recorder dump "
            "holds only plain data"
        ) from None
    except (pickle.UnpicklingError, ValueError, EOFError, TypeError, IndexError) as exc:
        raise DumpRefused(f"not a readable Flight Recorder dump: {exc}") from None


class _NamesObject(Exception):
    """The pickle asked for a global name (a class, a function)."""


class _NoNames(pickle.Unpickler):
    """An unpickler that resolves no global name and no persistent id: it can only build
    dicts, lists, tuples, sets, strings, bytes and numbers. Every way a pickle runs code
    (REDUCE, BUILD, NEWOBJ, INST, OBJ, extension codes) needs a callable that only
    ``find_class`` or ``persistent_load`` could give it."""

    def find_class(self, module: str, name: str) -> Any:
        raise _NamesObject(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not plain data")


def parse_dump(raw: dict[str, Any], display: str, rank: int, fmt: str) -> FlightDump:
    """A dump's plain content as a :class:`FlightDump` (fields it lacks get defaults)."""
    version = str(raw.get("version", ""))
    notes: list[str] = []
    parsed = _version(version)
    known = ".".join(map(str, KNOWN_VERSION))
    if parsed is None:
        notes.append(f"Flight Recorder dump without a known version ({version or 'none'})")
    elif parsed > KNOWN_VERSION:
        notes.append(
            f"Flight Recorder format {version} is newer than the {known} this analyzer knows; "
            "read as that"
        )
    calls: list[CollectiveCall] = []
    bad = 0
    entries = raw.get("entries")
    for entry in entries if isinstance(entries, list) else ():
        call = _call(entry)
        if call is None:
            bad += 1
        else:
            calls.append(call)
    if bad:
        notes.append(f"{bad} entr{'y' if bad == 1 else 'ies'} without a process group or sequence")
    return FlightDump(
        path=display,
        rank=rank,
        version=version,
        format="json" if fmt == "json" else "pickle",
        groups=tuple(_groups(raw.get("pg_config"))),
        calls=tuple(calls),
        note="; ".join(notes) or None,
    )


def _version(text: str) -> tuple[int, int] | None:
    found = regex.fullmatch(r"(\d+)\.(\d+)", text.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def _groups(config: Any) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """``pg_config`` as (name, description, ranks). gloo's groups may have an empty name."""
    if not isinstance(config, dict):
        return
    for key, value in config.items():
        if not isinstance(value, dict):
            continue
        name = str(value.get("name") or key)
        ranks = value.get("ranks", "")
        members = (
            tuple(int(r) for r in ranks if isinstance(r, int))
            if isinstance(ranks, list)
            else tuple(int(r) for r in regex.findall(r"\d+", str(ranks)))
        )
        yield name, str(value.get("desc", "")), members


def _call(entry: Any) -> CollectiveCall | None:
    if not isinstance(entry, dict):
        return None
    group = entry.get("process_group")
    p2p = bool(entry.get("is_p2p", False))
    seq = entry.get("p2p_seq_id" if p2p else "collective_seq_id")
    if not isinstance(group, (list, tuple)) or len(group) < 2 or not isinstance(seq, int):
        return None
    backend, _, op = str(entry.get("profiling_name", "")).rpartition(":")
    created = entry.get("time_created_ns")
    timeout = entry.get("timeout_ms")
    return CollectiveCall(
        record=_int(entry.get("record_id")),
        group=str(group[0]),
        group_desc=str(group[1]),
        seq=seq,
        p2p=p2p,
        op=op or "unknown",
        backend=backend,
        input_sizes=_sizes(entry.get("input_sizes")),
        input_dtypes=_strings(entry.get("input_dtypes")),
        output_sizes=_sizes(entry.get("output_sizes")),
        output_dtypes=_strings(entry.get("output_dtypes")),
        state=str(entry.get("state", "")),
        time=created / 1e9 if isinstance(created, int) and created > 0 else None,
        timeout_ms=timeout if isinstance(timeout, int) else None,
        user_frame=_user_frame(entry.get("frames")),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) else -1


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        tuple(d for d in s if isinstance(d, int)) for s in value if isinstance(s, (list, tuple))
    )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@functools.lru_cache(maxsize=4096)
def _user_path(path: str) -> bool:
    """Whether a frame's file is the user's (the same few files recur in every entry)."""
    return is_user_path(path)


def _user_frame(value: Any) -> Frame | None:
    """The first (innermost) frame of the user's code in an entry's ``frames``."""
    for f in value if isinstance(value, list) else ():
        if isinstance(f, dict) and isinstance(f.get("filename"), str) and _user_path(f["filename"]):
            line = f.get("line")
            return Frame(
                f["filename"], line if isinstance(line, int) else 0, str(f.get("name", "")), True
            )
    return None
