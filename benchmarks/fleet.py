"""Benchmark ``crashlens triage``: jobs/s of a shell loop, the local engine and the Ray engine.

Generates ``--jobs`` job directories (default 2,000) of about ``--mb`` MB each: job ``i`` is a
copy of fixture ``i mod 18`` (every fixtures/**/expected.yaml job) plus ``train_progress.log``,
benign step and NCCL INFO lines in the formats benchmarks/generate.py uses (those of
fixtures/gpu/nccl_timeout_cascade), so that a job is about 1 MB. Then, each ``--repeat`` times
(medians reported):

* shell loop: ``for d in JOBS; do crashlens analyze "$d" -q; done`` (one process per job), over
  ``--loop-jobs`` of the jobs (the rate is per job; the loop over all 2,000 would take ~30 min);
* ``crashlens triage ROOT -o T --engine local --workers N`` (fresh table each time);
* ``crashlens triage ROOT -o T --engine ray --workers N`` (starts its own local Ray);
* pure analysis: every job analysed in this process, one after the other, with rules loaded
  once (``crashlens.fleet.worker.analyze_job``); divided by N it is the time a perfect engine
  would need on N cores, so ``engine time / (pure / N) - 1`` is the engine's overhead. On a
  shared machine wall times vary with the load, so the local engine's overhead is also given in
  CPU seconds (the command and its reaped workers against the pure loop), and a one-job run of
  each engine gives its fixed cost (start-up, rules, Ray's start and shutdown).

Checks that both engines' rows are equal and prints one JSON object of the numbers.

    python benchmarks/fleet.py --jobs 2000 --mb 1 --repeat 3 --tree /tmp/fleet-bench
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import NCCL, STEP

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted(p.parent for p in (ROOT / "fixtures").rglob("expected.yaml"))
COMPARE = ["job_id", "status", "cause_class", "rule", "first_rank", "first_host", "n_files"]


def filler(target: int, seed: int) -> str:
    """Benign training-progress lines (steps and NCCL INFO), about ``target`` bytes."""
    rng = random.Random(seed)
    out, size, sec = [], 0, 0
    while size < target:
        sec += 1
        ts = f"2024-05-01 {1 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
        if rng.random() < 0.6:
            line = STEP.format(ts=ts, ms=rng.randrange(1000), step=sec, loss=rng.random() * 3,
                               gn=rng.random(), tok=rng.randrange(150000, 200000))  # fmt: skip
        else:
            line = NCCL.format(node=0, pid=4242, tid=4283, dev=0, ch=rng.randrange(32), a=0, b=1)
        out.append(line)
        size += len(line)
    return "".join(out)


def make_tree(root: Path, jobs: int, mb: float) -> None:
    """The job directories (templates built once, then copied)."""
    if root.is_dir() and len(list(root.iterdir())) == jobs:
        return
    shutil.rmtree(root, ignore_errors=True)
    templates = root.parent / f"{root.name}-templates"
    shutil.rmtree(templates, ignore_errors=True)
    for i, fixture in enumerate(FIXTURES):
        t = templates / str(i)
        shutil.copytree(fixture, t)
        have = sum(p.stat().st_size for p in t.rglob("*") if p.is_file())
        (t / "train_progress.log").write_text(filler(max(0, int(mb * 1e6) - have), i))
    for i in range(jobs):
        shutil.copytree(templates / str(i % len(FIXTURES)), root / f"job-{i:05d}")
    shutil.rmtree(templates)


def shell_loop(dirs: list[Path]) -> float:
    script = 'for d in "$@"; do crashlens analyze "$d" -q; done'
    start = time.perf_counter()
    subprocess.run(["bash", "-c", script, "loop", *map(str, dirs)], check=False)
    return time.perf_counter() - start


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def triage(root: Path, engine: str, workers: int) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the command and the workers it reaped) and the table."""
    out = Path(tempfile.mkdtemp(prefix="fleet-bench-")) / "fleet.parquet"
    cmd = ["crashlens", "triage", str(root), "-o", str(out), "--engine", engine]
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run([*cmd, "--workers", str(workers), "-q"], check=True)
    return time.perf_counter() - start, _children_cpu() - cpu, str(out)


