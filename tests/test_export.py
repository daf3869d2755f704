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
from costsim.export import PlanFile, skypilot_task, slurm_script
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
    task = yaml.safe_load(skypilot_task(PlanFile.read(sdxl_plan), workdir=ROOT, bucket="s3://ckpts"))
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
    # the plan travels as a file mount (git ignores plan.json, so the workdir sync leaves it out)
    assert task["file_mounts"]["~/.costsim/plan/plan.json"] == str(Path(sdxl_plan).resolve())
    assert task["run"] == "runner execute ~/.costsim/plan/plan.json --run-dir /checkpoints/runs/$SKYPILOT_TASK_ID\n"
    assert task["workdir"] == str(ROOT) and "store" not in task["setup"] and "secrets" not in task


def test_a_plan_outside_the_working_folder_is_uploaded_from_where_it_is(sdxl_plan, tmp_path, run_cli, monkeypatch):
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    relative = os.path.relpath(sdxl_plan, elsewhere)   # ../../p0/plan.json, as a user types it
    result = run_cli("export", relative, "--to", "skypilot")
    assert result.exit_code == 0, result.stderr
    task = yaml.safe_load(result.stdout)
    assert task["file_mounts"]["~/.costsim/plan/plan.json"] == str(Path(sdxl_plan).resolve())
    one = _one_node(sdxl_plan, tmp_path / "work" / "one.json")
    script = run_cli("export", "one.json", "--to", "slurm", "--shared-dir", "/shared").stdout
    assert f'runner execute {one} --run-dir "$RUN_DIR"' in script   # where the nodes find it, from any folder


def _one_node(plan_path, out) -> Path:
    plan = Plan.read(plan_path)
    return replace(plan, resources=replace(plan.resources, nodes=1)).write(out).resolve()


def test_an_s3_plan_brings_the_store_extra_its_settings_and_its_keys_as_secrets(sdxl_plan, tmp_path):
    s3 = replace(Plan.read(sdxl_plan), checkpoint=replace(Plan.read(sdxl_plan).checkpoint,
                                                          location="s3://team-ckpts/sdxl")).write(tmp_path / "s3.json")
    env = {"AWS_ENDPOINT_URL": "http://10.0.0.5:8333", "AWS_REGION": "eu-central-1", "AWS_ACCESS_KEY_ID": "AKIA-not-in-yaml",
           "AWS_SECRET_ACCESS_KEY": "not-in-yaml", "HOME": "/root"}
    text = skypilot_task(PlanFile.read(s3), workdir=ROOT, store_env=env)
    task = yaml.safe_load(text)
    assert "pip install -e '.[runner,sdxl,store]'" in task["setup"]
    assert task["envs"] == {"AWS_ENDPOINT_URL": "http://10.0.0.5:8333", "AWS_REGION": "eu-central-1"}
    assert task["secrets"] == {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}
    assert "not-in-yaml" not in text   # keys are given at launch, never written down
    assert "# Checkpoints: s3://team-ckpts/sdxl" in text
    assert "--secret AWS_ACCESS_KEY_ID --secret AWS_SECRET_ACCESS_KEY" in text.splitlines()[1]
    # no new bucket: the checkpoints are in the plan's store, the run folder on the node
    assert "/checkpoints" not in task["file_mounts"]
    assert task["run"].startswith("runner execute ~/.costsim/plan/s3.json --run-dir ~/costsim-runs/$SKYPILOT_TASK_ID")
    with_bucket = yaml.safe_load(skypilot_task(PlanFile.read(s3), workdir=ROOT, bucket="gs://runs", store_env={}))
    assert with_bucket["file_mounts"]["/checkpoints"]["source"] == "gs://runs" and "envs" not in with_bucket


