"""Cross-rank forensics: clock skew from simultaneous events, hangs, cascades."""

from __future__ import annotations

import calendar
from pathlib import Path

from crashlens import analyze

WATCHDOG = (
    "[rank{r}]:[E501 {t} ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=100, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n"
)
PROGRESS = (
    "[rank{r}]:[E501 {t} ProcessGroupNCCL.cpp:1583] [PG 0 (default_pg) Rank {r}] Timeout at NCCL "
    "work: 100, last enqueued NCCL work: 100, last completed NCCL work: {done}.\n"
)
STEP = "2024-05-01 {t},000 INFO train: step 7 loss 1.25\n"
NOTE = "2024-05-01 {t} INFO train: evaluating\n"
OOM = (
    "[rank{r}]: Traceback (most recent call last):\n"
    '[rank{r}]:   File "/home/u/train.py", line 40, in <module>\n'
    "[rank{r}]:     loss.backward()\n"
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has "
    "a total capacity of 79.15 GiB of which 1.00 GiB is free.\n"
)
ILLEGAL = (
    "[rank{r}]: Traceback (most recent call last):\n"
    '[rank{r}]:   File "/home/u/train.py", line 41, in <module>\n'
    "[rank{r}]:     torch.cuda.synchronize()\n"
    "[rank{r}]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
)


def write(root: Path, host: str, rank: int, text: str) -> None:
    (root / host).mkdir(parents=True, exist_ok=True)
    (root / host / f"rank_{rank}.log").write_text(text)


def test_three_seconds_of_clock_skew_still_names_the_right_first_rank(tmp_path: Path) -> None:
    # True story: rank 2 (node-02) runs out of memory at 03:14:00, rank 0 (node-01) hits an
    # illegal memory access at 03:14:01.5. node-02's clock runs 3 s ahead, so its log says
    # 03:14:03. Both hosts' surviving ranks time out on SeqNum=100 at the same true moment.
    # Every rank logged "step 7" at the same true moment (03:13:00), another simultaneous event.
    step_a, step_b = STEP.format(t="03:13:00"), STEP.format(t="03:13:03")
    write(tmp_path, "node-01", 0, step_a + NOTE.format(t="03:14:01,500") + ILLEGAL.format(r=0))
    write(tmp_path, "node-01", 1, step_a + WATCHDOG.format(r=1, t="03:24:00.1"))
    write(tmp_path, "node-02", 2, step_b + NOTE.format(t="03:14:03,000") + OOM.format(r=2))
    write(tmp_path, "node-02", 3, step_b + WATCHDOG.format(r=3, t="03:24:03.1"))
    report = analyze([tmp_path])
    skew = report.to_dict()["clock_skew"]
    assert skew["node-01"]["offset_s"] == 0.0
    assert abs(skew["node-02"]["offset_s"] - 3.0) < 0.01 and skew["node-02"]["applied"]
    assert "simultaneous event group(s)" in skew["node-02"]["basis"]
    assert report.first_failure is not None and report.first_failure.rank == 2
    assert report.primary is not None and report.primary.match.rule.cls == "cuda_oom"
    # Without the correction the other rank looks first: the estimate is what decides.
    override = analyze([tmp_path], skew={"node-02": 0.0})
    assert override.first_failure is not None and override.first_failure.rank == 0


def test_hang_where_every_rank_timed_out_names_the_straggler(tmp_path: Path) -> None:
    for rank, done in ((0, 99), (1, 99), (2, 98), (3, 99)):
        text = STEP.format(t="03:13:00") + WATCHDOG.format(r=rank, t="03:24:00.1")
        text += PROGRESS.format(r=rank, t="03:24:00.1", done=done)
        write(tmp_path, "node-01", rank, text)
    report = analyze([tmp_path])
    ff = report.first_failure
    assert ff is not None and ff.kind == "hang" and ff.rank == 2
    assert "last completed collective: 98" in ff.text
    assert report.primary is not None and report.primary.kind == "symptom"


def test_story_and_cascade_counts() -> None:
    from conftest import FIXTURES

    report = analyze([FIXTURES / "gpu/nccl_timeout_cascade"])
    data = report.to_dict()
    assert data["story"].startswith("Rank 5 on node-02 failed first (CUDA out of memory")
    cascade = {c["class"]: c for c in data["cascade"]}
    assert cascade["nccl_timeout"]["ranks"] == [0, 1, 2, 3]
    assert "symptoms" in data["story"]


def test_plain_dmesg_gets_wall_time_from_a_pid_shared_with_a_timed_event(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "2024-05-01 03:14:00,000 INFO train: step 7 loss 1.25\n"
        "2024-05-01 03:14:02,500 ERROR train: RuntimeError: DataLoader worker (pid 4971) is "
        "killed by signal: Killed.\n"
    )
    (tmp_path / "dmesg.txt").write_text(
        "[412870.100000] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|"
        "__GFP_COMP), order=0, oom_score_adj=0\n"
        "[412871.000000] Out of memory: Killed process 4971 (pt_data_worker) total-vm:9012344kB, "
        "anon-rss:8123456kB, file-rss:10240kB, shmem-rss:0kB, UID:0 pgtables:16384kB "
        "oom_score_adj:0\n"
    )
    report = analyze([tmp_path])
    assert report.primary is not None and report.primary.rule_id == "kernel-oom-kill"
    (kernel,) = [e for e in report.primary.evidence if e.file.endswith("dmesg.txt")]
    # Joined on pid 4971: the kill is the moment the worker was reported killed.
    assert kernel.time is not None and kernel.time_inferred
    assert kernel.time == calendar.timegm((2024, 5, 1, 3, 14, 2, 0, 0, 0)) + 0.5


def test_launcher_reports_are_put_on_the_reference_clock_like_their_evidence() -> None:
    from conftest import FIXTURES, parse_file
    from crashlens.align import align

    parsed = parse_file(FIXTURES / "repro" / "rank_exception_cascade" / "console.log", 2026)
    plain = align([parsed]).failures
    shifted = align([parsed], {"localhost": 2.0}).failures
    assert plain and len(plain) == len(shifted)
    for before, after in zip(plain, shifted, strict=True):
        assert before.time is not None and after.time == before.time - 2.0
        assert after.evidence.time == after.time
