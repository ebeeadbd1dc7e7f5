"""`crashlens watch`: a real watcher process follows a directory this test appends to."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from crashlens.rulebase import load_rules
from crashlens.watch import Alert, Watcher

ROOT = Path(__file__).resolve().parents[1]
CASCADE = ROOT / "fixtures" / "gpu" / "nccl_timeout_cascade"

#: The commands as cli.py registers them (cli.py itself is not needed by these tests).
APP = (
    "import typer\n"
    "from crashlens.live_cli import RUN_CONTEXT, run_command, watch_command\n"
    "app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)\n"
    "app.command('run', context_settings=RUN_CONTEXT)(run_command)\n"
    "app.command('watch')(watch_command)\n"
    "app()\n"
)
HOOK = (
    'printf "%s|%s|%s|%s|%s\\n" "$CRASHLENS_RULE" "$CRASHLENS_CLASS" "$CRASHLENS_RANK" '
    '"$CRASHLENS_FILE" "$CRASHLENS_LINE" >> "$HOOK_OUT"'
)


def _fixture_lines(node: str, prefix: str) -> list[str]:
    """Lines of one rank of the cascade fixture, without its torchrun tee prefix."""
    text = (CASCADE / node / "console.log").read_text(encoding="utf-8")
    return [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]


def _append(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _benign(rank: int, step: int) -> str:
    return (
        f"2024-05-01 03:13:{step % 60:02d},{rank:03d} INFO train: rank {rank} step {step} loss 2.4"
    )


class _Reader(threading.Thread):
    """Collects a pipe's lines with their arrival time (monotonic)."""

    def __init__(self, stream: object) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[tuple[float, str]] = []

    def run(self) -> None:
        for line in self.stream:  # type: ignore[attr-defined]
            self.lines.put((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, needle: str, timeout: float) -> tuple[float, str] | None:
        deadline = time.monotonic() + timeout
        for item in self.seen:
            if needle in item[1]:
                return item
        while time.monotonic() < deadline:
            try:
                item = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(item)
            if needle in item[1]:
                return item
        return None

    def drain(self) -> list[str]:
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except queue.Empty:
                return [line for _, line in self.seen]


def _swallow_sigint() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture()
def watcher_proc(tmp_path: Path):
    """Start `crashlens watch` on tmp_path/logs; always stopped (and reaped) at the end."""
    logs = tmp_path / "logs"
    logs.mkdir()
    hook_out = tmp_path / "hook.txt"
    env = {**os.environ, "HOOK_OUT": str(hook_out), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-c", APP, "watch", str(logs), "--interval", "0.2", "--on-cause", HOOK]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Started with SIGINT blocked and ignored, as a supervisor or a test runner may leave
        # it: Ctrl-C must still stop the watch.
        preexec_fn=_swallow_sigint,
    )
    out, err = _Reader(proc.stdout), _Reader(proc.stderr)
    out.start()
    err.start()
    try:
        yield proc, logs, hook_out, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_alert_fires_once_early_and_hook_gets_env(watcher_proc) -> None:
    proc, logs, hook_out, out, err = watcher_proc
    assert err.wait_for("watching", 30), "watcher did not start"
    ranks = [logs / f"rank_{r}.log" for r in range(4)]
    # Stage 1: every rank trains normally; nothing must fire.
    for step in range(5):
        for r, path in enumerate(ranks):
            _append(path, [_benign(r, step)])
    assert out.wait_for("crashlens watch:", 1.0) is None
    # Stage 2: rank 3 dies of a CUDA OOM (the traceback of rank 5 in the cascade fixture).
    oom_tb = _fixture_lines("node-02", "[default1]:[rank5]: ")
    oom_tb = [line for line in oom_tb if not line.startswith("[W")]
    assert oom_tb[-1].startswith("torch.OutOfMemoryError: CUDA out of memory")
    _append(ranks[3], oom_tb)
    written = time.monotonic()
    alert = out.wait_for("crashlens watch:", 5.0)
    assert alert is not None, f"no alert; stderr: {err.drain()}"
    assert alert[0] - written < 2.0, f"alert took {alert[0] - written:.2f} s"
    assert " rank 3 cuda_oom CUDA out of memory (" in alert[1]
    assert alert[1].endswith(f"rank_3.log:{5 + len(oom_tb)})")
    # Stage 3: the other ranks hit the NCCL watchdog (symptoms), rank 3 repeats the OOM line.
    timeouts = [
        line
        for line in _fixture_lines("node-01", "[default2]:[rank2]:")
        if "Watchdog caught collective operation timeout" in line
    ]
    assert timeouts
    for r in range(3):
        _append(ranks[r], [_benign(r, 6), *timeouts])
    _append(ranks[3], [oom_tb[-1]])
    time.sleep(1.0)
    # Stage 4: truncation (copytruncate) and rename rotation; their new lines must be read.
    ranks[1].write_text("OSError: [Errno 28] No space left on device: '/ckpt/step_900.pt'\n")
    ranks[2].rename(logs / "rank_2.log.1")
    ranks[2].write_text(_benign(2, 7) + "\nOSError: [Errno 24] Too many open files\n")
    assert out.wait_for("disk_full", 5.0) is not None, err.drain()
    assert out.wait_for("too_many_open_files", 5.0) is not None, err.drain()
    time.sleep(0.6)
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    assert proc.wait(15) == 1  # causes were alerted (hooks get up to 10 s to finish)
    lines = [line for line in out.drain() if line.startswith("crashlens watch:")]
    assert sum("cuda_oom" in line for line in lines) == 1, lines
    assert len(lines) == 3, lines
    assert next(line for line in lines if "disk_full" in line).endswith("rank_1.log:1)")
    assert next(line for line in lines if "too_many" in line).endswith("rank_2.log:2)")
    errors = err.drain()
    assert not any("Traceback" in line for line in errors), errors
    hooks = hook_out.read_text().splitlines()
    assert len(hooks) == 3, hooks
    oom = [h for h in hooks if h.startswith("cuda-oom|")]
    assert oom == [f"cuda-oom|cuda_oom|3|{ranks[3]}|{5 + len(oom_tb)}"]


def test_partial_lines_and_once(tmp_path: Path) -> None:
    """A line written in two pieces is parsed once, whole; --once reads and exits."""
    rules = load_rules([])
    watcher = Watcher(tmp_path, rules)
    log = tmp_path / "rank_7.log"
    log.write_text(_benign(7, 1) + "\nRuntimeError: CUDA out of mem")
    assert watcher.poll(time.time()) == []
    with log.open("a") as f:
        f.write("ory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.7 GiB\n")
    alerts = watcher.poll(time.time())
    assert [(a.rule.id, a.hit.evidence.rank, a.hit.evidence.line) for a in alerts] == [
        ("cuda-oom", 7, 2)
    ]
    assert watcher.poll(time.time()) == []  # once per cause
    proc = subprocess.run(
        [sys.executable, "-c", APP, "watch", str(tmp_path), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.count("crashlens watch:") == 1
    assert "rank 7 cuda_oom" in proc.stdout


def _grow(src: Path, dst: Path, piece: int, rounds_done: int) -> bool:
    """Append the next ``piece`` bytes of every file under ``src`` to its copy under ``dst``.

    Pieces end mid-line, so the watcher's partial-line carry is exercised. Returns whether
    anything is left to append.
    """
    left = False
    for path in sorted(src.rglob("*.log")):
        data = path.read_bytes()
        start = rounds_done * piece
        chunk = data[start : start + piece]
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("ab") as f:
            f.write(chunk)
        left = left or start + piece < len(data)
    return left


def _run_watcher(src: Path, dst: Path, *, fast: bool) -> tuple[Watcher, list[tuple[int, object]]]:
    watcher = Watcher(dst, load_rules([]), read_cap=None, fast=fast)
    alerts: list[tuple[int, object]] = []
    rnd = 0
    more = True
    while more:
        more = _grow(src, dst, 97_001, rnd)
        rnd += 1
        alerts += [(rnd, a) for a in watcher.poll(time.time())]
    return watcher, alerts


def test_fast_path_on_appended_megabytes(tmp_path: Path) -> None:
    """A few MB appended in pieces: the fast path alerts exactly as the line-by-line path."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from generate import generate

    src = generate(tmp_path / "src", ranks=8, mb_per_rank=0.5, oom_rank=5)
    oom_file = src / "node-00" / "rank_5.log"
    oom_text = oom_file.read_bytes()
    oom_at = oom_text.index(b"torch.OutOfMemoryError")
    oom_line = oom_text[:oom_at].count(b"\n") + 1
    oom_round = oom_text.index(b"\n", oom_at) // 97_001 + 1  # the round completing it
    # A combined console (two writers interleaved) takes the fast path too, demultiplexed.
    console = src / "console.log"
    console.write_text(
        "".join(f"[default{r}]:[rank{r}]: {_benign(r, s)}\n" for s in range(150) for r in (0, 1))
        + "[default1]:[rank1]: OSError: [Errno 28] No space left on device\n"
    )

    fast, fast_alerts = _run_watcher(src, tmp_path / "fast", fast=True)
    slow, slow_alerts = _run_watcher(src, tmp_path / "slow", fast=False)

    modes = {Path(name).name: tail.fast for name, tail in fast.tails.items()}
    assert set(modes.values()) == {True}, modes
    assert fast.bytes_read == slow.bytes_read > 4_000_000

    def summary(alerts: list[tuple[int, object]]) -> list[tuple[int, str, int | None, str, int]]:
        out = []
        for rnd, alert in alerts:
            assert isinstance(alert, Alert)
            ev = alert.hit.evidence
            out.append((rnd, alert.rule.id, ev.rank, Path(ev.file).name, ev.line))
        return out

    expected = [
        (1, "disk-full", 1, "console.log", 301),
        (oom_round, "cuda-oom", 5, "rank_5.log", oom_line),
    ]
    assert summary(fast_alerts) == summary(slow_alerts) == expected
    slow_tails = {Path(name).name: tail for name, tail in slow.tails.items()}
    for name, tail in fast.tails.items():
        other = slow_tails[Path(name).name]
        assert tail.parser is not None and other.parser is not None
        assert (tail.lines, tail.parser.lines) == (other.lines, other.parser.lines), name


def test_a_rule_with_when_alerts_live_on_the_facts_read_so_far(tmp_path: Path) -> None:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "myfw-on-new-torch.yaml").write_text(
        "id: myfw-on-new-torch\ntitle: MYFW fatal on torch 2\nclass: version_mismatch\n"
        "severity: high\ndetectors:\n  fatal: 'MYFW-FATAL code=(?P<code>\\d+)'\n"
        "when: {torch: '>=2.0'}\nremediation: pin it\n"
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    watcher = Watcher(logs, load_rules([rules_dir]))
    # collect_env's line (torch/utils/collect_env.py), then the failure.
    (logs / "rank_0.log").write_text("PyTorch version: 2.1.2+cu121\nMYFW-FATAL code=42\n")
    alerts = watcher.poll(time.time())
    assert [a.rule.id for a in alerts] == ["myfw-on-new-torch"]


def test_watch_reads_crashlens_yaml_like_analyze(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_7.log").write_text(
        _benign(7, 1) + "\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB. "
        "GPU 0 has a total capacity of 15.7 GiB\n"
    )
    watch = [sys.executable, "-c", APP, "watch", str(logs), "--once"]
    plain = subprocess.run(watch, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert plain.returncode == 1 and "cuda_oom" in plain.stdout
    (tmp_path / "crashlens.yaml").write_text("disable: [cuda-oom]\n")
    off = subprocess.run(watch, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "cuda_oom" not in off.stdout, off.stdout
