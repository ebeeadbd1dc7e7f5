"""DataLoader worker killed by SIGKILL (as the kernel OOM killer does).

crashlens-repro: id=dataloader_worker_killed class=dataloader_worker_crash ranks=1 gpu=no launcher=python

A map-style Dataset sends SIGKILL to its own worker process when it reaches one index, exactly
what the Linux OOM killer does to a DataLoader worker that grows too large. The main process
notices through its SIGCHLD handler and raises "DataLoader worker (pid N) is killed by signal".
Samples are numpy arrays, batched by numpy and made tensors in the training loop, so batches
travel pickled through the worker's queue: tensors would travel as shared-memory file
descriptors, and a worker killed in the middle of that handshake makes the main process fail
reading the descriptor instead (ConnectionResetError), a race whose outcome depends on load.
"""  # noqa: E501

import argparse
import logging
import os
import signal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


class KilledAtIndex(Dataset[np.ndarray]):
    def __init__(self, size: int, kill_at: int) -> None:
        self.size = size
        self.kill_at = kill_at

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> np.ndarray:
        if idx == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.random.default_rng(idx).standard_normal(16, dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--kill-at", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        KilledAtIndex(args.size, args.kill_at),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        collate_fn=np.stack,
    )
    logger.info("starting training: %d samples, num_workers=%d", args.size, args.num_workers)
    for step, batch in enumerate(loader):
        loss = model(torch.from_numpy(batch)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info("step %d loss %.4f", step, loss.item())
    logger.info("training finished")


if __name__ == "__main__":
    main()
