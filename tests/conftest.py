"""Shared test helpers."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from crashlens.model import FileResult, Source
from crashlens.rulebase import load_rules
from crashlens.session import SequentialRunner, Session

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module, loaded once (it is a script, not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


# Hermetic runs: no parse cache of the bundled rules in the user's home (tests/test_rules_cache.py
# points it at a directory of its own).
os.environ.setdefault("CRASHLENS_CACHE_DIR", "off")


#: A user rule whose regex backtracks catastrophically on a line of "a"s (the detector time limit).
EVIL_RULE = """id: evil-backtrack
title: Catastrophic user regex
class: unknown
severity: low
detectors:
  evil:
    regex: '^(a|aa)+$'
    contains: ['aaaa']
"""


def parse_file(path: Path, year: int) -> FileResult:
    """One log file parsed line by line with the bundled rules (a session's ``parse_lines``)."""
    session = Session(load_rules(), runner=SequentialRunner())
    lines = enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
    return session.parse_lines(Source(str(path)), lines, year=year)


def run_python(
    directory: Path, source: str, name: str = "train"
) -> subprocess.CompletedProcess[str]:
    """A real run: ``source`` written as ``<name>.py`` in ``directory`` and run with this
    interpreter, its output captured as text."""
    script = directory / f"{name}.py"
    script.write_text(source, encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True)


@pytest.fixture()
def write(tmp_path: Path):
    """Write a text file under tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return _write


# --- the real one-node SLURM cluster (tests/test_slurm.py) ---------------------------------------
# Started once per session when the machine can run it; the time-limit job (about 80 s) is
# submitted at the start so that it runs beside the rest of the suite.
SLURM: dict[str, object] = {}

TIME_LIMIT_JOB = """#!/bin/bash
#SBATCH -n 2
#SBATCH --time=1
#SBATCH -o slurm-%j.out
srun -o slurm-%j_%t.out {python} -u -c "
import logging, os, time
logging.basicConfig(format='%(asctime)s %(levelname)s %(name)s: %(message)s', level=logging.INFO)
for step in range(100000):
    logging.getLogger('train').info('step %d loss %.4f', step, 2.0 / (step + 1))
    time.sleep(1.0)
"
"""


def pytest_collection_finish(session: pytest.Session) -> None:
    import os
    import sys
    import tempfile

    if not any(item.nodeid.startswith("tests/test_slurm.py") for item in session.items):
        return  # only runs that include the SLURM tests pay for the cluster
    if os.environ.get("CRASHLENS_SKIP_SLURM"):
        SLURM["unavailable"] = "CRASHLENS_SKIP_SLURM is set"
        return
    import slurm_cluster

    root = Path(tempfile.mkdtemp(prefix="crashlens-slurm-"))
    SLURM["root"] = root  # removed at the session's end, cluster or not
    try:
        cluster = slurm_cluster.start(root / "cluster")
    except slurm_cluster.Unavailable as exc:
        SLURM["unavailable"] = str(exc)
        return
    SLURM["cluster"] = cluster
    work = root / "time-limit"
    work.mkdir()
    (work / "job.sh").write_text(TIME_LIMIT_JOB.format(python=sys.executable))
    proc = cluster.run("sbatch", "--parsable", str(work / "job.sh"), cwd=work)
    SLURM["time_limit"] = (proc.stdout.strip(), work) if proc.returncode == 0 else proc.stderr


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import shutil

    cluster = SLURM.get("cluster")
    if cluster is not None:
        cluster.stop()  # type: ignore[attr-defined]
    root = SLURM.get("root")
    if isinstance(root, Path):
        shutil.rmtree(root, ignore_errors=True)
