"""Flight Recorder dumps for the gloo repro scripts, written as ProcessGroupNCCL writes them.

Not a repro (no header): the sandbox copies it beside the script of a repro whose header says
``fr=yes``, which imports it. gloo records each collective (TORCH_FR_BUFFER_SIZE) but never
dumps by itself: the rank whose collective fails dumps its record and raises a flag in the
store; a thread in every rank dumps when it sees the flag, so the dumps show where each rank
was. The file is the prefix (TORCH_FR_DUMP_TEMP_FILE) plus the global rank, in the pickle
format the NCCL backend writes.
"""

import logging
import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

logger = logging.getLogger("train")

_FLAG = "flight_recorder_dump"
_dump_lock = threading.Lock()
_dumped = threading.Event()


def _store() -> dist.TCPStore:
    # a client of its own: a TCPStore client serves one call at a time
    return dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
        timeout=timedelta(seconds=30),
    )  # fmt: skip


def dump_flight_record(rank: int) -> None:
    """Write this rank's dump once; a second caller waits until it is complete."""
    if not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return
    with _dump_lock:
        if _dumped.is_set():
            return
        default = os.path.expanduser("~/.cache/torch/comm_lib_trace_rank_")
        prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", default)
        os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
        with open(f"{prefix}{rank}.tmp", "wb") as f:
            f.write(torch._C._distributed_c10d._dump_fr_trace(True, True, False))
        os.replace(f"{prefix}{rank}.tmp", f"{prefix}{rank}")
        _dumped.set()
    logger.info("flight recorder dump written to %s%d", prefix, rank)


def watch_for_dump(rank: int) -> None:
    def _watch() -> None:
        try:
            store = _store()
            while not store.check([_FLAG]):
                time.sleep(0.1)
        except (OSError, RuntimeError):  # the store went away with the job
            return
        dump_flight_record(rank)

    threading.Thread(target=_watch, daemon=True).start()


def on_collective_failure(rank: int) -> None:
    """Dump this rank's record and tell the others to dump theirs."""
    dump_flight_record(rank)
    _store().set(_FLAG, str(rank))