def test_a_bucket_without_its_scheme_and_a_node_folder_for_spot_are_refused(sdxl_plan, tmp_path, run_cli):
    result = run_cli("export", str(sdxl_plan), "--to", "skypilot", "--bucket", "my-ckpts")
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        "error: --bucket: got 'my-ckpts'; give the bucket's URL with its scheme, e.g. s3://my-ckpts (SkyPilot reads a "
        "bare name as a local folder; allowed: s3://, gs://, r2://, cos://, oci://, nebius://, https://)"]
    local = replace(Plan.read(sdxl_plan), checkpoint=replace(Plan.read(sdxl_plan).checkpoint, location="/data/ckpt"))
    result = run_cli("export", str(local.write(tmp_path / "local.json")), "--to", "skypilot")
    assert result.exit_code == 2 and "checkpoint.location: /data/ckpt is a folder on the node's own disk" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_workload_option_naming_a_local_folder_is_uploaded_and_passed(sdxl_plan, tmp_path):
    weights = tmp_path / "sdxl base"
    weights.mkdir()
    plan = Plan.read(sdxl_plan)
    plan = replace(plan, workload=replace(plan.workload, options={"weights": str(weights), "ema": "0.9999"}))
    task = yaml.safe_load(skypilot_task(PlanFile(plan=plan, path=Path(sdxl_plan)), workdir=ROOT))
    assert task["file_mounts"]["~/.costsim/inputs/weights"] == str(weights)
    assert task["run"].rstrip().endswith("--option weights=~/.costsim/inputs/weights")
    assert "ema" not in task["run"]   # not a path: the plan carries it to the runner itself


def test_the_workdir_must_be_the_costsim_repository(sdxl_plan, tmp_path, run_cli):
    result = run_cli("export", str(sdxl_plan), "--to", "skypilot", "--workdir", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: --workdir: {tmp_path} is not the costsim repository: give the costsim " \
                                    "source folder the nodes install from"


def test_slurm_script_fields_and_syntax(sdxl_plan):
    plan = Plan.read(sdxl_plan)
    script = slurm_script(PlanFile(plan=plan, path=Path("/shared/plan.json")), shared_dir="/shared")
    for line in ("#SBATCH --nodes=2", "#SBATCH --requeue", f"#SBATCH --gpus-per-node={plan.resources.gpus_per_node}",
                 "#SBATCH --signal=TERM@120"):
        assert line in script
    assert 'srun --kill-on-bad-exit=0 runner execute /shared/plan.json --run-dir "$RUN_DIR"' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def _limit_s(script: str) -> int:
    value = next(line for line in script.splitlines() if line.startswith("#SBATCH --time=")).split("=")[1]
    days, _, clock = value.rpartition("-")
    return int(days or 0) * 86400 + sum(int(x) * f for x, f in zip(clock.split(":"), (3600, 60, 1)))


def test_slurm_time_limit_is_the_deadline_or_the_p90_whichever_is_shorter(sdxl_plan, tmp_path, run_cli):
    plan = Plan.read(sdxl_plan)
    p90 = plan.prediction.makespan_s.p90
    by_p90 = math.ceil(p90 * 1.25 + 1800)
    tight = replace(plan, policy=replace(plan.policy, deadline_s=by_p90 - 3600.0))
    script = slurm_script(PlanFile(plan=tight, path=Path("/shared/plan.json")), shared_dir="/shared")
    assert _limit_s(script) == by_p90 - 3600   # never past the deadline the plan was made for
    assert "# Time limit of each run of the job: the plan's deadline (P90 finish x 1.25 + 30 min would be" in script
    loose = replace(plan, policy=replace(plan.policy, deadline_s=by_p90 + 3600.0))
    script = slurm_script(PlanFile(plan=loose, path=Path("/shared/plan.json")), shared_dir="/shared")
    assert _limit_s(script) == by_p90 and "# Time limit of each run of the job: P90 finish x 1.25 + 30 min" in script
    one = _one_node(sdxl_plan, tmp_path / "one.json")
    result = run_cli("export", str(one), "--to", "slurm", "--shared-dir", "/shared", "--time-limit", "12h")
    assert _limit_s(result.stdout) == 12 * 3600 and "limit of each run of the job: --time-limit." in result.stdout
    assert run_cli("export", str(one), "--to", "slurm", "--time-limit", "12").exit_code == 2


def test_slurm_refuses_a_node_local_checkpoint_place_for_several_nodes(sdxl_plan, tmp_path, run_cli):
    plan = Plan.read(sdxl_plan)   # 2 nodes
    with pytest.raises(InputError, match=r"--shared-dir: /tmp/runs: each node's own disk cannot hold"):
        slurm_script(PlanFile(plan=plan, path=Path("/shared/plan.json")), shared_dir="/tmp/runs")
    local = replace(plan, checkpoint=replace(plan.checkpoint, location="/scratch/ckpt")).write(tmp_path / "local.json")
    result = run_cli("export", str(local), "--to", "slurm")
    assert result.exit_code == 2 and "checkpoint.location: /scratch/ckpt: each node's own disk" in result.stderr
    one = replace(plan, resources=replace(plan.resources, nodes=1))
    assert "#SBATCH --nodes=1" in slurm_script(PlanFile(plan=one, path=Path("/tmp/plan.json")), shared_dir="/tmp/runs")
    s3 = replace(plan, checkpoint=replace(plan.checkpoint, location="s3://bucket/ckpt"))
    assert "#SBATCH --nodes=2" in slurm_script(PlanFile(plan=s3, path=Path("/shared/plan.json")), shared_dir="/shared")
    with pytest.raises(InputError, match=r"/tmp/plan.json: file: in a node-local folder: the other nodes of a 2-node"):
        slurm_script(PlanFile(plan=s3, path=Path("/tmp/plan.json")), shared_dir="/shared")


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


@pytest.fixture(scope="module")
def sky(tmp_path_factory):
    """Run scripts/skypilot_parse_check.py under SkyPilot 0.14.1 (its own venv): parse and upload a task."""
    if os.environ.get("COSTSIM_ENGINE_TESTS") == "0":
        pytest.skip("engine tests turned off")
    scratch = tmp_path_factory.mktemp("sky")
    venv = scratch / "sky-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # --no-compile: its ~100 packages' bytecode is written as the check imports them, not all at install (36.7 s
    # against 24.2 s to install here; the check's first import then 5.3 s against 2.0 s)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "skypilot==0.14.1"],
                             capture_output=True, text=True, timeout=600)
    if install.returncode != 0:
        pytest.skip(f"skypilot could not be installed here: {install.stderr[-300:]}")

    def check(task_text: str, *secrets: str, env: dict | None = None) -> dict:
        task = scratch / "task.yaml"
        task.write_text(task_text)
        result = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "skypilot_parse_check.py"),
                                 str(task), str(ROOT / "data" / "catalog" / "offerings.csv"),
                                 *[arg for name in secrets for arg in ("--secret", name)]],
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, **(env or {}), "HOME": str(scratch / "home")})
        assert result.returncode == 0, result.stderr[-3000:]
        return json.loads(result.stdout.strip().splitlines()[-1])
    return check


