"""Output formats for tickets, chat and CI: structure, golden snapshots and hostile log text.

Snapshots live in tests/snapshots/<fixture>.<ext>; regenerate them with
``CRASHLENS_UPDATE_SNAPSHOTS=1 pytest tests/test_render_formats.py`` and review the diff.
"""

from __future__ import annotations

import html
import http.server
import json
import os
import re
import socket
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import ClassVar

import pytest

from conftest import FIXTURES, ROOT
from crashlens import __version__, analyze
from crashlens.errors import CrashlensError
from crashlens.render import FORMATS, ci, render, slack
from crashlens.render import html as html_format
from crashlens.render import markdown as md_format
from crashlens.report import Report

SNAPSHOTS = Path(__file__).parent / "snapshots"
JOBS = ["gpu/nccl_timeout_cascade", "repro/rank_exception_cascade"]
SNAPSHOT_EXT = {"markdown": "md", "github": "github.txt", "junit": "junit.xml"}

HOSTILE = (
    "<script>alert(1)</script> <img src=x onerror=alert(1)> ``` <!channel> @here "
    "<@U123> <http://evil.example|click> [bold red]x[/bold red] %0A::error::x \x1b[31m red"
)


@cache
def report_for(job: str) -> Report:
    """Each fixture is analysed once per test session (absolute paths, as users pass them)."""
    return analyze([FIXTURES / job])


def scrub(text: str) -> str:
    """Make output stable: the checkout path, the tool version and the rule count vary."""
    text = text.replace(str(FIXTURES), "<ROOT>/fixtures")
    text = re.sub(r"\b\d+ rules\b", "<N> rules", text)
    return text.replace(f"crashlens {__version__}", "crashlens <VERSION>")


@pytest.fixture()
def hostile(tmp_path: Path) -> Report:
    """A job whose fatal exception message tries every injection trick we know."""
    log = tmp_path / "train.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        f"ValueError: {HOSTILE}\n",
        encoding="utf-8",
    )
    report = analyze([tmp_path])
    assert report.causes, "the fallback rule should match an uncaught ValueError"
    assert "<script>" in report.causes[0].evidence[0].text
    return report


# --- registry -----------------------------------------------------------------------------------


def test_formats_registered() -> None:
    for name in ("html", "markdown", "slack", "github", "junit"):
        assert name in FORMATS
    assert render(report_for(JOBS[1]), "markdown").startswith("## ")


# --- markdown -----------------------------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS)
def test_markdown_structure(job: str) -> None:
    report = report_for(job)
    out = render(report, "markdown")
    assert out.splitlines()[0].startswith("## 🔴 crashlens: ")
    assert "| # | Cause | Class | Confidence | Rule | Ranks |" in out
    top = report.causes[0]
    assert f"| 1 | {md_format.md_text(top.match.rule.title)}" in out
    assert f"`{top.match.rule.id}`" in out
    assert out.count("```") % 2 == 0, "every fence is closed"
    assert out.count("<details>") == out.count("</details>") >= 1


def test_markdown_escapes_outside_code() -> None:
    assert md_format.md_text("<b>x</b> & [a](http://e) *y*") == (
        r"&lt;b&gt;x&lt;/b&gt; &amp; \[a\](http://e) \*y\*"
    )
    assert "```" not in md_format.code_text("a ``` b ```` c")


# --- slack --------------------------------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS)
def test_slack_structure(job: str) -> None:
    report = report_for(job)
    data = json.loads(render(report, "slack"))
    assert isinstance(data["text"], str) and data["text"].startswith("crashlens: ")
    blocks = data["blocks"]
    assert 3 <= len(blocks) <= slack.MAX_BLOCKS
    assert blocks[0]["type"] == "header"
    fields = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert f"*Confidence*\n{report.causes[0].confidence:.2f}" in fields
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b]
    assert all(len(t) <= slack.MAX_SECTION for t in texts)
    assert any(t.startswith("*Evidence*\n```") and t.endswith("```") for t in texts)
    assert "<!" not in json.dumps(data, ensure_ascii=False)


def test_slack_truncates_to_limits() -> None:
    long = "&<>" * 3000
    cut = slack.truncate(slack.slack_escape(long), slack.MAX_SECTION)
    assert len(cut) <= slack.MAX_SECTION
    assert re.search(r"&[a-z]{0,3}…$", cut) is None, "no entity cut in half"


