"""Writing a checkpoint into a directory the job's user may not write.

crashlens-repro: id=permission_denied class=permission_denied ranks=1 gpu=no launcher=python

A shared output directory belongs to another user (here: created by root, mode 0755) and the
training process runs unprivileged (the script drops to the `nobody` uid when started as root,
as a container's non-root user would be; otherwise the directory is made read-only), so saving
the first checkpoint fails with "PermissionError: [Errno 13] Permission denied".
"""

import argparse
import logging
import os

import torch

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")
NOBODY = 65534


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", default="shared_outputs")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    os.makedirs(args.out_dir, exist_ok=True)
    os.chmod(args.out_dir, 0o755 if os.getuid() == 0 else 0o555)
    if os.getuid() == 0:
        os.chmod(".", 0o711)  # the job's user may traverse the run directory, not write it
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    model = torch.nn.Linear(8, 2)
    for step in range(1, 3):
        logger.info("step %d loss %.4f", step, 1.0 / step)
    path = os.path.join(args.out_dir, "checkpoint-2.pt")
    logger.info("saving checkpoint to %s", path)
    torch.save(model.state_dict(), path)


if __name__ == "__main__":
    main()
