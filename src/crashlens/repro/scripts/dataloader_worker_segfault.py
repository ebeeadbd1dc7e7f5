"""DataLoader worker crashes with a segmentation fault in native code.

crashlens-repro: id=dataloader_worker_segfault class=dataloader_worker_crash ranks=1 gpu=no launcher=python

A Dataset dereferences a NULL pointer through ctypes at one index, as a buggy C extension
(image decoder, tokenizer) would. torch's SIGSEGV handler in the worker prints
"ERROR: Unexpected segmentation fault encountered in worker." and the main process raises
"DataLoader worker (pid N) is killed by signal: Segmentation fault."
"""  # noqa: E501

import argparse
import ctypes
import logging

import torch
from torch.utils.data import DataLoader, Dataset

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


class SegfaultAtIndex(Dataset[torch.Tensor]):
    def __init__(self, size: int, crash_at: int) -> None:
        self.size = size
        self.crash_at = crash_at

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> torch.Tensor:
        if idx == self.crash_at:
            ctypes.string_at(0)  # read from address 0: SIGSEGV
        return torch.randn(16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--crash-at", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        SegfaultAtIndex(args.size, args.crash_at),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    logger.info("starting training: %d samples, num_workers=%d", args.size, args.num_workers)
    for step, batch in enumerate(loader):
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info("step %d loss %.4f", step, loss.item())
    logger.info("training finished")


if __name__ == "__main__":
    main()
