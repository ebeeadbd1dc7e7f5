"""Engines that run :func:`~crashlens.fleet.worker.analyze_job` over many jobs.

``local`` (:class:`LocalEngine`): a pool of forked processes on this machine; the run's context
(rules loaded and configured once, in the parent) reaches each worker through the pool's
initializer, which also compiles the matcher once per worker. A worker that dies (killed, out of
memory, a crash in native code) breaks the pool: the jobs it may have held are retried one at a
time in a fresh pool, so the job that kills its worker is found and becomes an ``error`` row
after ``max_attempts`` tries, while the others are analysed normally.

``ray`` (:class:`RayEngine`): Ray tasks over chunks of jobs, a bounded number in flight. The
context is put in the object store once; each Ray worker process fetches it on its first task
and keeps it (rules compiled once per worker). Tasks are retried by Ray when their worker dies
(``max_retries``); a chunk that still fails is split into one task per job, and a job that
fails alone becomes an ``error`` row. Workers read each job's files themselves (from the local
disk or straight from object storage); only job descriptions and result rows pass through the
driver.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from crashlens.errors import CrashlensError
from crashlens.fleet.jobs import Job
from crashlens.fleet.worker import (
    JobOutcome,
    WorkerContext,
    analyze_job,
    cached_context,
    failed_outcome,
    init_worker,
    worker_analyze,
)

ENGINES = ("local", "ray")
#: Ray's object store when this process starts a local Ray (small: only rows travel).
RAY_OBJECT_STORE_BYTES = 200 * 1024 * 1024
PR_SET_PDEATHSIG = 1


class Engine(Protocol):
    """Analyses jobs; yields one outcome per job, in completion order."""

    name: str

    def run(self, jobs: Sequence[Job], ctx: WorkerContext) -> Iterator[JobOutcome]: ...


def default_workers() -> int:
    """One worker per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies (no orphans of a killed run)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def _init_local_worker(ctx: WorkerContext) -> None:
    _die_with_parent()
    # Ctrl-C reaches the whole process group: the driver stops the run and commits what is
    # finished; a worker interrupted mid-job would only turn its job into an error row.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    init_worker(ctx)


class LocalEngine:
    """Forked worker processes on this machine."""

    name = "local"

    def __init__(self, workers: int | None = None, max_attempts: int = 3) -> None:
        self.workers = workers or default_workers()
        self.max_attempts = max(1, max_attempts)

    def run(self, jobs: Sequence[Job], ctx: WorkerContext) -> Iterator[JobOutcome]:
        """Analyse ``jobs``; a job whose worker dies ``max_attempts`` times is an error row."""
        if "fork" not in multiprocessing.get_all_start_methods():
            init_worker(ctx)  # no fork here: analyse in this process
            for job in jobs:
                yield analyze_job(job, ctx)
            return
        queue: deque[tuple[Job, int]] = deque((job, 0) for job in jobs)
        solo: deque[tuple[Job, int]] = deque()  # suspects of a broken pool, one at a time
        context = multiprocessing.get_context("fork")
        while queue or solo:
            pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=context,
                initializer=_init_local_worker,
                initargs=(ctx,),
            )
            inflight: dict[Future[JobOutcome], tuple[Job, int]] = {}
            lost: list[tuple[Job, int]] = []
            try:
                while queue or solo or inflight:
                    source, limit = (solo, 1) if solo else (queue, 2 * self.workers)
                    while source and len(inflight) < limit:
                        job, attempts = source.popleft()
                        inflight[pool.submit(worker_analyze, job)] = (job, attempts)
                    done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                    broken = False
                    for future in done:
                        item = inflight.pop(future)
                        try:
                            yield future.result()
                        except BrokenProcessPool:
                            broken = True
                            lost.append(item)
                    if broken:
                        for future, item in list(inflight.items()):
                            if future.done() and future.exception() is None:
                                yield future.result()
                            else:
                                lost.append(item)
                        inflight.clear()
                        break
            finally:
                pool.shutdown(wait=not lost and not inflight, cancel_futures=True)
            for job, attempts in lost:
                if attempts + 1 >= self.max_attempts:
                    yield failed_outcome(
                        job,
                        ctx,
                        f"the worker process analysing this job died ({attempts + 1} attempt(s))",
                    )
                else:
                    solo.append((job, attempts + 1))


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast, in one line, when a ``host:port`` Ray address does not answer (``ray.init``
    would retry for minutes). ``auto`` and addresses without a port are left to Ray.

    Raises:
        CrashlensError: when nothing listens there.
    """
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as exc:
        raise CrashlensError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}): start it "
            "(`ray start --head` on the head node), check --address, or leave --address out to "
            "run on a local Ray"
        ) from None


def _ray_chunk(jobs: list[Job], key: str, holder: list[Any]) -> list[JobOutcome]:
    """A Ray task: analyse a few jobs with this worker's (cached) context."""
    import ray

    ctx = cached_context(key, lambda: ray.get(holder[0]))
    return [analyze_job(job, ctx) for job in jobs]


