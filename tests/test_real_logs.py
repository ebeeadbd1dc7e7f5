"""Logs as users really have them: each behaviour on a real capture or a verbatim public report.

Inputs: ``corpus/`` cases (transcribed from public issue threads, source in each case.yaml),
``tests/captures/`` (real program runs, ``python tests/captures/make.py``), the captured
``fixtures/repro`` jobs and rule fixtures captured from real runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import parse_file
from crashlens import analyze
from crashlens.parse.text import glue_point
from crashlens.parse.traceback import MAX_FRAMES, MAX_TEXT_LINES
from crashlens.render import render
from crashlens.report import Report

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpus"
CAPTURES = ROOT / "tests" / "captures"
RULES = ROOT / "rules"


def _report(path: Path) -> Report:
    return analyze([path])


def _classes(report: Report) -> list[str]:
    return [c.match.rule.cls for c in report.causes]


# -- never silent about a failed job ---------------------------------------------------------


def test_a_bare_final_exception_line_is_a_failure() -> None:
    # pytorch/pytorch#107021: the console ends in "...RendezvousConnectionError: ..." with no
    # traceback header above it.
    report = _report(CORPUS / "tune" / "pytorch-pytorch-107021")
    assert report.failed and _classes(report)[0] == "rendezvous_failure"
    assert report.first_failure is not None
    assert "RendezvousConnectionError" in report.first_failure.text


def test_a_launcher_report_alone_is_a_failure(tmp_path: Path) -> None:
    # CPython's CalledProcessError as accelerate's launcher raises it (captured from a run):
    # the child exited 3 and said nothing.
    fixture = RULES / "process" / "launcher-exit-nonzero" / "positive-subprocess.log"
    lines = [t for t in fixture.read_text().splitlines() if not t.startswith("#! ")]
    end = next(i for i, t in enumerate(lines) if t.startswith("subprocess.CalledProcessError"))
    log = tmp_path / "console.log"
    log.write_text("\n".join(lines[: end + 1]) + "\n")
    report = _report(log)
    assert report.failed
    assert report.primary is not None and report.primary.rule_id == "launcher-exit-nonzero"
    assert "No failure found" not in render(report, "text", color=False)


def test_a_torchrun_summary_without_its_header_names_the_failed_rank() -> None:
    # hiyouga/ChatGLM-Efficient-Tuning#75: only the "Failures: / Root Cause" block was pasted.
    report = _report(CORPUS / "validation" / "hiyouga-chatglm-efficient-tuning-75")
    assert report.failed
    assert report.first_failure is not None and report.first_failure.rank == 0


def test_a_shell_kill_glued_to_a_progress_bar_is_a_failure() -> None:
    # PKU-YuanGroup/Video-LLaVA#13: "Loading checkpoint shards: 0%| ... ?it/s]Killed".
    report = _report(CORPUS / "validation" / "pku-yuangroup-video-llava-13")
    assert _classes(report)[:1] == ["host_oom"]
    assert report.primary is not None and report.primary.lead is not None
    assert report.primary.lead.text == "Killed"


def test_uncaught_exceptions_are_user_code_or_unknown_by_where_they_were_raised() -> None:
    library = _report(RULES / "process" / "uncaught-exception" / "positive.log")
    assert [c.rule_id for c in library.causes] == ["uncaught-exception"]
    assert _classes(library) == ["unknown"]
    user = _report(RULES / "process" / "uncaught-exception" / "near-miss.log")
    assert [c.rule_id for c in user.causes] == ["user-code-error"]
    # raised in the user's code, then inside PyYAML called from it: the last one ended it
    assert "yaml.parser.ParserError" in user.causes[0].remediation
    assert "train_cfg.py:5 in read_config" in user.causes[0].remediation


# -- text as users really have it -----------------------------------------------------------


def test_a_traceback_glued_to_a_tqdm_bar_is_assembled() -> None:
    report = _report(CAPTURES / "tqdm_glued.log")
    [tb] = report.tracebacks
    assert tb.fatal and tb.final.type == "RuntimeError"
    assert tb.final.message == "loss is nan at step 6"


@pytest.mark.parametrize(
    ("line", "rest"),
    [
        ("eval: 100%|##########| 50/50 [02:00<00:00, 2.41s/it]Traceback (most recent call last):",
         "Traceback (most recent call last):"),
        ("step 9: 100%|####| 9/9 [00:03<00:00, 2.41s/it][rank2]: Traceback (most recent call last):",
         "[rank2]: Traceback (most recent call last):"),
        ("Original Traceback (most recent call last):", None),
        ("  traceback : Traceback (most recent call last):", None),
        ("Traceback (most recent call last):", None),
    ],
)  # fmt: skip
def test_a_glued_header_is_split_where_its_line_begins(line: str, rest: str | None) -> None:
    cut = glue_point(line)
    assert (line[cut:] if cut else None) == rest


def test_ansi_coloured_rich_tracebacks_are_read() -> None:
    # rich's traceback handler on a forced terminal (box drawing inside ANSI colour codes).
    report = _report(CAPTURES / "rich_ansi.log")
    [tb] = report.tracebacks
    assert tb.final.type == "FileNotFoundError"
    assert [f.function for f in tb.final.frames] == ["<module>", "load"]
    assert _classes(report) == ["file_not_found"]
    assert "\x1b" not in render(report, "json")


def test_a_web_paste_without_indentation_still_has_frames() -> None:
    # NVIDIA/apex#428 as pasted: every "File ..." line at column 0.
    report = _report(CORPUS / "tune" / "nvidia-apex-428")
    [tb] = [t for t in report.tracebacks if t.fatal]
    assert tb.final.type == "ImportError" and len(tb.final.frames) >= 5
    assert _classes(report)[0] == "version_mismatch"


def test_processes_sharing_a_console_each_keep_their_exception() -> None:
    # Two processes raising at once into one console: "Traceback" twice in a row, then both
    # processes' frames and final lines.
    report = _report(CAPTURES / "interleaved.log")
    messages = sorted(tb.final.message for tb in report.tracebacks)
    assert messages == [f"rank {r}: label index 11 out of range for 10 classes" for r in (0, 1)]
    assert all(tb.fatal for tb in report.tracebacks)
    assert report.primary is not None and len(report.primary.evidence) == 2


def test_a_recursion_error_through_a_thousand_frames_is_one_bounded_traceback() -> None:
    report = _report(CAPTURES / "recursion.log")
    [tb] = report.tracebacks
    assert tb.fatal and tb.final.type == "RecursionError"
    assert len(tb.final.frames) == MAX_FRAMES  # bounded: the outermost and innermost kept
    assert tb.final.frames[-1].function in ("even", "odd")
    assert len(tb.text.splitlines()) <= MAX_TEXT_LINES + 1
    assert tb.text.splitlines()[-1] == "RecursionError: maximum recursion depth exceeded"
    assert _classes(report) == ["user_code_error"]


def test_a_handled_traceback_never_leads_the_report() -> None:
    # A ConnectionError logged and retried (training went on), then the fatal KeyError.
    report = _report(ROOT / "fixtures" / "repro" / "user_code_error")
    top = report.primary
    assert top is not None and top.lead is not None
    assert top.lead.text == "KeyError: 'input_ids'"
    assert "KeyError" in top.remediation and "ConnectionError" not in top.remediation
    assert report.first_failure is not None and "KeyError" in report.first_failure.text
    annotation = render(report, "github").splitlines()[0]
    assert f"line={top.lead.line}," in annotation


def test_hf_transformers_timestamps_are_read() -> None:
    # hiyouga/LLaMA-Factory#1092: "10/02/2023 06:37:37 - INFO - llmtuner..." lines.
    result = parse_file(CORPUS / "tune" / "hiyouga-llamafactory-1092" / "console.log", 2023)
    [summary] = result.ranks
    assert summary.first_time == pytest.approx(1696228657.0)  # 2023-10-02T06:37:37Z


# -- the cause inside the symptom -----------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "cls", "rule"),
    [
        # NCCL's "Cuda failure 'out of memory'" WARN under a NCCL error (NVIDIA/nccl#1235)
        ("tune/nvidia-nccl-1235", "cuda_oom", "nccl-buffer-oom"),
        # torch.save's "PytorchStreamWriter failed writing file" on a full disk (no ENOSPC)
        ("tune/h2oai-h2o-llmstudio-214", "disk_full", "disk-full"),
        # an extension built against another torch: "undefined symbol"
        ("tune/nvidia-apex-428", "version_mismatch", "extension-undefined-symbol"),
        # "Last error: socketStartConnect: Connect to ... failed : No route to host"
        (
            "tune/hkproj-pytorch-transformer-distributed-1",
            "env_misconfig",
            "nccl-socket-unreachable",
        ),
        # two processes on one GPU: "Duplicate GPU detected" in NCCL's Last error
        ("tune/nvidia-megatron-lm-661", "env_misconfig", "nccl-duplicate-gpu"),
        # DDP's own diagnostic about unused parameters
        ("validation/imprintlab-medsegdiff-27", "user_code_error", "ddp-unused-parameters"),
    ],
)
def test_the_cause_inside_the_symptom(case: str, cls: str, rule: str) -> None:
    report = _report(CORPUS / case)
    assert report.primary is not None
    assert (report.primary.match.rule.cls, report.primary.rule_id) == (cls, rule)


def test_sigbus_is_shared_memory() -> None:
    # bash's job report of a child killed by SIGBUS (captured).
    report = _report(RULES / "memory" / "sigbus-exit" / "positive.log")
    assert _classes(report) == ["shm_exhausted"]


# -- who failed first -----------------------------------------------------------------------


def test_srun_names_the_rank_of_a_rankless_finding() -> None:
    # open-mmlab K-Net#30: slurmstepd's "Detected 1 oom-kill event" names no task; srun's
    # "task 0: Out Of Memory" right after it does.
    report = _report(CORPUS / "tune" / "zwwwayne-k-net-30")
    assert _classes(report)[0] == "host_oom"
    assert report.first_failure is not None and report.first_failure.rank == 0


def test_open_mpi_names_the_failed_rank() -> None:
    report = _report(RULES / "process" / "launcher-exit-nonzero" / "positive.log")
    ranks = {ev.text.split()[0]: ev.rank for c in report.causes for ev in c.evidence}
    assert ranks["mpirun"] == 1


WATCHDOG = (
    # ProcessGroupNCCL's watchdog lines as in rules/distributed/nccl-watchdog-timeout (format
    # of torch ~2.3-2.7): rank 0 completed the least work, so rank 0 is the straggler.
    "[rank{r}]:[E501 03:24:00.215402011 ProcessGroupNCCL.cpp:1583] [PG 0 (default_pg) Rank {r}] "
    "Timeout at NCCL work: 15417, last enqueued NCCL work: 15417, last completed NCCL work: {c}.\n"
)


def test_the_straggler_can_be_rank_0(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text(WATCHDOG.format(r=1, c=15416) + WATCHDOG.format(r=0, c=15415))
    report = _report(log)
    assert report.first_failure is not None
    assert (report.first_failure.kind, report.first_failure.rank) == ("hang", 0)


def test_the_rank_the_others_wait_for_is_the_culprit() -> None:
    # Ranks 3 and 5 waited in the store for the NCCL id only rank 0 publishes (lines as posted
    # in public reports): rank 0 is named, though it printed nothing.
    report = _report(RULES / "distributed" / "nccl-unique-id-wait" / "positive.log")
    assert report.first_failure is not None
    assert (report.first_failure.kind, report.first_failure.rank) == ("hang", 0)
    assert "waited for rank 0" in report.first_failure.text


@pytest.mark.parametrize(
    ("fixture", "waiting"),
    [("positive-operations.log", "rank 0"), ("positive-stalled-ops.log", "another rank")],
)
def test_horovods_stall_warning_names_the_missing_rank(fixture: str, waiting: str) -> None:
    # Horovod's stall inspector as posted (horovod#1012 under mpirun's tags, horovod#429 with
    # no tag: who waited is not said): rank 1 never submitted the tensors the others wait on.
    report = _report(RULES / "distributed" / "horovod-stall" / fixture)
    assert report.first_failure is not None
    assert (report.first_failure.kind, report.first_failure.rank) == ("hang", 1)
    assert report.first_failure.text.startswith(f"{waiting} waited for rank 1: ")
    assert _classes(report)[0] == "nccl_timeout"


def test_an_exception_line_a_paste_set_in_bold_is_an_exception() -> None:
    # vllm#754 as posted: IPython frames without their header, the final line wrapped in
    # Markdown's ** by the reporter.
    report = _report(RULES / "env" / "module-not-found" / "not-installed.log")
    assert _classes(report)[0] == "missing_dependency"
    assert report.first_failure is not None
    assert report.first_failure.text.startswith("ImportError: Ray is not installed.")


def test_a_duplicate_rank_is_the_rank_processes_state_not_their_launchers_prefix(
    tmp_path: Path,
) -> None:
    # NeMo#5819 as posted: srun's task prefixes "0: " and "1: " name two nodes, each of which
    # numbered its processes 1-3. One node's lines alone (three processes under one prefix,
    # each a different rank) are a healthy start; both nodes' are the duplicate.
    both = RULES / "distributed" / "duplicate-global-rank" / "srun-per-node.log"
    assert _classes(_report(both))[0] == "env_misconfig"
    one_node = tmp_path / "node0.log"
    one_node.write_text(
        "".join(line for line in both.read_text().splitlines(True) if line.startswith("0: "))
    )
    report = _report(one_node)
    assert "duplicate-global-rank" not in [c.rule_id for c in report.causes]


def test_torch_2_1s_capacty_spelling_still_gives_the_free_memory() -> None:
    # hiyouga/LLaMA-Factory#1936: torch 2.1 printed "has a total capacty of".
    report = _report(CORPUS / "tune" / "hiyouga-llamafactory-1936")
    assert report.primary is not None and report.primary.rule_id == "cuda-oom"
    assert report.primary.match.fields.get("free") == "93.81 MiB"
    assert "(with 93.81 MiB free)" in report.primary.remediation
