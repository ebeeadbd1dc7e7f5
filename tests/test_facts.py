"""Environment facts: each extractor on lines in the real upstream format, and near misses."""

from __future__ import annotations

import pytest

from crashlens import facts

# (line as printed by the upstream tool, expected facts). Formats: torch/utils/collect_env.py,
# pip freeze / pip list, NCCL init.cc, nvidia-smi, transformers/accelerate `env` commands,
# DeepSpeed __init__.py / launch.py / DeepSpeedConfig.print, accelerate PartialState repr,
# torchelastic rendezvous result, HF Trainer banner, TrainingArguments.__str__, datasets map
# desc, torch DataLoader worker warning, CUDACachingAllocator OOM message.
POSITIVE = [
    ("PyTorch version: 2.1.2+cu121", {"torch": "2.1.2+cu121"}),
    ("CUDA used to build PyTorch: 12.1", {"cuda": "12.1"}),
    ("CUDA runtime version: 12.1.105", {"cuda_runtime": "12.1.105"}),
    ("Nvidia driver version: 535.104.05", {"driver": "535.104.05"}),
    ("cuDNN version: 8.9.2", {"cudnn": "8.9.2"}),
    ("/usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.2", {"cudnn": "8.9.2"}),
    (
        "GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB",
        {"gpu_model": "NVIDIA A100-SXM4-80GB"},
    ),
    (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-3a1e9f2b-6c7d-4e91-9a02-1f8b7c0d5e11)",
        {"gpu_model": "NVIDIA A100-SXM4-80GB"},
    ),
    ("[pip3] torch==2.1.2", {"torch": "2.1.2"}),
    ("[pip3] nvidia-nccl-cu12==2.18.1", {"nccl": "2.18.1"}),
    (
        "[conda] pytorch                   2.1.2           py3.10_cuda12.1_cudnn8.9.2_0    pytorch",
        {"torch": "2.1.2"},
    ),
    ("transformers==4.36.2", {"transformers": "4.36.2"}),
    ("accelerate==0.25.0", {"accelerate": "0.25.0"}),
    ("datasets==2.16.1", {"datasets": "2.16.1"}),
    ("torch                    2.1.2+cu121", {"torch": "2.1.2+cu121"}),
    ("deepspeed                0.12.6", {"deepspeed": "0.12.6"}),
    ("node-01:1234:1234 [0] NCCL INFO NCCL version 2.18.1+cuda12.1", {"nccl": "2.18.1"}),
    ("NCCL version 2.21.5+cuda12.4", {"nccl": "2.21.5"}),
    (
        "[2022-07-26 22:43:05,228] [INFO] [launch.py:96:main] 1 NCCL_VERSION=2.11.4-1",
        {"nccl": "2.11.4"},
    ),
    (
        "| NVIDIA-SMI 535.54.03    Driver Version: 535.54.03    CUDA Version: 12.2     |",
        {"driver": "535.54.03", "driver_cuda": "12.2"},
    ),
    (
        "|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:10:1C.0 Off |                    0 |",
        {"gpu_model": "NVIDIA A100-SXM4-80GB"},
    ),
    (
        "|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:81:00.0 Off |                    0 |",
        {"gpu_model": "NVIDIA A100-SXM4-80GB"},
    ),
    (
        "| N/A   64C    P0             358W / 400W |  54906MiB / 81920MiB |    100%      Default |",
        {"gpu_memory": "81920MiB"},
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 3 has a "
        "total capacity of 79.15 GiB of which 1.27 GiB is free.",
        {"gpu_memory": "79.15 GiB"},
    ),
    (
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 39.59 GiB total "
        "capacity; 35.10 GiB already allocated; 1.27 GiB free; 36.80 GiB reserved)",
        {"gpu_memory": "39.59 GiB"},
    ),
    ("- `transformers` version: 4.36.2", {"transformers": "4.36.2"}),
    ("- PyTorch version (GPU?): 2.1.2+cu121 (True)", {"torch": "2.1.2+cu121"}),
    ("- Accelerate version: 0.25.0", {"accelerate": "0.25.0"}),
    ("- `Accelerate` version: 0.25.0", {"accelerate": "0.25.0"}),
    (
        "[2024-07-10 16:18:01,485] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: "
        "version=0.14.0, git-hash=unknown, git-branch=unknown",
        {"deepspeed": "0.14.0"},
    ),
    (
        "[2024-09-15 00:13:10,097] [INFO] [launch.py:164:main] dist_world_size=4",
        {"world_size": "4"},
    ),
    ("Num processes: 8", {"world_size": "8"}),
    ("Mixed precision type: fp16", {"precision": "fp16"}),
    (
        "node-01:1:1 [0] NCCL INFO comm 0x55d0c8a0 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 7000 "
        "commId 0x1 - Init COMPLETE",
        {"world_size": "8"},
    ),
    ("  global_world_sizes=[16, 16, 16, 16]", {"world_size": "16"}),
    ("WORLD_SIZE=8", {"world_size": "8"}),
    (
        "[INFO|trainer.py:1747] 2024-01-01 00:00:00,000 >>   Instantaneous batch size per device = 8",
        {"per_device_train_batch_size": "8"},
    ),
    ("  Instantaneous batch size per device = 1,024", {"per_device_train_batch_size": "1024"}),
    ("  Gradient Accumulation steps = 4", {"gradient_accumulation_steps": "4"}),
    ("per_device_train_batch_size=8,", {"per_device_train_batch_size": "8"}),
    ("gradient_accumulation_steps=4,", {"gradient_accumulation_steps": "4"}),
    ("dataloader_num_workers=4,", {"num_workers": "4"}),
    ("bf16=True,", {"precision": "bf16"}),
    ("max_seq_length=2048,", {"max_seq_length": "2048"}),
    (
        "Namespace(batch_size=8, num_workers=16, fp16=True)",
        {"num_workers": "16", "precision": "fp16"},
    ),
    (
        "Map (num_proc=64):  45%|####      | 4500/10000 [00:10<00:12, 450.00 examples/s]",
        {"num_proc": "64"},
    ),
    (
        "UserWarning: This DataLoader will create 16 worker processes in total. Our suggested max "
        "number of worker in current system is 8, which is smaller than what this DataLoader is "
        "going to create.",
        {"num_workers": "16"},
    ),
    (
        "[config.py:988:print]   train_micro_batch_size_per_gpu  8",
        {"per_device_train_batch_size": "8"},
    ),
    (
        "[config.py:988:print]   gradient_accumulation_steps .. 4",
        {"gradient_accumulation_steps": "4"},
    ),
    ("[config.py:988:print]   bfloat16_enabled ............. True", {"precision": "bf16"}),
    ("[config.py:988:print]   fp16_enabled ................. True", {"precision": "fp16"}),
]

