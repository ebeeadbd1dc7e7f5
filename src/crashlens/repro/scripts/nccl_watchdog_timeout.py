"""One rank stalls; the NCCL watchdog on its peer times out the collective and aborts.

crashlens-repro: id=nccl_watchdog_timeout class=nccl_timeout ranks=2 gpu=yes launcher=torchrun timeout=180

Two ranks (one GPU each) allreduce every step under a short process-group timeout
(init_process_group("nccl", timeout=...)). At step K rank 1 stalls (a hung filesystem read, a
deadlock in its data pipeline) for longer than the timeout. Rank 0's allreduce never completes;
ProcessGroupNCCL's watchdog reports "[Rank 0] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=N, OpType=ALLREDUCE, ... Timeout(ms)=T) ran for T' milliseconds before timing
out" and takes the process down; torchrun then stops the group. The stalled rank is the root
cause, the timeouts are symptoms. A watchdog thread exits the stalled rank after --max-runtime
seconds so nothing hangs forever.
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
    parser.add_argument("--hang-rank", type=int, default=1)
    parser.add_argument("--hang-step", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=20.0, help="process-group timeout (s)")
    parser.add_argument("--hang-time", type=float, default=120.0)
    parser.add_argument("--max-runtime", type=float, default=150.0)
    parser.add_argument("--numel", type=int, default=1 << 20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    safety_exit(args.max_runtime)

    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", timeout=timedelta(seconds=args.timeout), device_id=device)
    rank = dist.get_rank()
    torch.manual_seed(rank)
    logger.info("rank %d/%d on %s", rank, dist.get_world_size(), device)
    for step in range(args.steps):
        if rank == args.hang_rank and step == args.hang_step:
            logger.info("reading next shard")
            time.sleep(args.hang_time)  # stands in for a hung read
        grad = torch.randn(args.numel, device=device)
        dist.all_reduce(grad)
        logger.info("step %d grad norm %.4f", step, grad.norm().item())
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
