"""Re-capture the JSON Flight Recorder dumps here (python tests/captures/flight_json/make.py).

Two gloo ranks (torch, CPU) record their collectives (TORCH_FR_BUFFER_SIZE). Both all-reduce
twice; then rank 0 starts a third all_reduce (async) that rank 1 has not called yet, and both
write ``torch._C._distributed_c10d._dump_fr_trace_json()`` to ``comm_lib_trace_rank_<N>.json``
before rank 1 joins it and the job ends. The dumps are the JSON format torch writes, as is.
"""

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _rank(rank: int, init: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    x = torch.ones(8)
    dist.all_reduce(x)
    dist.all_reduce(x)
    work = dist.all_reduce(x, async_op=True) if rank == 0 else None
    dump = torch._C._distributed_c10d._dump_fr_trace_json(True, False)
    (HERE / f"comm_lib_trace_rank_{rank}.json").write_bytes(dump)
    if rank == 1:
        dist.all_reduce(x)
    if work is not None:
        work.wait()
    dist.destroy_process_group()


def main() -> None:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "100"
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/store"
        mp.start_processes(_entry, args=(init,), nprocs=2, start_method="spawn")


def _entry(rank: int, init: str) -> None:
    _rank(rank, init)


if __name__ == "__main__":
    sys.exit(main())
