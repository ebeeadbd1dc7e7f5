"""A rank leaves the sequence of collectives the others follow; they hang in theirs.

crashlens-repro: id=collective_hang class=user_code_error ranks=4 gpu=no launcher=torchrun fr=yes torchrun_args=--monitor-interval=30

Four ranks all-reduce their loss each step (gloo, 5 s timeout). At step --bad-step rank
--odd-rank takes a path of its own: it broadcasts instead (``--fault desync``, per-rank metrics
code inside ``if rank == ...``), all-reduces a tensor of another size (``--fault size``, a padded
batch), or raises before the collective (``--fault raise``). Without TORCH_DISTRIBUTED_DEBUG's
check nothing says so: the others wait in all_reduce until the timeout, and gloo's "Timed out
waiting" or "Connection closed by peer" errors point at whichever rank gave up first. Every
rank's Flight Recorder dump (TORCH_FR_BUFFER_SIZE) records which collective each rank entered;
the odd rank's call is the one that differs. torchrun watches its ranks every 30 s, as a
multi-node job's other nodes do not see a rank exit at once.
"""  # noqa: E501

import argparse
import logging
from datetime import timedelta

import torch
import torch.distributed as dist
from _flight_recorder import on_collective_failure, watch_for_dump

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fault", choices=["desync", "size", "raise"], default="desync")
    parser.add_argument("--odd-rank", type=int, default=2)
    parser.add_argument("--bad-step", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=5.0, help="process-group timeout (s)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    watch_for_dump(rank)
    model = torch.nn.Linear(16, 1)
    try:
        for step in range(args.steps):
            loss = model(torch.randn(8, 16)).pow(2).mean().detach().reshape(1)
            if rank == args.odd_rank and step == args.bad_step:
                if args.fault == "raise":
                    metrics: dict[str, float] = {}
                    loss += metrics["eval_loss"]  # a key only the eval ranks fill
                elif args.fault == "desync":
                    dist.broadcast(loss, src=0)  # this rank logs the "best" loss
                else:
                    dist.all_reduce(torch.cat([loss, loss]))  # a padded batch
            else:
                dist.all_reduce(loss)
            logger.info("rank %d step %d loss %.4f", rank, step, loss.item())
    except RuntimeError:
        on_collective_failure(rank)
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
