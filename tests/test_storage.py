"""The planner knows where checkpoints live: the store sets the durable save, the restart's fetch, whether
an emergency save fits the notice, the node disk, and the store's bill; EMA changes the bytes and the batch."""

import json
from dataclasses import replace

import numpy as np
import pytest
import yaml

from costsim import io
from costsim.montecarlo import run_trials, timeline_for
from costsim.planner import configure
from costsim.policies import get as policy
from costsim.sim.trial import run_trial
from costsim.storage import HOURS_PER_MONTH, Store, load_storage

AWS_H200 = "aws/us-east-1/p5en.48xlarge"
GCP_H200 = "gcp/us-central1/a3-ultragpu-8g"


@pytest.fixture(scope="module")
def sdxl():
    workload = io.load_workload("sdxl")
    return workload, io.load_profile_for(workload.model, workload.profile), io.load_offerings()


def pick(configured, offering, policy_name, nodes=1, variant=None):
    return next(c for c in configured if c.candidate.offering.id == offering and c.candidate.policy == policy_name
                and c.candidate.nodes == nodes and (variant is None or c.candidate.variant == variant))


def with_store(storage, **changes):
    """The shipped storage file with aws-s3 changed."""
    stores = dict(storage.stores)
    stores["aws-s3"] = replace(stores["aws-s3"], **changes)
    return replace(storage, stores=stores)


def test_an_object_store_adds_its_upload_to_the_save_and_its_fetch_to_the_restart(sdxl):
    workload, profile, offerings = sdxl
    storage = load_storage()
    shipped, _ = configure(workload, profile, offerings, workload.deadline_s, storage)
    slower, _ = configure(workload, profile, offerings, workload.deadline_s,
                          with_store(storage, write_gb_per_s=0.5, read_gb_per_s=0.75))
    node, _ = configure(replace(workload, checkpoint_storage="node-disk"), profile, offerings, workload.deadline_s,
                        storage)
    a, b, n = (pick(c, AWS_H200, "on-demand") for c in (shipped, slower, node))
    s3 = storage.stores["aws-s3"]
    size = a.checkpoints.bytes
    assert size == profile.checkpoint_bytes == 30.8e9
    # halving the bandwidth adds one more upload to the save and one more fetch to the restart
    assert b.config.params.checkpoint_s - a.config.params.checkpoint_s == pytest.approx(size / (s3.write_gb_per_s * 1e9))
    assert b.config.params.restart_s - a.config.params.restart_s == pytest.approx(size / (s3.read_gb_per_s * 1e9))
    # on the node's own disk neither is paid: the profile's figures as measured
    assert n.config.params.checkpoint_s == n.gpu.checkpoint_save_s < a.config.params.checkpoint_s
    assert n.config.params.restart_s == n.gpu.restart_s < a.config.params.restart_s
    # the async stall stays the local copy's (the upload runs behind training)
    assert a.config.params.checkpoint_stall_s == n.config.params.checkpoint_stall_s == a.gpu.checkpoint_stall_s


def test_checkpoints_on_the_node_disk_are_refused_for_spot_and_for_several_nodes(run_cli, tmp_path):
    doc = yaml.safe_load(io.resolve("sdxl", "workloads").read_text())
    doc["checkpoint"]["storage"] = "node-disk"
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump(doc))
    result = run_cli("plan", "--workload", str(workload), "--gpu", "H200", "--trials", "20", "--format", "json",
                     "--out", str(tmp_path / "plan.json"))
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    ranked = {(r["policy"], r["nodes"]) for r in out["candidates"]}
    assert {r["checkpoint_storage"] for r in out["candidates"]} == {"node-disk"}
    assert ranked and all(policy_name in ("on-demand", "owned") and nodes == 1 for policy_name, nodes in ranked)
    reasons = [s["reason"] for s in out["skipped"]]
    assert any("gone with a reclaimed spot node" in r for r in reasons)
    assert any("cannot be read by the other nodes" in r for r in reasons)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["checkpoint"]["storage"] == "node-disk" and plan["checkpoint"]["storage_kind"] == "node"
    doc["checkpoint"]["storage"] = "nas"
    workload.write_text(yaml.safe_dump(doc))
    result = run_cli("plan", "--workload", str(workload), "--gpu", "H200", "--trials", "20")
    assert result.exit_code == 2 and "checkpoint.storage: unknown store 'nas'; allowed: aws-s3" in result.stderr


