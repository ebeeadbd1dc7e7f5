"""A terminal's hard wrap, told from line lengths and undone (crashlens.ingest.unwrap)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashlens import analyze
from crashlens.ingest.unwrap import cut_width, rejoined, unwrap, wrap_width

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "corpus" / "tune"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[:200]


def test_a_paste_cut_at_its_terminals_width_is_told() -> None:
    # axolotl-ai-cloud/axolotl#1813 as posted: a traceback copied from a 99-column terminal
    assert wrap_width(_lines(TUNE / "axolotl-ai-cloud-axolotl-1813" / "console.log")) == 99


@pytest.mark.parametrize(
    "case",
    [
        "deepspeedai-megatron-deepspeed-207",  # one device-side assert per thread, one length
        "huggingface-trl-1995",
        "huggingface-accelerate-1192",  # rich logging: records padded to the terminal's width
        "huggingface-accelerate-2246",  # one NCCL message per rank, then NCCL's own lines
        "hiyouga-llamafactory-6269",  # the watchdog's timeout on each rank
        "ultralytics-yolov5-475",
        "horovod-horovod-3929",  # Open MPI tagged lines
        "huggingface-blog-1270",  # a rich traceback's box
        "zai-org-glm-4-277",
        "udacity-p1_facial_keypoints-6",
    ],
)
def test_lines_that_share_a_length_are_not_a_wrap(case: str) -> None:
    (log,) = (TUNE / case).glob("*.log")
    assert wrap_width(_lines(log)) is None


def test_cut_lines_are_joined_to_what_follows() -> None:
    pieces = [(1, "a" * 10), (2, "b" * 10), (3, "c"), (4, "short"), (5, "d" * 10)]
    assert list(unwrap(pieces, 10)) == [(1, "a" * 10 + "b" * 10 + "c"), (4, "short"), (5, "d" * 10)]
    assert list(unwrap([(1, "x" * 10 + "\r"), (2, "y")], 10)) == [(1, "x" * 10 + "\r" + "y")]


def test_an_indented_paste_of_a_wrap_loses_its_margin_where_joined() -> None:
    # a paste indented as a block: every piece a wrap cut off carries the margin too
    pieces = [(1, "  " + "a" * 10), (2, "  " + "b" * 10), (3, "  c"), (4, "  short")]
    assert list(unwrap(pieces, 12, "  ")) == [(1, "  " + "a" * 10 + "b" * 10 + "c"), (4, "  short")]
    # om-ai-lab/VLM-R1#257 as posted (a 116-column terminal), pasted indented by two spaces
    log = TUNE / "om-ai-lab-vlm-r1-257" / "console.log"
    lines = ["  " + ln for ln in log.read_text().split("\n")]
    assert wrap_width(lines[:200]) == 118
    joined = [t for _, t in unwrap(enumerate(lines, 1), 118, "  ")]
    assert any("This typically indicates a NCCL" in t for t in joined)


def test_a_wrapped_capture_gets_the_diagnosis_of_the_original(tmp_path: Path) -> None:
    # a real run's console (the capture matrix), cut at 100 and at 120 columns as a terminal
    # would: the same cause and first rank as the file as written
    src = ROOT / "fixtures/captured/rank_exception_cascade/default-bad-rank2-bad-step4/console.log"
    want = analyze([src])
    assert want.primary is not None and want.first_failure is not None
    for width in (100, 120):
        lines = src.read_text().split("\n")
        cut = [ln[i : i + width] for ln in lines for i in range(0, max(len(ln), 1), width)]
        assert max(map(len, cut)) == width
        wrapped = tmp_path / f"console-{width}.log"
        wrapped.write_text("\n".join(cut))
        got = analyze([wrapped])
        assert got.primary is not None
        assert got.primary.rule_id == want.primary.rule_id
        assert got.first_failure is not None and got.first_failure.rank == want.first_failure.rank


def test_a_message_cut_inside_a_word_is_read_whole_too() -> None:
    cut = "ValueError: " + "x" * 60 + " variable MASTE\nR_ADDR expected, but not set"
    assert (
        rejoined(cut) == "ValueError: " + "x" * 60 + " variable MASTER_ADDR expected, but not set"
    )
    # a message that goes on on its next line: a short line, or one that ends in a blank
    assert rejoined("KeyError: 'x'\nDid you mean 'y'?") == "KeyError: 'x'\nDid you mean 'y'?"
    assert rejoined("a" * 70 + " \nb") == "a" * 70 + " \nb"
    assert rejoined("a" * 70 + "\n  b") == "a" * 70 + "\n  b"


def _cut_at_100(log: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """``log``'s lines cut at 100 columns as a terminal would, and a file that holds them."""
    lines = log.read_text().split("\n")
    cut = [ln[i : i + 100] for ln in lines for i in range(0, max(len(ln), 1), 100)]
    wrapped = tmp_path / "console.log"
    wrapped.write_text("\n".join(cut))
    return cut, wrapped


