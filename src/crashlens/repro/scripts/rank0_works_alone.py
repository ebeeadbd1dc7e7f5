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
import time
from datetime import timedelta

import torch.distributed as dist
from _flight_recorder import on_collective_failure, watch_for_dump

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


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
