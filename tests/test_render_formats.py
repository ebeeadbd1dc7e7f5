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
from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich.console import Console

from conftest import FIXTURES, ROOT
from crashlens import __version__, analyze
from crashlens.errors import CrashlensError
from crashlens.render import FORMATS, ci, common, remedy, render, slack, text
from crashlens.render import html as html_format
from crashlens.render import markdown as md_format
from crashlens.report import Report

SNAPSHOTS = Path(__file__).parent / "snapshots"
JOBS = ["gpu/nccl_timeout_cascade", "repro/rank_exception_cascade", "gpu/cuda_oom_single"]
SNAPSHOT_EXT = {
    "text": "txt",
    "json": "json",
    "html": "html",
    "markdown": "md",
    "slack": "slack.json",
    "github": "github.txt",
    "junit": "junit.xml",
}

HOSTILE = (
    "*bold* [x](javascript:alert(1)) `tick` "
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
    # HTML offers a line break after each "/" of a path.
    text = text.replace(str(FIXTURES).replace("/", "/<wbr>"), "&lt;ROOT&gt;/<wbr>fixtures")
    text = re.sub(r"\b\d+ rules\b", "<N> rules", text)
    text = re.sub(r'"rules_loaded": \d+', '"rules_loaded": "<N>"', text)
    text = re.sub(
        r"<dt>Rules loaded</dt><dd>\d+</dd>", "<dt>Rules loaded</dt><dd>&lt;N&gt;</dd>", text
    )
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
    # Outside code, markup is entity-escaped; in the remediation the value is a code span.
    html_tokens = [t.content for t in _tokens(out) if t.type in ("html_inline", "html_block")]
    assert not [x for x in html_tokens if re.search(r"<(script|img|!channel|@U|http)", x)]
    assert not [t for t in _tokens(out) if t.type == "link_open" and "evil" in str(t.attrs)]
    code = [t.content for t in _tokens(out) if t.type == "code_inline"]
    assert any("<script>alert(1)</script>" in x for x in code), "shown readable, as code"
    # A log line can neither open nor close a fence: the fences are exactly the renderer's.
    fences = [t for t in _tokens(out) if t.type == "fence"]
    assert len(fences) == sum(1 for x in out.splitlines() if x == "```text") >= 2
    assert all(t.info == "text" for t in fences)
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


# --- remediation, rendered as Markdown in every format ------------------------------------------

OOM = "gpu/cuda_oom_single"
#: What the hostile exception's message starts with, as the fallback rule captures it.
HOSTILE_HEAD = "*bold* [x](javascript:alert(1)) `tick` <script>"


def _tokens(markdown: str) -> list[Token]:
    """Block and inline tokens of a document, as a CommonMark renderer (raw HTML on) sees it."""
    out = []
    for tok in MarkdownIt("commonmark").parse(markdown):
        out.append(tok)
        out.extend(tok.children or [])
    return out


def _remediation_section(markdown: str) -> str:
    """The Markdown between "**Remediation:**" and the next bold label or heading."""
    after = markdown.split("**Remediation:**", 1)[1]
    return re.split(r"\n\*\*[A-Z]|\n#", after, maxsplit=1)[0]


def test_markdown_remediation_is_a_real_list_with_code_spans() -> None:
    out = render(report_for(OOM), "markdown")
    section = _remediation_section(out)
    kinds = [t.type for t in _tokens(section)]
    assert "ordered_list_open" in kinds
    assert kinds.count("list_item_open") == 5
    code = [t.content for t in _tokens(section) if t.type == "code_inline"]
    assert "model.gradient_checkpointing_enable()" in code
    assert "\\`" not in out, "backticks are not escaped into literal text"
    # The frame of the user's code is named next to the remediation.
    assert "**In your code:** `/home/alice/llm/model.py:84 in forward`" in out


def test_markdown_keeps_log_values_in_the_remediation_inert(hostile: Report) -> None:
    section = _remediation_section(render(hostile, "markdown"))
    tokens = _tokens(section)
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "html_inline", "html_block", "em_open", "strong_open"}
    [value] = [t.content for t in tokens if t.type == "code_inline" and "<script>" in t.content]
    assert value.startswith(HOSTILE_HEAD), "the message is shown whole, as code"


