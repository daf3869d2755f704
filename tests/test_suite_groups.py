"""The suite's own scheduling: under pytest-xdist the tests that start the one-host Slurm share one worker,
and a file's tests stay on one (tests/conftest.py). Both silently stopped holding once (a conftest hook
that ran after xdist's, then pytest 9.2's node ids): two workers' Slurm tests took down each other's
cluster in CI."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_slurm_tests_share_one_worker_and_a_file_stays_on_one():
    files = ["tests/test_control.py", "tests/test_history.py", "tests/test_export.py"]
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-n", "2",
                             "--dist", "loadgroup", "-v", "-m", "slurm or not slow", "-k", "not real_windows", *files],
                            cwd=ROOT,
                            capture_output=True, text=True, timeout=600,
                            env={**__import__("os").environ, "COSTSIM_ENGINE_TESTS": "0"})
    ran = re.findall(r"^\[(gw\d)\] .*? (?:PASSED|SKIPPED|FAILED|ERROR) (tests/[\w/.]+)::(\S+)", result.stdout, re.M)
    assert ran, result.stdout[-3000:]
    slurm = {worker for worker, _, name in ran if name.endswith("@slurm")}
    assert len(slurm) == 1 and sum(1 for *_, name in ran if name.endswith("@slurm")) == 4, ran
    for path in files:
        workers = {worker for worker, where, name in ran if where == path and not name.endswith("@slurm")}
        assert len(workers) == 1, (path, workers)
