"""Plain `python train.py` run: one handled traceback, then a fatal KeyError in collate.

crashlens-repro: id=user_code_error class=user_code_error ranks=1 gpu=no launcher=python

A tiny model trains for a few logged steps. One step's metrics upload fails and is handled with
`logger.exception(... retrying)` (a benign traceback in the log that is NOT the cause). Later a
batch holds a record without "input_ids" and the collate function dies with an uncaught
`KeyError: 'input_ids'` -- the real root cause.
"""

import argparse
import logging
from typing import Any

import torch
from torch.utils.data import DataLoader

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


def make_records(n: int, bad_index: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for i in range(n):
        ids = [(i * 7 + j) % 100 for j in range(8)]
        if i == bad_index:
            records.append({"text": "raw text that was never tokenized", "label": i % 2})
        else:
            records.append({"input_ids": ids, "label": i % 2})
    return records


def collate(batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    input_ids = torch.tensor([ex["input_ids"] for ex in batch])
    labels = torch.tensor([ex["label"] for ex in batch])
    return {"input_ids": input_ids, "labels": labels}


def upload_metrics(step: int, loss: float) -> None:
    raise ConnectionError(f"metrics server unreachable while sending step {step}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--bad-index", type=int, default=45)
    parser.add_argument("--upload-step", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(8 * 16, 2)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(
        make_records(args.samples, args.bad_index), batch_size=args.batch_size, collate_fn=collate
    )
    logger.info("training on %d samples", args.samples)
    for step, batch in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(batch["input_ids"]), batch["labels"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info("step %d loss %.4f", step, loss.item())
        if step == args.upload_step:
            try:
                upload_metrics(step, loss.item())
            except ConnectionError:
                logger.exception("failed to upload metrics for step %d, retrying", step)
    logger.info("training finished")


if __name__ == "__main__":
    main()
