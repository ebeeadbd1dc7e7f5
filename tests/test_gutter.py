"""A paste that kept a viewer's line numbers is read without them (crashlens.ingest.gutter)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import run_python
from crashlens import analyze
from crashlens.ingest.gutter import numbered, ungutter

ROOT = Path(__file__).resolve().parents[1]
LLAVA = ROOT / "corpus" / "tune" / "haotian-liu-llava-394" / "console.log"

_SCRIPT = """\
def load(path):
    with open(path) as f:
        return f.read()


print("epoch 1 loss 2.31", flush=True)
load("/data/train-00001.jsonl")
"""


def test_a_numbered_paste_is_told_and_its_numbers_taken_off() -> None:
    # haotian-liu/LLaVA#394 as posted: the reporter's traceback with its viewer's gutter, cut
    # inside a frame
    lines = LLAVA.read_text().splitlines()
    assert lines[0] == " 1  Traceback (most recent call last):" and numbered(lines)
    plain = [text for _, text in ungutter(enumerate(lines, 1))]
    assert plain[0] == "Traceback (most recent call last):"
    assert plain[1].startswith(' File "/root/devroot/src/LLaVA/llava/train/train_mem.py"')
    report = analyze([LLAVA])
    assert report.failed and report.primary is not None
    assert report.primary.rule_id == "traceback-cut-off"


def test_cat_n_of_a_real_run_reads_as_the_run(tmp_path: Path) -> None:
    # A real run's output, numbered by cat -n (right-aligned numbers and a tab): the same
    # diagnosis as the output itself
    run = run_python(tmp_path, _SCRIPT)
    assert run.returncode == 1 and "FileNotFoundError" in run.stderr
    log = tmp_path / "train.log"
    log.write_text(run.stdout + run.stderr)
    numbered_log = tmp_path / "numbered.log"
    numbered_log.write_text(
        subprocess.run(["cat", "-n", str(log)], capture_output=True, text=True).stdout
    )
    assert numbered_log.read_text().startswith("     1\tepoch 1 loss 2.31")
    plain, gutter = analyze([log]).primary, analyze([numbered_log]).primary
    assert plain is not None and gutter is not None
    assert gutter.rule_id == plain.rule_id == "file-not-found"


def test_lines_that_merely_start_with_numbers_are_no_gutter() -> None:
    # srun -l's task labels, a table of ranks, counts out of order: kept as they are
    assert not numbered([" 0: step 1", " 1: step 1", " 0: step 2"])
    assert not numbered(["3 GPUs", "4 nodes", "12 ranks"])
    assert not numbered(["1  Traceback (most recent call last):", '2   File "a.py"'])  # two
    assert numbered(["  9  a", " 10  b", " 11", " 12  c"])  # an empty line keeps its number
