"""Saving a checkpoint fails because the checkpoint filesystem is full.

crashlens-repro: id=disk_full class=disk_full ranks=1 gpu=no launcher=python tmpfs=checkpoints:1m

The model trains a few steps and then torch.save()s a checkpoint larger than the free space in
--ckpt-dir. The capture machinery mounts a 1 MiB tmpfs there (a full scratch or NFS quota in real
life), so the write really fails. By default the checkpoint is written through an open file object
(as Lightning/fsspec and many scripts do): the log shows "OSError: [Errno 28] No space left on
device" followed by torch's "unexpected pos N vs M". With --save-mode path (torch.save(obj, path))
torch 2.x reports only "basic_ios::clear: iostream error" and "unexpected pos N vs M".
"""

import argparse
import logging
from pathlib import Path

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ckpt-dir", default="checkpoints")
    parser.add_argument("--hidden", type=int, default=1024, help="model width (4 MiB per layer)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--save-mode", choices=["file", "path"], default="file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        loss = model(torch.randn(8, args.hidden)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info("step %d loss %.4f", step, loss.item())

    ckpt_dir = Path(args.ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"step_{args.steps}.pt"
    logger.info("saving checkpoint to %s", path)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": args.steps}
    if args.save_mode == "path":
        torch.save(state, path)
    else:
        with open(path, "wb") as f:
            torch.save(state, f)
    logger.info("checkpoint saved")


if __name__ == "__main__":
    main()
