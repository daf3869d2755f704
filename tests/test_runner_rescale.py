"""A plan run on the processes a job actually gets: the plan's micro-batch, accumulation for the rest,
samples numbered globally, so that a job that goes on at another world size trains on the same
samples (CPU, gloo)."""

import json
import os
import subprocess
import sys

import pytest

from runner.batching import BatchSplitError, split_batch
from tests.runner_helpers import events, execute, summary, tiny_plan


@pytest.mark.parametrize("global_batch, processes, plan_micro, micro, accumulation", [
    (64, 8, 8, 8, 1),     # as planned
    (64, 2, 8, 8, 4),     # fewer GPUs: the plan's micro-batch, more accumulation
    (64, 1, 8, 8, 8),
    (64, 16, 8, 4, 1),    # more GPUs: fewer samples each, never a micro-batch above the plan's
    (48, 2, 16, 12, 2),   # 24 per rank: the largest micro-batch <= 16 that divides it
    (60, 4, 16, 15, 1),
    (60, 2, 8, 6, 5),     # 30 per rank: 8 and 7 do not divide, 6 does
    (7, 7, 4, 1, 1),
])
def test_split_keeps_the_plans_micro_batch_and_the_global_batch(global_batch, processes, plan_micro, micro,
                                                                 accumulation):
    split = split_batch(global_batch, processes, plan_micro)
    assert (split.micro_batch, split.accumulation) == (micro, accumulation)
    assert split.micro_batch <= plan_micro
    assert split.micro_batch * split.accumulation * processes == global_batch


@pytest.mark.parametrize("global_batch, processes", [(64, 3), (64, 5), (10, 4)])
def test_a_global_batch_that_cannot_split_is_refused_with_the_numbers(global_batch, processes):
    with pytest.raises(BatchSplitError, match=f"global batch {global_batch} does not split over {processes} processes"):
        split_batch(global_batch, processes, 8)


def test_a_steps_samples_are_the_same_set_at_any_world_size():
    global_batch, step = 48, 7
    expected = list(range(step * global_batch, (step + 1) * global_batch))
    for processes, plan_micro in ((1, 48), (1, 8), (2, 8), (3, 4), (4, 5), (6, 8), (48, 8)):
        split = split_batch(global_batch, processes, plan_micro)
        taken = [i for rank in range(processes) for micro in range(split.accumulation)
                 for i in split.indices(step, rank, micro)]
        assert sorted(taken) == expected and len(taken) == len(set(taken))
        assert all(len(split.indices(step, r, m)) == split.micro_batch
                   for r in range(processes) for m in range(split.accumulation))


pytest.importorskip("torch")


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return tiny_plan(tmp_path_factory.mktemp("plan"), interval_steps=50)


def one_line_error(result, *words):
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def execute_entry(plan, folder, entry, *args):
    """`runner execute` of a workload module written into `folder`, into folder/run."""
    return subprocess.run([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(folder / "run"),
                           "--workload-entry", entry, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(folder)})


def test_processes_that_cannot_split_the_global_batch_are_refused_before_anything_starts(plan, tmp_path):
    result = execute(plan, tmp_path / "run", "--nproc-per-node", "3")
    one_line_error(result, "global batch 64 does not split over 3 processes", "workload.global_batch")
    assert not (tmp_path / "run" / "telemetry.jsonl").exists()


def test_an_elastic_range_is_checked_at_every_node_count(plan, tmp_path):
    doc = json.loads(plan.read_text())
    doc["resources"].update(gpus_per_node=1, nodes=3)
    three = tmp_path / "plan3.json"
    three.write_text(json.dumps(doc))
    result = execute(three, tmp_path / "run", "--nnodes", "3", "--node-rank", "0", "--rdzv-endpoint",
                     "127.0.0.1:1", "--min-nodes", "2")
    one_line_error(result, "global batch 64 does not split over 3 processes", "3 node(s)")


def test_an_unknown_option_is_refused_before_anything_starts(plan, tmp_path):
    result = execute(plan, tmp_path / "run", "--option", "weigths=/models/unet")
    one_line_error(result, "'weigths'", "--option")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_workload_with_the_old_batch_interface_is_refused_with_the_new_one_named(plan, tmp_path):
    (tmp_path / "old.py").write_text(
        "import torch\nfrom runner.workloads import Built, workload\n"
        "@workload()\ndef build(ctx):\n    model = torch.nn.Linear(2, 1)\n"
        "    return Built(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),\n"
        "                 batch=lambda step, micro: torch.zeros(1, 2), loss=lambda m, b: m(b).sum())\n")
    result = execute_entry(plan, tmp_path, "old:build")
    assert result.returncode == 2
    assert "not restarting: the workload's batch takes 2 arguments; the interface is batch(indices)" in result.stderr
    assert summary(tmp_path / "run")["restarts"] == 0


