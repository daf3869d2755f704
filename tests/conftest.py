import fcntl
import json
import os

import pytest

from costsim.cli import main
from tests.runner_helpers import DRILL_NICE


class Result:
    def __init__(self, code, out, err):
        self.exit_code, self.stdout, self.stderr = code, out, err

    def json(self):
        return json.loads(self.stdout)


@pytest.fixture
def run_cli(capsys):
    """Run the costsim entry point in-process, as a user would: exit code, stdout, stderr."""
    def run(*args):
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code or 0
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)
    return run


def pytest_itemcollected(item):
    """Under pytest-xdist (`-n 2 --dist loadgroup`, pyproject's addopts): a file's tests stay on one
    worker (its module fixtures, the object store on its port, are made once), and every test that
    starts the one-host Slurm shares one worker (the machine holds one Slurm at a time). Marked as each
    test is collected: xdist turns the markers into its groups in its own pytest_collection_modifyitems,
    and a conftest's modifyitems hook ran after it (with any order pluggy chose), so that no test was
    ever grouped (each file's tests, the Slurm ones too, went to whichever worker was free)."""
    group = "slurm" if item.get_closest_marker("slurm") else item.nodeid.split("::")[0]
    item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def solo_gate(request, tmp_path_factory):
    """Under pytest-xdist, a test marked `solo` is a wall-clock drill whose deadline a machine twice as busy
    as it planned for can make infeasible (a drill ran 3x slower beside another worker's DDP runs). As
    root, its processes run at a raised priority (`drill_priority`) and the other worker goes on beside it
    (it stood idle for 3-4 minutes of a 22-minute suite, waiting for a running test to end and then beside
    the drill); two drills never run at once (one lock, taken by solo tests only). Otherwise a solo test
    runs with no test beside it: every test holds the lock shared, a solo test alone; the gate, taken
    first by all, lets no new test start while a solo test waits for the running ones to end."""
    solo = request.node.get_closest_marker("solo") is not None
    if "PYTEST_XDIST_WORKER" not in os.environ or (DRILL_NICE and not solo):
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent   # the run's folder, above each worker's own
    if DRILL_NICE:
        with open(shared / "solo.drill", "a") as drill:
            fcntl.flock(drill, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(drill, fcntl.LOCK_UN)
        return
    with open(shared / "solo.gate", "a") as gate, open(shared / "solo.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