class RayEngine:
    """Ray tasks on a cluster (``address``) or on a local Ray this engine starts."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        *,
        chunk: int | None = None,
        max_retries: int = 3,
        quiet: bool = False,
    ) -> None:
        self.log_level = logging.ERROR if quiet else logging.WARNING
        self.address = address
        self.workers = workers
        self.chunk = chunk
        self.max_retries = max_retries

    def _start(self) -> bool:
        import ray

        if ray.is_initialized():
            return False
        if self.address:
            _check_reachable(self.address)
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=self.log_level)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise CrashlensError(
                    f"cannot connect to the Ray cluster at {self.address}: "
                    f"{' '.join(str(exc).split())[:300]} (check --address; a cluster with token "
                    "authentication needs its token in this environment, see docs/fleet.md)"
                ) from None
        else:
            ray.init(
                num_cpus=self.workers or default_workers(),
                include_dashboard=False,
                object_store_memory=RAY_OBJECT_STORE_BYTES,
                log_to_driver=False,
                logging_level=self.log_level,
            )
        return True

    def run(self, jobs: Sequence[Job], ctx: WorkerContext) -> Iterator[JobOutcome]:
        """Analyse ``jobs`` on Ray; yields outcomes as their tasks finish."""
        import ray
        from ray.exceptions import RayError

        if not jobs:
            return
        started = self._start()
        try:
            holder = [ray.put(ctx)]  # in a list: tasks fetch it once per worker, not per task
            task = ray.remote(_ray_chunk).options(
                max_retries=self.max_retries, retry_exceptions=False, num_cpus=1
            )
            cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))  # type: ignore[no-untyped-call]
            if self.workers:
                cpus = min(cpus, self.workers)
            size = self.chunk or max(1, min(16, len(jobs) // (cpus * 8)))
            pending: deque[list[Job]] = deque(
                list(jobs[i : i + size]) for i in range(0, len(jobs), size)
            )
            inflight: dict[Any, list[Job]] = {}
            while pending or inflight:
                while pending and len(inflight) < 2 * cpus:
                    chunk = pending.popleft()
                    inflight[task.remote(chunk, ctx.rules_hash, holder)] = chunk
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    chunk = inflight.pop(ref)
                    try:
                        outcomes: list[JobOutcome] = ray.get(ref)
                    except RayError as exc:
                        if len(chunk) > 1:
                            pending.extendleft([job] for job in reversed(chunk))
                            continue
                        reason = f"the Ray task analysing this job failed: {type(exc).__name__}"
                        yield failed_outcome(chunk[0], ctx, reason)
                        continue
                    yield from outcomes
        finally:
            if started:
                ray.shutdown()


def make_engine(
    name: str, *, workers: int | None = None, address: str | None = None, quiet: bool = False
) -> Engine:
    """The engine called ``name`` (``local`` or ``ray``); ``quiet``: Ray logs errors only.

    Raises:
        ValueError: for an unknown engine name.
    """
    if name == "local":
        return LocalEngine(workers)
    if name == "ray":
        return RayEngine(address, workers, quiet=quiet)
    raise ValueError(f"unknown engine '{name}' (choose from {', '.join(ENGINES)})")
