"""What tests/test_repeats.py and tests/test_fold_runs.py build their retry-loop logs from: a
handled ConnectionResetError traceback, the step and NCCL lines around it, and one file read
on either path."""

from __future__ import annotations

import calendar
import time
from pathlib import Path

from crashlens.model import FileResult
from crashlens.rulebase import load_rules
from crashlens.session import SequentialRunner, Session

RULES = load_rules()
START = calendar.timegm((2024, 5, 1, 1, 0, 0, 0, 0, 0))
#: One round of the retry loop: the traceback the writer survives.
ROUND = (
    "Traceback (most recent call last):\n"
    '  File "/srv/train/data/remote.py", line 88, in fetch_shard\n'
    "    return session.get(url, timeout=30).content\n"
    '  File "/opt/conda/lib/python3.10/site-packages/requests/sessions.py", line 602, in get\n'
    '    return self.request("GET", url, **kwargs)\n'
    "ConnectionResetError: [Errno 104] Connection reset by peer\n"
)
STEP = "{ts},{ms:03d} INFO train: step {n} loss 0.5\n"
NCCL = "node-00:4100:4141 [1] NCCL INFO Channel {ch:02d}/0 : 1[1] -> 2[1] via P2P/IPC/read\n"


def stamp(sec: int) -> str:
    """The log time ``sec`` seconds after START, as the step lines print it."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(START + sec))


def read(path: Path, fast: bool = True) -> FileResult:
    """One file's result, read in this process on the fast path or line by line."""
    session = Session(RULES, fast=fast, runner=SequentialRunner())
    session.read_paths([path])
    (result,) = session.results
    return result
