"""A peer's process exits mid-training; the NCCL collective on the other rank fails.

crashlens-repro: id=nccl_error class=nccl_error ranks=2 gpu=yes launcher=torchrun timeout=180 torchrun_args=--monitor-interval=10

Two ranks (one GPU each) allreduce every step over NCCL's socket transport (NCCL_P2P_DISABLE=1,
NCCL_SHM_DISABLE=1, NCCL_IB_DISABLE=1 on loopback: the GPUs talk as GPUs on different nodes do).
At step K rank 1's process vanishes without a Python traceback (os._exit, as when a node is lost
or a process is killed from outside) while rank 0 is inside allreduce. Rank 0's NCCL sees the
connection closed ("NCCL error: remote process exited or there was a network error" / "unhandled
system error", "Connection closed by remote peer") and its ProcessGroupNCCL watchdog takes the
process down. torchrun polls its workers only every --monitor-interval seconds here, so rank 0
meets the NCCL error before the launcher tears the group down, as it does across nodes, where
each node's launcher sees only its own ranks.
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


def safety_exit(seconds: float) -> None:
    def _exit() -> None:
        time.sleep(seconds)
        logger.error("safety exit after %.0f s", seconds)
        os._exit(3)

    threading.Thread(target=_exit, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--exit-rank", type=int, default=1)
    parser.add_argument("--exit-step", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0, help="process-group timeout (s)")
    parser.add_argument("--max-runtime", type=float, default=150.0)
    parser.add_argument("--numel", type=int, default=1 << 22)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    safety_exit(args.max_runtime)
    for key in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")

    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", timeout=timedelta(seconds=args.timeout), device_id=device)
    rank = dist.get_rank()
    torch.manual_seed(rank)
    logger.info("rank %d/%d on %s", rank, dist.get_world_size(), device)
    for step in range(args.steps):
        if rank == args.exit_rank and step == args.exit_step:
            logger.info("step %d: process exits", step)
            logging.shutdown()
            os._exit(1)  # the process is gone: no traceback, sockets closed by the kernel
        grad = torch.randn(args.numel, device=device)
        dist.all_reduce(grad)
        logger.info("step %d grad norm %.4f", step, grad.norm().item())
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