def _sha256(path) -> str:
    import hashlib
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _node_command_files(parsed: dict) -> list[str]:
    """The local files the node's run step names: the plan after `execute`, each --option's value."""
    words = parsed["run"].split()
    files = [words[words.index("execute") + 1]]
    return files + [w.split("=", 1)[1] for prev, w in zip(words, words[1:]) if prev == "--option"]


@pytest.mark.slow
def test_skypilot_parses_the_task_and_uploads_what_the_node_runs(sky, sdxl_plan):
    parsed = sky(skypilot_task(PlanFile.read(sdxl_plan), workdir=ROOT))
    r = Plan.read(sdxl_plan).resources
    assert parsed["num_nodes"] == 2
    assert parsed["accelerators"] == {r.gpu: r.gpus_per_node}
    assert parsed["instance_type"] == r.instance and parsed["region"] == r.region
    assert parsed["use_spot"] == (r.market == "spot")
    assert parsed["job_recovery"]["strategy"] == "FAILOVER" and "/checkpoints" in parsed["mounts"]
    assert parsed["storage_modes"] == {"/checkpoints": "MOUNT_CACHED"}
    assert parsed["disk_size"] == math.ceil(Plan.read(sdxl_plan).checkpoint.node_disk_bytes / 1e9) + SYSTEM_GB
    assert parsed["disk_tier"] == "high"
    # what the node runs is in what SkyPilot uploads: the plan (byte for byte) and what setup installs
    (plan_on_node,) = _node_command_files(parsed)
    assert parsed["uploaded"][plan_on_node] == _sha256(sdxl_plan)
    for needed in ("pyproject.toml", "costsim/__init__.py", "runner/__init__.py", "costsim/data/__init__.py"
                   if (ROOT / "costsim" / "data").exists() else "data/catalog/offerings.csv"):
        assert parsed["uploaded"][f"~/sky_workdir/{needed}"] == _sha256(ROOT / needed)