def pure(root: Path) -> tuple[float, float, float]:
    """Wall and CPU seconds to analyse every job in this process (rules loaded once), MB read."""
    from crashlens.fleet.jobs import discover_jobs
    from crashlens.fleet.worker import WorkerContext, analyze_job, init_worker, rules_hash
    from crashlens.session import Session

    jobs = discover_jobs([str(root)])
    rules = Session.configured([]).rules
    ctx = WorkerContext(rules, rules_hash(rules))
    init_worker(ctx)
    cpu, start = time.process_time(), time.perf_counter()
    for job in jobs:
        analyze_job(job, ctx)
    wall = time.perf_counter() - start
    return wall, time.process_time() - cpu, sum(j.bytes for j in jobs) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--loop-jobs", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tree", type=Path, default=Path(tempfile.gettempdir()) / "fleet-bench")
    args = ap.parse_args()
    from crashlens.fleet import load

    root = args.tree / "jobs"
    t0 = time.perf_counter()
    make_tree(root, args.jobs, args.mb)
    generated = time.perf_counter() - t0
    dirs = sorted(root.iterdir())
    step = max(1, len(dirs) // args.loop_jobs)
    sample = dirs[::step][: args.loop_jobs]
    loop = [shell_loop(sample) for _ in range(args.repeat)]
    one = args.tree / "one"
    if not one.is_dir():
        shutil.copytree(dirs[0], one / dirs[0].name)
    local, ray, pure_s, local_cpu, pure_cpu, fixed_local, fixed_ray = [], [], [], [], [], [], []
    tables = {}
    for _ in range(args.repeat):
        seconds, cpu, tables["local"] = triage(root, "local", args.workers)
        local.append(seconds)
        local_cpu.append(cpu)
        seconds, _, tables["ray"] = triage(root, "ray", args.workers)
        ray.append(seconds)
        seconds, cpu, mb = pure(root)
        pure_s.append(seconds)
        pure_cpu.append(cpu)
        fixed_local.append(triage(one, "local", args.workers)[0])
        fixed_ray.append(triage(one, "ray", args.workers)[0])
    a, b = load(tables["local"])[0], load(tables["ray"])[0]
    equal = a[COMPARE].equals(b[COMPARE])
    n = len(dirs)
    loop_rate = len(sample) / statistics.median(loop)
    local_rate = n / statistics.median(local)
    ray_rate = n / statistics.median(ray)
    ideal = statistics.median(pure_s) / args.workers
    med = statistics.median
    result = {
        "jobs": n,
        "mb_total": round(mb, 1),
        "workers": args.workers,
        "generate_s": round(generated, 1),
        "loop_jobs": len(sample),
        "loop_s": [round(x, 2) for x in loop],
        "local_s": [round(x, 2) for x in local],
        "ray_s": [round(x, 2) for x in ray],
        "pure_s": [round(x, 2) for x in pure_s],
        "local_cpu_s": [round(x, 2) for x in local_cpu],
        "pure_cpu_s": [round(x, 2) for x in pure_cpu],
        "one_job_s": {"local": round(med(fixed_local), 2), "ray": round(med(fixed_ray), 2)},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "jobs_per_s": {
            "shell_loop": round(loop_rate, 2),
            "local": round(local_rate, 1),
            "ray": round(ray_rate, 1),
            "pure_per_core": round(n / statistics.median(pure_s), 1),
        },
        "speedup_vs_loop": {
            "local": round(local_rate / loop_rate, 1),
            "ray": round(ray_rate / loop_rate, 1),
        },
        "overhead_vs_pure": {
            "local_wall": round(med(local) / ideal - 1, 3),
            "ray_wall": round(med(ray) / ideal - 1, 3),
            "local_cpu": round(med(local_cpu) / med(pure_cpu) - 1, 3),
            "ray_wall_without_start": round((med(ray) - med(fixed_ray)) / ideal - 1, 3),
        },
        "per_job_ms": {
            "shell_loop": round(1000 / loop_rate, 1),
            "pure": round(1000 * statistics.median(pure_s) / n, 2),
        },
        "causes": a["cause_class"].fillna("(no failure)").value_counts().to_dict(),
        "engines_equal": bool(equal),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