@pytest.mark.parametrize(
    ("case", "rule", "candidate"),
    [
        # an exception's message cut in its words: read whole (rejoined)
        ("pytorch-pytorch-39832", "dist-env-missing", None),  # a line detector's words
        ("nvidia-nccl-697", "nccl-error", None),
        # too few cut lines for wrap_width to tell a wrap from lines that share a length: the
        # paste is read both ways, and joined again when that reading finds more
        ("akegarasu-lora-scripts-132", "module-not-found", 100),  # a launcher's one line
        ("kubernetes-sigs-jobset-603", "rendezvous-host-unresolved", 100),  # c10d's warning
        ("zai-org-glm-4-277", "datasets-map-worker-died", 100),  # among padded progress rows
    ],
)
def test_a_short_paste_wrapped_at_100_keeps_its_diagnosis(
    case: str, rule: str, candidate: int | None, tmp_path: Path
) -> None:
    # real pastes too short for their width to show, cut at 100 columns, their rule's words
    # with them
    (log,) = (TUNE / case).glob("*.log")
    assert analyze([log]).primary.rule_id == rule  # type: ignore[union-attr]
    cut, wrapped = _cut_at_100(log, tmp_path)
    assert wrap_width(cut[:200]) is None
    if candidate is not None:
        assert cut_width(cut[:200]) == candidate
    got = analyze([wrapped]).primary
    assert got is not None and got.rule_id == rule


def test_a_short_paste_joined_into_a_cut_traceback_is_read_as_printed() -> None:
    # tambetm/simple_dqn#17 as posted (tune case): the longest line is a frame's source line,
    # the bare exception line after it. Joined, the traceback would be cut, and the cut rules
    # whose words are crashlens's own stand-in for its exception line would outnumber the one
    # rule that read the real MemoryError
    log = TUNE / "tambetm-simple_dqn-17" / "console.log"
    assert cut_width(log.read_text().split("\n")) is not None
    top = analyze([log]).primary
    assert top is not None and top.rule_id == "cpu-allocator-oom" and top.cls == "host_oom"


def test_a_short_paste_is_not_joined_where_nothing_goes_on() -> None:
    # the longest line is followed by a record of its own (or by nothing): no candidate width
    assert cut_width(["x" * 80, "2024-05-01 03:00:00 INFO next"]) is None
    assert cut_width(["short", "y" * 80]) is None
    assert cut_width(["a" * 40, "b" * 40]) is None  # narrower than any terminal
    assert cut_width(["w" * 80, "rest of it"]) == 80


def test_a_coloured_record_after_the_longest_line_is_its_own() -> None:
    # WongKinYiu/yolov7#1952 as posted, its exception line coloured as a terminal prints it:
    # the longest line is an assert's source line, and the coloured line after it starts a
    # record of its own
    lines = (TUNE / "wongkinyiu-yolov7-1952" / "console.log").read_text().split("\n")
    coloured = [f"\x1b[31m{ln}\x1b[0m" if ln.startswith("AssertionError") else ln for ln in lines]
    assert coloured != lines
    assert cut_width(coloured) is None


def test_a_whole_frame_line_is_not_a_cut() -> None:
    # hiyouga/LLaMA-Factory#1301 as posted: its longest line is a whole frame line, and what
    # follows it is that frame's source line, not the rest of it
    lines = (TUNE / "hiyouga-llamafactory-1301" / "console.log").read_text().split("\n")
    longest = max(lines, key=len)
    assert longest.lstrip().startswith('File "') and longest.endswith("apply_rotary_pos_emb")
    assert cut_width(lines[:200]) is None


def test_typographic_quotes_a_paste_put_in_are_read_as_printed() -> None:
    from crashlens.parse.hits import as_typed

    assert as_typed("ModuleNotFoundError: No module named \u2018x\u2019") == (
        "ModuleNotFoundError: No module named 'x'"
    )
    # aws/deep-learning-containers#3989 as posted: the module's name in curly quotes
    log = TUNE / "aws-deep-learning-containers-3989" / "console.log"
    assert "\u2018smdistributed\u2019" in log.read_text()
    got = analyze([log]).primary
    assert got is not None and got.rule_id == "module-not-found"
