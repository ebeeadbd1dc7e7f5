"""Host (CPU) memory allocation fails: the process hits its address-space limit.

crashlens-repro: id=host_oom class=host_oom ranks=1 gpu=no launcher=python

The script caps its own virtual memory with RLIMIT_AS (as `ulimit -v` or a container limit on
a login node would), trains a few steps, then builds a tensor far larger than the cap, as a
script that loads a whole dataset or an oversized embedding table into RAM does. torch's CPU
allocator reports "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes".
"""

import argparse
import logging
import resource

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit-gib", type=float, default=3.0, help="RLIMIT_AS to set")
    parser.add_argument("--alloc-gib", type=float, default=8.0, help="size of the big tensor")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    limit = int(args.limit_gib * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    logger.info("address-space limit set to %d bytes", limit)

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info("step %d loss %.4f", step, loss.item())

    n_floats = int(args.alloc_gib * 1024**3) // 4
    logger.info("building feature cache of %d floats", n_floats)
    cache = torch.empty(n_floats, dtype=torch.float32)
    cache.zero_()
    logger.info("feature cache ready")


if __name__ == "__main__":
    main()
