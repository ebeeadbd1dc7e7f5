"""Failure signatures: what differs between occurrences of one failure is normalised away,
what tells failures apart is kept, and the key is a documented function of its parts."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from crashlens import analyze
from crashlens.signature import normalise

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize(
    ("message", "normalised"),
    [
        (
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
            "CUDA out of memory. Tried to allocate <n> GiB. GPU <n> has a total capacity of <n> GiB",
        ),
        ("[rank3]: KeyError: 'labels'", "KeyError: 'labels'"),
        (
            "[Errno 2] No such file or directory: '/data/run7/shard-00017.jsonl'",
            "[Errno <n>] No such file or directory: '<path>'",
        ),
        (
            "No such file or directory: 'checkpoints/run7/step_12000.pt'",
            "No such file or directory: '<path>'",
        ),
        (
            "connect() to 10.0.3.7:29500 failed: Connection refused",
            "connect() to <ip> failed: Connection refused",
        ),
        ("segfault at 7f3a2b1c0000 ip 0x00007f3a2b1c", "segfault at <hex> ip <hex>"),
        ("NCCL WARN on gpu-node-17: peer lost", "NCCL WARN on <host>: peer lost"),
        (
            "shm file </torch_3230_2255679089_0>: No space left",
            "shm file </torch_<n>_<n>_<n>>: No space left",
        ),
        (
            "2024-05-01 10:00:03,120 INFO train: step 10 loss = inf",
            "<time> INFO train: step <n> loss = inf",
        ),
        ("run 1f0e9d2b-7a40-4c1f-9d2b-7a404c1f9d2b failed", "run <id> failed"),
        (
            "Timeout(ms)=1800000) ran for 1800089 milliseconds",
            "Timeout(ms)=<n>) ran for <n> milliseconds",
        ),
    ],
)
def test_what_differs_between_occurrences_is_normalised(message: str, normalised: str) -> None:
    assert normalise(message) == normalised


def test_names_that_tell_failures_apart_are_kept() -> None:
    assert normalise("KeyError: 'input_ids'") != normalise("KeyError: 'labels'")
    assert "fp16" in normalise("ValueError: Attempting to unscale FP16 gradients. fp16")
    assert "ALLREDUCE" in normalise("WorkNCCL(SeqNum=21, OpType=ALLREDUCE)")


def test_the_key_is_a_documented_function_of_its_parts() -> None:
    report = analyze([ROOT / "fixtures/captured/user_code_error/python"])
    sig = report.signature(report.causes[0])
    assert (sig.cls, sig.exception, sig.message, sig.frame) == (
        "user_code_error",
        "KeyError",
        "'input_ids'",
        "train.py:<listcomp>",
    )
    parts = "\0".join((sig.cls, sig.exception, sig.message, sig.frame))
    assert sig.key == hashlib.sha256(parts.encode()).hexdigest()[:16]
    assert sig.text == "user_code_error · KeyError: 'input_ids' · at train.py:<listcomp>"


def test_a_dataloader_workers_exception_is_signed_by_the_original_not_the_wrapper() -> None:
    report = analyze([ROOT / "fixtures/captured/shm_exhausted"])
    sig = report.signature(report.causes[0])
    assert sig.exception == "RuntimeError"
    assert sig.message.startswith("unable to allocate shared memory(shm)")
    assert "DataLoader worker process" not in sig.message


def test_a_cut_traceback_says_only_that_it_was_cut() -> None:
    log = ROOT / "rules/process/traceback-cut-off/positive.log"
    report = analyze([log])
    sig = report.signature(report.causes[0])
    assert (sig.exception, sig.message, sig.frame) == ("", "the log ends inside a traceback", "")
