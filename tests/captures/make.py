"""Re-capture the real program runs under tests/captures/ (python tests/captures/make.py [NAME...]).

Each capture runs a small real program (CPython, tqdm, rich, multiprocessing) and stores its
console output exactly as written, for the tests of how text looks in users' logs
(tests/test_real_logs.py). Paths of this machine are replaced with /home/user/proj and
/opt/venv afterwards, nothing else.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROGRAMS = {
    # A manual tqdm bar still open when the exception escapes: the traceback is printed right
    # after the bar's last "\r" update, on the same line.
    "tqdm_glued": """
import time
from tqdm import tqdm
bar = tqdm(total=10, desc="train")
for step in range(10):
    time.sleep(0.01)
    if step == 6:
        raise RuntimeError(f"loss is nan at step {step}")
    bar.update(1)
""",
    # An experiment config the user edited into invalid Python (an unquoted path), imported by
    # name as detection toolkits load their configs: the compiler's report has a frame
    # without a function, its source line and a caret.
    "syntax_error_config": """
import importlib
from pathlib import Path
Path("exp_cfg.py").write_text("import os\\n\\nclass Exp:\\n    data_dir = os.path.realpath(/data/coco)\\n")
exp = importlib.import_module("exp_cfg")
print(exp.Exp.data_dir)
""",
    # rich's traceback handler on a forced terminal: box drawing and ANSI colour codes.
    "rich_ansi": """
from rich.console import Console
from rich.traceback import install
install(console=Console(stderr=True, force_terminal=True, width=100))
def load(path):
    return open(path).read()
load("/nonexistent/data/train.jsonl")
""",
    # Mutual recursion at CPython's default limit: ~1,000 alternating frames, not collapsed.
    "recursion": """
def even(n):
    return True if n == 0 else odd(n - 1)
def odd(n):
    return False if n == 0 else even(n - 1)
print("checking parity", flush=True)
even(10**6)
""",
    # Two processes of one job raise at the same moment and share one console (no prefixes,
    # as torchrun's default output): their traceback lines interleave.
    "interleaved": """
import multiprocessing as mp
import sys
import traceback
def worker(rank, barrier):
    try:
        barrier.wait()
        raise ValueError(f"rank {rank}: label index 11 out of range for 10 classes")
    except ValueError:
        for line in traceback.format_exc().splitlines(keepends=True):
            sys.stderr.write(line)
            sys.stderr.flush()
        sys.exit(1)
