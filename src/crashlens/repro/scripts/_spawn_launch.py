"""Start a torchrun-style script in N processes with torch.multiprocessing.spawn.

Not a repro (no header): the sandbox copies it beside the script as ``launch.py`` for the
capture matrix's ``spawn`` layout, the way code bases that predate torchrun start their
workers (a launch function calling ``mp.spawn(worker, nprocs=...)``, each worker setting the
process group's environment from its index). Each child gets the environment torchrun would
give it (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and runs the script as
``__main__``; spawn's parent reports the first child that fails.

    python launch.py --nprocs 4 --master-port 29500 train.py --script-arg value
"""

import argparse
import os
import runpy
import sys

import torch.multiprocessing as mp


def worker(index: int, nprocs: int, port: int, script: str, argv: list[str]) -> None:
    os.environ.update(
        RANK=str(index),
        LOCAL_RANK=str(index),
        WORLD_SIZE=str(nprocs),
        LOCAL_WORLD_SIZE=str(nprocs),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nprocs", type=int, required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("script")
    args, rest = parser.parse_known_args()
    mp.spawn(worker, args=(args.nprocs, args.master_port, args.script, rest), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