@pytest.mark.slow
def test_skypilot_uploads_a_plan_that_git_ignores_and_the_inputs_an_option_names(sky, sdxl_plan, tmp_path):
    """The repository ignores plan.json: a plan kept beside pyproject.toml (as the old export told users to)
    is left out of the workdir by SkyPilot's own exclusion, and still reaches the node."""
    work = tmp_path / "repo"
    work.mkdir()
    for name in (".gitignore", "pyproject.toml"):
        shutil.copy(ROOT / name, work / name)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    weights = tmp_path / "weights"
    (weights / "unet").mkdir(parents=True)
    (weights / "unet" / "config.json").write_text("{}")
    plan = Plan.read(sdxl_plan)
    plan = replace(plan, workload=replace(plan.workload, options={"weights": str(weights)})).write(work / "plan.json")
    parsed = sky(skypilot_task(PlanFile.read(plan), workdir=work))
    assert "plan.json" in parsed["excluded_from_workdir"]   # SkyPilot's own rule: git ignores it
    plan_on_node, weights_on_node = _node_command_files(parsed)
    assert parsed["uploaded"][plan_on_node] == _sha256(plan)
    assert parsed["uploaded"][f"{weights_on_node}/unet/config.json"] == _sha256(weights / "unet" / "config.json")


@pytest.mark.slow
def test_skypilot_gives_an_s3_plans_node_the_store_settings_and_keys(sky, sdxl_plan, tmp_path):
    plan = Plan.read(sdxl_plan)
    s3 = replace(plan, checkpoint=replace(plan.checkpoint, location="s3://team-ckpts/sdxl")).write(tmp_path / "s3.json")
    task = skypilot_task(PlanFile.read(s3), workdir=ROOT, store_env={"AWS_ENDPOINT_URL": "http://store:8333",
                                                                     "AWS_REGION": "us-east-1"})
    keys = {"AWS_ACCESS_KEY_ID": "id-from-env", "AWS_SECRET_ACCESS_KEY": "key-from-env"}
    parsed = sky(task, *keys, env=keys)   # as `sky jobs launch task.yaml --secret AWS_ACCESS_KEY_ID --secret ...`
    assert parsed["envs"] == {"AWS_ENDPOINT_URL": "http://store:8333", "AWS_REGION": "us-east-1"}
    assert parsed["secrets"] == sorted(keys)
    assert ".[runner,sdxl,store]" in parsed["setup"]
    assert parsed["storage_modes"] == {}   # no bucket made: the checkpoints are in the plan's store
    (plan_on_node,) = _node_command_files(parsed)
    assert parsed["uploaded"][plan_on_node] == _sha256(s3)
    unresolved = sky(task)   # launched without --secret: SkyPilot holds them as references to resolve
    assert unresolved["secret_refs"] == sorted(keys) and unresolved["secrets"] == []


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


def test_the_slurm_scripts_run_folder_is_a_path_wherever_the_job_is_submitted(sdxl_plan, tmp_path, run_cli,
                                                                               monkeypatch):
    """--shared-dir as the script's shell reads it: a relative folder made absolute (sbatch may be run from
    elsewhere), ~ as $HOME, a variable kept; anything the shell would run or unquote refused in one line."""
    one = _one_node(sdxl_plan, tmp_path / "one.json")
    monkeypatch.chdir(tmp_path)
    scripts = {given: run_cli("export", str(one), "--to", "slurm", "--shared-dir", given)
               for given in ("runs", "~/runs", "$SCRATCH/team runs", "/shared")}
    assert all(r.exit_code == 0 for r in scripts.values()), {g: r.stderr for g, r in scripts.items()}
    run_dirs = [next(line for line in r.stdout.splitlines() if line.startswith("RUN_DIR=")) for r in scripts.values()]
    assert [line.split("   #")[0] for line in run_dirs] == [
        f'RUN_DIR="{tmp_path.resolve()}/runs/runs/$SLURM_JOB_ID"', 'RUN_DIR="$HOME/runs/runs/$SLURM_JOB_ID"',
        'RUN_DIR="$SCRATCH/team runs/runs/$SLURM_JOB_ID"', 'RUN_DIR="/shared/runs/$SLURM_JOB_ID"']
    for bad in ('/shared/$(touch /tmp/x)', '/a"b', "/a`id`", ""):
        result = run_cli("export", str(one), "--to", "slurm", "--shared-dir", bad)
        assert result.exit_code == 2 and result.stderr.startswith("error: --shared-dir: ") and \
            len(result.stderr.strip().splitlines()) == 1, (bad, result.stderr)
