"""Resuming from a checkpoint path that does not exist.

crashlens-repro: id=file_not_found class=file_not_found ranks=1 gpu=no launcher=python

The script trains from a checkpoint given by --resume, as a restarted job does; the path names a
run directory that was never written (a typo, another node's local disk, a cleaned scratch), so
torch.load raises "FileNotFoundError: [Errno 2] No such file or directory".
"""

import argparse
import logging

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resume", default="checkpoints/run-17/step_12000.pt")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    model = torch.nn.Linear(8, 2)
    logger.info("resuming from %s", args.resume)
    state = torch.load(args.resume, map_location="cpu")
    model.load_state_dict(state["model"])


if __name__ == "__main__":
    main()