def test_slack_escape_defuses_mentions() -> None:
    out = slack.slack_escape("hi @here and @channel, <!everyone> @Everyone x@here.com")
    assert "@here" not in out and "@channel" not in out and "@Everyone" not in out
    assert "&lt;!everyone&gt;" in out


# --- GitHub annotations -------------------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS)
def test_github_structure(job: str) -> None:
    report = report_for(job)
    lines = render(report, "github").splitlines()
    assert len(lines) == len(report.causes)
    assert lines[0].startswith("::error file=")
    assert all(re.match(r"::(error|warning) file=[^:]+,line=\d+,title=[^:]*::", x) for x in lines)


def test_github_escaping_rules() -> None:
    assert ci.gh_data("100%\r\nnext") == "100%25%0D%0Anext"
    assert ci.gh_property("a:b,c%") == "a%3Ab%2Cc%25"


def test_github_notice_when_healthy() -> None:
    report = analyze([FIXTURES / "gpu/healthy_run"])
    assert not report.causes
    assert render(report, "github").startswith("::notice title=crashlens::")


# --- JUnit --------------------------------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS)
def test_junit_structure(job: str) -> None:
    report = report_for(job)
    root = ET.fromstring(render(report, "junit"))
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "crashlens"
    cases = suite.findall("testcase")
    assert len(cases) == len(report.causes) == int(suite.get("tests", "-1"))
    assert int(suite.get("failures", "-1")) == len(report.causes)
    top = report.causes[0].match.rule
    assert cases[0].get("classname") == f"crashlens.{top.cls}"
    assert cases[0].get("name") == top.id
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("type") == top.cls
    assert report.causes[0].evidence[0].text[:40] in (failure.text or "")


def test_junit_passing_case_when_healthy() -> None:
    root = ET.fromstring(render(analyze([FIXTURES / "gpu/healthy_run"]), "junit"))
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 1 and cases[0].find("failure") is None
    assert root.get("failures") == "0"


def test_xml_safe_strips_illegal_characters() -> None:
    assert ci.xml_safe("a\x00b\x1b[31mc\ufffe\ud800d\te") == "a\\x00b\\x1b[31mcd\te"


# --- golden snapshots ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(SNAPSHOT_EXT))
@pytest.mark.parametrize("job", JOBS)
def test_snapshot(job: str, fmt: str) -> None:
    out = scrub(render(report_for(job), fmt))
    assert str(ROOT / "fixtures") not in out
    path = SNAPSHOTS / f"{Path(job).name}.{SNAPSHOT_EXT[fmt]}"
    if os.environ.get("CRASHLENS_UPDATE_SNAPSHOTS") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(out, encoding="utf-8")
        if os.environ.get("CRASHLENS_UPDATE_SNAPSHOTS") != "1":
            pytest.fail(f"snapshot {path.name} was missing and has been written; rerun")
    assert out == path.read_text(encoding="utf-8"), f"{path.name} changed; see module doc"


# --- HTML ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS)
def test_html_structure(job: str) -> None:
    report = report_for(job)
    page = render(report, "html")
    assert page.startswith("<!DOCTYPE html>")
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';' in page
    assert html.escape(report.causes[0].match.rule.title) in page
    assert html.escape(report.verdict) in page
    assert "<svg" in page and "first failure</text>" in page
    tracebacks = int((report.timeline["kind"] == "traceback").sum())
    assert tracebacks >= 1 and page.count("<details>") >= tracebacks
    assert f"{report.causes[0].confidence:.2f}" in page
    # Self-contained: nothing to fetch.
    for needle in ("<link", "<script", "<img", "@import", "url(", "<iframe", "src="):
        assert needle not in page, needle


def test_html_renders_remediation_as_text_not_markdown(hostile: Report) -> None:
    page = render(hostile, "html")
    assert '<pre class="remedy">An uncaught ValueError ended the process: &lt;script&gt;' in page


