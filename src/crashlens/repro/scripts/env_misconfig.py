"""A distributed training script started with plain `python` instead of its launcher.

crashlens-repro: id=env_misconfig class=env_misconfig ranks=1 gpu=no launcher=python

The script calls init_process_group() with the default env:// rendezvous, which reads RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment that torchrun (or srun, or
deepspeed) would have set. Started as `python train.py`, they are missing, and torch raises
"ValueError: Error initializing torch.distributed using env:// rendezvous: environment
variable RANK expected, but not set".
"""

import argparse
import logging

import torch
import torch.distributed as dist

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="gloo")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logger.info("initializing the process group (%s)", args.backend)
    dist.init_process_group(args.backend)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    logger.info("rank %d ready: %s", dist.get_rank(), model)


if __name__ == "__main__":
    main()
