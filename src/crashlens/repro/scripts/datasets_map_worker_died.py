"""A Hugging Face datasets `.map(num_proc=N)` worker process dies (killed by SIGKILL).

crashlens-repro: id=datasets_map_worker_died class=datasets_map_worker_died ranks=1 gpu=no launcher=python requires=datasets

The map function SIGKILLs its own process on one example, as the OOM killer does to a
tokenization worker that grows too large. datasets notices the dead pool process and raises
"One of the subprocesses has abruptly died during map operation."
"""  # noqa: E501

import argparse
import logging
import os
import signal
from typing import Any

from datasets import Dataset

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("prepare")


def make_tokenize(kill_at: int) -> Any:
    def tokenize(example: dict[str, Any], idx: int) -> dict[str, Any]:
        if idx == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"input_ids": [ord(c) for c in example["text"]]}

    return tokenize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--kill-at", type=int, default=300)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    ds = Dataset.from_dict({"text": [f"example number {i}" for i in range(args.rows)]})
    logger.info("loaded %d rows, tokenizing with num_proc=%d", len(ds), args.num_proc)
    ds = ds.map(make_tokenize(args.kill_at), with_indices=True, num_proc=args.num_proc)
    logger.info("tokenized %d rows", len(ds))


if __name__ == "__main__":
    main()
