"""DataLoader workers run out of shared memory (/dev/shm too small for their batches).

crashlens-repro: id=shm_exhausted class=shm_exhausted ranks=1 gpu=no launcher=python shm=8m

Workers hand batches to the main process through shared memory. In a container /dev/shm is
64 MB unless the job asks for more (`docker run --shm-size`); here the capture gives the run a
private 8 MiB /dev/shm, and each batch holds 16 MiB of images, so a worker cannot place it
there: "RuntimeError: unable to write to file </torch_...>: No space left on device (28)"
re-raised in the main process, or the worker dies of SIGBUS ("Unexpected bus error encountered
in worker. This might be caused by insufficient shared memory (shm)").
"""

import argparse
import logging

import torch
from torch.utils.data import DataLoader, Dataset

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


class Images(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((3, 512, 512), float(i))  # 3 MiB per image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    loader = DataLoader(Images(), batch_size=args.batch_size, num_workers=args.workers)
    for step, batch in enumerate(loader):
        logger.info("step %d batch %s mean %.2f", step, tuple(batch.shape), batch.mean().item())


if __name__ == "__main__":
    main()
