"""Plain `python train.py` run whose loss diverges to inf and then NaN, and the script aborts.

crashlens-repro: id=numerical_instability class=numerical_instability ranks=1 gpu=no launcher=python

A tiny regression model is trained with a learning rate far too high: the loss grows each step,
overflows float32 to inf and then becomes NaN. The script logs its metrics the way training
scripts do (python logging, a metrics dict, a progress line), and stops itself when the loss is
no longer finite -- no exception from torch, only the script's own abort and exit status 1.
"""

import argparse
import logging
import math
import sys

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lr", type=float, default=50.0)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x = torch.randn(64, 16) * 10
    y = torch.randn(64, 1)
    logger.info("training for %d steps at lr=%g", args.steps, args.lr)
    for step in range(1, args.steps + 1):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.item()
        logger.info("step %d loss = %.4f", step, value)
        print({"loss": round(value, 4), "learning_rate": args.lr, "step": step}, flush=True)
        if not math.isfinite(value):
            logger.error("NaN detected in loss, aborting.")
            sys.exit(1)


if __name__ == "__main__":
    main()
