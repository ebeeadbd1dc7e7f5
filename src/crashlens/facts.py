"""Environment facts the logs state about the run: versions, hardware, world size, settings.

Each extractor is a literal trigger plus an anchored regex; the parser hands a line to
:func:`extract` only when it contains a trigger, so facts cost nothing on the fast path's quiet
lines. Every regex is linear: no nested quantifiers, bounded alternatives. The keys are stable
(documented in docs/rules.md, "Environment facts") because rules name them in ``when:``
conditions and remediation placeholders.

:func:`derived` computes a few values remediation texts need (half the batch size, twice the
accumulation) from the facts, only when the inputs are plain integers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import regex

from crashlens import lazyre
from crashlens.model import Fact

#: A dotted version as printed by pip, collect_env or a banner (``2.1.2+cu121``, ``0.12.6``).
_V = r"\d+(?:\.\d+){1,3}(?:(?:[+\-]|\.?[a-z])[\w.+\-]{0,40})?"
#: An integer that may be printed with thousands separators (transformers formats ``{:,}``).
_N = r"\d{1,3}(?:,\d{3})+|\d+"

#: Python packages whose version is a fact (pip name -> fact key).
PACKAGES: dict[str, str] = {
    "torch": "torch",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "deepspeed": "deepspeed",
    "datasets": "datasets",
    "nvidia-nccl-cu11": "nccl",
    "nvidia-nccl-cu12": "nccl",
    "nvidia-cudnn-cu11": "cudnn",
    "nvidia-cudnn-cu12": "cudnn",
}


def _package_extractors() -> list[tuple[str, str]]:
    out = []
    for name, key in PACKAGES.items():
        esc = regex.escape(name)
        # `pip freeze` / `pip list --format=freeze` (and collect_env's "[pip3] torch==2.1.2")
        out.append((f"{name}==", rf"^(?:\[pip3?\] )?{esc}==(?P<{key}>{_V})\s*$"))
        # `pip list` columns: name padded with spaces, then the version (pip utils/misc.py
        # tabulate: " ".join(map(str.ljust, row, sizes)))
        out.append((f"{name} ", rf"^{esc} +(?P<{key}>{_V})(?: +\S+)?\s*$"))
    return out


#: (trigger literal, regex with named groups -> fact keys). Sources are named per entry.
EXTRACTORS: tuple[tuple[str, str], ...] = (
    # torch/utils/collect_env.py env_info_fmt
    ("PyTorch version: ", rf"^PyTorch version: (?P<torch>{_V})\s*$"),
    ("CUDA used to build PyTorch: ", r"^CUDA used to build PyTorch: (?P<cuda>\d+\.\d+)\s*$"),
    ("CUDA runtime version: ", r"^CUDA runtime version: (?P<cuda_runtime>\d+\.\d+(?:\.\d+)?)"),
    ("Nvidia driver version: ", r"^Nvidia driver version: (?P<driver>\d+(?:\.\d+){1,2})\s*$"),
    ("cuDNN version: ", r"^cuDNN version: (?:/\S*/libcudnn\.so\.)?(?P<cudnn>\d+\.\d+\.\d+)\s*$"),
    # collect_env "cuDNN version: Probably one of the following:" then one path per line
    ("/libcudnn.so.", r"^/\S*/libcudnn\.so\.(?P<cudnn>\d+\.\d+\.\d+)\s*$"),
    # collect_env "GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB" (UUIDs removed),
    # and `nvidia-smi -L`: "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)"
    (
        "GPU 0: ",
        r"^(?:GPU models and configuration: )?GPU 0: (?P<gpu_model>[^()\n]{1,80}?)"
        r"(?: \(UUID: [^)\n]{0,80}\))?\s*$",
    ),
    # collect_env "[conda] pytorch  2.1.2  py3.10_cuda12.1_cudnn8.9.2_0  pytorch"
    ("[conda] pytorch ", rf"^\[conda\] pytorch +(?P<torch>{_V})(?: |$)"),
    # NCCL src/init.cc "NCCL version %s" (INFO) and torch's "..., NCCL version <v>" in errors
    ("NCCL version ", r"NCCL (?:INFO )?(?:NCCL )?version (?P<nccl>\d+\.\d+\.\d+)"),
    # DeepSpeed launcher echoes NCCL_* env: "[launch.py:96:main] 0 NCCL_VERSION=2.11.4-1"
    ("NCCL_VERSION=", r"(?:^|\s)NCCL_VERSION=(?P<nccl>\d+\.\d+\.\d+)"),
    # nvidia-smi banner: "| NVIDIA-SMI 535.54.03  Driver Version: 535.54.03  CUDA Version: 12.2 |"
    (
        "Driver Version: ",
        r"Driver Version: (?P<driver>\d+(?:\.\d+){1,2}) +CUDA Version: (?P<driver_cuda>\d+\.\d+)",
    ),
    # nvidia-smi GPU row: "|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:10:1C.0 Off |"
    (
        "|   0  ",
        r"^\|   0  (?P<gpu_model>[A-Za-z][^|\n]{0,60}?) +(?:On|Off) +\| +[0-9A-Fa-f]{8}:",
    ),
    # nvidia-smi memory cell: "| N/A   64C    P0   358W / 400W |  54906MiB / 81920MiB |"
    ("MiB / ", r"^\| [^|\n]{0,60}\| +\d+MiB / +(?P<gpu_memory>\d+MiB) +\|"),
    # c10/cuda/CUDACachingAllocator.cpp OOM text, torch >= 2.1 and the older form
    (
        "has a total capacity of ",
        r"GPU \d+ has a total capacity of (?P<gpu_memory>[\d.]+ [KMGT]iB)",
    ),
    ("total capacity; ", r"\(GPU \d+; (?P<gpu_memory>[\d.]+ [KMGT]iB) total capacity; "),
    # transformers commands/env.py: "- `transformers` version: 4.36.2",
    # "- PyTorch version (GPU?): 2.1.2+cu121 (True)", "- Accelerate version: 0.25.0"
    ("- `transformers` version: ", rf"^- `transformers` version: (?P<transformers>{_V})\s*$"),
    ("- PyTorch version (GPU?): ", rf"^- PyTorch version \(GPU\?\): (?P<torch>{_V}) \("),
    ("- Accelerate version: ", rf"^- Accelerate version: (?P<accelerate>{_V})\s*$"),
    # accelerate commands/env.py: "- `Accelerate` version: 0.25.0"
    ("- `Accelerate` version: ", rf"^- `Accelerate` version: (?P<accelerate>{_V})\s*$"),
    # deepspeed/__init__.py initialize(): "DeepSpeed info: version=0.14.0, git-hash=..."
    ("DeepSpeed info: version=", rf"DeepSpeed info: version=(?P<deepspeed>{_V}), git-hash="),
    # deepspeed/launcher/launch.py: logger.info(f"dist_world_size={dist_world_size}")
    ("dist_world_size=", r"(?:^|\] )dist_world_size=(?P<world_size>\d+)\s*$"),
    # accelerate state.py PartialState.__repr__: "Num processes: 8", "Mixed precision type: bf16"
    ("Num processes: ", r"^Num processes: (?P<world_size>\d+)\s*$"),
    ("Mixed precision type: ", r"^Mixed precision type: (?P<precision>bf16|fp16|fp8)\s*$"),
    # NCCL init.cc "comm 0x... rank 0 nranks 8 cudaDev 0 ... - Init COMPLETE"
    (" nranks ", r"\bcomm 0x[0-9a-f]+ rank \d+ nranks (?P<world_size>\d+) cudaDev "),
    # torchelastic agent "Rendezvous complete ... Result:" block, one key per line
    ("global_world_sizes=[", r"^\s*global_world_sizes=\[(?P<world_size>\d+)[,\]]"),
    # env dumps: "WORLD_SIZE=8" (exported variables, `env` output, launcher echoes)
    ("WORLD_SIZE=", r"(?:^|[\s'\"])WORLD_SIZE=['\"]?(?P<world_size>\d+)['\"]?(?:\s|,|$)"),
    # transformers Trainer._inner_training_loop banner ("***** Running training *****")
    (
        "  Instantaneous batch size per device = ",
        rf"(?:^|\s)Instantaneous batch size per device = (?P<per_device_train_batch_size>{_N})\s*$",
    ),
    (
        "  Gradient Accumulation steps = ",
        rf"(?:^|\s)Gradient Accumulation steps = (?P<gradient_accumulation_steps>{_N})\s*$",
    ),
    # TrainingArguments.__str__: one "name=value," per line; argparse Namespace(...) dumps
    (
        "per_device_train_batch_size=",
        r"(?:^|[(,\s])per_device_train_batch_size=(?P<per_device_train_batch_size>\d+)(?:[,)]|\s*$)",
    ),
    (
        "gradient_accumulation_steps=",
        r"(?:^|[(,\s])gradient_accumulation_steps=(?P<gradient_accumulation_steps>\d+)(?:[,)]|\s*$)",
    ),
    (
        "dataloader_num_workers=",
        r"(?:^|[(,\s])dataloader_num_workers=(?P<num_workers>\d+)(?:[,)]|\s*$)",
    ),
    ("num_workers=", r"(?:^|[(,\s])num_workers=(?P<num_workers>\d+)(?:[,)]|\s*$)"),
    ("num_proc=", r"(?:^|[(,\s])num_proc=(?P<num_proc>\d+)(?:[,)]|\s*$)"),
    ("max_seq_length=", r"(?:^|[(,\s])max_seq_length=(?P<max_seq_length>\d+)(?:[,)]|\s*$)"),
    ("bf16=True", r"(?:^|[(,\s])(?P<precision>bf16)=True(?:[,)]|\s*$)"),
    ("fp16=True", r"(?:^|[(,\s])(?P<precision>fp16)=True(?:[,)]|\s*$)"),
    # datasets arrow_dataset.py map desc: "Map (num_proc=8):  45%|..."
    (" (num_proc=", r"^[\w ]{1,80} \(num_proc=(?P<num_proc>\d+)\)"),
    # torch/utils/data/dataloader.py _create_warning_msg
    (
        "This DataLoader will create ",
        r"This DataLoader will create (?P<num_workers>\d+) worker processes in total\.",
    ),
    # DeepSpeedConfig.print: "  {arg} {dots} {value}" with dots = "." * (29 - len(arg))
    (
        "train_micro_batch_size_per_gpu ",
        r"(?:^|\s)train_micro_batch_size_per_gpu \.{0,29} ?"
        r"(?P<per_device_train_batch_size>\d+)\s*$",
    ),
    (
        "gradient_accumulation_steps .",
        r"(?:^|\s)gradient_accumulation_steps \.{1,29} (?P<gradient_accumulation_steps>\d+)\s*$",
    ),
    ("bfloat16_enabled .", r"(?:^|\s)(?P<precision>bf)loat16_enabled \.{1,29} True\s*$"),
    ("fp16_enabled .", r"(?:^|\s)(?P<precision>fp16)_enabled \.{1,29} True\s*$"),
    *_package_extractors(),
)


@functools.cache
def _compiled() -> tuple[tuple[str, Any], ...]:
    """The extractors, each compiled on the first line that holds its trigger (not at
    import, nor all at once)."""
    return tuple((trigger, lazyre.compile_regex(pattern)) for trigger, pattern in EXTRACTORS)


TRIGGERS: tuple[str, ...] = tuple(dict.fromkeys(trigger for trigger, _ in EXTRACTORS))
#: Values normalised after extraction (DeepSpeed's ``bfloat16_enabled`` -> ``bf16``).
_NORMALISE = {("precision", "bf"): "bf16"}


def extract(text: str) -> dict[str, str]:
    """Facts stated by one log line (empty when none); the first extractor to state a key wins."""
    out: dict[str, str] = {}
    for trigger, pattern in _compiled():
        if trigger in text:
            m = pattern.search(text)
            if m:
                for key, value in m.groupdict().items():
                    if value and key not in out:
                        value = value.replace(",", "") if value[:1].isdigit() else value
                        out[key] = _NORMALISE.get((key, value), value)
    return out


#: Facts whose values are versions (compared with :func:`version_tuple`).
VERSION_KEYS = frozenset(
    {"torch", "cuda", "cuda_runtime", "driver_cuda", "cudnn", "nccl", "driver", *PACKAGES.values()}
)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or len(text) > 9:
        return None
    return int(text)


def derived(values: Mapping[str, str]) -> dict[str, str]:
    """Values remediation texts may use beyond the facts themselves.

    Computed only when their inputs are plain non-negative integers (a value joined from
    several hosts, ``"8 | 16"``, is not), so a placeholder is either right or left unknown:

    - ``half_batch``: ``per_device_train_batch_size // 2`` (at least 1);
    - ``double_accum``: ``gradient_accumulation_steps * 2``;
    - ``global_batch``: batch x accumulation x ``world_size`` (when all three are known);
    - ``half_workers``: ``num_workers // 2``; ``half_num_proc``: ``num_proc // 2`` (at least 1).
    """
    out: dict[str, str] = {}
    batch = _int(values.get("per_device_train_batch_size"))
    accum = _int(values.get("gradient_accumulation_steps"))
    world = _int(values.get("world_size"))
    if batch is not None:
        out["half_batch"] = str(max(1, batch // 2))
    if accum is not None:
        out["double_accum"] = str(accum * 2)
    if batch is not None and accum is not None and world is not None:
        out["global_batch"] = str(batch * accum * world)
    workers = _int(values.get("num_workers"))
    if workers is not None:
        out["half_workers"] = str(workers // 2)
    proc = _int(values.get("num_proc"))
    if proc is not None:
        out["half_num_proc"] = str(max(1, proc // 2))
    return out


def environment_of(facts: Iterable[Fact]) -> dict[str, str]:
    """One value per fact key: the most common; differing values joined with ``" | "``.

    The same summary as ``Report.environment``, for stages that only have the facts.
    """
    values: dict[str, dict[str, int]] = {}
    for f in facts:
        counts = values.setdefault(f.key, {})
        counts[f.value] = counts.get(f.value, 0) + 1
    return {
        key: " | ".join(sorted(counts, key=lambda v: (-counts[v], v)))
        for key, counts in sorted(values.items())
    }


def placeholder_values(environment: Mapping[str, str]) -> dict[str, str]:
    """The facts plus :func:`derived` values, as remediation placeholders (facts win)."""
    return {**derived(environment), **environment}


def version_tuple(value: str) -> tuple[int, ...] | None:
    """``"2.1.2+cu121"`` -> ``(2, 1, 2)``; local suffixes and pre-release tags are ignored.

    Returns None when the value does not start with a dotted integer.
    """
    m = _VERSION_PREFIX.match(value.strip())
    if m is None:
        return None
    return tuple(int(part) for part in m.group(0).split("."))


_VERSION_PREFIX = lazyre.compile_regex(r"\d{1,9}(?:\.\d{1,9}){0,5}")