if __name__ == "__main__":
    barrier = mp.Barrier(2)
    procs = [mp.Process(target=worker, args=(r, barrier)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
""",
    # A TypeError raised inside the standard library (json's encoder), called from the
    # user's code: the user's bug, not the library's.
    "stdlib_typeerror": """
import json
def save_metrics(metrics):
    return json.dumps(metrics)
print("epoch 1 done", flush=True)
save_metrics({"loss": 0.31, "seen_ids": {3, 5}})
""",
    # A distributed script started with plain python instead of its launcher: the variables
    # torchrun sets are missing, and the KeyError is raised inside the stdlib's os module.
    "environ_keyerror": """
import os
def setup():
    local_rank = int(os.environ["LOCAL_RANK"])
    return local_rank
setup()
""",
    # Unbounded recursion through torch.nn.Module.__call__: the innermost frames are torch's.
    "torch_recursion": """
import torch
class Chain(torch.nn.Module):
    def forward(self, x, depth):
        return self(x, depth + 1)
Chain()(torch.zeros(2), 0)
""",
    # The job's script installed inside a package directory (a wheel's or an image's
    # site-packages): the script the process was started with is still the user's.
    "installed_script": """
def collate(batch):
    return [sample["input_ids"] for sample in batch]
collate([{"text": "hello"}])
""",
}
#: A two-process job, each process logging to its own file (rank0.log, rank1.log): rank 1 logs a
#: traceback it survives (no retry announced, no step after it), then ends 61 s later; rank 0
#: dies of an uncaught KeyError 30 s in. Rank 0 failed first, not rank 1's survived error.
ENDINGS = """
import logging
import multiprocessing as mp
import sys
import time

def run(rank):
    log = logging.getLogger(f"rank{rank}")
    handler = logging.FileHandler(f"rank{rank}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.info("step 1 loss 2.31")
    if rank == 1:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            log.exception("checkpoint upload failed")
        time.sleep(61)
        log.error("giving up: peer rank 0 is gone")
        sys.exit(1)
    time.sleep(30)
    try:
        batch = {"text": "hello"}
        batch["input_ids"]
    except KeyError:
        log.exception("collate failed")
        sys.exit(1)

if __name__ == "__main__":
    procs = [mp.Process(target=run, args=(r,)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
"""


def capture_endings(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "endings.py"
        script.write_text(ENDINGS.lstrip(), encoding="utf-8")
        subprocess.run([sys.executable, str(script)], cwd=tmp, check=False)
        out.mkdir(exist_ok=True)
        for name in ("rank0.log", "rank1.log"):
            text = (Path(tmp) / name).read_text(encoding="utf-8")
            text = text.replace(tmp, "/home/user/proj").replace(sys.base_prefix, "/usr")
            (out / name).write_text(text, encoding="utf-8")


#: Two-rank torchrun (gloo) jobs where rank 0 works alone while rank 1 waits and times out:
#: in a barrier (main_process_first) and on a c10d store key. Rank 0 is the one waited for.
HANGS = {
    "barrier_wait": """
import datetime
import logging
import os
import time

import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("train")


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()
    if rank == 0:
        # the main process prepares the dataset while the others wait (main_process_first)
        log.info("rank 0: tokenizing dataset")
        time.sleep(12)
    dist.barrier()
    log.info("rank %d: dataset ready", rank)


if __name__ == "__main__":
    main()
""",
    "store_wait": """
import datetime
import os

import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1,
                          int(os.environ["WORLD_SIZE"]), rank == 0,
                          timeout=datetime.timedelta(seconds=4))
    if rank == 0:
        import time
        print("rank 0: computing the shard plan", flush=True)
        time.sleep(10)
        store.set("plan", "ready")
    else:
        store.wait(["plan"])
    print(f"rank {rank}: plan ready", flush=True)


if __name__ == "__main__":
    main()
""",
}


def capture_hangs(out: Path) -> None:
    out.mkdir(exist_ok=True)
    for i, (name, source) in enumerate(HANGS.items()):
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / f"{name}.py"
            script.write_text(source.lstrip(), encoding="utf-8")
            torchrun = Path(sys.executable).with_name("torchrun")
            port = str(29631 + 10 * i)
            cmd = [str(torchrun), "--nproc-per-node", "2", "--master-port", port, str(script)]
            # One console, as a terminal shows it: stdout and stderr interleaved as written.
            run = subprocess.run(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp, check=False
            )
            text = run.stdout.decode("utf-8")
            text = text.replace(tmp, "/home/user/proj").replace(sys.prefix, "/opt/venv")
            (out / f"{name}.log").write_text(text.replace(sys.base_prefix, "/usr"), "utf-8")


#: Where a program's script lies under the run directory (default: ``<name>.py``).
SCRIPT_PATHS = {"installed_script": "venv/lib/python3.11/site-packages/jobs/train.py"}


def capture(name: str, source: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / SCRIPT_PATHS.get(name, f"{name}.py")
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(source.lstrip(), encoding="utf-8")
        run = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            cwd=tmp,
            env={**os.environ, "COLUMNS": "100"},
            check=False,
        )
        # Bytes as written: tqdm's ``\r`` updates must not become newlines.
        out = (run.stdout + run.stderr).decode("utf-8")
        out = out.replace(tmp, "/home/user/proj").replace(sys.prefix, "/opt/venv")
        return out.replace(sys.base_prefix, "/usr")


def interleaved_enough(text: str) -> bool:
    pairs = itertools.pairwise(text.splitlines())
    return any(a.startswith("Traceback") and b.startswith("Traceback") for a, b in pairs)


def main(names: list[str]) -> None:
    if not names or "endings" in names:
        capture_endings(HERE / "endings")
    if not names or "hangs" in names:
        capture_hangs(HERE / "hangs")
    for name, source in PROGRAMS.items():
        if names and name not in names:
            continue
        for _ in range(50):  # the interleaving depends on scheduling: keep a run that shows it
            text = capture(name, source)
            if name != "interleaved" or interleaved_enough(text):
                break
        (HERE / f"{name}.log").write_text(text, encoding="utf-8")
        print(name, len(text.splitlines()), "lines")


if __name__ == "__main__":
    main(sys.argv[1:])
