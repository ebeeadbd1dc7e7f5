"""DataLoader workers exhaust a low open-file limit under the file_descriptor sharing strategy.

crashlens-repro: id=too_many_open_files class=too_many_open_files ranks=1 gpu=no launcher=python

Workers hand each batch's tensors to the main process as file descriptors (torch's default
sharing strategy on Linux); batches made of many small tensors, prefetched by several workers,
need more descriptors than the job's `ulimit -n` (set low here at start, as a container's
nofile limit would be). The main process fails to receive them: "RuntimeError: received 0
items of ancdata" / "OSError: [Errno 24] Too many open files".
"""

import argparse
import logging
import resource

import torch
from torch.utils.data import DataLoader, Dataset

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


class ManySmallTensors(Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        return [torch.full((2,), float(i)) for _ in range(64)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nofile", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=15.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))
    torch.multiprocessing.set_sharing_strategy("file_descriptor")
    loader = DataLoader(
        ManySmallTensors(),
        batch_size=8,
        num_workers=args.workers,
        prefetch_factor=8,
        timeout=args.timeout,
    )
    kept = []
    for step, batch in enumerate(loader):
        kept.append(batch)  # holding batches keeps their descriptors open
        if step % 4 == 0:
            logger.info("step %d: %d batches held", step, len(kept))


if __name__ == "__main__":
    main()
