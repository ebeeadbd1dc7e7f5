"""What a paste does to a log (an indented block, CRLF, trailing blanks, a coloured exception
line) never changes the diagnosis of a real corpus case (``benchmarks/metamorphic.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import benchmark
from crashlens.rulebase import load_rules

accuracy = benchmark("accuracy")
metamorphic = benchmark("metamorphic")
RULES = load_rules()
RIGHT = metamorphic.diagnosed_right(accuracy.load_cases(accuracy.CORPUS, ("tune",)), RULES)


@pytest.mark.parametrize(
    "transform", ["indent2", "indent4", "crlf", "trailing_blanks", "coloured_exception"]
)
def test_a_paste_keeps_the_diagnosis(transform: str, tmp_path: Path) -> None:
    assert len(RIGHT) > 300
    # om-ai-lab/VLM-R1#257 is a 116-column terminal's copy: blanks after every line make each
    # cut line end like one padded to the width, which is not a cut (unwrap._goes_on)
    known = {"trailing_blanks": ["om-ai-lab-vlm-r1-257"]}.get(transform, [])
    assert metamorphic.changed(RIGHT, transform, RULES, tmp_path) == known


@pytest.mark.parametrize("transform", ["jenkins_stamped", "stamped"])
def test_a_tools_stamp_on_every_line_keeps_the_diagnosis(transform: str, tmp_path: Path) -> None:
    # Jenkins' Timestamper ("[<ISO time>] ") and kubectl's RFC 3339 stamp before every line (18
    # of 506 right tune cases changed before a stamp was read), also over a log that already
    # carries a tool's stamp on every line (a stamp over a stamp: two cases changed before
    # stacked stamps were read). A terminal's hard wrap under a stamp is not read as a wrap
    # (a stamped piece is a record of its own): om-ai-lab/VLM-R1#257.
    changed = metamorphic.changed(RIGHT, transform, RULES, tmp_path)
    assert set(changed) <= {"om-ai-lab-vlm-r1-257"}


def test_the_rewrite_really_rewrites(tmp_path: Path) -> None:
    case = next(c for c in RIGHT if c.cause == "cuda_oom")
    copy = metamorphic.rewrite(case.path, tmp_path / "x", "indent4")
    lines = [x for p in copy.iterdir() for x in p.read_text().split("\n") if x]
    assert lines and all(x.startswith("    ") for x in lines)


def test_doubled_line_breaks_keep_a_message_whole(tmp_path: Path) -> None:
    # bfs18/e2_tts#21: the wrapped error's message goes on after a line break; doubled, a blank
    # line would end it there
    (case,) = [c for c in RIGHT if c.id == "bfs18-e2_tts-21"]
    assert metamorphic.changed([case], "double_spaced", RULES, tmp_path) == []


def test_a_terminals_hard_wrap_mostly_keeps_the_diagnosis(tmp_path: Path) -> None:
    # a paste a terminal cut at 100 columns: read with its cut lines joined again (45 of the
    # right tune cases changed before; 27 of 645 were pastes too short to show the width, 18
    # of 746 once an exception's message is also read with its cut lines joined)
    changed = metamorphic.changed(RIGHT, "wrapped", RULES, tmp_path)
    assert len(changed) <= 0.03 * len(RIGHT), changed


def test_a_paste_that_flattened_every_traceback_keeps_the_diagnosis(tmp_path: Path) -> None:
    # each traceback on one line, its line breaks turned into blanks (32 of the right tune
    # cases changed before the flattened reading, none after)
    changed = metamorphic.changed(RIGHT, "flattened", RULES, tmp_path)
    assert len(changed) <= 0.01 * len(RIGHT), changed


@pytest.mark.parametrize("name", ["quoted", "tabbed"])
def test_a_quoted_or_tab_indented_paste_keeps_the_diagnosis(name: str, tmp_path: Path) -> None:
    # every line behind "> " or a tab (about 23 % of the right tune cases changed before the
    # margin took quotes and tabs)
    changed = metamorphic.changed(RIGHT, name, RULES, tmp_path)
    assert len(changed) <= 0.01 * len(RIGHT), changed


@pytest.mark.parametrize("name", ["quoted", "tabbed"])
def test_a_test_harness_tee_keeps_its_diagnosis_under_a_quote(name: str, tmp_path: Path) -> None:
    # huggingface/accelerate#934: `accelerate test` prints its child's lines behind "stdout: " /
    # "stderr: "; read as text, a quoted copy's "stderr:   File ..." was an exception's line
    (case,) = [c for c in RIGHT if c.id == "huggingface-accelerate-934"]
    assert metamorphic.changed([case], name, RULES, tmp_path) == []


def test_a_paste_that_doubled_every_line_break_keeps_the_diagnosis(tmp_path: Path) -> None:
    # a web page's copy: a blank line after every line, three where the log had one (9 of 976
    # right tune cases changed before a run of three read as doubled). Left: two 2-line
    # pastes (too few lines to tell), a terminal's hard wrap (om-ai-lab/VLM-R1#257) and a cut
    # IPython traceback whose header the copy split (OpenGVLab/InternVideo#102)
    changed = metamorphic.changed(RIGHT, "double_spaced", RULES, tmp_path)
    assert set(changed) <= {
        "huggingface-setfit-625",
        "laion-ai-clap-113",
        "om-ai-lab-vlm-r1-257",
        "opengvlab-internvideo-102",
    }


def test_a_quoted_short_paste_keeps_its_exception_line(tmp_path: Path) -> None:
    # a reply's "> " before every line of a short traceback: the exception's line after the
    # longest source line read as the rest of a wrapped line (6 of 976 right tune cases)
    cases = [c for c in RIGHT if c.id in ("facebookresearch-moco-48", "wongkinyiu-yolov7-1952")]
    assert len(cases) == 2
    assert metamorphic.changed(cases, "quoted", RULES, tmp_path) == []
