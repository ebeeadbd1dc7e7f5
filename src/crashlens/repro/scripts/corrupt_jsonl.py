"""A corrupt (truncated) line in a JSONL training file crashes a DataLoader worker on every rank.

crashlens-repro: id=corrupt_jsonl class=corrupt_data ranks=2 gpu=no launcher=torchrun

Each rank reads `train.jsonl` (written by rank 0 into the working directory, with one line cut
short as an interrupted copy leaves it) through a map-style Dataset and a DataLoader with one
worker. The worker's json.loads raises JSONDecodeError, which torch re-raises in the main process
as "Caught JSONDecodeError in DataLoader worker process 0." with the "Original Traceback".
The entrypoint is decorated with torchelastic's @record (as the torchrun docs advise), so each
rank also writes an error.json and torchrun's summary carries the traceback.
"""

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("train")


class JsonlDataset(Dataset[torch.Tensor]):
    def __init__(self, path: Path) -> None:
        self.lines = path.read_text().splitlines()

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, idx: int) -> torch.Tensor:
        record: dict[str, Any] = json.loads(self.lines[idx])
        return torch.tensor(record["x"], dtype=torch.float32)


def write_data(path: Path, rows: int, corrupt_line: int) -> None:
    lines = []
    for i in range(rows):
        line = json.dumps({"id": i, "x": [float(i % 7), float(i % 5), 1.0, 0.5]})
        if i == corrupt_line:
            line = line[: len(line) // 2]  # truncated record
        lines.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(path)


@record
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="train.jsonl")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--corrupt-line", type=int, default=73)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = Path(args.data)
    if rank == 0:
        write_data(path, args.rows, args.corrupt_line)
    dist.barrier()

    model = torch.nn.Linear(4, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ds = JsonlDataset(path)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(
        ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.num_workers
    )
    logger.info("rank %d/%d: %d samples from %s", rank, world, len(ds), path)
    for step, batch in enumerate(loader):
        loss = ddp(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info("step %d loss %.4f", step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
