"""Ranking helpers: remediation placeholders."""

from __future__ import annotations

from crashlens.rank import fill


def test_fill_drops_asides_with_unknown_values_and_marks_other_unknowns() -> None:
    template = "Halve the batch (from {batch} to {half}) on GPU {gpu}; precision {precision}."
    assert fill(template, {"batch": "8", "half": "4", "gpu": "3", "precision": "bf16"}) == (
        "Halve the batch (from 8 to 4) on GPU 3; precision bf16."
    )
    assert fill(template, {"gpu": "3"}) == "Halve the batch on GPU 3; precision (unknown)."


def test_fill_leaves_malformed_templates_and_plain_parentheses_alone() -> None:
    assert fill("use {medium: Memory} (see docs)", {}) == "use {medium: Memory} (see docs)"
    assert fill("raise the limit (ulimit -n)", {}) == "raise the limit (ulimit -n)"
