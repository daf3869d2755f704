"""Runner pieces without processes: safe checkpoint metadata, verification, launch, drill schedules."""

import json
import os
import pickle
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("torch")

import torch  # noqa: E402

from runner import faults, ownership  # noqa: E402
from runner.checkpoint_manifest import MANIFEST, verify  # noqa: E402
from runner.checkpoint_reader import SafeFileSystemReader  # noqa: E402
from runner.launch import LaunchError, Node, discover, expand_slurm_nodelist, torchrun_argv  # noqa: E402
from runner.workloads import UnknownWorkload, resolve  # noqa: E402


class Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/costsim-pwned",))


def test_checkpoint_metadata_cannot_run_code(tmp_path):
    (tmp_path / ".metadata").write_bytes(pickle.dumps(Boom()))
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system|not allowed"):
        SafeFileSystemReader(str(tmp_path)).read_metadata()
    assert not os.path.exists("/tmp/costsim-pwned")


def write_checkpoint(folder, files, chunk=16):
    """A manifest computed independently of the code under test: zlib over each `chunk` bytes."""
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    sums = {n: [zlib.crc32(d[i:i + chunk]) for i in range(0, max(len(d), 1), chunk)] for n, d in files.items()}
    manifest = {"step": 1, "chunk_bytes": chunk,
                "files": {n: {"size": len(d), "crc32_chunks": sums[n]} for n, d in files.items()}}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_verify_accepts_intact_and_names_what_is_wrong(tmp_path):
    files = {".metadata": b"meta", "__0_0.distcp": b"x" * 100}
    write_checkpoint(tmp_path / "ok", files)
    assert verify(tmp_path / "ok") is None
    write_checkpoint(tmp_path / "flip", files)
    (tmp_path / "flip" / "__0_0.distcp").write_bytes(b"x" * 70 + b"y" + b"x" * 29)   # one byte, 5th chunk
    assert "__0_0.distcp fails its CRC-32" in verify(tmp_path / "flip")
    write_checkpoint(tmp_path / "short", files)
    (tmp_path / "short" / "__0_0.distcp").write_bytes(b"x" * 10)
    assert "10 bytes, expected 100" in verify(tmp_path / "short")
    write_checkpoint(tmp_path / "gone", files)
    (tmp_path / "gone" / "__0_0.distcp").unlink()
    assert "missing" in verify(tmp_path / "gone")
    (tmp_path / "old").mkdir()   # a whole-file CRC-32, as manifests of earlier versions have it
    for name, data in files.items():
        (tmp_path / "old" / name).write_bytes(data)
    old = {n: {"size": len(d), "crc32": zlib.crc32(d)} for n, d in files.items()}
    (tmp_path / "old" / MANIFEST).write_text(json.dumps({"step": 1, "files": old}))
    assert verify(tmp_path / "old") is None
    (tmp_path / "old" / "__0_0.distcp").write_bytes(b"z" * 100)
    assert "CRC-32" in verify(tmp_path / "old")
    (tmp_path / "nomanifest").mkdir()
    assert "manifest" in verify(tmp_path / "nomanifest")


def test_discover_single_node_by_default():
    assert discover(nnodes=None, node_rank=None, endpoint=None, env={}) == Node(
        nnodes=1, node_rank=0, endpoint=None, run_id=None, source="single node")


