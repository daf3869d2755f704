"""costsim export: the SkyPilot task and the Slurm script, checked as text and by the real engines."""

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from costsim.contract.plan import Plan
from costsim.errors import InputError
from costsim.export import skypilot_task, slurm_script
from costsim.storage import SYSTEM_GB

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sdxl_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("p") / "plan.json"
    from costsim.cli import main
    try:
        main(["plan", "--workload", "sdxl", "--trials", "40", "--gpu", "H200", "--out", str(out), "--format", "json"])
    except SystemExit as done:
        assert done.code in (0, None)
    plan = Plan.read(out)
    return replace(plan, resources=replace(plan.resources, nodes=2)).write(out)   # exercise the multi-node fields


def test_skypilot_task_fields(sdxl_plan):
    plan = Plan.read(sdxl_plan)
    task = yaml.safe_load(skypilot_task(plan, bucket="s3://ckpts"))
    r = plan.resources
    assert task["num_nodes"] == 2
    assert task["resources"]["accelerators"] == f"{r.gpu}:{r.gpus_per_node}"
    assert task["resources"]["use_spot"] is (r.market == "spot")
    assert task["resources"]["job_recovery"]["strategy"] == "FAILOVER"
    assert task["file_mounts"]["/checkpoints"] == {"source": "s3://ckpts", "mode": "MOUNT_CACHED"}
    # the disk holds the newest checkpoint and the one being written (the plan's budget) and the system's room
    c = plan.checkpoint
    assert c.node_disk_bytes >= 2 * c.bytes
    assert task["resources"]["disk_size"] == math.ceil(c.node_disk_bytes / 1e9) + SYSTEM_GB
    assert task["resources"]["disk_tier"] == "high"
    assert task["run"].startswith("runner execute plan.json --run-dir /checkpoints/runs/$SKYPILOT_TASK_ID")


def test_slurm_script_fields_and_syntax(sdxl_plan):
    plan = Plan.read(sdxl_plan)
    script = slurm_script(plan, shared_dir="/shared")
    p90 = plan.prediction.makespan_s.p90
    limit = next(line for line in script.splitlines() if line.startswith("#SBATCH --time="))
    hours = sum(int(x) * f for x, f in zip(limit.split("=")[1].split("-")[-1].split(":"), (3600, 60, 1)))
    days = int(limit.split("=")[1].split("-")[0]) if "-" in limit else 0
    assert days * 86400 + hours == pytest.approx(p90 * 1.25 + 1800, abs=1)
    for line in ("#SBATCH --nodes=2", "#SBATCH --requeue", f"#SBATCH --gpus-per-node={plan.resources.gpus_per_node}",
                 "#SBATCH --signal=TERM@120"):
        assert line in script
    assert 'srun --kill-on-bad-exit=0 runner execute plan.json --run-dir "$RUN_DIR"' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_slurm_refuses_a_node_local_checkpoint_place_for_several_nodes(sdxl_plan, tmp_path, run_cli):
    plan = Plan.read(sdxl_plan)   # 2 nodes
    with pytest.raises(InputError, match=r"--shared-dir: /tmp/runs: each node's own disk cannot hold"):
        slurm_script(plan, shared_dir="/tmp/runs")
    local = replace(plan, checkpoint=replace(plan.checkpoint, location="/scratch/ckpt")).write(tmp_path / "local.json")
    result = run_cli("export", str(local), "--to", "slurm")
    assert result.exit_code == 2 and "checkpoint.location: /scratch/ckpt: each node's own disk" in result.stderr
    one = replace(plan, resources=replace(plan.resources, nodes=1))
    assert "#SBATCH --nodes=1" in slurm_script(one, shared_dir="/tmp/runs")   # one node: its own disk is fine
    s3 = replace(plan, checkpoint=replace(plan.checkpoint, location="s3://bucket/ckpt"))
    assert "#SBATCH --nodes=2" in slurm_script(s3, shared_dir="/shared")


def test_owned_plans_do_not_export_to_skypilot(run_cli, tmp_path):
    out = tmp_path / "plan.json"
    assert run_cli("plan", "--workload", "tiny", "--trials", "10", "--out", str(out)).exit_code == 0
    result = run_cli("export", str(out), "--to", "skypilot")
    assert result.exit_code == 2 and "owned hardware" in result.stderr
    assert run_cli("export", str(out), "--to", "slurm").stdout.startswith("#!/bin/bash")


def test_a_drill_plan_does_not_export_to_skypilot_and_the_header_names_the_file_written(run_cli, tmp_path, sdxl_plan):
    drill = tmp_path / "drill.json"
    assert run_cli("plan", "--workload", "tiny-drill", "--trials", "10", "--out", str(drill)).exit_code == 0
    result = run_cli("export", str(drill), "--to", "skypilot")
    assert result.exit_code == 2 and "is not something SkyPilot launches" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    out = tmp_path / "mine.yaml"
    assert run_cli("export", str(sdxl_plan), "--to", "skypilot", "--out", str(out)).exit_code == 0
    assert f"# Launch with: sky jobs launch {out} " in out.read_text()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("COSTSIM_ENGINE_TESTS") == "0", reason="engine tests turned off")
def test_skypilots_own_parser_accepts_the_task(sdxl_plan, tmp_path):
    venv = tmp_path / "sky-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "skypilot==0.14.1"], capture_output=True,
                             text=True, timeout=600)
    if install.returncode != 0:
        pytest.skip(f"skypilot could not be installed here: {install.stderr[-300:]}")
    task = tmp_path / "task.yaml"
    task.write_text(skypilot_task(Plan.read(sdxl_plan)))
    result = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "skypilot_parse_check.py"), str(task),
                             str(ROOT / "data" / "catalog" / "offerings.csv")], capture_output=True, text=True,
                            env={**os.environ, "HOME": str(tmp_path / "home")}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    r = Plan.read(sdxl_plan).resources
    assert parsed["num_nodes"] == 2
    assert parsed["accelerators"] == {r.gpu: r.gpus_per_node}
    assert parsed["instance_type"] == r.instance and parsed["region"] == r.region
    assert parsed["use_spot"] == (r.market == "spot")
    assert parsed["job_recovery"]["strategy"] == "FAILOVER" and "/checkpoints" in parsed["mounts"]
    assert parsed["storage_modes"] == {"/checkpoints": "MOUNT_CACHED"}
    assert parsed["disk_size"] == math.ceil(Plan.read(sdxl_plan).checkpoint.node_disk_bytes / 1e9) + SYSTEM_GB
    assert parsed["disk_tier"] == "high"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("apt-get") is None or os.environ.get("COSTSIM_ENGINE_TESTS") == "0"
                    or not (os.environ.get("CI") or os.environ.get("COSTSIM_ENGINE_TESTS") == "1"),
                    reason="starts a Slurm cluster on this machine: only in CI or with COSTSIM_ENGINE_TESTS=1, as root")
@pytest.mark.slow
@pytest.mark.slurm
def test_exported_slurm_script_runs_on_a_one_host_slurm(tmp_path):
    try:
        result = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_localhost_check.sh"), str(tmp_path)],
                                capture_output=True, text=True, timeout=600)
    finally:
        subprocess.run(["pkill", "-x", "slurmctld"], check=False)
        subprocess.run(["pkill", "-x", "slurmd"], check=False)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert "slurm job finished: 3000 steps, status done" in result.stdout
