"""Two `runner execute` nodes on loopback (torchrun c10d rendezvous), CPU, 1 gloo process each."""

import json
import socket
import subprocess
import sys

import pytest

from tests.runner_helpers import events, execute, summary, tiny_plan

pytest.importorskip("torch")
STEPS = "160"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