NEAR_MISS = [
    "fp16=False,",
    "[config.py:988:print]   fp16_enabled ................. False",
    "cuDNN version: Probably one of the following:",
    "Could not import torch==2.1.2 from the cache",
    "I installed torch 2.1.2 yesterday and it worked",
    "bf16_full_eval=False,",
    "dataloader_num_workers=None,",
    "model_num_workers=4",
    "GPU 0: process 1234 uses 3 GiB (UUID: x) extra text (paren)",
    "  Num examples = 1,000,000",
    "PyTorch version: N/A",
    "DeepSpeed info: version=unknown",
]


@pytest.mark.parametrize("line,want", POSITIVE, ids=[p[0][:50] for p in POSITIVE])
def test_extractor_reads_real_format(line: str, want: dict[str, str]) -> None:
    assert any(t in line for t in facts.TRIGGERS), "the parser would never offer this line"
    assert facts.extract(line) == want


@pytest.mark.parametrize("line", NEAR_MISS)
def test_near_misses_state_nothing(line: str) -> None:
    assert facts.extract(line) == {}


def test_every_extractor_compiles_and_has_a_literal_trigger() -> None:
    for trigger, pattern in facts.EXTRACTORS:
        assert trigger and pattern
    assert len(facts.TRIGGERS) == len(set(facts.TRIGGERS))


def test_derived_values_only_from_integers() -> None:
    got = facts.derived(
        {
            "per_device_train_batch_size": "8",
            "gradient_accumulation_steps": "4",
            "world_size": "16",
            "num_workers": "16",
            "num_proc": "1",
        }
    )
    assert got == {
        "half_batch": "4",
        "double_accum": "8",
        "global_batch": "512",
        "half_workers": "8",
        "half_num_proc": "1",
    }
    assert facts.derived({"per_device_train_batch_size": "1"})["half_batch"] == "1"
    # joined values from several hosts, non-integers and absurd sizes give nothing
    assert facts.derived({"per_device_train_batch_size": "8 | 16"}) == {}
    assert facts.derived({"gradient_accumulation_steps": "auto", "num_workers": "-1"}) == {}
    assert facts.derived({"per_device_train_batch_size": "9" * 40}) == {}


def test_version_tuple() -> None:
    assert facts.version_tuple("2.1.2+cu121") == (2, 1, 2)
    assert facts.version_tuple("4.36.0.dev0") == (4, 36, 0)
    assert facts.version_tuple("12.1") == (12, 1)
    assert facts.version_tuple("N/A") is None


def test_extract_is_linear_on_hostile_lines() -> None:
    import time

    hostile = [
        "per_device_train_batch_size=" + "9" * 50_000 + "x",
        "| " + "|" * 50_000 + " MiB / ",
        "GPU 0: " + "(" * 50_000,
        "torch " + "1." * 20_000,
        " (num_proc=" + "a " * 30_000,
    ]
    start = time.perf_counter()
    for line in hostile:
        facts.extract(line)
    assert time.perf_counter() - start < 2.0


def test_environment_summary_and_placeholders() -> None:
    from crashlens.model import Fact

    stated = [
        Fact("nccl", "2.18.1", "a.log", 1, "node-01", 0),
        Fact("nccl", "2.19.3", "b.log", 1, "node-02", 4),
        Fact("nccl", "2.18.1", "c.log", 1, "node-03", 8),
        Fact("per_device_train_batch_size", "8", "a.log", 2, "node-01", 0),
    ]
    env = facts.environment_of(stated)
    assert env == {"nccl": "2.18.1 | 2.19.3", "per_device_train_batch_size": "8"}
    values = facts.placeholder_values(env)
    assert values["half_batch"] == "4" and values["nccl"] == "2.18.1 | 2.19.3"
