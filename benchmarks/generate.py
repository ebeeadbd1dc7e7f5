"""Generate a deterministic, realistic multi-rank job's logs for benchmarking.

64 ranks (8 nodes x 8 GPUs) of torchrun-style logs: python-logging step lines, tqdm bars
(carriage returns), NCCL INFO noise, warnings, benign handled tracebacks (a retried checkpoint
upload, and ``--retries`` more retried connection resets per rank, each followed by many more
steps), a CUDA OOM buried on one rank and NCCL watchdog timeouts on all the others. Message
formats are the ones in fixtures/gpu/nccl_timeout_cascade (see its SOURCE.md).

Layouts: a per-rank ``tree`` (``node-NN/rank_R.log``), or one combined ``console`` with every
rank's lines interleaved behind the prefix each launcher writes (``--style``; formats from
../shared/reference/signals.md section 0): torchrun ``--tee`` ``[defaultN]:``, the c10d
excepthook ``[rankN]:``, ``srun --label`` (``%*d: ``), Open MPI ``--tag-output``
(``[1,N]<stderr>:``), pdsh (``host: ``), kubectl ``--prefix`` (``[pod/NAME/CONTAINER] ``) and
kubectl ``--timestamps`` (an RFC 3339 time before every line).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator
from pathlib import Path

OOM_RANK = 37
START = 1_714_525_200  # 2024-05-01 01:00:00 UTC
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
RETRY = """{ts},{ms:03d} WARNING train.data: shard fetch failed, retrying (attempt 1/5)
Traceback (most recent call last):
  File "/srv/train/data/remote.py", line 88, in fetch_shard
    return session.get(url, timeout=30).content
  File "/opt/conda/lib/python3.10/site-packages/requests/sessions.py", line 602, in get
    return self.request("GET", url, **kwargs)
ConnectionResetError: [Errno 104] Connection reset by peer
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


#: A Python warning as ``warnings.showwarning`` prints it: the warning, then its source line.
WARN_CONT = (
    "/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:91: UserWarning: "
    "None of the inputs have requires_grad=True. Gradients will be None\n  warnings.warn(\n"
)
#: The HF Trainer's per-step log dict: no timestamp.
TRAINER = (
    "{{'loss': {loss:.4f}, 'grad_norm': {gn:.4f}, 'learning_rate': 3e-05, 'epoch': {ep:.2f}}}\n"
)
TQDM_STEP = " {p:3d}%|{bar}| {n}/5000 [01:{s:02d}<10:00,  1.52it/s]\r"
#: Content mixes (``--mix``): what share of lines each kind of line takes.
MIXES = ("quiet", "ordinary", "timestampless", "tqdm", "warnings", "nccl", "retries")


