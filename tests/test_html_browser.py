"""The HTML report in a real headless Chromium: it renders, shows the diagnosis, and the
browser logs no script error or Content-Security-Policy violation for it.

Skipped when /usr/bin/chromium is absent, unless CRASHLENS_REQUIRE_BROWSER=1 (CI) makes a
missing browser a failure. Every Chromium runs in its own process group with a 60 s timeout,
and the whole group is killed afterwards so no renderer or zygote outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from conftest import FIXTURES
from crashlens import analyze
from crashlens.render import render
from crashlens.report import Report

CHROMIUM = Path("/usr/bin/chromium")
TIMEOUT_S = 60
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
]
#: stderr lines that mean the page misbehaved (wording differs across Chromium versions).
PROBLEMS = re.compile(r"Uncaught|Refused to|Content Security Policy|:CONSOLE", re.IGNORECASE)


@pytest.fixture(scope="module")
def chromium() -> Path:
    if CHROMIUM.exists():
        return CHROMIUM
    if os.environ.get("CRASHLENS_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{CHROMIUM} is required (CRASHLENS_REQUIRE_BROWSER=1) but missing")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")


def run_chromium(browser: Path, profile: Path, *args: str) -> tuple[str, str]:
    """Run one headless Chromium; return (stdout, stderr). Never leaves a process behind."""
    proc = subprocess.Popen(
        [str(browser), *FLAGS, f"--user-data-dir={profile}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {TIMEOUT_S} s")
    finally:
        _kill_group(proc.pid)
    assert proc.returncode == 0, err[-2000:]
    return out, err


def _kill_group(pgid: int) -> None:
    """Kill the process group this test started (its id is our Chromium's pid)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@pytest.fixture(scope="module")
def report() -> Report:
    return analyze([FIXTURES / "gpu/nccl_timeout_cascade"])


@pytest.fixture()
def page(tmp_path: Path, report: Report) -> Path:
    path = tmp_path / "report.html"
    path.write_text(render(report, "html"), encoding="utf-8")
    return path


def test_dom_shows_diagnosis_without_console_errors(
    chromium: Path, page: Path, report: Report, tmp_path: Path
) -> None:
    dom, err = run_chromium(
        chromium,
        tmp_path / "profile",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        page.as_uri(),
    )
    assert "<svg" in dom and "</html>" in dom
    top = report.causes[0].match.rule.title
    assert f"<h3>{top}</h3>" in dom
    ff = report.first_failure
    assert ff is not None
    assert f"<dt>Rank</dt><dd>{ff.rank}</dd>" in dom
    assert 'class="lane-ff"' in dom, "the first failing lane is highlighted"
    # The remediation is rendered Markdown: a real ordered list with code, in the browser's DOM.
    remedy = re.search(r'<div class="remedy">(.*?)</div>', dom, re.S)
    assert remedy is not None
    assert re.search(r"<ol>\s*<li>", remedy.group(1)) and remedy.group(1).count("<li>") == 5
    assert "<code>model.gradient_checkpointing_enable()</code>" in remedy.group(1)
    problems = [line for line in err.splitlines() if PROBLEMS.search(line)]
    assert not problems, problems


def test_console_check_detects_violations(chromium: Path, tmp_path: Path) -> None:
    """Control: the stderr check above would see a CSP violation if the page had one."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'\"></head><body>"
        '<img src="http://example.invalid/x.png"></body></html>',
        encoding="utf-8",
    )
    _, err = run_chromium(
        chromium, tmp_path / "profile", "--enable-logging=stderr", "--v=0", "--dump-dom",
        bad.as_uri(),
    )  # fmt: skip
    assert any(PROBLEMS.search(line) for line in err.splitlines()), err[-2000:]


def test_screenshot_is_not_blank(chromium: Path, page: Path, tmp_path: Path) -> None:
    png = tmp_path / "shot.png"
    run_chromium(
        chromium,
        tmp_path / "profile",
        f"--screenshot={png}",
        "--window-size=1280,2000",
        page.as_uri(),
    )
    width, height, pixels = decode_png(png.read_bytes())
    assert (width, height) == (1280, 2000)
    assert len(set(pixels)) > 64, "a blank page has only a handful of byte values"
    assert pixels.count(0xFF) < 0.95 * len(pixels), "mostly white means nothing rendered"


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the inflated (still filtered) scanlines of a PNG; stdlib only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)
