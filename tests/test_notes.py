"""Skip reasons and notes are typed: code asks their kind, reports print their text."""

from __future__ import annotations

import pickle
from pathlib import Path

from crashlens import analyze
from crashlens.ingest.discover import discover
from crashlens.model import Note, NoteKind, Skip, SkipKind
from crashlens.session import fold_notes


def test_a_skip_is_its_text_and_its_kind(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# notes\n")
    (tmp_path / "train.log").write_text("RuntimeError: CUDA error: an illegal memory access\n")
    (tmp_path / "gone.log").symlink_to(tmp_path / "nowhere.log")
    skips = {c.display.rsplit("/", 1)[-1]: c.skipped for c in discover([tmp_path])}
    assert skips["train.log"] is None
    readme = skips["README.md"]
    assert isinstance(readme, Skip) and readme.kind is SkipKind.NOT_A_LOG
    assert readme == "not a log (.md file)"  # the text reports show, unchanged
    again = pickle.loads(pickle.dumps(readme))  # forked readers send it back pickled
    assert again == readme and again.kind is SkipKind.NOT_A_LOG
    report = analyze([tmp_path], parallel=False)
    by_path = {Path(f.path).name: f.skipped for f in report.inputs}
    assert by_path["README.md"] is not None and by_path["README.md"].kind is SkipKind.NOT_A_LOG
    # a file that is no log is listed with the inputs but is not a note; a broken link is both
    skipped_notes = [n for n in report.notes if n.kind is NoteKind.SKIPPED_FILE]
    assert [Path(n.path or "").name for n in skipped_notes] == ["gone.log"]
    assert by_path["gone.log"] is not None and by_path["gone.log"].kind is SkipKind.LINK


def test_notes_on_many_files_fold_by_kind_and_reason() -> None:
    notes = [Note.on_file(f"rank{i}/stdout.log", "empty file") for i in range(5)]
    notes += [Note.on_file("rank9.log", "empty file", skipped=True), Note("a general note")]
    folded = fold_notes(notes)
    assert folded[0] == "5 files: empty file (rank0/stdout.log, rank1/stdout.log and 3 more)"
    assert folded[0].kind is NoteKind.FILE
    # a skipped file with the same words is another group, and too small to fold
    assert folded[1] == "skipped rank9.log: empty file" and folded[1].kind is NoteKind.SKIPPED_FILE
    assert folded[2] == "a general note" and folded[2].kind is NoteKind.GENERAL
