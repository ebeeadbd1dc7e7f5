"""Benchmark ``crashlens analyze`` against a grep scan of the rules' literal anchors.

Generates the tree (benchmarks/generate.py) if needed, then measures in the same run:
wall time, MB/s and peak RSS of ``crashlens analyze``, and wall time of
``grep -cE '<union of the rules' literal anchors>' -r`` over the same files. Prints the ratio
and checks the diagnosis found the buried OOM rank.

    python benchmarks/run.py --mb-per-rank 8          # 64 ranks x 8 MB = 512 MB
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import OOM_RANK, generate

from crashlens.parse.matcher import LineMatcher
from crashlens.rulebase import load_rules


def grep_pattern() -> str:
    """The union of every line detector's literal anchors, as an ERE."""
    matcher = LineMatcher(load_rules())
    literals = sorted({*matcher.by_literal, *matcher.by_literal_ci})
    return "|".join(re.sub(r"([][\\.^$*+?(){}|])", r"\\\1", lit) for lit in literals)


def timed(
    cmd: list[str], discard: bool = False
) -> tuple[float, int, subprocess.CompletedProcess[str]]:
    """Run ``cmd``; return wall seconds, the largest process's peak RSS (KiB) and the result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    if discard:
        out = subprocess.DEVNULL
        proc = subprocess.run(cmd, stdout=out, stderr=out, text=True, check=False)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before), proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb-per-rank", type=float, default=8.0)
    ap.add_argument("--tree", type=Path, help="reuse (or create) the tree here")
    ap.add_argument("--lnav", action="store_true", help="also time `lnav -n` indexing and merging")
    args = ap.parse_args()
    tmp = None
    tree = args.tree
    if tree is None:
        tmp = Path(tempfile.mkdtemp(prefix="crashlens-bench-"))
        tree = tmp / "job"
    if not tree.exists():
        generate(tree, args.ranks, args.mb_per_rank)
    size = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
    try:
        g_wall, _, g = timed(["grep", "-cE", grep_pattern(), "-r", str(tree)])
        c_wall, c_rss, c = timed(
            [sys.executable, "-m", "crashlens", "analyze", str(tree), "-f", "json"]
        )
        report = json.loads(c.stdout)
        l_wall = None
        if args.lnav and shutil.which("lnav"):
            files = sorted(str(p) for p in tree.rglob("*.log"))
            l_wall, _, _ = timed(["lnav", "-n", *files], discard=True)
        ff = report["first_failure"] or {}
        print(f"tree: {size / 1e6:.0f} MB, {args.ranks} ranks")
        print(f"grep -cE (rule anchors): {g_wall:.2f} s (exit {g.returncode})")
        print(
            f"crashlens analyze: {c_wall:.2f} s, {size / 1e6 / c_wall:.1f} MB/s, "
            f"peak RSS {c_rss / 1024:.0f} MB"
        )
        print(f"ratio analyze/grep: {c_wall / g_wall:.1f}x")
        if l_wall is not None:
            print(f"lnav -n (index + merge): {l_wall:.2f} s; lnav/analyze: {l_wall / c_wall:.1f}x")
        top = report["causes"][0]["class"] if report["causes"] else None
        print(f"diagnosis: {top}, first failing rank {ff.get('rank')} (expected {OOM_RANK})")
        if top != "cuda_oom" or ff.get("rank") != OOM_RANK:
            sys.exit("diagnosis differs from the buried OOM")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
