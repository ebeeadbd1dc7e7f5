"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashlens.model import FileResult, Source
from crashlens.rulebase import load_rules
from crashlens.session import SequentialRunner, Session

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def parse_file(path: Path, year: int) -> FileResult:
    """One log file parsed line by line with the bundled rules (a session's ``parse_lines``)."""
    session = Session(load_rules(), runner=SequentialRunner())
    lines = enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
    return session.parse_lines(Source(str(path)), lines, year=year)


@pytest.fixture()
def write(tmp_path: Path):
    """Write a text file under tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return _write
