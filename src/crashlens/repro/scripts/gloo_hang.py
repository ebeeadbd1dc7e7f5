"""One rank stalls; the others time out inside a gloo collective.

crashlens-repro: id=gloo_hang class=nccl_timeout ranks=3 gpu=no launcher=torchrun fr=yes torchrun_args=--monitor-interval=5

Three ranks allreduce each step with a short process-group timeout. At step K rank 1 stalls (a
hung filesystem read, a deadlock) for far longer than the timeout, while ranks 0 and 2 wait in
allreduce and fail with gloo's "Timed out waiting ... for recv operation to complete". torchrun
then tears down the group. The hung rank is the root cause; the timeouts are symptoms. A
watchdog thread exits the stalled rank after --max-runtime seconds so nothing hangs forever.
With TORCH_FR_BUFFER_SIZE set every rank writes a Flight Recorder dump when the first collective
fails: the stalled rank's record ends one all_reduce before the others'. torchrun checks its
ranks every 5 s, so the stalled rank is still there to write its dump.
"""  # noqa: E501

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


def safety_exit(seconds: float) -> None:
    def _exit() -> None:
        time.sleep(seconds)
        logger.error("safety exit after %.0f s", seconds)
        os._exit(3)

    threading.Thread(target=_exit, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hang-rank", type=int, default=1)
    parser.add_argument("--hang-step", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=8.0, help="process-group timeout (s)")
    parser.add_argument("--hang-time", type=float, default=60.0)
    parser.add_argument("--max-runtime", type=float, default=40.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    safety_exit(args.max_runtime)

    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    watch_for_dump(rank)
    torch.manual_seed(rank)
    for step in range(args.steps):
        if rank == args.hang_rank and step == args.hang_step:
            logger.info("reading next shard")
            time.sleep(args.hang_time)  # stands in for a hung read
        loss = torch.randn(1000).pow(2).mean()
        try:
            dist.all_reduce(loss)
        except RuntimeError:
            on_collective_failure(rank)
            raise
        logger.info("step %d loss %.4f", step, loss.item() / dist.get_world_size())
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
