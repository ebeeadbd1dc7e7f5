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
from _flight_recorder import on_collective_failure, watch_for_dump

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


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