def test_an_emergency_save_counts_only_where_the_durable_save_fits_the_notice(sdxl):
    """The 30.8 GB checkpoint saved and uploaded to S3 takes about a minute: within AWS's 2-minute notice
    (a reclaim loses at most a save's worth: the notice rule lets go only of training that costs less to
    redo than a save, or that a save could not keep in the time left after a write in flight), not within
    GCP's 30 s (up to an interval lost)."""
    workload, profile, offerings = sdxl
    configured, _ = configure(workload, profile, offerings, workload.deadline_s, load_storage())
    lost, preempted, save_s = {}, {}, {}
    for offering in (AWS_H200, GCP_H200):
        c = pick(configured, offering, "spot-only")
        notice = c.candidate.offering.spot_notice_s
        fits = c.config.params.checkpoint_s <= notice
        assert fits is (offering == AWS_H200), (offering, c.config.params.checkpoint_s, notice)
        outcomes = [run_trial(c.config.params, policy("spot-only"), timeline_for(c.config, 0, i)[0], c.config.prices)
                    for i in range(20)]
        preempted[offering] = sum(o.preemptions for o in outcomes)
        assert preempted[offering] > 0
        lost[offering] = sum(o.lost_work_s for o in outcomes)
        save_s[offering] = c.config.params.checkpoint_s
    assert lost[AWS_H200] <= preempted[AWS_H200] * save_s[AWS_H200] * (1 + 1e-9)
    assert lost[GCP_H200] / preempted[GCP_H200] > 2 * lost[AWS_H200] / preempted[AWS_H200]


def test_the_store_is_on_the_bill_gb_months_times_keep(sdxl):
    workload, profile, offerings = sdxl
    storage = load_storage()
    free, _ = configure(workload, profile, offerings, workload.deadline_s, with_store(storage, usd_per_gb_month=0.0))
    dear, _ = configure(workload, profile, offerings, workload.deadline_s, with_store(storage, usd_per_gb_month=1.0))
    a, b = pick(free, AWS_H200, "greedy"), pick(dear, AWS_H200, "greedy")
    assert a.config.params == b.config.params   # the same job, only the store's price differs
    sa, sb = run_trials(a.config, 40, seed=3), run_trials(b.config, 40, seed=3)
    per_h = 1.0 * 30.8 * workload.checkpoint_keep / HOURS_PER_MONTH
    assert np.allclose(sb.cost - sa.cost, per_h * sa.makespan_s / 3600.0)


def test_the_node_disk_budget_holds_two_checkpoints_or_the_newest_and_the_export(sdxl):
    workload, profile, offerings = sdxl
    configured, _ = configure(workload, profile, offerings, workload.deadline_s, load_storage())
    c = pick(configured, AWS_H200, "greedy").checkpoints
    assert c.node_disk_bytes >= max(2 * c.bytes, c.bytes + profile.export_bytes)
    shared = Store(name="nfs", kind="shared", write_gb_per_s=1, read_gb_per_s=1, usd_per_gb_month=0, source="t",
                   read_date="2026-12-01")
    storage = replace(load_storage(), stores={**load_storage().stores, "nfs": shared})
    on_nfs, _ = configure(replace(workload, checkpoint_storage="nfs"), profile, offerings, workload.deadline_s, storage)
    n = pick(on_nfs, AWS_H200, "greedy").checkpoints
    assert c.bytes > n.node_disk_bytes >= profile.export_bytes   # written straight to the share: the export only


def test_ema_makes_checkpoints_larger_and_the_batch_smaller(run_cli, tmp_path):
    doc = yaml.safe_load(io.resolve("sdxl", "workloads").read_text())
    profile = io.load_profile("sdxl-unet")
    for name, options in (("plain", None), ("ema", {"ema": 0.9999})):
        if options:
            doc["options"] = options
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        result = run_cli("plan", "--workload", str(tmp_path / f"{name}.yaml"), "--gpu", "H200", "--trials", "20",
                         "--out", str(tmp_path / f"{name}.json"))
        assert result.exit_code == 0, result.stderr
    plain, ema = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("plain", "ema"))
    assert plain["checkpoint"]["bytes"] == profile.checkpoint_bytes and plain["workload"]["options"] == {}
    assert ema["checkpoint"]["bytes"] == profile.ema_checkpoint_bytes > profile.checkpoint_bytes
    assert ema["workload"]["options"] == {"ema": "0.9999"}   # the runner trains with what was priced
    assert ema["prediction"]["per_gpu_batch"] <= profile.ema_max_batch["H200"]
    # every H200 configuration is held to the EMA limit (the main one runs 16 per GPU without EMA)
    workload = io.load_workload(str(tmp_path / "ema.yaml"))
    configured, _ = configure(workload, profile, io.load_offerings(), workload.deadline_s, load_storage())
    limits = {c.gpu.variant: c.gpu.max_batch_per_gpu for c in configured if c.gpu.gpu == "H200"}
    assert profile.gpus["H200"].max_batch_per_gpu == 16 and set(limits.values()) == {8} and len(limits) > 1
    assert ema["prediction"]["checkpoint_save_s"] > plain["prediction"]["checkpoint_save_s"]
    doc["profile"] = "tiny"
    doc["model"] = "tiny"
    (tmp_path / "no-ema.yaml").write_text(yaml.safe_dump(doc))
    result = run_cli("plan", "--workload", str(tmp_path / "no-ema.yaml"), "--trials", "10")
    assert result.exit_code == 2 and "options.ema: the profile" in result.stderr and "has no `ema` figures" in result.stderr
