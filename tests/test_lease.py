"""One runner per run folder (runner/lease.py): a second runner is refused in one line naming the holder,
a holder that is gone is taken over, a holder taken over stops before it writes again, and a lease file
that is not one is one line. Real `runner execute` processes on the tiny plan, paced so that they run
long enough to meet each other."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.runner_helpers import events, execute, tiny_plan

pytest.importorskip("torch")
pytestmark = pytest.mark.slow   # real runner processes
PACED = ["--steps", "4000", "--option", "pace=3ms"]   # 12 s of training
FAST_LEASE = {"COSTSIM_LEASE_TTL_S": "3"}            # a heartbeat a second


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return tiny_plan(tmp_path_factory.mktemp("plan"), interval_steps=200)


def start(plan, run, *args):
    return subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run), *PACED,
                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **FAST_LEASE})


def training(run, since: float, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not any(e["t"] > since for e in events(run, "step")):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_second_runner_is_refused_and_a_killed_holder_is_taken_over(plan, tmp_path):
    run = tmp_path / "run"
    first = start(plan, run)
    training(run, 0)
    second = execute(plan, run, *PACED)
    lines = [x for x in second.stderr.splitlines() if x.strip()]
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert f"held by runner pid {first.pid} on " in lines[0] and "one runner per run folder" in lines[0]
    os.killpg(first.pid, signal.SIGKILL)   # a holder that vanished: its lease is still on the disk
    first.wait()
    assert json.loads((run / "lease.json").read_text())["pid"] == first.pid
    third = execute(plan, run, *PACED)     # this host: its process is gone, taken over at once
    assert third.returncode == 0, third.stderr[-2000:]
    assert f"taking over {run} from runner pid {first.pid}" in third.stderr
    assert not (run / "lease.json").exists()   # given back at the end


def test_a_holder_whose_lease_was_taken_over_stops_before_it_writes_again(plan, tmp_path):
    """As if another node had taken the folder over while this one was thought dead: its heartbeat finds the
    other's token and stops the workers; it writes no summary and no exit record of its own."""
    run = tmp_path / "run"
    first = start(plan, run)
    training(run, 0)
    lease = json.loads((run / "lease.json").read_text())
    other = {**lease, "token": "other", "host": "node-b", "pid": 4242, "heartbeat": time.time()}
    (run / "lease.json").write_text(json.dumps(other))
    _, err = first.communicate(timeout=60)
    assert first.returncode == 1, err[-2000:]
    assert "was taken over by runner pid 4242 on node-b" in err
    lines_after = len((run / "telemetry.jsonl").read_text().splitlines())
    time.sleep(2)
    assert len((run / "telemetry.jsonl").read_text().splitlines()) == lines_after   # nothing more written
    assert not (run / "summary.json").exists() and not events(run, "exit", rank=None)
    assert json.loads((run / "lease.json").read_text())["token"] == "other"   # left to its holder


def test_a_lease_file_that_is_not_one_is_one_line(plan, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "lease.json").write_text("{not json")
    result = execute(plan, run, "--steps", "10")
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "lease.json: lease: not a runner's lease" in lines[0]
