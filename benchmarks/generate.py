"""Generate a deterministic, realistic multi-rank log tree for benchmarking.

64 ranks (8 nodes x 8 GPUs) of torchrun-style per-rank logs: python-logging step lines, tqdm
bars (carriage returns), NCCL INFO noise, warnings, a benign handled traceback per rank, a CUDA
OOM buried on one rank and NCCL watchdog timeouts on all the others. Message formats are the
ones in fixtures/gpu/nccl_timeout_cascade (see its SOURCE.md).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

OOM_RANK = 37
STEP = (
    "{ts},{ms:03d} INFO train: step {step} loss {loss:.4f} lr 3.00e-04 grad_norm {gn:.3f} "
    "tok/s {tok}\n"
)
NCCL = "node-{node:02d}:{pid}:{tid} [{dev}] NCCL INFO Channel {ch:02d}/0 : {a}[{dev}] -> {b}[{dev}] via P2P/IPC/read\n"
TQDM = "eval:  {p}%|{bar}| {n}/200 [00:0{s}<00:10, 9.65it/s]\r"
WARN = (
    "/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:91: UserWarning: "
    "None of the inputs have requires_grad=True. Gradients will be None\n"
)
HANDLED = """{ts},{ms:03d} ERROR train.ckpt: upload attempt 1/3 failed; retrying in 30s
Traceback (most recent call last):
  File "/srv/train/ckpt_upload.py", line 64, in upload_with_retry
    _put_object(bucket, key, path, timeout=timeout)
  File "/srv/train/ckpt_upload.py", line 41, in _put_object
    raise TimeoutError(f"upload of part {{part}}/{{nparts}} timed out after {{timeout}}s")
TimeoutError: upload of part 3/8 timed out after 60s
"""
OOM = """[rank{r}]: Traceback (most recent call last):
[rank{r}]:   File "/home/alice/llm/train.py", line 212, in <module>
[rank{r}]:     main()
[rank{r}]:   File "/home/alice/llm/train.py", line 188, in main
[rank{r}]:     loss.backward()
[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.91 GiB memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated.
"""
TIMEOUT = (
    "[rank{r}]:[E501 {ts} ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=38911, OpType=ALLREDUCE, NumelIn=262144, "
    "NumelOut=262144, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.\n"
)


def rank_log(rank: int, target_bytes: int, rng: random.Random, oom_rank: int = OOM_RANK) -> str:
    node, dev = divmod(rank, 8)
    pid = 40000 + rank * 13
    out: list[str] = []
    size = 0
    step = 0
    sec = 0
    handled_at = target_bytes // 3
    handled = False
    while size < target_bytes:
        step += 1
        sec += 1
        ts = f"2024-05-01 {1 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
        kind = rng.random()
        if kind < 0.55:
            line = STEP.format(ts=ts, ms=rng.randrange(1000), step=step, loss=rng.random() * 3,
                               gn=rng.random(), tok=rng.randrange(150000, 200000))  # fmt: skip
        elif kind < 0.9:
            line = NCCL.format(node=node, pid=pid, tid=pid + 41, dev=dev, ch=rng.randrange(32),
                               a=rank, b=(rank + 1) % 64)  # fmt: skip
        elif kind < 0.97:
            line = (
                "".join(
                    TQDM.format(p=p, bar="#" * (p // 10) + " " * (10 - p // 10), n=p * 2, s=p // 20)
                    for p in range(0, 101, 25)
                )
                + "\n"
            )
        else:
            line = WARN
        if not handled and size > handled_at:
            line += HANDLED.format(ts=ts, ms=1)
            handled = True
        out.append(line)
        size += len(line)
    end = f"03:{sec // 60 % 60:02d}:{sec % 60:02d}.123456789"
    if rank == oom_rank:
        out.append(OOM.format(r=rank))
    else:
        out.append(TIMEOUT.format(r=rank, ts=end))
    return "".join(out)


def generate(
    root: Path, ranks: int, mb_per_rank: float, seed: int = 0, oom_rank: int = OOM_RANK
) -> Path:
    """Write the tree under ``root`` and return it."""
    for rank in range(ranks):
        node = rank // 8
        d = root / f"node-{node:02d}"
        d.mkdir(parents=True, exist_ok=True)
        rng = random.Random(seed * 1000 + rank)
        text = rank_log(rank, int(mb_per_rank * 1e6), rng, oom_rank)
        (d / f"rank_{rank}.log").write_text(text)
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb-per-rank", type=float, default=8.0)
    args = ap.parse_args()
    generate(args.out, args.ranks, args.mb_per_rank)


if __name__ == "__main__":
    main()
