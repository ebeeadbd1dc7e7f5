"""Ingest: compression, binary sniffing, decoding, line splitting, path attribution."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from pathlib import Path

import pytest
import zstandard

from crashlens.ingest.discover import attribute, discover
from crashlens.ingest.read import MAX_LINE, NotText, iter_lines, open_text, sniff

LOG = "2024-05-01 03:14:00,000 INFO a\n2024-05-01 03:14:01,000 INFO b\n"


@pytest.mark.parametrize("opener", [gzip.compress, bz2.compress, lzma.compress, zstandard.compress])
def test_compressed_logs_are_read_transparently(tmp_path: Path, opener) -> None:
    path = tmp_path / "rank_0.log.any"
    path.write_bytes(opener(LOG.encode()))
    assert [t for _, t in open_text(path)] == LOG.splitlines()


def test_binary_files_are_refused() -> None:
    with pytest.raises(NotText):
        sniff(b"\x7fELF\x02\x01\x01" + b"\x00" * 100)
    with pytest.raises(NotText):
        sniff(bytes(range(256)) * 4)


def test_utf16_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "win.log"
    path.write_bytes(LOG.encode("utf-16"))
    assert [t for _, t in open_text(path)] == LOG.splitlines()


def test_invalid_utf8_crlf_and_carriage_returns() -> None:
    data = b"ok\r\nbad \xff byte\r\n 10%|#  | 1/10\r 50%|##  | 5/10\rRuntimeError: x\n"
    lines = list(iter_lines(io.BytesIO(data)))
    assert lines[0] == (1, "ok")
    assert lines[1] == (2, "bad \ufffd byte")
    # tqdm states split on bare \r, all on physical line 3
    assert [n for n, _ in lines[2:]] == [3, 3, 3]
    assert lines[-1] == (3, "RuntimeError: x")


def test_huge_line_is_truncated_without_losing_line_numbers() -> None:
    data = b"first\n" + b"x" * (5 * MAX_LINE + 3 * (1 << 20)) + b"\nlast\n"
    lines = list(iter_lines(io.BytesIO(data)))
    assert [n for n, _ in lines] == [1, 2, 3]
    assert len(lines[1][1]) < MAX_LINE + 100
    assert lines[2] == (3, "last")


@pytest.mark.parametrize(
    ("path", "rank", "local", "host", "kind"),
    [
        ("job/rank_3.log", 3, None, None, "worker"),
        ("job/rank3/stdout.txt", 3, None, None, "worker"),
        ("job/node-2/worker.log", None, None, "node-2", "worker"),
        ("logs/none_ab12/attempt_0/3/stderr.log", 3, 3, None, "worker"),
        ("node-02/logs/none_ab12/attempt_0/1/stderr.log", None, 1, "node-02", "worker"),
        ("slurm-48213_5.out", 5, None, None, "worker"),
        ("node-01/dmesg.txt", None, None, "node-01", "kernel"),
        ("var/log/kern.log", None, None, None, "kernel"),
        ("logs/attempt_0/2/error.json", 2, 2, None, "errorfile"),
        ("dmesg-node-02.txt", None, None, "node-02", "kernel"),
    ],
)
def test_attribution_from_path(path, rank, local, host, kind) -> None:
    src = attribute(path)
    assert (src.rank, src.local_rank, src.host, src.kind) == (rank, local, host, kind)


def test_discover_walks_sorted_and_notes_what_it_skips(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "rank_1.log").write_text("x\n")
    (tmp_path / "a.log").write_text("x\n")
    (tmp_path / "README.md").write_text("# notes\n")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    found = {c.display.rsplit("/", 1)[-1]: c.skipped for c in discover([tmp_path])}
    assert found["a.log"] is None and found["rank_1.log"] is None
    assert found["README.md"] is not None and "not a log" in found["README.md"]
    assert found["dangling"] == "broken symlink"
    missing = list(discover([tmp_path / "nope"]))
    assert missing[0].skipped == "no such file or directory"


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    from crashlens import analyze

    text = "2024-05-01 03:14:00,000 INFO train: step 1\n" * 2000
    text += "2024-05-01 03:14:00,500 ERROR train: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    text += "2024-05-01 03:14:01,000 INFO train: step 2\n" * 20000
    data = gzip.compress(text.encode())
    path = tmp_path / "rank_0.log.gz"
    path.write_bytes(data[: len(data) // 2])
    before = path.read_bytes()
    report = analyze([path])
    assert report.primary is not None and report.primary.match.rule.cls == "cuda_oom"
    assert any("read stopped early" in n for n in report.notes)
    assert path.read_bytes() == before


def _console_with_oom_at_40_percent() -> bytes:
    """A combined console: two ranks' steps, rank 0's CUDA OOM traceback, rank 1 going on."""
    lines = []
    for i in range(5000):
        for r in (0, 1):
            lines.append(
                f"[rank{r}]:2024-05-01 03:14:{i % 60:02d},101 INFO train: step {i} loss 0.{i:04d}\n"
            )
    lines.append(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/home/user/train.py", line 88, in <module>\n'
        "[rank0]:     loss.backward()\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
        "a total capacity of 79.15 GiB of which 1.23 GiB is free.\n"
    )
    lines += [
        f"[rank1]:2024-05-01 03:14:{i % 60:02d},101 INFO train: waiting {i}\n" for i in range(15000)
    ]
    return "".join(lines).encode()


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "line-path"])
@pytest.mark.parametrize(
    "suffix,compress",
    [("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress),
     ("zst", zstandard.compress)],
)  # fmt: skip
def test_a_damaged_archive_keeps_everything_before_the_damage(
    tmp_path: Path, suffix: str, compress, fast: bool
) -> None:
    from crashlens import analyze

    data = compress(_console_with_oom_at_40_percent())
    path = tmp_path / f"console.log.{suffix}"
    path.write_bytes(data[: int(len(data) * 0.8)])  # cut after the OOM, mid-stream
    report = analyze([path], fast=fast)
    assert report.primary is not None and report.primary.rule_id == "cuda-oom"
    assert report.first_failure is not None and report.first_failure.rank == 0
    assert any("read stopped early" in n for n in report.notes), report.notes


def test_concatenated_zstd_frames_are_one_log(tmp_path: Path) -> None:
    data = _console_with_oom_at_40_percent()
    path = tmp_path / "console.log.zst"
    path.write_bytes(zstandard.compress(data[:700_000]) + zstandard.compress(data[700_000:]))
    assert sum(1 for _ in open_text(path)) == data.count(b"\n")


def test_zstd_log_is_analysed(tmp_path: Path) -> None:
    from crashlens import analyze

    log = (Path(__file__).parent.parent / "fixtures/gpu/cuda_oom_single/train.log").read_bytes()
    path = tmp_path / "train.log.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(log))
    report = analyze([path])
    assert report.primary is not None and report.primary.match.rule.cls == "cuda_oom"
    assert (
        report.primary.evidence[0].line == log[: log.index(b"CUDA out of memory")].count(b"\n") + 1
    )


def test_a_run_of_zeros_is_binary_not_utf16() -> None:
    with pytest.raises(NotText):
        sniff(b"\0" * 8192)


def test_decompression_bomb_is_capped_and_the_rest_of_the_job_analysed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small .gz that decompresses to far more than logs compress from stops at the cap,
    with a note, and the real log beside it is still analysed."""
    import crashlens.ingest.read as read
    from crashlens import analyze

    monkeypatch.setattr(read, "BOMB_MIN_BYTES", 1 << 20)
    (tmp_path / "real.log").write_bytes(
        (Path(__file__).parent.parent / "fixtures/gpu/cuda_oom_single/train.log").read_bytes()
    )
    line = b"2024-05-01 01:00:00,000 INFO train: step 1 loss 0.5\n"
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip.compress(line * 400_000))  # 21 MB of text in ~60 KB
    assert len(line) * 400_000 > read.BOMB_RATIO * bomb.stat().st_size > (1 << 20)
    report = analyze([tmp_path], parallel=False)
    assert report.primary is not None and report.primary.match.rule.cls == "cuda_oom"
    note = next(n for n in report.notes if n.startswith(str(bomb)))
    assert "decompression bomb" in note and "the rest of the file is left out" in note
    bomb_input = next(f for f in report.inputs if f.path == str(bomb))
    cap_lines = read.BOMB_RATIO * bomb.stat().st_size // len(line)
    assert 0.5 * cap_lines < bomb_input.lines <= cap_lines + 1


def test_slow_decompression_is_capped_by_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import crashlens.ingest.read as read
    from crashlens import analyze

    monkeypatch.setattr(read, "MAX_FILE_SECONDS", 0.0)
    path = tmp_path / "rank_0.log.xz"
    path.write_bytes(lzma.compress(LOG.encode() * 50_000))
    report = analyze([path], parallel=False)
    assert any("decompression stopped after 0 s" in n for n in report.notes), report.notes