def test_discover_from_flags_skypilot_slurm_and_master_addr():
    assert discover(nnodes=2, node_rank=1, endpoint="10.0.0.1:29400", env={}).endpoint == "10.0.0.1:29400"
    sky = discover(nnodes=None, node_rank=None, endpoint=None, env={
        "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NODE_IPS": "10.1.0.5\n10.1.0.6", "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_TASK_ID": "sky-7"})
    assert (sky.nnodes, sky.node_rank, sky.endpoint, sky.run_id, sky.source) == (2, 1, "10.1.0.5:29500", "sky-7", "skypilot")
    slurm = discover(nnodes=None, node_rank=None, endpoint=None, env={
        "SLURM_NODEID": "3", "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "gpu[07-10]", "SLURM_JOB_ID": "991"})
    assert (slurm.node_rank, slurm.endpoint, slurm.run_id) == (3, "gpu07:29500", "991")
    env = discover(nnodes=None, node_rank=None, endpoint=None,
                   env={"MASTER_ADDR": "h0", "MASTER_PORT": "1234", "NNODES": "2", "NODE_RANK": "1"})
    assert (env.endpoint, env.node_rank) == ("h0:1234", 1)


@pytest.mark.parametrize("kwargs, env, message", [
    (dict(nnodes=2, node_rank=None, endpoint=None), {}, "needs --node-rank and --rdzv-endpoint"),
    (dict(nnodes=2, node_rank=2, endpoint="h:1"), {}, "outside 0..1"),
    (dict(nnodes=2, node_rank=1, endpoint="nohostport"), {}, "not HOST:PORT"),
    (dict(nnodes=None, node_rank=None, endpoint=None), {"SKYPILOT_NODE_RANK": "x"}, "not an integer"),
])
def test_discover_rejects_bad_node_information(kwargs, env, message):
    with pytest.raises(LaunchError, match=message):
        discover(**kwargs, env=env)


def test_slurm_nodelist_expansion():
    """As `scontrol show hostnames` expands them (node[1-2]-ib used to come out as node1, node2, -ib)."""
    assert expand_slurm_nodelist("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    assert expand_slurm_nodelist("a,b") == ["a", "b"]
    assert expand_slurm_nodelist("node[1-2]-ib") == ["node1-ib", "node2-ib"]
    assert expand_slurm_nodelist("rack[1-2]-n[09-10],x") == ["rack1-n09", "rack1-n10", "rack2-n09", "rack2-n10", "x"]
    with pytest.raises(LaunchError, match=r"cannot read the range \[a-b\]"):
        expand_slurm_nodelist("node[a-b]")


def test_the_launcher_exits_with_torchruns_status_and_without_its_report(tmp_path):
    """runner.torchrun: a worker that fails ends it with status 1 (torchrun's), the worker's own error kept
    and torchrun's ChildFailedError report left out; a clean worker with 0."""
    (tmp_path / "fails.py").write_text("raise SystemExit('worker: bad input')\n")
    (tmp_path / "works.py").write_text("print('worker: done')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    args = [sys.executable, "-m", "runner.torchrun", "--standalone", "--nproc-per-node", "1", "--monitor-interval", "0.1"]
    failed = subprocess.run([*args, "fails.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "worker: bad input" in failed.stderr
    assert "ChildFailedError" not in failed.stderr
    done = subprocess.run([*args, "works.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "worker: done" in done.stdout


def test_a_forked_workers_unexpected_error_prints_its_traceback(tmp_path):
    """A forked worker's exception reaches torchrun's agent as a record that the supervisor's filter drops (the
    test below), so the worker prints its own traceback, as a new interpreter would, and still fails."""
    (tmp_path / "bad.json").write_text('{"not": "a plan"}')
    code = ("from runner.torchrun import worker; "
            "worker('--plan', 'bad.json', '--run-dir', 'run', '--run-id', 'x')")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 1
    assert result.stderr.count("Traceback (most recent call last)") == 2   # the worker's own, then the interpreter's
    assert "bad.json: schema" in result.stderr


def test_torchrun_argv_is_a_list_without_a_shell():
    argv = torchrun_argv(Node(nnodes=2, node_rank=1, endpoint="h0:29500", run_id=None, source="flags"),
                         nproc_per_node=8, run_id="r1", worker_args=["--plan", "p.json; rm -rf /"])
    assert argv[:3] == [sys.executable, "-m", "runner.torchrun"]
    assert argv[argv.index("--rdzv-endpoint") + 1] == "h0:29500" and "--standalone" not in argv
    assert argv[-1] == "p.json; rm -rf /"   # passed as one argument, never interpreted
    single = torchrun_argv(Node(nnodes=1, node_rank=0, endpoint=None, run_id=None, source="x"),
                           nproc_per_node=2, run_id="r", worker_args=[])
    assert "--standalone" in single and single[single.index("--nproc-per-node") + 1] == "2"


def test_workload_registry_refuses_unknown_and_accepts_named_entry_points():
    with pytest.raises(UnknownWorkload, match="--workload-entry"):
        resolve("os:system")
    with pytest.raises(UnknownWorkload, match="cannot import"):
        resolve("mine", "no_such_module_xyz:build")
    assert callable(resolve("tiny"))


def test_fault_schedules():
    assert faults.parse_schedule("3", total_steps=100, seed=1) == faults.parse_schedule("3", total_steps=100, seed=1)
    assert len(faults.parse_schedule("3", total_steps=100, seed=1)) == 3
    assert faults.parse_schedule("term@60,30", total_steps=100, seed=0) == [faults.Fault(30, "kill"),
                                                                            faults.Fault(60, "term")]
    for bad in ("boom@3", "kill@0", "kill@100", "30,30"):
        with pytest.raises(ValueError):
            faults.parse_schedule(bad, total_steps=100, seed=0)
    assert faults.decode("term@7") == faults.Fault(7, "term")


def replicated_state():
    big = {f"w{i}": torch.full((i + 1, 1024), float(i)) for i in range(5)}   # 4 KiB per row
    return {"model": big, "optim": {"state": {k: {"exp_avg": torch.zeros_like(v), "step": torch.tensor(3.0)}
                                              for k, v in big.items()},
                                    "param_groups": [{"lr": 0.1, "params": sorted(big)}]},
            "progress": {"step": 7}, "rng_rank1": {"torch": torch.zeros(5000, dtype=torch.uint8)}}


def test_ownership_splits_large_replicated_tensors_and_keeps_the_rest_everywhere():
    state = replicated_state()
    owners = ownership.owners(state, 2, private=("rng_rank",), min_bytes=8 << 10)
    large = {("model", f"w{i}") for i in range(1, 5)} | {("optim", "state", f"w{i}", "exp_avg") for i in range(1, 5)}
    assert set(owners) == large                                      # w0 (4 KiB), steps and the rng state stay out
    assert owners == ownership.owners(replicated_state(), 2, private=("rng_rank",), min_bytes=8 << 10)
    shares = [ownership.owned_bytes(state, owners, r) for r in (0, 1)]
    assert sum(shares) == 2 * 4 * 1024 * (2 + 3 + 4 + 5) and abs(shares[0] - shares[1]) <= 4 * 4096
    views = [ownership.view(state, owners, r) for r in (0, 1)]
    for rank, mine in enumerate(views):
        assert mine["progress"] == {"step": 7} and mine["optim"]["param_groups"] is state["optim"]["param_groups"]
        assert mine["model"]["w0"] is state["model"]["w0"] and "rng_rank1" in mine
        for path, owner in owners.items():
            inside = mine
            for key in path[:-1]:
                inside = inside[key]
            assert (path[-1] in inside) == (owner == rank)
            if owner == rank:
                assert inside[path[-1]] is ownership._get(state, path)   # the live tensor, not a copy
    assert ownership.owners(state, 1, private=("rng_rank",), min_bytes=8 << 10) == {p: 0 for p in large}


def test_merge_puts_loaded_values_back_into_the_state():
    state = replicated_state()
    loaded = ownership.view(state, ownership.owners(state, 2, min_bytes=8 << 10), 1)
    loaded["progress"]["step"] = 42
    loaded["optim"]["param_groups"] = [{"lr": 0.5}]
    ownership.merge(state, loaded)
    assert state["progress"]["step"] == 42 and state["optim"]["param_groups"] == [{"lr": 0.5}]
    assert set(state["model"]) == {f"w{i}" for i in range(5)}   # what the view left out is still there


def test_checkpoint_entries_are_unpickled_as_data_only(tmp_path):
    """A checkpoint's non-tensor entries (DCP unpickles them with weights_only=False) cannot run code."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from runner.checkpoint_reader import SafeLoadPlanner
    dcp.save({"progress": {"step": 5, "boom": Boom()}}, checkpoint_id=str(tmp_path / "bad"), no_dist=True)
    dcp.save({"progress": {"step": 5, "lr": 0.25}}, checkpoint_id=str(tmp_path / "ok"), no_dist=True)
    target = {"progress": {"step": 0, "lr": 0.0}}
    dcp.load(target, storage_reader=SafeFileSystemReader(str(tmp_path / "ok")), planner=SafeLoadPlanner(), no_dist=True)
    assert target == {"progress": {"step": 5, "lr": 0.25}}
    with pytest.raises(CheckpointException, match="Unsupported global|weights_only"):
        dcp.load({"progress": {"step": 0, "boom": None}}, storage_reader=SafeFileSystemReader(str(tmp_path / "bad")),
                 planner=SafeLoadPlanner(), no_dist=True)
    assert not os.path.exists("/tmp/costsim-pwned")


@pytest.mark.parametrize("mode", ["never", "always", "cuda"])
def test_threaded_reader_loads_what_dcp_reader_loads(tmp_path, monkeypatch, mode):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    from runner import checkpoint_reader as checkpoint
    monkeypatch.setattr(checkpoint, "READ_BATCH_BYTES", 1000)   # many batches per file, several threads
    monkeypatch.setenv("COSTSIM_READ_BATCHED", mode)   # "cuda" without a GPU: every record on its own
    generator = torch.Generator().manual_seed(0)
    state = {"model": {f"w{i}": torch.randn(17 * (i + 1), 3, generator=generator) for i in range(12)},
             "ints": torch.arange(10), "progress": {"step": 9, "lr": [0.5, 0.25]}}
    dcp.save(state, storage_writer=FileSystemWriter(str(tmp_path), thread_count=3), no_dist=True)
    ours = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}, "ints": torch.zeros(10, dtype=torch.int64),
            "progress": {"step": 0, "lr": []}}
    theirs = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
              "ints": torch.zeros(10, dtype=torch.int64),
              "progress": {"step": 0, "lr": []}}
    dcp.load(ours, storage_reader=SafeFileSystemReader(str(tmp_path)), planner=checkpoint.SafeLoadPlanner(), no_dist=True)
    dcp.load(theirs, storage_reader=FileSystemReader(str(tmp_path)), no_dist=True)
    for key, value in state["model"].items():
        assert torch.equal(ours["model"][key], value) and torch.equal(theirs["model"][key], value)
    assert torch.equal(ours["ints"], state["ints"]) and ours["progress"] == theirs["progress"] == state["progress"]


def test_batched_read_copies_only_after_it_is_prepared_and_leaves_odd_records_to_the_record_path(tmp_path,
                                                                                                    monkeypatch):
    """The batched path (COSTSIM_READ_BATCHED=always runs it for CPU targets): `prepared` is called after every
    record's place is set and before any tensor's bytes are copied (what runs beside the rest of the read sees
    the targets untouched until then); records it cannot take whole (a non-contiguous target, another dtype, a
    tensor larger than a batch's buffer) are read on their own, and everything ends as DCP's reader loads it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    from runner import checkpoint_reader as checkpoint
    monkeypatch.setattr(checkpoint, "READ_BATCH_BYTES", 4096)
    monkeypatch.setenv("COSTSIM_READ_BATCHED", "always")
    generator = torch.Generator().manual_seed(1)
    state = {"w": {f"w{i}": torch.randn(40 + i, 5, generator=generator) for i in range(20)},
             "big": torch.randn(2000, generator=generator),   # 8 KB: more than a buffer
             "half": torch.randn(64, generator=generator).to(torch.bfloat16),
             "grid": torch.randn(6, 9, generator=generator), "step": torch.tensor(7), "progress": {"lr": 0.5}}
    dcp.save(state, storage_writer=FileSystemWriter(str(tmp_path), thread_count=2), no_dist=True)

    def empty() -> dict:
        return {"w": {k: torch.zeros_like(v) for k, v in state["w"].items()}, "big": torch.zeros(2000),
                "half": torch.zeros(64),   # float32 target for a bfloat16 record: converted on the record path
                "grid": torch.zeros(9, 6).t(),   # a non-contiguous target
                "step": torch.tensor(0), "progress": {"lr": 0.0}}
    ours, theirs = empty(), empty()
    batches: list = []
    prepare = checkpoint._Batch.prepare.__func__

    def recording(cls, *args):
        batches.append(prepare(cls, *args))
        return batches[-1]
    monkeypatch.setattr(checkpoint._Batch, "prepare", classmethod(recording))
    seen: list = []

    def prepared():   # nothing copied yet; the non-tensor entries are in
        seen.append((sum(int(t.count_nonzero()) for t in ours["w"].values()), ours["progress"]["lr"]))
    dcp.load(ours, storage_reader=checkpoint.SafeFileSystemReader(str(tmp_path), prepared=prepared),
             planner=checkpoint.SafeLoadPlanner(), no_dist=True)
    dcp.load(theirs, storage_reader=FileSystemReader(str(tmp_path)), no_dist=True)
    assert seen == [(0, 0.5)]
    copied = sum(len(b.targets) for b in batches)
    left = sorted(item.dest_index.fqn for b in batches for item in b.rest)
    assert copied == len(state["w"]) + 1 and left == ["big", "grid", "half"]   # the 20 and the step count
    assert len(batches) > 3 and all(b.end - b.start <= 4096 for b in batches)
    for key in ("big", "half", "grid", "step"):
        assert torch.equal(ours[key], theirs[key]) and torch.equal(ours[key], state[key].to(ours[key].dtype))
    assert all(torch.equal(ours["w"][k], v) for k, v in state["w"].items()) and ours["progress"] == {"lr": 0.5}


def test_a_bad_batched_read_setting_is_refused(monkeypatch):
    from runner import checkpoint_reader
    from runner.speed import RuntimeConfigError
    monkeypatch.setenv("COSTSIM_READ_BATCHED", "sometimes")
    with pytest.raises(RuntimeConfigError, match="COSTSIM_READ_BATCHED='sometimes': expected one of cuda, always"):
        checkpoint_reader.batched_mode()
    assert checkpoint_reader.buffers_when() == "ahead"
    monkeypatch.setenv("COSTSIM_READ_BUFFERS", "later")
    with pytest.raises(RuntimeConfigError, match="COSTSIM_READ_BUFFERS='later': expected one of ahead, sized"):
        checkpoint_reader.buffers_when()


def _saved_at(path, prefix: bytes, obj) -> tuple[int, int]:
    """`obj` torch.save'd into `path` after `prefix` (as DCP appends records to a file): (offset, length)."""
    import io
    record = io.BytesIO()
    torch.save(obj, record)
    path.write_bytes(prefix + record.getvalue() + b"more records")
    return len(prefix), len(record.getvalue())


@pytest.mark.parametrize("block", [4096, 0, 64])
def test_a_tensor_record_is_read_from_its_bytes_as_torch_load_reads_it(tmp_path, monkeypatch, block):
    """The fast path (runner.checkpoint_reader._record) reads torch.save's record itself: every layout a
    training state holds (fp32, bf16, fp8, a 0-dim step count, a transposed view, a view inside a larger
    storage, an empty tensor, one larger than the record's first and last blocks together) comes out equal to
    torch.load's, dtype, shape and strides included; its fields found in the record's first and last
    RECORD_BLOCK_BYTES (4096), with a read for each (0), or partly either way (64)."""
    import io

    from runner import checkpoint_reader
    from runner.checkpoint_reader import _record, _Staging
    monkeypatch.setattr(checkpoint_reader, "RECORD_BLOCK_BYTES", block)
    generator = torch.Generator().manual_seed(1)
    base = torch.randn(7, 5, generator=generator)
    cases = {"fp32": base, "bf16": base.to(torch.bfloat16), "step": torch.tensor(12.0), "int": torch.arange(9),
             "transposed": base.t(), "inside": torch.randn(100, generator=generator)[10:40].view(5, 6),
             "empty": torch.zeros(0, 3), "large": torch.randn(64, 100, generator=generator)}
    if hasattr(torch, "float8_e4m3fn"):
        cases["fp8"] = base.to(torch.float8_e4m3fn)
    for name, tensor in cases.items():
        path = tmp_path / name
        offset, length = _saved_at(path, b"x" * 13, tensor)
        with open(path, "rb", buffering=0) as handle:
            record = _record(handle.fileno(), offset, length)
            assert record is not None, name
            ours = _Staging().read(handle.fileno(), record, torch.empty(tensor.size(), dtype=tensor.dtype))
        theirs = torch.load(io.BytesIO(path.read_bytes()[offset:offset + length]), weights_only=True)
        assert ours.dtype == theirs.dtype and ours.size() == theirs.size() and ours.stride() == theirs.stride(), name
        exact = torch.float64 if ours.is_floating_point() else ours.dtype   # fp8 has no equal(): compare widened
        assert torch.equal(ours.to(exact), theirs.to(exact)), name


def test_a_records_fields_come_from_two_reads_of_its_ends(tmp_path, monkeypatch):
    """Each read leaves the interpreter lock and takes it back (a wait behind any thread holding it): _record
    finds a record's directory, headers and pickle in two reads of its first and last 4 KB, where it took
    seven reads, one a field, before (RECORD_BLOCK_BYTES=0 still does that); a record within 4 KB (a step count's,
    1.6 KB) is one read, and its tensor's bytes come with it: the reading thread reads nothing more for it."""
    from runner import checkpoint_reader
    reads, real_pread, real_preadv = [], os.pread, os.preadv
    monkeypatch.setattr(checkpoint_reader.os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))
    monkeypatch.setattr(checkpoint_reader.os, "preadv", lambda fd, views, at: reads.append(-1) or real_preadv(fd, views, at))
    for tensor, block, expected in ((torch.randn(64, 100), 4096, 2 + 1), (torch.randn(64, 100), 0, 7 + 1),
                                    (torch.tensor(12.0), 4096, 1), (torch.tensor(12.0), 0, 7 + 1)):
        monkeypatch.setattr(checkpoint_reader, "RECORD_BLOCK_BYTES", block)
        offset, length = _saved_at(tmp_path / "r", b"x" * 100, tensor)
        reads.clear()
        with open(tmp_path / "r", "rb", buffering=0) as handle:
            record = checkpoint_reader._record(handle.fileno(), offset, length)
            assert record is not None
            read = checkpoint_reader._Staging().read(handle.fileno(), record, torch.empty_like(tensor))
        assert torch.equal(read, tensor) and len(reads) == expected, (tuple(tensor.shape), block, reads)


def test_a_records_tensor_in_a_slice_of_a_buffer_starts_at_the_slice(tmp_path):
    """On a GPU the bytes go into a slice of a thread's pinned buffer at a 64-byte aligned place; the tensor
    viewing them starts there, not at the buffer's start (the first GPU run loaded every record after the
    first one of a buffer from the buffer's start)."""
    from runner.checkpoint_reader import _record, _view
    tensor = torch.arange(40.0).view(5, 8)[1:4, 2:7]   # an offset and strides of its own
    offset, length = _saved_at(tmp_path / "r", b"", tensor)
    with open(tmp_path / "r", "rb", buffering=0) as handle:
        record = _record(handle.fileno(), offset, length)
    assert record is not None
    buffer = torch.zeros(1024, dtype=torch.uint8)
    raw = buffer[192:192 + record.nbytes]
    raw.copy_(torch.frombuffer(bytearray((tmp_path / "r").read_bytes()[record.data:record.data + record.nbytes]),
                               dtype=torch.uint8))
    assert torch.equal(_view(raw, record), tensor)


def test_a_record_that_is_not_one_plain_tensor_is_left_to_torch_load(tmp_path):
    """A parameter, a dict of tensors, a list, or a record whose pickle names other code: _record says None
    (torch.load with weights_only=True decides), it never builds or calls anything the record names."""
    from runner.checkpoint_reader import _record
    t = torch.ones(3)
    for name, obj in {"parameter": torch.nn.Parameter(t.clone()), "dict": {"a": t, "b": t + 1, "c": t, "d": t,
                                                                           "e": t, "f": t},
                      "list": [t, t], "code": Boom(), "two-storages": (t, torch.zeros(2))}.items():
        path = tmp_path / name
        offset, length = _saved_at(path, b"", obj)
        with open(path, "rb", buffering=0) as handle:
            assert _record(handle.fileno(), offset, length) is None, name
    assert not os.path.exists("/tmp/costsim-pwned")
    path = tmp_path / "cut"
    offset, length = _saved_at(path, b"", t)
    with open(path, "rb", buffering=0) as handle:
        assert _record(handle.fileno(), offset, length - 30) is None   # the directory cut off
    path.write_bytes(path.read_bytes()[:offset + length - 30])   # the file itself ends early
    with open(path, "rb", buffering=0) as handle:
        assert _record(handle.fileno(), offset, length) is None


def test_a_file_slice_reads_and_seeks_only_inside_its_bytes(tmp_path):
    import io

    from runner.checkpoint_reader import _Slice
    (tmp_path / "f").write_bytes(b"HEAD" + b"0123456789" + b"TAIL")
    with open(tmp_path / "f", "rb", buffering=0) as handle:
        part = _Slice(handle, 4, 10)
        assert part.read() == b"0123456789" and part.read() == b""
        assert part.seek(-3, io.SEEK_END) == 7 and part.read(2) == b"78" and part.tell() == 9
        assert part.seek(100) == 10 and part.read() == b""     # past the end: clamped, nothing read
        assert part.seek(-50, io.SEEK_CUR) == 0 and part.read(4) == b"0123"


def test_torchruns_failure_report_is_left_out_and_a_workers_traceback_kept():
    import io

    from runner.launch import TorchrunReportFilter
    worker = [b"Traceback (most recent call last):\n", b'  File "<frozen runpy>", line 198, in _run_module_as_main\n',
              b'  File "/x/runner/train.py", line 310, in <module>\n', b"    main()\n",
              b"ZeroDivisionError: division by zero\n"]
    torchrun = [b"Traceback (most recent call last):\n", b'  File "<frozen runpy>", line 198, in _run_module_as_main\n',
                b'  File "/x/torch/distributed/run.py", line 1032, in <module>\n', b"    main()\n",
                b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n", b"=" * 60 + b"\n",
                b"runner.train FAILED\n", b"-" * 60 + b"\n", b"  exitcode  : 1 (pid: 7)\n", b"=" * 60 + b"\n"]
    noisy = (b"E1130 api.py:1002] failed (exitcode: 78) local_rank: 0 (pid: 1) of binary: python3\n"
             b"W1130 api.py:1028] Sending process 29378 closing signal SIGTERM\n")   # when one rank stopped first
    out = io.BytesIO()
    stream = io.BytesIO(b"runner: step 5/10\n" + b"".join(worker) + b"".join(torchrun) + noisy + b"runner: restart 1\n")
    TorchrunReportFilter(out).pump(stream)
    assert out.getvalue() == b"runner: step 5/10\n" + b"".join(worker) + b"runner: restart 1\n"


def test_torchruns_record_of_a_forked_worker_that_failed_is_left_out_with_its_traceback():
    """Forked workers (runner.torchrun) fail into torchrun's log as one record: the "failed (exitcode: N)" line
    and the traceback of its ProcessExitedException, each line under the record's prefix (as printed by torch
    2.13). The record's traceback goes whatever the code (the supervisor says why in its line); its first line
    goes as the exec'd workers' does: for a notice's or a setting's exit; the line after it is kept."""
    import io

    from runner.launch import TorchrunReportFilter
    prefix = b"E1203 16:12:03.402000 28925 site-packages/torch/distributed/elastic/multiprocessing/api.py:836] "
    for code, first_kept in ((78, False), (1, True)):
        record = [f"failed (exitcode: {code}) local_rank: 0 (pid: 28930) of fn: worker (start_method: fork)\n",
                  "Traceback (most recent call last):\n", '  File "/x/torch/multiprocessing/spawn.py", line 200, in join\n',
                  "    raise ProcessExitedException(\n",
                  f"torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code {code}\n"]
        lines = [prefix + line.encode() for line in record]
        out = io.BytesIO()
        TorchrunReportFilter(out).pump(io.BytesIO(b"runner: step 5/10\n" + b"".join(lines) + b"runner: stopped: why\n"))
        kept = lines[0] if first_kept else b""
        assert out.getvalue() == b"runner: step 5/10\n" + kept + b"runner: stopped: why\n", code


def test_an_injected_fault_is_one_line_and_what_its_peers_say_after_it_is_dropped():
    import io

    from runner.launch import TorchrunReportFilter
    peer = [b"[rank0]:Traceback (most recent call last):\n", b'[rank0]:  File "/x/runner/train.py", line 133\n',
            b"[rank0]:RuntimeError: [pair.cc:537] Read error [127.0.0.1]:9102: Connection reset by peer.\n",
            b"E1201 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 12331) of binary: python3\n"]
    out = io.BytesIO()
    stream = io.BytesIO(b"runner: step 30/300\n[rank1]:runner: drill: injected kill at step 33 (local rank 1)\n"
                        + b"".join(peer))
    TorchrunReportFilter(out).pump(stream)
    assert out.getvalue() == b"runner: step 30/300\nrunner: drill: injected kill at step 33 (local rank 1)\n"


def test_a_short_write_by_torchs_zip_writer_is_out_of_space_only_where_the_disk_has_no_room(tmp_path):
    """ENOSPC, however wrapped, is out of space; PyTorch's zip writer loses the errno ("unexpected pos"),
    so its short write counts only where the folder has less room than the write needed."""
    import errno

    from runner.diskspace import free_bytes, is_disk_full
    enospc = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise enospc
        except OSError as inner:
            raise RuntimeError("CheckpointException ranks:dict_keys([1])") from inner
    except RuntimeError as wrapped:
        assert is_disk_full(wrapped)
    short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    free = free_bytes(tmp_path)
    assert is_disk_full(short, tmp_path, free + 1)          # less room than the write needed: the disk
    assert not is_disk_full(short, tmp_path, free // 2)     # room enough: something else went wrong
    assert not is_disk_full(short) and not is_disk_full(RuntimeError("Connection reset by peer"), tmp_path, free + 1)


def test_making_room_never_removes_the_only_intact_checkpoint(tmp_path):
    """The newest checkpoint on disk is damaged, an older one is intact: a save that needs room may remove
    checkpoints older than an intact one, never that one (it used to keep 'the newest', the damaged one,
    and remove the intact step-10); keep-k counts from the newest intact checkpoint too."""
    from runner.checkpoint import Checkpointer
    from runner.diskspace import DiskFullError, free_bytes

    def checkpointer():
        c = Checkpointer(tmp_path, keep=1, async_mode=False, rank=0, warn=warned.append, on_event=lambda *a, **f: None)
        c.agree_on_step()
        return c

    warned: list[str] = []
    first = checkpointer()
    state = {"model": {"w": torch.arange(64.0)}, "progress": {"step": 1}}
    first.save(10, state)
    first.keep = first.local_keep = 2
    first.save(20, state)
    first.close()
    shard = next((tmp_path / "step-20").glob("*.distcp"))
    shard.write_bytes(bytes(b ^ 0xFF for b in shard.read_bytes()))     # same size, damaged
    later = checkpointer()                                              # a new process on this disk
    assert later.agree_on_step() == 10 and warned and "step-20" in warned[0]
    with pytest.raises(DiskFullError):   # more than any disk here frees (other tests free space on it meanwhile)
        later.make_room(free_bytes(tmp_path) + (1 << 50), "checkpoint step-30")
    assert verify(tmp_path / "step-10") is None                         # still there, intact
    later.save(30, state)                                               # keep 1: from step-30, the intact newest
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-30"]
    later.close()


def test_the_crc_mode_decides_which_blocking_saves_read_back(tmp_path):
    """A blocking save computes its manifest's CRCs while writing unless the mode is "0" (set_crc_mode:
    what scripts/bench_checkpoint.py compares; under the default, "blocking", its read-back rows had
    silently followed the writers too), and every manifest checks out either way."""
    from runner.checkpoint import Checkpointer
    saves: list[dict] = []
    c = Checkpointer(tmp_path, keep=3, async_mode=False, rank=0, warn=print,
                     on_event=lambda event, **f: saves.append(f) if event == "checkpoint_save" else None)
    c.agree_on_step()
    state = {"model": {"w": torch.arange(1 << 16, dtype=torch.float32)}, "progress": {"step": 1}}
    for step, mode in ((1, "blocking"), (2, "0"), (3, "1")):
        c.set_crc_mode(mode)
        c.save(step, state)
    c.close()
    read_all = [f["commit_read_bytes"] >= f["bytes"] * 0.9 for f in saves]
    assert read_all == [False, True, False]
    assert all(verify(tmp_path / f"step-{step}") is None for step in (1, 2, 3))


def test_the_worker_builds_the_sdxl_unet_without_the_packages_it_never_uses():
    """diffusers imports peft and transformers when they are installed (4-5 s of a 10 s import on the H200
    host), scipy.stats (0.7 s here) and torchao (0.9 s); the sdxl-unet workload declares them unused and the worker hides
    them while it builds: the UNet still builds and runs, none of them is imported, and each can be imported
    after (a fresh interpreter: the test process may have imported diffusers already)."""
    pytest.importorskip("diffusers")
    code = """
import sys, torch
from runner.workloads import lean_imports, resolve
builder = resolve("sdxl-unet")
with lean_imports(builder):
    from diffusers import UNet2DConditionModel
    unet = UNet2DConditionModel(sample_size=8, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
                                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), cross_attention_dim=8,
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=2)
    out = unet(torch.zeros(1, 4, 8, 8), torch.tensor([1]), torch.zeros(1, 3, 8)).sample
print(tuple(out.shape), "peft" in sys.modules, "transformers" in sys.modules, "scipy" in sys.modules,
      "torchao" in sys.modules)
import transformers, scipy.stats, torchao.float8
print(transformers.__name__, scipy.stats.__name__, torchao.float8.__name__)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:2] == ["(1, 4, 8, 8) False False False False",
                                             "transformers scipy.stats torchao.float8"], result.stdout


def test_the_agent_imports_the_workloads_modules_before_forking_its_workers_and_nothing_unused(tmp_path):
    """torchrun's agent forks the workers (runner.torchrun) after runner.train.preload: the sdxl-unet plan's
    UNet module is imported there, as the build would (its unused packages stay out, CUDA stays off); a plan
    that does not load preloads nothing and leaves the workers to report it (a fresh interpreter each)."""
    pytest.importorskip("diffusers")
    from tests.sdxl_tiny import sdxl_plan
    plan = sdxl_plan(tmp_path)
    code = """
import sys, torch
import runner.train
print(runner.train.preload(["--plan", sys.argv[1], "--run-dir", "r", "--run-id", "x"]),
      "diffusers.models.unets.unet_2d_condition" in sys.modules, "transformers" in sys.modules,
      "peft" in sys.modules, torch.cuda.is_initialized())
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    lines = []
    for path in (plan, tmp_path / "missing.json"):
        result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                                timeout=300, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        lines.append(result.stdout.strip())
    assert lines == ["['diffusers.models.unets.unet_2d_condition'] True False False False",
                     "[] False False False False"], lines


def test_the_manifests_crc32_is_zlibs_whichever_library_computes_it():
    """Manifests written with zlib-ng's CRC-32 (the runner extra) are checked by a runner without it and the other
    way round: the same values as the stdlib's, started from any value, over any slice of a buffer."""
    import random

    from runner import checkpoint_manifest
    zlib_ng = pytest.importorskip("zlib_ng.zlib_ng")
    assert checkpoint_manifest.crc32 is zlib_ng.crc32   # the runner extra's: the fast one where installed
    rng = random.Random(11)
    data = memoryview(bytearray(rng.randbytes((1 << 20) + 333)))
    for start, stop, seed in ((0, 0, 0), (0, 1, 0), (7, 4099, 5), (1, len(data), 0xFFFFFFFF), (0, len(data), 123)):
        assert zlib_ng.crc32(data[start:stop], seed) == zlib.crc32(data[start:stop], seed), (start, stop, seed)
    whole = zlib.crc32(data)
    assert zlib_ng.crc32(data[1000:], zlib.crc32(data[:1000])) == whole   # chained across the two


def test_crcs_computed_while_a_file_is_written_equal_those_read_back_after(tmp_path):
    import array
    import random
    from concurrent.futures import ThreadPoolExecutor

    from runner.checkpoint_manifest import FollowingStream, file_checksums, resolved
    rng = random.Random(3)
    chunk, got = 1000, {}

    def done(sums, size):
        got.update(sums=resolved(sums), size=size)
    with ThreadPoolExecutor(2) as pool:
        path = tmp_path / "f"
        with open(path, "wb") as raw:
            stream = FollowingStream(raw, path, pool, done, chunk=chunk)
            for size in (0, 1, 999, 1000, 2500, 7, 4000):   # writes across, onto and inside chunk boundaries
                stream.write(rng.randbytes(size))
            stream.write(memoryview(array.array("d", [rng.random() for _ in range(300)])))   # 2,400 bytes of doubles
            assert stream.tell() == 10_907
            stream.close()
        assert got["size"] == path.stat().st_size == 10_907
        assert got["sums"] == file_checksums([path], chunk)[path] and len(got["sums"]) == 11
        empty = tmp_path / "empty"
        with open(empty, "wb") as raw:
            FollowingStream(raw, empty, pool, done, chunk=chunk).close()
        assert got["sums"] == file_checksums([empty], chunk)[empty] == [0]
        seeked = tmp_path / "seeked"
        with open(seeked, "wb") as raw:   # a seek: the sums are no longer known (the commit reads it back)
            stream = FollowingStream(raw, seeked, pool, done, chunk=chunk)
            stream.write(b"abc")
            stream.seek(0)
            stream.write(b"x")
            stream.close()
        assert got["sums"] is None


def test_an_unknown_crc_mode_is_refused_with_what_is_allowed(tmp_path, monkeypatch):
    """COSTSIM_CRC_WHILE_WRITING takes 0, 1 or blocking; anything else stops the worker with that line
    (runner.speed.RuntimeConfigError: the supervisor prints it once, no restart), not a silent default."""
    from runner import checkpoint
    from runner.speed import RuntimeConfigError
    monkeypatch.setattr(checkpoint, "CRC_WHILE_WRITING", "yes")   # read from the environment at import
    with pytest.raises(RuntimeConfigError, match=r"COSTSIM_CRC_WHILE_WRITING='yes': allowed 0, 1, blocking"):
        checkpoint.Checkpointer(tmp_path, keep=1, async_mode=False, rank=0, warn=print, on_event=lambda *a, **f: None)


@pytest.mark.parametrize(("visible", "expected"), [
    (None, 4), ("", 0), ("0,1", 2), ("2", 1), ("1gpu2,3", 2), ("0,-1,2", 1), ("0,0", 0), ("1,7,2", 1),
    ("GPU-8f1c", None), ("MIG-2a3b", None)])
def test_the_gpu_count_without_torch_reads_cuda_visible_devices_as_cuda_does(tmp_path, visible, expected):
    """runner.gpus: the driver's GPUs narrowed by CUDA_VISIBLE_DEVICES, compared with torch.cuda's own parser
    where both answer (the CPU machine has no GPU: torch's parse of the variable, then its cut at the count)."""
    from runner.gpus import visible_gpus
    driver = tmp_path / "nvidia"
    for bus in ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"):
        (driver / "gpus" / bus).mkdir(parents=True)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert visible_gpus(env, driver) == expected
    if expected is not None and visible is not None:   # torch.cuda's reading of the same variable
        from unittest import mock
        with mock.patch.dict(os.environ, env):
            parsed = torch.cuda._parse_visible_devices()
        assert next((i for i, d in enumerate(parsed) if d >= 4), len(parsed)) == expected


def test_the_gpu_count_leaves_mig_and_a_missing_driver_to_cuda(tmp_path):
    from runner.gpus import visible_gpus
    assert visible_gpus({}, tmp_path / "none") is None                       # no NVIDIA driver: ask CUDA
    driver = tmp_path / "nvidia"
    (driver / "gpus" / "0000:18:00.0").mkdir(parents=True)
    (driver / "capabilities" / "gpu0" / "mig").mkdir(parents=True)
    assert visible_gpus({}, driver) == 1                                      # MIG possible, none made
    (driver / "capabilities" / "gpu0" / "mig" / "gi1").mkdir()
    assert visible_gpus({}, driver) is None                                   # a GPU instance: CUDA knows


def test_the_read_threads_setting_is_a_whole_number_or_refused(monkeypatch):
    from runner.checkpoint_reader import read_threads
    from runner.speed import RuntimeConfigError
    monkeypatch.setenv("COSTSIM_READ_THREADS", "2")
    assert read_threads() == min(2, os.cpu_count() or 1)
    for bad in ("many", "0", "-3", ""):
        monkeypatch.setenv("COSTSIM_READ_THREADS", bad)
        with pytest.raises(RuntimeConfigError, match="COSTSIM_READ_THREADS=.*whole number"):
            read_threads()


def _one_layer_state(size: int, b_shape: tuple[int, int], seed: int | None = None, step: int = 0) -> dict:
    """A training state of the checkpointer's shape: a layer `a.w` of `size` with Adam's exp_avg, a tensor `b`,
    random (seed) or zeros (a target to load into)."""
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    make = (lambda *shape: torch.randn(*shape, generator=g)) if g is not None else torch.zeros
    return {"model": {"a.w": make(size), "b": make(*b_shape)},
            "optim": {"state": {"a.w": {"exp_avg": make(size), "step": torch.tensor(3.0 if g else 0.0)}},
                      "param_groups": [{"lr": 1e-3 if g else 0.0, "params": ["a.w", "b"]}]}, "progress": {"step": step}}


def _its_tensors(state: dict) -> dict[str, torch.Tensor]:
    """The state's three tensors by name: the model's and the optimizer's exp_avg."""
    return {**state["model"], "exp_avg": state["optim"]["state"]["a.w"]["exp_avg"]}


def _recording_checkpointer(root: Path, keep: int) -> tuple:
    """An async-mode Checkpointer at rank 0 whose checkpoint_save events are kept in the list returned beside it."""
    from runner.checkpoint import Checkpointer
    saves: list[dict] = []
    c = Checkpointer(root, keep=keep, async_mode=True, rank=0, warn=print,
                     on_event=lambda event, **f: saves.append(f) if event == "checkpoint_save" else None)
    c.agree_on_step()
    return c, saves


def _loaded(root: Path, step: int, size: int, b_shape: tuple[int, int]) -> dict:
    """Checkpoint `step` under root, loaded by a new Checkpointer into a zeroed state of that shape."""
    from runner.checkpoint import Checkpointer
    loaded = _one_layer_state(size, b_shape)
    Checkpointer(root, keep=4, async_mode=False, rank=0, warn=print, on_event=lambda *a, **f: None).load(step, loaded)
    return loaded


def test_a_blocking_save_staged_as_it_writes_holds_the_state_of_that_moment(tmp_path):
    """A notice's save copies each tensor into its staging buffer as its writer thread reaches it ("pipelined",
    the default) instead of copying the whole state first: the checkpoint holds the state as it was at the save
    (not the buffers' older contents from the async save before), the same as a save staged first."""
    c, saves = _recording_checkpointer(tmp_path, keep=3)
    state = _one_layer_state(1 << 15, (64, 33), seed=5, step=1)
    c.prepare(state)
    c.wait_staging()
    c.save(1, state)                                   # async: the buffers now hold step 1's values
    c.wait()
    expected = {}
    for step, mode in ((2, "pipelined"), (3, "first")):
        for tensor in _its_tensors(state).values():
            tensor.add_(1.0)                           # training moved on since
        state["progress"]["step"] = step
        expected[step] = {k: v.clone() for k, v in _its_tensors(state).items()}
        c.set_staging(mode)
        c.save(step, state, blocking=True, reason="notice")
    c.close()
    assert [(f["staged"], f["staging"]) for f in saves] == [(True, "streaming"), (True, "pipelined"), (True, "first")]
    for step in (2, 3):
        loaded = _loaded(tmp_path, step, 1 << 15, (64, 33))
        assert loaded["progress"]["step"] == step
        assert all(torch.equal(t, expected[step][k]) for k, t in _its_tensors(loaded).items())
    with pytest.raises(ValueError, match="allowed pipelined, first"):
        c.set_staging("lazy")


def test_a_commit_that_training_waits_for_reads_back_on_every_core(tmp_path, monkeypatch):
    """An async write's commit reads back the CRCs it did not sum while writing, on CHECK_THREADS threads beside
    training; once training stops to wait for it (a notice, a blocking save), on every core. The writers are held
    at their first file until the test has hurried (or not), so the commit's choice is not a race."""
    import contextlib

    from torch.distributed.checkpoint.filesystem import FileSystem

    import runner.checkpoint as checkpoint
    if checkpoint.CORES < 2:
        pytest.skip("one core: hurried or not, the read-back has one thread")
    monkeypatch.setattr(checkpoint, "CHECK_THREADS", 1)   # fewer than the cores, whatever the machine

    class Gated(FileSystem):
        def __init__(self, gate: threading.Event):
            super().__init__()
            self.gate = gate

        @contextlib.contextmanager
        def create_stream(self, path, mode):
            self.gate.wait(timeout=60)
            with super().create_stream(path, mode) as stream:
                yield stream

    c, saves = _recording_checkpointer(tmp_path, keep=4)
    state = _one_layer_state(1 << 16, (64, 33), seed=7)
    c.prepare(state)
    c.wait_staging()
    for step, hurried in ((1, False), (2, True)):
        gate = threading.Event()
        c._writer.fs = Gated(gate)   # the writers wait at their first file
        c.save(step, state)          # async: returns once the state is copied
        if hurried:
            c.hurry()                # as a notice's wait(hurry=True) does before it joins
        gate.set()
        c.wait()
    c.close()
    assert [s["commit_read_bytes"] > 0 for s in saves] == [True, True], saves
    assert [s["commit_threads"] for s in saves] == [1, checkpoint.CORES], saves
    assert verify(tmp_path / "step-2") is None


def test_an_async_save_written_as_it_is_copied_holds_the_state_of_its_moment(tmp_path):
    """An async save streams (the default): its writer threads write each tensor once training's thread has
    copied it into its buffer. The checkpoint holds the state as it was when save() returned, though training
    changes every tensor right after and the buffers held the save before's values; a state whose shapes
    changed since the buffers were made is copied whole first ("first"), as is every save under
    COSTSIM_ASYNC_STAGING=first; anything else is refused by name."""
    from runner.speed import RuntimeConfigError
    c, saves = _recording_checkpointer(tmp_path, keep=4)
    state = _one_layer_state(1 << 16, (64, 33), seed=7)
    c.prepare(state)
    c.wait_staging()
    expected = {}
    for step, mode in ((1, "streaming"), (2, "streaming"), (3, "streaming"), (4, "first")):
        if step == 3:   # the structure changed since the buffers were made: copied whole, then written
            state["model"]["b"] = torch.randn(65, 33)
        c.set_async_staging(mode)
        state["progress"]["step"] = step
        expected[step] = {k: v.clone() for k, v in _its_tensors(state).items()}
        c.save(step, state)
        for tensor in _its_tensors(state).values():
            tensor.add_(1.0)                           # training goes on while the write does
        c.wait()
    c.close()
    assert [f["staging"] for f in saves] == ["streaming", "streaming", "first", "first"]
    assert all(f["mode"] == "async" and f["stall_s"] <= f["duration_s"] for f in saves)
    for step in (1, 2, 3, 4):
        loaded = _loaded(tmp_path, step, 1 << 16, (64, 33) if step < 3 else (65, 33))
        assert loaded["progress"]["step"] == step
        assert all(torch.equal(t, expected[step][k]) for k, t in _its_tensors(loaded).items())
    with pytest.raises(RuntimeConfigError, match="COSTSIM_ASYNC_STAGING='lazy': allowed streaming, first"):
        c.set_async_staging("lazy")


def test_a_streaming_copy_that_fails_fails_its_writers_instead_of_leaving_them_waiting():
    """A writer thread waits in resolve_data for its tensor's copy; when the copying fails (here a buffer of
    the wrong size), the writers waiting end too (the one whose tensor was never copied raises, naming the
    staging) and the copy's own error reaches training."""
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import WriteItem, WriteItemType

    from runner.staging import StreamingStage
    good, bad = torch.ones(8), torch.ones(5)
    staged = {"good": torch.zeros(8), "bad": torch.zeros(4)}
    stage = StreamingStage(staged, [("good", good, staged["good"]), ("bad", bad, staged["bad"])])
    stage.planner.set_up_planner(staged, is_coordinator=True)
    outcome: dict[str, object] = {}

    def writer(key: str) -> None:
        item = WriteItem(index=MetadataIndex(key), type=WriteItemType.TENSOR)
        try:
            outcome[key] = stage.planner.resolve_data(item)
        except RuntimeError as exc:
            outcome[key] = exc

    threads = [threading.Thread(target=writer, args=(key,)) for key in ("bad", "good")]
    for thread in threads:
        thread.start()
    with pytest.raises(RuntimeError, match="size"):
        stage.fill(time.perf_counter())
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert isinstance(outcome["bad"], RuntimeError) and "staging the checkpoint failed" in str(outcome["bad"])
    assert stage.stall_s() >= 0


def test_a_streaming_writer_gets_its_tensor_only_once_it_has_been_copied():
    """The async save's writer thread asks for a tensor before training's thread has copied it: it waits (its
    buffer still holds an older save's bytes), and gets the buffer once fill() has copied the tensor into it.
    On a CPU the whole copy is quicker than DCP's planning, so a save alone rarely shows a writer that did not
    wait; this asks directly."""
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import WriteItem, WriteItemType

    from runner.staging import StreamingStage
    value, buffer = torch.arange(16.0), torch.zeros(16)        # the buffer: an older save's values
    stage = StreamingStage({"w": buffer}, [("w", value, buffer)])
    stage.planner.set_up_planner({"w": buffer}, is_coordinator=True)
    got: list[torch.Tensor] = []
    writer = threading.Thread(target=lambda: got.append(stage.planner.resolve_data(
        WriteItem(index=MetadataIndex("w"), type=WriteItemType.TENSOR))))
    writer.start()
    writer.join(timeout=0.3)
    assert writer.is_alive() and not got                        # waiting for the copy, nothing written yet
    stage.fill(time.perf_counter())
    writer.join(timeout=10)
    assert not writer.is_alive() and got[0] is buffer and torch.equal(got[0], value)


def test_a_gpu_that_cuda_does_not_show_the_worker_is_one_configuration_line():
    """runner.gpus may count more GPUs than CUDA shows a worker (a container's or a scheduler's limit without
    CUDA_VISIBLE_DEVICES): the worker's device check names the counts and what to give, a configuration error
    (no restart), instead of CUDA's invalid device ordinal. Here CUDA shows none."""
    from costsim.runtime import Runtime
    from runner.speed import RuntimeConfigError, check_device
    shown = torch.cuda.device_count()
    with pytest.raises(RuntimeConfigError, match=rf"GPU {shown} asked for, and CUDA shows this process {shown}: "
                                                 rf".*--nproc-per-node {max(shown, 1)}"):
        check_device(Runtime(), torch.device("cuda", shown))


def test_prewarm_records_a_steps_imports_and_imports_them_later(tmp_path):
    """runner.prewarm: the modules imported since a snapshot are written (importable ones only: a module made
    from a compile cache's file has no spec, Triton's cuda_utils comes from outside the import path); a later
    start imports the file's names on a thread, passing over lines that are not module names and counting the
    names that fail."""
    import importlib.util
    import types

    from runner import prewarm
    (tmp_path / "mods").mkdir()
    for name in ("prewarm_probe_a", "prewarm_probe_b"):
        (tmp_path / "mods" / f"{name}.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(tmp_path / "mods"))
    try:
        before = set(sys.modules)
        import prewarm_probe_a  # noqa: F401 - imported since the snapshot: recorded
        sys.modules["costsim_kernel_0123abcd"] = types.ModuleType("costsim_kernel_0123abcd")   # as Inductor's kernels
        elsewhere = tmp_path / "triton-cache" / "cuda_utils_probe.py"   # a module loaded from outside the path
        elsewhere.parent.mkdir()
        elsewhere.write_text("VALUE = 2\n")
        spec = importlib.util.spec_from_file_location("cuda_utils_probe", elsewhere)
        sys.modules["cuda_utils_probe"] = importlib.util.module_from_spec(spec)
        path = tmp_path / "cache" / prewarm.IMPORTS_FILE
        assert prewarm.record(path, before) >= 1
        names = path.read_text().split()
        assert "prewarm_probe_a" in names and "costsim_kernel_0123abcd" not in names and "cuda_utils_probe" not in names
        path.write_text("prewarm_probe_b\nos; rm -rf /\n__import__('os')\nno_such_module_here\n")
        assert prewarm.read_names(path) == ["prewarm_probe_b", "no_such_module_here"]
        warming = prewarm.Prewarm(prewarm.read_names(path)).start()
        assert warming.wait() >= 0 and "prewarm_probe_b" in sys.modules
    finally:
        sys.path.remove(str(tmp_path / "mods"))
        for name in ("costsim_kernel_0123abcd", "cuda_utils_probe", "prewarm_probe_a", "prewarm_probe_b"):
            sys.modules.pop(name, None)
    report = warming.report()
    assert report["imported"] == 1 and report["failed"] == 1 and report["failed_examples"] == ["no_such_module_here"]
    assert prewarm.read_names(tmp_path / "missing.txt") == []
    assert prewarm.imports_file({"TORCHINDUCTOR_CACHE_DIR": "/x"}) == Path("/x") / prewarm.IMPORTS_FILE
    assert prewarm.imports_file({}) is None and not prewarm.enabled({"COSTSIM_PREWARM": "0"})


class _Scaled(torch.nn.Module):
    """A scalar parameter: a state entry shaped like it is a scalar too."""
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        return x * self.scale


def _state_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3).to(memory_format=torch.channels_last), torch.nn.Flatten(),
                                torch.nn.Linear(4, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3).to(torch.bfloat16),
                                _Scaled())
    model[3].weight.requires_grad_(False)   # no gradient, no state: torch's way makes none either
    return model


OPTIMIZERS = {
    "adamw foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
    "adamw fused": lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
    "adam amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-3, amsgrad=True),
    "two groups": lambda ps: torch.optim.AdamW([{"params": ps[:2], "weight_decay": 0.0},
                                                {"params": ps[2:], "amsgrad": True}], lr=1e-3),
    "sgd momentum": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9),
    "rmsprop centered": lambda ps: torch.optim.RMSprop(ps, lr=1e-3, momentum=0.5, centered=True),
    "adafactor (factored)": lambda ps: torch.optim.Adafactor(ps, lr=1e-3),
    "lbfgs (needs a closure)": lambda ps: torch.optim.LBFGS(ps),
    "sgd (no state)": lambda ps: torch.optim.SGD(ps, lr=1e-3),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_resumes_optimizer_state_is_made_with_gradients_there_too(name):
    """Under DDP a resumed process has zero gradients before its optimizer has state (runner.train.grads_for_buckets:
    views of DDP's buckets). runner.state.training_state, the state a resume loads into, still holds every entry
    torch's way makes for a process without gradients (the probe's, or torch's own with the gradients set aside),
    and leaves each gradient the very tensor it was."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from runner.state import training_state
    from runner.train import grads_for_buckets
    bare, held = _state_model(), _state_model()
    bare_optim, held_optim = OPTIMIZERS[name](list(bare.parameters())), OPTIMIZERS[name](list(held.parameters()))
    grads_for_buckets(held)
    grads = [p.grad for p in held.parameters()]
    if name.startswith("lbfgs"):   # torch's own way fails the same, unchanged
        with pytest.raises(TypeError):
            training_state(held, held_optim, None, 0, 0)
        return
    _, want = get_state_dict(bare, bare_optim)
    got = training_state(held, held_optim, None, 0, 0)["optim"]
    assert {fqn: sorted(entries) for fqn, entries in want["state"].items()} == \
        {fqn: sorted(entries) for fqn, entries in got["state"].items()}
    assert bool(got["state"]) == (name != "sgd (no state)")
    assert all(p.grad is g for p, g in zip(held.parameters(), grads))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_resumes_optimizer_state_is_torchs_own_without_its_step(name):
    """runner.state.make_optimizer_state gives an optimizer without state what torch's get_state_dict's
    zero-gradient step would (every key, dtype, device, shape and value; the parameters untouched), or leaves
    it to that step where a probe cannot show it (a factored state, an optimizer that needs a closure)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from runner.state import make_optimizer_state
    stepped, probed = _state_model(), _state_model()
    stepped_optim, probed_optim = OPTIMIZERS[name](list(stepped.parameters())), OPTIMIZERS[name](list(probed.parameters()))
    before = [p.detach().clone() for p in probed.parameters()]
    how = make_optimizer_state(probed_optim)
    expected = {"adafactor (factored)": "torch", "lbfgs (needs a closure)": "torch", "sgd (no state)": "torch"}
    assert how == expected.get(name, "probed")
    assert all(p.grad is None for p in probed.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, probed.parameters()))
    if name.startswith("lbfgs"):   # torch's own way fails the same, unchanged
        with pytest.raises(TypeError):
            get_state_dict(stepped, stepped_optim)
        with pytest.raises(TypeError):
            get_state_dict(probed, probed_optim)
        return
    _, want = get_state_dict(stepped, stepped_optim)
    _, got = get_state_dict(probed, probed_optim)
    assert want["param_groups"] == got["param_groups"]
    assert want["state"].keys() == got["state"].keys()
    assert bool(want["state"]) == (name != "sgd (no state)")
    for fqn, entries in want["state"].items():
        assert entries.keys() == got["state"][fqn].keys(), fqn
        for key, value in entries.items():
            mine = got["state"][fqn][key]
            assert (value.dtype, value.device, value.shape, value.stride()) == \
                (mine.dtype, mine.device, mine.shape, mine.stride()), (fqn, key)
            assert torch.equal(value, mine), (fqn, key)
    if want["state"]:
        assert make_optimizer_state(probed_optim) == "kept"   # a state is never made twice
