"""torchrun cannot start: the master port is already taken by another process.

crashlens-repro: id=port_in_use class=rendezvous_failure ranks=2 gpu=no launcher=torchrun master_port=occupied

The training code below never runs: the capture machinery first opens a listening socket on
127.0.0.1:<port> (standing in for a leftover job, or a second job on the same node that picked
the same MASTER_PORT) and then launches `torchrun --master-port <port>` on it, so the launcher's
TCPStore cannot bind and rendezvous fails with "address already in use".
"""  # noqa: E501

import argparse
import logging

import torch
import torch.distributed as dist

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    dist.init_process_group("gloo")
    for step in range(args.steps):
        loss = torch.randn(100).pow(2).mean()
        dist.all_reduce(loss)
        logger.info("step %d loss %.4f", step, loss.item() / dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
