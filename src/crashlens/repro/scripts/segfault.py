"""A native extension dereferences a null pointer in the training process.

crashlens-repro: id=segfault class=segfault ranks=1 gpu=no launcher=python

A custom op implemented in C (here: ctypes reading address 0, standing in for a buggy
extension) crashes the interpreter with SIGSEGV. faulthandler is on (as `python -X
faulthandler`, PYTHONFAULTHANDLER=1 or Lightning enable it), so the log shows "Fatal Python
error: Segmentation fault" and the Python stack; the process exits with -11 (139 in a shell).
"""

import argparse
import ctypes
import faulthandler
import logging

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def fused_op(x: torch.Tensor) -> torch.Tensor:
    ctypes.string_at(0)  # the native bug: reads a null pointer
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    faulthandler.enable()
    model = torch.nn.Linear(8, 2)
    for step in range(1, args.steps + 1):
        out = model(torch.randn(4, 8))
        logger.info("step %d loss %.4f", step, out.pow(2).mean().item())
        if step == args.steps:
            fused_op(out)


if __name__ == "__main__":
    main()
