"""Ranks take different code paths and call different collectives (a desync).

crashlens-repro: id=collective_desync class=user_code_error ranks=3 gpu=no launcher=torchrun

Each step every rank all-reduces its loss; a metrics branch that only rank --odd-rank takes
broadcasts a value instead (a collective inside `if rank == ...`, per-rank logging with
different keys). With TORCH_DISTRIBUTED_DEBUG=DETAIL (set by the script, as users do to debug
hangs) the process group checks each collective across ranks and raises "Detected mismatch
between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(...
OpType=ALLREDUCE ...), but Rank 1 is running collective: CollectiveFingerPrint(...
OpType=BROADCAST ...)"; without it the same bug is a hang.
"""

import argparse
import logging
import os
from datetime import timedelta

# torch reads the debug level when torch.distributed is imported, so it is set first
os.environ.setdefault("TORCH_DISTRIBUTED_DEBUG", "DETAIL")

import torch
import torch.distributed as dist

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--odd-rank", type=int, default=1)
    parser.add_argument("--desync-step", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    model = torch.nn.Linear(8, 1)
    for step in range(1, args.desync_step + 2):
        loss = model(torch.randn(4, 8)).pow(2).mean().detach()
        if rank == args.odd_rank and step == args.desync_step:
            dist.broadcast(loss, src=0)  # only this rank logs the "best" metric
        else:
            dist.all_reduce(loss)
        logger.info("rank %d step %d loss %.4f", rank, step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
