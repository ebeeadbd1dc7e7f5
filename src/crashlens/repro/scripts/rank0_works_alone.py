"""Rank 0 prepares the dataset alone while the other ranks wait in a barrier and time out.

crashlens-repro: id=rank0_works_alone class=nccl_timeout ranks=2 gpu=no launcher=torchrun fr=yes

The `main_process_first` pattern: rank 0 tokenizes and caches the dataset while every other rank
waits in dist.barrier() to load the cache afterwards. The preparation takes longer than the
process-group timeout (5 s here; 30 min in real jobs with a big dataset), so the waiting ranks
fail with gloo's "Timed out waiting 5000ms for recv operation to complete". The root is rank 0's
long one-rank work, which logs no error at all. With TORCH_FR_BUFFER_SIZE set the ranks write
Flight Recorder dumps when the barrier fails: rank 0's record has no barrier.
"""

import argparse
import logging
import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


# -- Flight Recorder dumps, as ProcessGroupNCCL writes them on a timeout ----------------------
# gloo records each collective (TORCH_FR_BUFFER_SIZE) but never dumps by itself: the rank whose
# collective fails dumps its record and raises a flag in the store; a thread in every rank dumps
# when it sees the flag, so the dumps show where each rank was. The file is the prefix
# (TORCH_FR_DUMP_TEMP_FILE) plus the global rank, in the pickle format the NCCL backend writes.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timeout", type=float, default=5.0, help="process-group timeout (s)")
    parser.add_argument("--prepare-s", type=float, default=14.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    watch_for_dump(rank)
    if rank == 0:
        logger.info("rank 0: tokenizing and caching the dataset")
        time.sleep(args.prepare_s)
        logger.info("rank 0: dataset cached")
    try:
        dist.barrier()
    except RuntimeError:
        on_collective_failure(rank)
        raise
    logger.info("rank %d: loading the cached dataset", rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