@pytest.mark.slow
def test_running_out_of_memory_stops_at_once_with_what_to_try(plan, tmp_path):
    (tmp_path / "hungry.py").write_text(
        "import torch\nfrom runner.workloads import workload\nfrom runner.workloads.tiny import build as tiny\n"
        "@workload()\ndef build(ctx):\n    built = tiny(ctx)\n    calls = []\n    inner = built.loss\n"
        "    def loss(model, data):\n        calls.append(1)\n"
        "        if len(calls) > 3:\n"
        "            raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 20.00 GiB')\n"
        "        return inner(model, data)\n"
        "    built.loss = loss\n    return built\n")
    result = execute_entry(plan, tmp_path, "hungry:build", "--steps", "50")
    assert result.returncode == 1
    # Why it stopped, in one line of the runner's own, and no traceback; torchrun's log lines about the
    # ranks it stopped (how many depends on which rank ran out first) are not counted.
    assert "Traceback" not in result.stderr, result.stderr
    stops = [x for x in result.stderr.splitlines() if x.startswith("runner: not restarting")]
    assert len(stops) == 1, result.stderr
    line = stops[0]
    assert "out of memory on rank" in line and "32 samples per micro-batch" in line
    assert "activation_checkpointing" in line and "more GPUs" in line
    s = summary(tmp_path / "run")
    assert s["status"] == "failed" and s["reason"] == "out_of_memory" and s["restarts"] == 0
    assert len(s["attempts"]) == 1


@pytest.mark.slow
def test_a_job_resumed_on_another_world_size_ends_where_the_uninterrupted_job_ends(plan, tmp_path):
    args = ("--seed", "7")
    whole = execute(plan, tmp_path / "whole", "--steps", "300", *args)
    assert whole.returncode == 0, whole.stderr[-3000:]
    moved = tmp_path / "moved"
    for steps, nproc in (("100", "2"), ("200", "1"), ("300", "2")):
        result = execute(plan, moved, "--steps", steps, "--nproc-per-node", nproc, *args)
        assert result.returncode == 0, result.stderr[-3000:]
        if nproc == "1":
            alone = summary(moved)
    reference, final = summary(tmp_path / "whole"), summary(moved)
    # 2 x 32 as planned; on one process the plan's micro-batch of 32, twice
    assert (reference["world_size"], reference["micro_batch"], reference["accumulation"]) == (2, 32, 1)
    assert (alone["world_size"], alone["micro_batch"], alone["accumulation"]) == (1, 32, 2)
    assert alone["attempts"][0]["accumulation"] == 2
    assert [e["step"] for e in events(moved, "start")] == [0, 100, 200]
    assert final["steps"] == 300
    # not bit-exact (another reduction order) but the same samples and the same steps
    assert final["final_loss"] == pytest.approx(reference["final_loss"], rel=1e-4)
    # the loss went down: the same samples are being learned, not others
    first = execute(plan, tmp_path / "short", "--steps", "10", *args)
    assert first.returncode == 0
    assert reference["final_loss"] < summary(tmp_path / "short")["final_loss"]

    from costsim.calibrate import load_run
    points = {(p.gpus, p.micro_batch, p.accumulation) for p in load_run(str(moved)).points}
    assert points == {(2, 32, 1), (1, 32, 2)}


@pytest.mark.slow
def test_the_final_loss_is_the_global_batchs_mean_whatever_the_world_size(plan, tmp_path):
    """summary.json's final_loss (and `runner report`'s line) is the last step's loss over the whole global
    batch: the mean of the ranks' micro-batch means. One process accumulating the same samples gets the
    same figure; rank 0's own half of the batch does not (the report used to call it rank 0's)."""
    two = execute(plan, tmp_path / "two", "--steps", "40", "--seed", "3")
    one = execute(plan, tmp_path / "one", "--steps", "40", "--seed", "3", "--nproc-per-node", "1")
    assert two.returncode == 0 and one.returncode == 0, (two.stderr[-2000:], one.stderr[-2000:])
    both, alone = summary(tmp_path / "two")["final_loss"], summary(tmp_path / "one")["final_loss"]
    assert both == pytest.approx(alone, rel=1e-4)
    rank0 = [e for e in events(tmp_path / "two", "progress") if "loss_rank0" in e]
    if rank0 and rank0[-1]["step"] == 40:
        assert rank0[-1]["loss_rank0"] != pytest.approx(both, rel=1e-4)
    report = subprocess.run([sys.executable, "-m", "runner", "report", str(tmp_path / "two")], capture_output=True,
                            text=True, timeout=60)
    line = next(x for x in report.stdout.splitlines() if x.startswith("final loss"))
    assert line.split()[2] == f"{both:.4g}" and "mean over ranks" in line