def test_html_remediation_is_an_ordered_list_with_code() -> None:
    page = render(report_for(OOM), "html")
    [remedy_html] = re.findall(r'<div class="remedy">(.*?)</div>', page, re.S)
    assert remedy_html.count("<li>") == 5 and "<ol>" in remedy_html
    assert "<code>model.gradient_checkpointing_enable()</code>" in remedy_html
    assert "<p>GPU 0 ran out of memory: it tried to allocate 2.00 GiB" in remedy_html


def test_html_links_only_http_targets() -> None:
    out = remedy.to_html("[ok](https://example.org/a) [bad](javascript:alert(1)) <b>x</b>")
    assert out.count("<a ") == 1
    assert '<a href="https://example.org/a" rel="noopener noreferrer">ok</a>' in out
    assert "[bad](javascript:alert(1))" in out and "&lt;b&gt;" in out
    assert html_format._reference("file:///etc/passwd") == "file:///etc/passwd"
    assert html_format._reference("http://example.org/").startswith('<a href="http://')
    assert html_format._reference("javascript:alert(1)") == "javascript:alert(1)"


def test_html_keeps_log_values_in_the_remediation_inert(hostile: Report) -> None:
    page = render(hostile, "html")
    [remedy_html] = re.findall(r'<div class="remedy">(.*?)</div>', page, re.S)
    assert "<a " not in remedy_html and "<strong>" not in remedy_html
    assert "<em>" not in remedy_html
    assert "<code>*bold* [x](javascript:alert(1)) `tick` &lt;script&gt;" in remedy_html


def test_slack_remediation_has_numbered_lines_and_code_spans() -> None:
    data = json.loads(render(report_for(OOM), "slack"))
    texts = [b["text"]["text"] for b in data["blocks"] if "text" in b and "text" in b["text"]]
    [fix] = [t for t in texts if t.startswith("*Remediation*")]
    lines = fix.splitlines()
    assert [x[:3] for x in lines if x[:1].isdigit()] == ["1. ", "2. ", "3. ", "4. ", "5. "]
    assert "`model.gradient_checkpointing_enable()`" in fix
    assert "\\`" not in fix
    assert "*In your code:* `/home/alice/llm/model.py:84 in forward`" in texts


def test_slack_keeps_log_values_in_the_remediation_inert(hostile: Report) -> None:
    data = json.loads(render(hostile, "slack"))
    texts = [b["text"]["text"] for b in data["blocks"] if "text" in b and "text" in b["text"]]
    [fix] = [t for t in texts if t.startswith("*Remediation*")]
    # One code span holds the message: Slack formats nothing inside it, links nothing.
    span = re.search(r"`([^`]*)`", fix)
    assert span is not None and span.group(1).startswith("*bold* [x](javascript:alert(1)) 'tick'")
    assert "&lt;!channel&gt;" in span.group(1) and "<!channel>" not in fix
    assert "*bold*" not in fix.replace(span.group(0), "")
    assert slack.remediation("[a](javascript:x) [b](https://e.org)") == (
        "[a](javascript:x) <https://e.org|b>"
    )


