"""Whose code a frame is, by what its path means; and whose bug an exception is, by its stack.

The paths are the ones real tracebacks print (the corpus, the captures); the end-to-end cases
are real program runs kept under tests/captures/ (``python tests/captures/make.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from crashlens import analyze
from crashlens.model import CUT_TRACEBACK, ExceptionInfo, Frame, chain_origin, exception_origin
from crashlens.provenance import launched_script, provenance
from crashlens.render import render

CAPTURES = Path(__file__).parent / "captures"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # installed packages, wherever the environment lives
        ("/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", "library"),
        ("/usr/local/lib/python3.8/dist-packages/transformers/trainer.py", "library"),
        ("/home/u/.local/lib/python3.9/site-packages/deepspeed/runtime/engine.py", "library"),
        ("C:\\Users\\u\\venv\\Lib\\site-packages\\torch\\serialization.py", "library"),
        ("/opt/conda/pkgs/pytorch-2.1.0-py3.10_cuda12.1_cudnn8.9.2_0/lib/x.py", "library"),
        ("/home/u/.eggs/apex-0.1-py3.8.egg/apex/amp/handle.py", "library"),
        # a known package's files by a relative path, as some launchers and builds print them
        ("torch/distributed/distributed_c10d.py", "library"),
        ("./torch/nn/parallel/distributed.py", "library"),
        # editable checkouts of a known package
        ("/home/u/code/transformers/src/transformers/trainer.py", "library"),
        ("/workspace/DeepSpeed/deepspeed/runtime/zero/stage3.py", "library"),
        ("/opt/pytorch/torch/utils/data/dataloader.py", "library"),
        # a checkout named as the project spells itself, not as its package is imported
        ("/home/user/LLaMA-Factory/src/llamafactory/hparams/parser.py", "library"),
        ("/home/u/unsloth-zoo/unsloth_zoo/compiler.py", "library"),
        # Cython and native sources
        ("pyarrow/error.pxi", "library"),
        ("/home/u/src/tokenizers/bindings.pyx", "library"),
        # the interpreter's own code
        ("/usr/lib/python3.11/json/encoder.py", "stdlib"),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/zipfile.py", "stdlib"),
        ("<frozen os>", "stdlib"),
        ("C:\\Python311\\Lib\\os.py", "stdlib"),
        # a conda environment on Windows keeps its stdlib in <env>\\Lib (as posted in
        # THUDM/ChatGLM-6B#1196: corpus case tune/zai-org-chatglm-6b-1196)
        ("D:\\Anaconda3\\envs\\chatglm6b\\lib\\json\\decoder.py", "stdlib"),
        ("C:\\Users\\u\\miniconda3\\Lib\\threading.py", "stdlib"),
        # a project's own lib folder is the user's
        ("C:\\Users\\u\\proj\\lib\\utils.py", "user"),
        ("D:\\work\\lib\\dataset\\coco.py", "user"),
        # console scripts of installed packages
        ("/usr/local/bin/torchrun", "library"),
        # the user's code, including checkouts that merely mention a package in their name
        ("/home/user/proj/train.py", "user"),
        ("train.py", "user"),
        ("/workspace/llm-torch-experiments/train_ddp.py", "user"),
        ("/home/u/transformers-examples/run_clm.py", "user"),
        ("/usr/local/bin/train.py", "user"),
        ("<stdin>", "user"),
        # code nobody wrote to a file: never "your code"
        ("<string>", "other"),
    ],
)
def test_provenance_comes_from_what_the_path_means(path: str, expected: str) -> None:
    assert provenance(path) == expected


_SITE = "/venv/lib/python3.11/site-packages"
CORPUS = Path(__file__).parents[1] / "corpus"


def _f(path: str, func: str = "f", user: bool | None = None) -> Frame:
    return Frame(path, 1, func, provenance(path) == "user" if user is None else user)


def test_the_launched_script_is_the_outermost_module_frame_not_a_runner() -> None:
    installed = "/venv/lib/python3.11/site-packages/jobs/train.py"
    assert launched_script([_f(installed, "<module>"), _f(installed, "main")]) == installed
    # python -m pkg: runpy started it; a console script: bin/ without .py
    assert launched_script([_f("<frozen runpy>", "_run_module_as_main")]) is None
    assert launched_script([_f("/usr/local/bin/torchrun", "<module>")]) is None
    # python -c: the code on the command line is the user's; multiprocessing's spawn child
    # runs its own bootstrap from a string
    assert launched_script([_f("<string>", "<module>")]) == "<string>"
    spawn = "/usr/lib/python3.11/multiprocessing/spawn.py"
    assert launched_script([_f("<string>", "<module>"), _f(spawn, "spawn_main")]) is None
    assert launched_script([_f("/home/user/train.py", "main")]) is None


@pytest.mark.parametrize(
    ("frames", "origin"),
    [
        ([_f("/home/u/train.py", "<module>")], "user"),
        ([_f("/home/u/train.py", "<module>"), _f("/usr/lib/python3.11/json/encoder.py")], "called"),
        ([_f("/usr/local/bin/torchrun", "<module>"), _f("torch/distributed/run.py")], "library"),
        # a library's module body raising while the user's import ran it: it cannot load here
        ([_f("/home/u/train.py", "<module>"), _f(f"{_SITE}/setfit/args.py", "<module>")], "import"),
        # the user's own module raising at import is theirs; a library function it called is not
        # an import failure
        ([_f("/home/u/train.py", "<module>"), _f("/home/u/utils.py", "<module>")], "user"),
        ([_f("/home/u/train.py", "<module>"), _f(f"{_SITE}/dep/core.py", "run")], "called"),
        ([], "none"),
    ],
)
def test_origin_says_whether_the_users_code_led_to_the_exception(
    frames: list[Frame], origin: str
) -> None:
    assert exception_origin(ExceptionInfo("TypeError", "x", tuple(frames), 1)) == origin


def test_a_chain_is_judged_with_every_stack_it_shows() -> None:
    # A library caught the user's callback's error and raised its own: the user's frame is
    # only in the first exception's stack.
    theirs = ExceptionInfo("KeyError", "'x'", (_f(f"{_SITE}/dep/core.py"), _f("/home/u/cb.py")), 1)
    wrapped = ExceptionInfo("RuntimeError", "callback failed", (_f(f"{_SITE}/dep/core.py"),), 5)
    assert exception_origin(wrapped) == "library"
    assert chain_origin([theirs, wrapped]) == "called"
    # and a library's own error stays the library's
    lib = ExceptionInfo("KeyError", "'x'", (_f(f"{_SITE}/dep/core.py"),), 1)
    assert chain_origin([lib, wrapped]) == "library"
    # a chain the log ends in: the exception before the cut is judged with the cut one's stack
    cut = ExceptionInfo(CUT_TRACEBACK, "the log ends", (_f("/home/u/train.py", "<module>"),), 9)
    assert chain_origin([lib, cut]) == "cut"
    assert chain_origin([lib, cut], 0) == "called"


def test_a_chain_cut_after_its_first_exception_falls_back_to_that_exception() -> None:
    # verbatim thread: detectron2's KeyError for a dataset never registered, then the chain's
    # second traceback (from the user's train.py down) is cut before its exception line
    report = analyze([CORPUS / "tune/facebookresearch-detectron2-1587/console.log"])
    assert report.primary is not None and report.primary.match.rule.cls == "user_code_error"
    assert (
        str(report.primary.user_frame) == "/workspace/code/detectron2_test/train.py:34 in <module>"
    )
    assert "traceback-cut-off" in {c.rule_id for c in report.causes}


@pytest.mark.parametrize(
    ("capture", "cls", "frame"),
    [
        # raised inside the stdlib (json's encoder), called from the user's function
        (
            "stdlib_typeerror",
            "user_code_error",
            "/home/user/proj/stdlib_typeerror.py:3 in save_metrics",
        ),
        # unbounded recursion whose innermost frames are torch.nn.Module's
        ("torch_recursion", "user_code_error", "/home/user/proj/torch_recursion.py:4 in forward"),
        # the job's script lives inside site-packages: still the user's
        (
            "installed_script",
            "user_code_error",
            "/home/user/proj/venv/lib/python3.11/site-packages/jobs/train.py:2 in <listcomp>",
        ),
        # a launcher's variable read by a script started with plain python
        ("environ_keyerror", "env_misconfig", "/home/user/proj/environ_keyerror.py:3 in setup"),
    ],
)
def test_an_exception_the_users_code_led_to_is_theirs(capture: str, cls: str, frame: str) -> None:
    report = analyze([CAPTURES / f"{capture}.log"])
    assert report.primary is not None
    assert report.primary.match.rule.cls == cls
    assert str(report.primary.user_frame) == frame
    assert report.first_failure is not None and str(report.first_failure.frame) == frame


def test_no_users_frame_on_the_stack_is_unknown_and_blames_no_code(tmp_path: Path) -> None:
    # python -m zipfile on a text file: runpy and the stdlib only (a real run's output)
    log = tmp_path / "console.log"
    text = (Path(__file__).parents[1] / "rules/process/uncaught-exception/positive.log").read_text()
    log.write_text("\n".join(x for x in text.splitlines() if not x.startswith("#")) + "\n")
    report = analyze([log])
    assert report.primary is not None and report.primary.match.rule.cls == "unknown"
    assert report.primary.user_frame is None
    assert "in your code" not in render(report, "text", color=False, width=100).lower()


def test_a_log_cut_inside_a_traceback_says_so_and_blames_no_code(tmp_path: Path) -> None:
    # A real run SIGKILLed while printing its traceback.
    fixture = Path(__file__).parents[1] / "rules/process/traceback-cut-off/positive.log"
    log = tmp_path / "train.log"
    log.write_text("".join(x for x in fixture.read_text().splitlines(True) if x[0] != "#"))
    report = analyze([log])
    text = render(report, "text", color=False, width=100)
    assert report.primary is not None and report.primary.rule_id == "traceback-cut-off"
    assert "the log ends inside a traceback" in text.lower()
    assert "IncompleteTraceback" not in text
    assert "in your code" not in text.lower()
    assert report.primary.user_frame is None


def test_a_cause_before_the_cut_wins_over_the_cut(tmp_path: Path) -> None:
    fixture = Path(__file__).parents[1] / "rules/process/traceback-cut-off/positive.log"
    cut = "".join(x for x in fixture.read_text().splitlines(True) if x[0] != "#")
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.23 GiB is free.\n"
    )
    log = tmp_path / "train.log"
    log.write_text(oom + cut)
    report = analyze([log])
    assert report.primary is not None and report.primary.match.rule.cls == "cuda_oom"


@pytest.mark.parametrize(
    ("case", "rule", "line", "rank"),
    [
        # the rank's own watchdog timeout, then its traceback cut inside tqdm (verbatim thread)
        ("validation/huggingface-accelerate-223", "nccl-watchdog-timeout", 1, 2),
        # rank 3's NCCL error, then rank 2's traceback cut before its exception (verbatim thread)
        ("validation/nvidia-nccl-1928", "gloo-peer-closed", 5, 3),
    ],
)
def test_a_cut_falls_back_to_the_evidence_before_it(
    case: str, rule: str, line: int, rank: int
) -> None:
    report = analyze([CORPUS / case / "console.log"])
    assert report.primary is not None and report.primary.rule_id == rule
    assert "traceback-cut-off" in {e.rule_id for e in report.primary.explains}
    first = report.first_failure
    assert first is not None and (first.line, first.rank) == (line, rank)


def test_a_cut_before_every_other_finding_stays_the_first_failure(tmp_path: Path) -> None:
    # rank 0 is killed while printing its traceback; rank 1's watchdog fires half an hour later
    fixture = Path(__file__).parents[1] / "rules/process/traceback-cut-off/positive.log"
    cut = [x for x in fixture.read_text().splitlines(True) if x[0] != "#"]
    (tmp_path / "rank0.log").write_text("2026-05-01 10:00:00,000 - INFO - step 10\n" + "".join(cut))
    # rank 1's watchdog line as ProcessGroupNCCL prints it (fixtures/gpu/xid_illegal_access),
    # half an hour after rank 0's last line
    cascade = FIXTURES / "gpu/xid_illegal_access"
    watchdog = next(
        line
        for f in sorted(cascade.rglob("*.log"))
        for line in f.read_text().splitlines()
        if line.startswith("[rank1]:[E") and "] [Rank 1] Watchdog caught collective" in line
    )
    stamp = watchdog.split()[1]  # the glog time, e.g. 03:24:00.432409297
    (tmp_path / "rank1.log").write_text(
        "2026-05-01 10:00:00,000 - INFO - step 10\n"
        + watchdog.replace("[E501 " + stamp, "[E501 10:30:05.432409297", 1)
        + "\n"
    )
    report = analyze([tmp_path])
    assert report.primary is not None and report.primary.rule_id == "traceback-cut-off"
    assert report.first_failure is not None and report.first_failure.file.endswith("rank0.log")


def test_a_recognised_error_in_a_terminates_message_is_the_cause(tmp_path: Path) -> None:
    # verbatim (its line breaks lost as posted): ProcessGroupNCCL takes the process down, and
    # std::terminate's what() carries the NCCL/IB error
    case = CORPUS / "tune/tatsu-lab-stanford_alpaca-207/console.log"
    report = analyze([case])
    assert report.primary is not None and report.primary.rule_id == "nccl-ib-completion-error"
    # the terminate right after ProcessGroupNCCL announced its teardown is that teardown
    assert "nccl-abort-teardown" in {e.rule_id for e in report.primary.explains}
    assert all(c.rule_id != "cpp-terminate" for c in report.causes)
    # the same text with its line breaks where ProcessGroupNCCL and libstdc++ print them
    text = case.read_text()
    for cut in ("[E ProcessGroupNCCL.cpp:460]", "terminate called", "  what():", "ncclRemoteError:",
                "Last error:", "NET/IB"):  # fmt: skip
        text = text.replace(" " + cut.strip(), "\n" + cut, 1)
    log = tmp_path / "rank3.log"
    log.write_text(text)
    assert len(text.splitlines()) == 7
    report = analyze([log])
    assert report.primary is not None and report.primary.rule_id == "nccl-ib-completion-error"
