"""One rank raises a Python exception; its peers then fail inside a gloo allreduce.

crashlens-repro: id=rank_exception_cascade class=user_code_error ranks=4 gpu=no launcher=torchrun

Four ranks allreduce a tensor each step. At step K rank 2 hits a bug in its own code (a
ValueError) and exits while the other ranks wait in allreduce; they see their gloo connection to
rank 2 closed and fail too, and torchrun prints its ChildFailedError summary. The root cause is
rank 2's ValueError; the gloo errors on the other ranks are consequences.
"""

import argparse
import logging
import time

import torch
import torch.distributed as dist

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def check_batch(step: int, rank: int, bad_rank: int, bad_step: int) -> None:
    if rank == bad_rank and step == bad_step:
        raise ValueError(f"label index 11 out of range for 10 classes (step {step})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--bad-rank", type=int, default=2)
    parser.add_argument("--bad-step", type=int, default=4)
    parser.add_argument("--step-time", type=float, default=0.2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    for step in range(args.steps):
        time.sleep(args.step_time)
        check_batch(step, rank, args.bad_rank, args.bad_step)
        loss = torch.randn(1000).pow(2).mean()
        dist.all_reduce(loss)
        logger.info("step %d loss %.4f", step, loss.item() / dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