def test_html_timeline_64_ranks(tmp_path: Path) -> None:
    write_64_rank_job(tmp_path)
    report = analyze([tmp_path])
    assert len(report.ranks) == 64
    assert report.first_failure is not None and report.first_failure.rank == 37
    svg = html_format.timeline_svg(report)
    labels = re.findall(r'class="lane-label"[^>]*>([^<]*)</text>', svg)
    rank_labels = [x for x in labels if x.startswith("rank ")]
    assert 8 <= len(rank_labels) < 64, "labels thin out at 64 ranks"
    assert any(x.startswith("rank 37 ") for x in rank_labels), "first failing lane is labelled"
    heights = {float(h) for h in re.findall(r'height="([\d.]+)" class="lane-', svg)}
    assert heights and max(heights) < 24, "lanes shrink"
    assert 'class="ff-ring"' in svg and 'class="m-fatal"' in svg and 'class="m-symptom"' in svg
    height = float(re.search(r'viewBox="0 0 \d+ ([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    assert height < 800, "64 lanes fit on one screen"
    ticks = re.findall(r'class="tick"[^>]*>([^<]*)</text>', svg)
    assert len(ticks) >= 3 and re.search(r"\d\d:\d\d:\d\d", ticks[1])


def write_64_rank_job(root: Path, *, nodes: int = 8, per_node: int = 8, bad: int = 37) -> None:
    """Console logs of a 64-rank job in the message formats of fixtures/gpu/nccl_timeout_cascade:
    rank ``bad`` runs out of GPU memory at 03:14:00, the others time out in NCCL at 03:24."""
    for n in range(nodes):
        host = f"node-{n + 1:02d}"
        lines = [f"W0501 03:00:05.812000 {48100 + n} site-packages/torch/distributed/run.py:793] "]
        for local in range(per_node):
            rank, pid = n * per_node + local, 50000 + n * 100 + local
            lines.append(
                f"[default{local}]:{host}:{pid}:{pid + 17} [{local}] NCCL INFO ncclCommInitRank "
                f"comm 0x55d0a22a1620 rank {rank} nranks 64 cudaDev {local} nvmlDev {local} "
                "busId 18000 commId 0x6f2c1d0e9a4b7713 - Init COMPLETE"
            )
        for step in range(0, 60, 20):
            minute = 1 + step // 10
            lines.append(
                f"[default0]:2024-05-01 03:{minute:02d}:02,135 INFO train: step {step} loss 3.692"
            )
        for local in range(per_node):
            rank = n * per_node + local
            if rank == bad:
                lines += _oom_traceback(local, rank)
        for local in range(per_node):
            rank = n * per_node + local
            if rank == bad:
                continue
            lines.append(
                f"[default{local}]:[rank{rank}]:[E501 03:24:0{local % 2}.215351828 "
                f"ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=15417, OpType=ALLREDUCE, NumelIn=6553600, "
                "NumelOut=6553600, Timeout(ms)=600000) ran for 600088 milliseconds before "
                "timing out."
            )
        (root / host).mkdir()
        (root / host / "console.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _oom_traceback(local: int, rank: int) -> list[str]:
    p = f"[default{local}]:[rank{rank}]:"
    return [
        f"{p} Traceback (most recent call last):",
        f'{p}   File "/workspace/llm-pretrain/train.py", line 142, in train_step',
        f"{p}     scaler.scale(loss).backward()",
        f"{p} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 1 has "
        "a total capacity of 79.15 GiB of which 1.12 GiB is free.",
        f"[default{local}]:[rank{rank}]:[W501 03:14:00.321157043 ProcessGroupNCCL.cpp:1250] "
        "Warning: WARNING: process group has NOT been destroyed before we destruct "
        "ProcessGroupNCCL.",
    ]


# --- hostile input ------------------------------------------------------------------------------


def test_hostile_html(hostile: Report) -> None:
    page = render(hostile, "html")
    for raw in ("<script>alert", "<img src=x", "<!channel>", "\x1b"):
        assert raw not in page, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # Colour codes are dropped when the log is read; the text they coloured stays.
    assert "\\x1b[31m" not in page and "::error::x  red" in page
    # The only tags in the page are ones the renderer wrote.
    tags = set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", page))
    assert "script" not in tags and "img" not in tags


def test_hostile_markdown(hostile: Report) -> None:
    out = render(hostile, "markdown")
    heading_and_prose = [x for x in _outside_fences(out)]
    joined = "\n".join(heading_and_prose)
    assert "<script" not in joined and "<img" not in joined and "<!channel>" not in joined
    assert "&lt;script&gt;" in joined
    assert out.count("```") % 2 == 0, "a log line cannot open or close a fence"
    assert "\x1b" not in out
    inside = "\n".join(_inside_fences(out))
    assert "<script>alert(1)</script>" in inside, "code blocks keep the text readable"


def _outside_fences(text: str) -> Iterator[str]:
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def _inside_fences(text: str) -> Iterator[str]:
    outside = set(_outside_fences(text))
    return (x for x in text.splitlines() if x not in outside and not x.startswith("```"))


def test_hostile_slack(hostile: Report) -> None:
    raw = render(hostile, "slack")
    data = json.loads(raw)
    every = json.dumps(data, ensure_ascii=False)
    for bad in ("<!channel>", "<@U123>", "<http://evil", "<script", "@here", "\x1b"):
        assert bad not in every, bad
    assert "&lt;!channel&gt;" in every
    assert "@\u200bhere" in every
    assert "<" not in every.replace("\\u003c", ""), "no raw angle bracket reaches Slack"


def test_hostile_github(hostile: Report) -> None:
    out = render(hostile, "github")
    lines = out.splitlines()
    assert len(lines) == len(hostile.causes) == 1
    assert lines[0].startswith(("::error ", "::warning "))
    assert "\r" not in out and "\x1b" not in out
    message = lines[0].split("::", 2)[2]
    assert "%250A::error::x" in message, "a literal %0A stays literal"
    assert "%0A::" not in message.replace("%250A::", "")


def test_hostile_junit(hostile: Report) -> None:
    out = render(hostile, "junit")
    root = ET.fromstring(out)
    failure = root.find("./testsuite/testcase/failure")
    assert failure is not None
    assert "<script>alert(1)</script>" in (failure.text or "")
    assert "<script>" not in out, "markup is escaped in the document"
    assert "\x1b" not in out


# --- posting to Slack ---------------------------------------------------------------------------


class _Hook(http.server.BaseHTTPRequestHandler):
    """A loopback stand-in for a Slack webhook: answers per the path, records bodies."""

    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Hook.bodies.append(body)
        status, reply = (200, b"ok") if self.path == "/ok" else (500, b"internal_error")
        if self.path == "/weird":
            status, reply = 200, b"invalid_payload"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def webhook() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_post_slack_success(webhook: str) -> None:
    payload = render(report_for(JOBS[1]), "slack")
    _Hook.bodies.clear()
    slack.post_slack(f"{webhook}/ok", payload, timeout=5)
    assert json.loads(_Hook.bodies[-1]) == json.loads(payload)


def test_post_slack_http_error(webhook: str) -> None:
    with pytest.raises(CrashlensError, match=r"HTTP 500: internal_error") as err:
        slack.post_slack(f"{webhook}/secret-token", "{}", timeout=5)
    assert "secret-token" not in str(err.value), "the webhook secret is not echoed"
    assert "\n" not in str(err.value)


def test_post_slack_rejected_body(webhook: str) -> None:
    with pytest.raises(CrashlensError, match="did not accept the message: invalid_payload"):
        slack.post_slack(f"{webhook}/weird", "{}", timeout=5)


def test_post_slack_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CrashlensError, match=r"could not reach Slack webhook at 127\.0\.0\.1"):
        slack.post_slack(f"http://127.0.0.1:{port}/hook", "{}", timeout=5)


def test_post_slack_rejects_non_http() -> None:
    with pytest.raises(CrashlensError, match="http"):
        slack.post_slack("file:///etc/passwd", "{}")


def test_slack_cuts_evidence_between_words_and_lists_what_the_cause_explains() -> None:
    data = json.loads(render(report_for("gpu/nccl_timeout_cascade"), "slack"))
    texts = [b["text"]["text"] for b in data["blocks"] if "text" in b and "text" in b["text"]]
    [evidence] = [t for t in texts if t.startswith("*Evidence*")]
    first = evidence.split("\n", 1)[1].strip("`").splitlines()[0]
    assert first.endswith("try setting …")  # a whole word, then the ellipsis
    [explains] = [t for t in texts if t.startswith("*Explains*")]
    assert "NCCL watchdog collective timeout (`nccl_timeout`) ×32 on ranks 0, 1, 2, 3" in explains