def _mixed_line(mix: str, kind: float, ts: str, step: int, rng: random.Random, **kw: int) -> str:
    """One step's lines in a content mix other than ``quiet``."""
    stamped = STEP.format(ts=ts, ms=rng.randrange(1000), step=step, loss=rng.random() * 3,
                          gn=rng.random(), tok=rng.randrange(150000, 200000))  # fmt: skip
    nccl = NCCL.format(ch=rng.randrange(32), **kw)
    bar = TQDM_STEP.format(p=step % 100, bar="#" * (step % 10) + " " * (10 - step % 10),
                           n=step, s=step % 60)  # fmt: skip
    if mix == "ordinary":  # a bar update between steps, a warning every other step, NCCL INFO
        return stamped + bar + "\n" + (WARN_CONT if step % 2 else nccl)
    if mix == "timestampless":
        return TRAINER.format(loss=rng.random() * 3, gn=rng.random(), ep=step / 1000)
    if mix == "tqdm":
        return "".join(TQDM_STEP.format(p=p, bar="#" * (p // 10) + " " * (10 - p // 10),
                                        n=step, s=p % 60) for p in range(0, 100, 7)) + "\n"  # fmt: skip
    if mix == "warnings":
        return WARN_CONT if kind < 0.7 else stamped
    if mix == "nccl":
        return nccl if kind < 0.95 else stamped
    raise ValueError(mix)


def rank_log(
    rank: int,
    target_bytes: int,
    rng: random.Random,
    oom_rank: int = OOM_RANK,
    retries: int = 0,
    mix: str = "quiet",
) -> str:
    """One rank's whole log."""
    return "".join(rank_lines(rank, target_bytes, rng, oom_rank, retries, mix))


def rank_lines(
    rank: int,
    target_bytes: int,
    rng: random.Random,
    oom_rank: int = OOM_RANK,
    retries: int = 0,
    mix: str = "quiet",
) -> Iterator[str]:
    """One rank's log, a piece at a time (a multi-GB log never sits in memory)."""
    if mix == "retries":
        retries = max(retries, target_bytes // 20_000)  # a retried exception every 20 KB
    node, dev = divmod(rank, 8)
    retry_at = sorted(rng.randrange(target_bytes * 4 // 5) for _ in range(retries))
    pid = 40000 + rank * 13
    size = 0
    step = 0
    sec = 0
    handled_at = target_bytes // 3
    handled = False
    while size < target_bytes:
        step += 1
        sec += 1
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(START + sec))
        kind = rng.random()
        if mix not in ("quiet", "retries"):
            line = _mixed_line(mix, kind, ts, step, rng, node=node, pid=pid, tid=pid + 41,
                               dev=dev, a=rank, b=(rank + 1) % 64)  # fmt: skip
        elif kind < 0.55:
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
        while retry_at and size > retry_at[0]:
            line += RETRY.format(ts=ts, ms=2)
            retry_at.pop(0)
        yield line
        size += len(line)
    end = time.strftime("%H:%M:%S", time.gmtime(START + sec + 600)) + ".123456789"
    if rank == oom_rank:
        yield OOM.format(r=rank)
    else:
        yield TIMEOUT.format(r=rank, ts=end)


def generate(
    root: Path,
    ranks: int,
    mb_per_rank: float,
    seed: int = 0,
    oom_rank: int = OOM_RANK,
    retries: int = 0,
    mix: str = "quiet",
) -> Path:
    """Write the per-rank tree under ``root`` and return it."""
    for rank in range(ranks):
        node = rank // 8
        d = root / f"node-{node:02d}"
        d.mkdir(parents=True, exist_ok=True)
        rng = random.Random(seed * 1000 + rank)
        text = rank_log(rank, int(mb_per_rank * 1e6), rng, oom_rank, retries, mix)
        (d / f"rank_{rank}.log").write_text(text)
    return root


def single(path: Path, mb: float, seed: int = 0, retries: int = 0) -> Path:
    """One rank's log of ``mb`` MB (the OOM rank's), written as it is generated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed * 1000 + OOM_RANK)
    with path.open("w") as out:
        out.writelines(rank_lines(OOM_RANK, int(mb * 1e6), rng, OOM_RANK, retries))
    return path


STYLES = ("default", "rank", "srun", "mpi", "pdsh", "kubectl", "stamped")


def prefix(style: str, rank: int, ranks: int, line: str) -> str:
    """The prefix a launcher in ``style`` writes before one of ``rank``'s lines."""
    if style == "default":
        return f"[default{rank % 8}]:"
    if style == "rank":
        # The c10d excepthook prefixes lines that do not carry the rank already.
        return "" if line.startswith(f"[rank{rank}]:") else f"[rank{rank}]: "
    if style == "srun":
        return f"{rank:{len(str(ranks - 1))}d}: "
    if style == "mpi":
        return f"[1,{rank}]<stderr>:"
    if style == "pdsh":
        return f"node-{rank // 8:02d}: "
    if style == "kubectl":
        return f"[pod/trainer-worker-{rank}/pytorch] "
    raise ValueError(style)


def _lines(text: str) -> list[str]:
    """Physical lines with their newline (a progress bar's ``\r`` states stay on theirs)."""
    return [line + "\n" for line in text.split("\n")[:-1]]


def console(
    path: Path,
    ranks: int,
    mb_total: float,
    style: str = "rank",
    seed: int = 0,
    oom_rank: int = OOM_RANK,
    retries: int = 0,
    mix: str = "quiet",
) -> Path:
    """Write one combined console of ``ranks`` interleaved rank logs to ``path``."""
    per_rank = int(mb_total * 1e6 / ranks)
    logs = [
        _lines(rank_log(r, per_rank, random.Random(seed * 1000 + r), oom_rank, retries, mix))
        for r in range(ranks)
    ]
    rng = random.Random(seed)
    pos = [0] * ranks
    live = list(range(ranks))
    path.parent.mkdir(parents=True, exist_ok=True)
    start = START
    with path.open("w") as out:
        n = 0
        while live:
            # Ranks write in bursts of a few lines, in an order that changes every round.
            rng.shuffle(live)
            for r in list(live):
                burst = logs[r][pos[r] : pos[r] + rng.randrange(1, 6)]
                pos[r] += len(burst)
                for line in burst:
                    n += 1
                    if style == "stamped":
                        secs, ns = divmod(n * 997_003, 1_000_000_000)
                        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start + secs))
                        out.write(f"{stamp}.{ns:09d}Z {line}")
                    else:
                        out.write(prefix(style, r, ranks, line) + line)
                if pos[r] >= len(logs[r]):
                    live.remove(r)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb-per-rank", type=float, default=8.0)
    ap.add_argument("--retries", type=int, default=0, help="retried exceptions per rank")
    ap.add_argument("--layout", choices=("tree", "console"), default="tree")
    ap.add_argument("--style", choices=STYLES, default="rank", help="console prefix style")
    ap.add_argument("--mix", choices=MIXES, default="quiet", help="content mix of the lines")
    args = ap.parse_args()
    if args.layout == "tree":
        generate(args.out, args.ranks, args.mb_per_rank, retries=args.retries, mix=args.mix)
    else:
        mb = args.mb_per_rank * args.ranks
        console(args.out, args.ranks, mb, args.style, retries=args.retries, mix=args.mix)


if __name__ == "__main__":
    main()
