"""Two `runner execute` nodes on loopback (torchrun c10d rendezvous), CPU, 1 gloo process each."""

import json
import subprocess
import sys

import pytest

from tests.runner_helpers import events, execute, free_port, summary, tiny_plan

pytest.importorskip("torch")
pytestmark = pytest.mark.slow   # real DDP runs (see pyproject's markers)
STEPS = "160"


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plans")
    one = tiny_plan(folder, interval_steps=40)
    doc = json.loads(one.read_text())
    doc["resources"].update(gpus_per_node=1, nodes=2)
    two = folder / "plan-2nodes.json"
    two.write_text(json.dumps(doc))
    return one, two


def two_nodes(plan, run_dirs, *extra_per_node, run_id="mn-test"):
    port = free_port()
    procs = []
    for rank, run_dir in enumerate(run_dirs):
        args = [sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run_dir), "--run-id", run_id,
                "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", f"127.0.0.1:{port}", "--steps", STEPS,
                "--seed", "5", *extra_per_node[rank]]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return [(p.wait(timeout=240), p.stderr.read()) for p in procs]


def test_two_nodes_train_like_one_node_of_the_same_world_size(plans, tmp_path):
    one, two = plans
    assert execute(one, tmp_path / "one", "--steps", STEPS, "--seed", "5").returncode == 0
    results = two_nodes(two, [tmp_path / "two"] * 2, [], [])
    assert all(code == 0 for code, _ in results), results[0][1][-2000:] + results[1][1][-2000:]
    # 2 nodes x 1 process and 1 node x 2 processes: the same ranks, data and sums, so the same bits
    assert summary(tmp_path / "two")["final_state_sha256"] == summary(tmp_path / "one")["final_state_sha256"]
    assert (tmp_path / "two" / "summary.node-1.json").exists()


def test_killing_one_nodes_worker_restarts_both_from_the_last_checkpoint(plans, tmp_path):
    one, two = plans
    assert execute(one, tmp_path / "one", "--steps", STEPS, "--seed", "5").returncode == 0
    results = two_nodes(two, [tmp_path / "two"] * 2, [], ["--inject-preemptions", "kill@100"])
    assert all(code == 0 for code, _ in results), results[0][1][-2000:] + results[1][1][-2000:]
    restarts = [e for e in events(tmp_path / "two", "restart", rank=None)]
    assert {e["node"] for e in restarts} == {0, 1}                # both nodes restarted
    loads = {e["step"] for e in events(tmp_path / "two", "checkpoint_load", rank=None)}
    assert loads == {80}                                            # both from the last checkpoint
    assert summary(tmp_path / "two")["final_state_sha256"] == summary(tmp_path / "one")["final_state_sha256"]


def test_a_node_that_cannot_see_the_checkpoints_refuses_to_start(plans, tmp_path):
    _, two = plans
    results = two_nodes(two, [tmp_path / "a", tmp_path / "b"], [], [])
    assert all(code == 2 for code, _ in results)
    assert any("must be shared storage" in err for _, err in results)
    assert summary(tmp_path / "a")["restarts"] == 0


def test_elastic_job_goes_on_with_fewer_nodes_keeping_the_global_batch(plans, tmp_path):
    import os
    import signal
    import time
    _, two = plans
    run_dir, port = tmp_path / "elastic", free_port()
    common = ["--run-dir", str(run_dir), "--run-id", "elastic", "--nnodes", "2", "--rdzv-endpoint",
              f"127.0.0.1:{port}", "--min-nodes", "1", "--steps", "2000", "--seed", "5"]
    node0 = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(two), "--node-rank", "0", *common],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    node1 = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(two), "--node-rank", "1", *common],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not any(e["step"] >= 80 for e in events(run_dir, "checkpoint_save")) and time.monotonic() < deadline:
        time.sleep(0.2)
    victims = [e["pid"] for e in events(run_dir, "start", rank=None) if e.get("node") == 1]
    os.killpg(node1.pid, signal.SIGKILL)          # node 1's supervisor and torchrun
    for pid in victims:                            # and its workers (torchrun starts them in their own sessions)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    node1.wait()
    assert node0.wait(timeout=240) == 0, node0.stderr.read()[-3000:]
    starts = events(run_dir, "start")
    assert [e["world_size"] for e in starts][0] == 2 and starts[-1]["world_size"] == 1
    assert starts[-1]["step"] >= 80   # resumed
    # the same global batch on half the processes: the plan's micro-batch, twice the accumulation
    splits = [(e["world_size"], e["micro_batch"], e["accumulation"]) for e in events(run_dir, "runtime")]
    assert splits[0] == (2, 32, 1) and splits[-1] == (1, 32, 2)
    assert summary(run_dir)["steps"] == 2000
