"""Throughput of ``crashlens watch`` on appended data (issue 9).

``poll``: pure processing rate of ``Watcher.poll()`` on data appended 1 MB per file per round.
``live``: this process appends to 64 files at ``--rate`` MB/s while a real
``python -m crashlens watch DIR --interval S`` runs; prints the rate achieved, the alert latency
of the OOM (rank 37's log is half as long, so it dies half way), the watcher's CPU time and
peak RSS.

    python benchmarks/watch.py live --ranks 64 --mb-per-rank 16 --rate 50 --interval 1
    python benchmarks/watch.py poll --ranks 64 --mb-per-rank 4 [--slow]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import OOM_RANK, rank_log

from crashlens.rulebase import load_rules
from crashlens.watch import Watcher


def contents(ranks: int, mb: float) -> dict[str, bytes]:
    """Per-rank logs by relative path; the OOM rank's is half as long (it dies half way)."""
    out = {}
    for r in range(ranks):
        size = int(mb * 1e6 / (2 if r == OOM_RANK else 1))
        out[f"node-{r // 8:02d}/rank_{r}.log"] = rank_log(r, size, random.Random(r)).encode()
    return out


def poll_bench(ranks: int, mb: float, fast: bool) -> None:
    data = contents(ranks, mb)
    dst = Path(tempfile.mkdtemp(prefix="wb-poll-"))
    for name in data:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
    watcher = Watcher(dst, load_rules([]), read_cap=None, fast=fast)
    spent, alerts, piece, off = 0.0, [], 1 << 20, 0
    while off < max(map(len, data.values())):
        for name, blob in data.items():
            with open(dst / name, "ab") as f:
                f.write(blob[off : off + piece])
        off += piece
        start = time.perf_counter()
        alerts += watcher.poll(time.time())
        spent += time.perf_counter() - start
    mb_read = watcher.bytes_read / 1e6
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found = [(a.rule.id, a.hit.evidence.rank) for a in alerts]
    print(
        f"poll fast={fast}: {mb_read:.0f} MB in {spent:.2f} s of poll time = "
        f"{mb_read / spent:.1f} MB/s; peak RSS {rss:.0f} MB (incl. the data); alerts {found}"
    )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _collect(stream: object, into: list[tuple[float, str]]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.append((time.monotonic(), line.strip()))


def live_bench(ranks: int, mb: float, rate: float, interval: float) -> None:
    data = contents(ranks, mb)
    dst = Path(tempfile.mkdtemp(prefix="wb-live-"))
    handles = {}
    for name, blob in data.items():
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        handles[name] = open(dst / name, "ab", buffering=0)  # noqa: SIM115
        handles[name].write(blob[:1000])  # the files exist before the watcher starts
    cmd = [sys.executable, "-m", "crashlens", "watch", str(dst), "--interval", str(interval)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[tuple[float, str]] = []
    err: list[tuple[float, str]] = []
    threading.Thread(target=_collect, args=(proc.stdout, out), daemon=True).start()
    threading.Thread(target=_collect, args=(proc.stderr, err), daemon=True).start()
    while not any("watching" in line for _, line in err):
        time.sleep(0.05)
    oom = f"node-{OOM_RANK // 8:02d}/rank_{OOM_RANK}.log"
    off = dict.fromkeys(data, 1000)
    total = sum(len(blob) - 1000 for blob in data.values())
    written, tick, oom_written = 0, 0.05, 0.0
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    while written < total:
        per = max(1, int((rate * 1e6 * (time.monotonic() - t0 + tick) - written) / len(data)))
        for name, blob in data.items():
            piece = blob[off[name] : off[name] + per]
            if piece:
                handles[name].write(piece)
                off[name] += len(piece)
                written += len(piece)
                if name == oom and off[name] >= len(blob):
                    oom_written = time.monotonic()
        ahead = t0 + written / (rate * 1e6) - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    t1 = time.monotonic()
    deadline = t1 + 120
    while time.monotonic() < deadline and not any("cuda_oom" in line for _, line in out):
        time.sleep(0.05)
    cpu = cpu_seconds(proc.pid) - cpu0
    status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
    hwm = int(next(line for line in status if line.startswith("VmHWM")).split()[1]) / 1024
    load = Path("/proc/loadavg").read_text().split()[:3]
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    alert = next((t for t, line in out if "cuda_oom" in line), float("nan"))
    print(
        f"live: wrote {written / 1e6:.0f} MB to {len(data)} files in {t1 - t0:.1f} s = "
        f"{written / 1e6 / (t1 - t0):.1f} MB/s; watcher CPU {cpu:.1f} s over "
        f"{time.monotonic() - t0:.1f} s wall; peak RSS {hwm:.0f} MB; loadavg {load}"
    )
    print(
        f"  OOM written {t1 - oom_written:.2f} s before the writer finished, alerted "
        f"{alert - oom_written:.2f} s after it was written; alerts: {[x for _, x in out]}; "
        f"stderr: {[x for _, x in err if 'watching' not in x]}"
    )
    for handle in handles.values():
        handle.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("mode", choices=["poll", "live"])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb-per-rank", type=float, default=4)
    ap.add_argument("--slow", action="store_true", help="poll: the line-by-line path")
    ap.add_argument("--rate", type=float, default=50.0, help="live: MB/s appended")
    ap.add_argument("--interval", type=float, default=1.0, help="live: watch --interval")
    args = ap.parse_args()
    if args.mode == "poll":
        poll_bench(args.ranks, args.mb_per_rank, not args.slow)
    else:
        live_bench(args.ranks, args.mb_per_rank, args.rate, args.interval)


if __name__ == "__main__":
    main()