def test_plain_formats_show_the_remediation_as_text(hostile: Report) -> None:
    message = render(hostile, "github").split("::", 2)[2]
    assert "*bold* [x](javascript:alert(1))" in message, "the value reaches CI as it was logged"
    root = ET.fromstring(render(report_for(OOM), "junit"))
    failure = root.find("./testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert "\n1. Halve per_device_train_batch_size" in failure.text
    assert "(`model.gradient_checkpointing_enable()`," in failure.text
    assert "In your code: /home/alice/llm/model.py:84 in forward" in failure.text


def test_github_annotation_points_at_the_users_frame() -> None:
    report = report_for("repro/rank_exception_cascade")
    frame = report.causes[0].user_frame
    assert frame is not None and frame.function == "check_batch" and frame.line == 24
    first = render(report, "github").splitlines()[0]
    assert first.startswith(f"::error file={ci.gh_property(frame.file)},line=24,")
    assert "In your code: " in first and "rank_exception_cascade.py:24 in check_batch" in first
    # Without a traceback frame the annotation cites the log line.
    kill = analyze([FIXTURES / "gpu/slurm_host_oom"])
    assert kill.causes[0].user_frame is None
    lead = kill.causes[0].lead
    assert lead is not None
    expected = f"::error file={ci.gh_property(lead.file)},line={lead.line},"
    assert render(kill, "github").startswith(expected)


def test_github_paths_are_relative_to_the_repository_and_a_hang_is_an_error(
    tmp_path: Path,
) -> None:
    report = report_for("repro/rank_exception_cascade")
    frame = report.causes[0].user_frame
    assert frame is not None and frame.file.startswith("/")
    root = Path(frame.file).parent.parent
    relative = Path(frame.file).relative_to(root).as_posix()
    first = render(report, "github", repo_root=root).splitlines()[0]
    assert first.startswith(f"::error file={ci.gh_property(relative)},line=24,")
    outside = render(report, "github", repo_root=tmp_path).splitlines()[0]
    assert f"file={ci.gh_property(frame.file)}," in outside
    # A hang with no root cause: its timeout is a symptom, but the job failed: ::error.
    hang = analyze([FIXTURES / "flight" / "gloo_hang" / "tee-hang-rank2"])
    assert hang.causes[0].kind == "symptom"
    assert render(hang, "github").startswith("::error ")


def test_github_format_appends_the_job_summary(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crashlens.cli import app

    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    job = str(FIXTURES / "gpu/cuda_oom_single")
    result = CliRunner().invoke(
        app, ["analyze", job, "-f", "github"], env={"GITHUB_STEP_SUMMARY": str(summary)}
    )
    assert result.exit_code == 1 and result.stdout.startswith("::error ")
    written = summary.read_text()
    assert written.startswith("earlier step\n") and "crashlens" in written
    assert "CUDA out of memory" in written


# --- the terminal -------------------------------------------------------------------------------


def _screen(report: Report, *, verbose: bool = False, width: int = 80) -> list[str]:
    with open(os.devnull, "w") as sink:
        console = Console(width=width, record=True, color_system=None, file=sink)
        for block in text.renderables(report, verbose=verbose):
            console.print(block)
    return [line.rstrip() for line in console.export_text().splitlines()]


@pytest.mark.parametrize("job", JOBS)
def test_default_terminal_view_fits_one_screen_at_80_columns(job: str) -> None:
    report = report_for(job)
    screen = _screen(report)
    assert len(screen) <= 30, "\n".join(screen)
    assert max(len(x) for x in screen) <= 80
    joined = "\n".join(screen)
    assert screen[0].startswith("crashlens: " + report.verdict[:30])
    assert re.search(r"^(Rank \d+|The process)( on \S+)? failed first", joined, re.M), joined
    assert "in your code: " in joined
    assert "Fix:" in joined and "Cause: " in joined
    assert "Evidence:" not in joined, "the evidence is behind --verbose"
    assert not re.search(r"[╭╮╰╯│─]", joined), "no boxes"


def test_the_oom_message_is_shown_once_and_marks_are_explained() -> None:
    report = report_for(OOM)
    plain = render(report, "text")
    assert plain.count("Tried to allocate") == 1
    assert "~ = time inferred" in plain and "03:05:40.492~" in plain
    verbose = render(report, "text", verbose=True)
    assert verbose.count("Tried to allocate") == 1, "its evidence line points at the first failure"
    assert "(the first failure, above)" in verbose


def test_verbose_shows_evidence_causes_and_inputs_the_default_hides() -> None:
    report = report_for("gpu/nccl_timeout_cascade")
    default, verbose = render(report, "text"), render(report, "text", verbose=True)
    assert "Evidence:" not in default and "Evidence:" in verbose
    assert "SOURCE.md" not in default and "SOURCE.md: not a log" in verbose
    for i, cause in enumerate(report.causes, 1):
        assert f"#{i} {cause.match.rule.title}" in verbose
    assert "4. Shard optimizer state" in verbose and "4. Shard optimizer state" not in default
    assert "(+2 more steps: --verbose)" in default


@pytest.mark.parametrize("job", JOBS)
def test_piped_text_is_plain_unwrapped_and_worded(job: str) -> None:
    report = report_for(job)
    out = render(report, "text", verbose=True)
    assert not re.search(r"[╭╮╰╯│─]", out) and "\x1b" not in out
    ff = report.first_failure
    assert ff is not None and any(line.strip() == ff.text for line in out.splitlines()), (
        "the first failure's message is one line, not hard-wrapped"
    )
    for wrong in ("(s)", " 0 rank", "0.0 MB", "on ranks 0\n"):
        assert wrong not in out, wrong
    assert not re.search(r"on ranks \d+(?![,\d])", out), "one rank is 'rank N'"


def test_sizes_and_plurals_are_worded_for_people() -> None:
    assert common.human_bytes(512) == "512 bytes" and common.human_bytes(1) == "1 byte"
    assert common.human_bytes(5_400) == "5.4 KB" and common.human_bytes(34_300_000) == "34.3 MB"
    assert text.on_ranks([]) == "" and text.on_ranks([0]) == " on rank 0"
    assert text.on_ranks((0, 1)) == " on ranks 0, 1"


def test_terminal_keeps_log_values_inert(hostile: Report) -> None:
    plain = render(hostile, "text", verbose=True)
    assert "*bold* [x](javascript:alert(1)) `tick`" in plain
    colored = render(hostile, "text", color=True, width=200, verbose=True)
    visible = re.sub(r"\x1b\[[0-9;]*m", "", colored)
    assert "[bold red]x[/bold red]" in visible, "rich markup in a log line is shown, not applied"
    assert "\x1b[31m red" not in colored and "\x1b]8;" not in colored, "no link, no log colour"


# --- HTML details -------------------------------------------------------------------------------


def test_html_single_process_timeline_and_no_fatal_mark_before_the_first_failure() -> None:
    svg = html_format.timeline_svg(report_for(OOM))
    assert re.findall(r'class="lane-label"[^>]*>([^<]*)</text>', svg) == ["process"]
    spans = re.findall(r'class="span"><title>([^<]*)</title>', svg)
    assert spans == ["the process: logged 2024-05-01 03:02:11.402 → 2024-05-01 03:05:40.492"]
    assert "launcher/system" not in svg
    # A handled ConnectionError logged before the fatal KeyError is not drawn as fatal.
    marks = re.findall(
        r'class="m-(\w+)"><title>[^\n]*· ([\d: -]+\.\d+)',
        html_format.timeline_svg(analyze([FIXTURES / "repro/user_code_error"])),
    )
    assert ("other", "2026-11-29 21:11:32.940") in marks
    assert [t for cat, t in marks if cat == "fatal"] == ["2026-11-29 21:11:32.942"]


def test_html_headline_of_a_launcher_summary_is_its_root_cause() -> None:
    page = render(report_for("repro/rank_exception_cascade"), "html")
    titles = re.findall(r"<summary><b>([^<]*)</b>", page)
    child = [t for t in titles if "ChildFailedError" in t]
    assert child and all("=====" not in t for t in child)
    assert "ChildFailedError: rank 2 on localhost failed first (exit code 1)" in child[0]


def test_html_detail_grid_breaks_paths_at_slashes_not_inside_words() -> None:
    page = render(report_for(OOM), "html")
    assert "word-break:break-all" not in page and "overflow-wrap:anywhere" not in page
    assert ".facts dd{margin:0;font-weight:600;overflow-wrap:break-word;word-break:normal}" in page
    assert "/<wbr>gpu/<wbr>cuda_oom_single/<wbr>train.log:60</dd>" in page


def test_a_log_without_timestamps_gets_no_timeline_panel(tmp_path: Path) -> None:
    from crashlens import analyze

    (tmp_path / "train.log").write_text(
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 3, in <module>\n'
        "    main()\n"
        "ValueError: bad config\n"
    )
    html = render(analyze([tmp_path]), "html")
    assert "<h2>Timeline</h2>" not in html and "1970" not in html
    assert "ValueError: bad config" in html


def test_verbose_view_names_no_clock_skew_for_a_host_the_logs_do_not_have() -> None:
    report = analyze([FIXTURES / "gpu/cuda_oom_single"], skew={"node-99": 2.5})
    assert "node-99" in report.clock_skew  # the override is kept in the report...
    verbose = render(report, "text", verbose=True)
    assert "Clock skew corrected" not in verbose and "node-99" not in verbose  # ...not shown


def test_slack_names_the_job_and_links_the_report() -> None:
    report = report_for("gpu/cuda_oom_single")
    message = json.loads(
        render(report, "slack", job="<!channel> llama-ft 4242", report_url="https://ci.example/r/1")
    )
    header = message["blocks"][0]["text"]
    assert header["type"] == "plain_text"  # the name is shown, never read as markup
    assert header["text"] == "crashlens: <!channel> llama-ft 4242: job failed"
    texts = [b.get("text", {}).get("text", "") for b in message["blocks"]]
    assert "<https://ci.example/r/1|Full report>" in texts
    odd = json.loads(render(report, "slack", report_url="https://x.example/a|<!here>"))
    assert not any("Full report" in b.get("text", {}).get("text", "") for b in odd["blocks"])


def test_the_cli_takes_the_job_name_from_slurm() -> None:
    from crashlens.cli import _scheduler_job

    assert _scheduler_job({"SLURM_JOB_NAME": "llama-ft", "SLURM_JOB_ID": "4242"}) == "llama-ft 4242"
    assert _scheduler_job({}) is None


def test_verbose_view_shows_the_users_stack_with_library_frames_folded() -> None:
    report = report_for("gpu/cuda_oom_single")
    lines = render(report, "text", verbose=True).splitlines()
    start = lines.index("  Stack (your frames; most recent call last):")
    stack = lines[start + 1 : start + 40]
    assert stack[0].strip() == "/home/alice/llm/train.py:214 in <module>"
    assert stack[1].strip() == "main()"
    assert "    … 2 library frames" in stack
    assert "/home/alice/llm/model.py:84 in forward" in [s.strip() for s in stack]
    # the default view shows the failing line of the user's code under the frame
    short = render(report, "text").splitlines()
    at = short.index("  in your code: /home/alice/llm/model.py:84 in forward")
    assert short[at + 1].strip() == "h = self.act(self.fc_in(x))"


def test_the_timeline_names_on_a_line_only_the_rules_that_held() -> None:
    """The repro's gloo error (a RuntimeError) is what `gloo-peer-closed` says; the exception
    detector of `reader-failed` hits every RuntimeError but its rule needs a reader's frame, so
    the line does not carry it. A launcher's exit report that a teardown explained away keeps
    its own line."""
    report = analyze([FIXTURES / "repro/rank_exception_cascade"])
    frame = report.timeline
    signals = frame[frame["kind"] == "signal"]
    gloo_lines = set(signals.loc[signals["signal"] == "gloo-peer-closed", "line"])
    assert gloo_lines
    on_them = set(signals.loc[signals["line"].isin(gloo_lines), "signal"])
    assert "reader-failed" not in on_them and "rendezvous-setup-failed" not in on_them
    teardown = analyze([FIXTURES / "gpu/nccl_timeout_cascade"]).timeline
    assert "torchrun-child-failed" in set(teardown["signal"])
