"""Environment facts the logs state about the run: versions, hardware, world size, settings.

Each extractor is a literal trigger plus a regex; the parser hands a line to :func:`extract`
only when it contains a trigger, so facts cost nothing on the fast path's quiet lines.
"""

from __future__ import annotations

import regex

#: (trigger literal, regex with named groups -> fact names).
EXTRACTORS: tuple[tuple[str, str], ...] = (
    # torch/utils/collect_env.py
    ("PyTorch version: ", r"^PyTorch version: (?P<torch>\S+)"),
    ("CUDA used to build PyTorch: ", r"^CUDA used to build PyTorch: (?P<cuda>[\d.]+)"),
    # NCCL src/init.cc: "NCCL version %s" (INFO) and torch's "NCCL version <v>" in errors
    ("NCCL version ", r"NCCL (?:INFO )?(?:NCCL )?version (?P<nccl>\d+\.\d+\.\d+)"),
)
_COMPILED = tuple((trigger, regex.compile(pattern)) for trigger, pattern in EXTRACTORS)
TRIGGERS: tuple[str, ...] = tuple(dict.fromkeys(trigger for trigger, _ in EXTRACTORS))


def extract(text: str) -> dict[str, str]:
    """Facts stated by one log line (empty when none)."""
    out: dict[str, str] = {}
    for trigger, pattern in _COMPILED:
        if trigger in text:
            m = pattern.search(text)
            if m:
                out.update({k: v for k, v in m.groupdict().items() if v})
    return out
