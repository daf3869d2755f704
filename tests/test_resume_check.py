"""The supervisor's check of the newest checkpoints beside torchrun's start (runner.resume_check), as rank 0
reads it: the same verdicts as rank 0's own check, none for a manifest replaced since, and a wait that ends
when the check ends however it ends. The runner's resume through it: tests/test_runner_resume.py."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from runner import resume_check
from runner.checkpoint_manifest import MANIFEST, file_checksums, verify
from runner.resume_check import UNKNOWN, Precheck, Verdicts


def checkpoint(root: Path, step: int, payload: bytes) -> Path:
    """A checkpoint folder as the runner commits it: its files, then the manifest of their chunk CRC-32s."""
    folder = root / f"step-{step}"
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"metadata %d" % step)
    (folder / "__0_0.distcp").write_bytes(payload)
    chunk = 1024
    files = [folder / ".metadata", folder / "__0_0.distcp"]
    sums = file_checksums(files, chunk)
    manifest = {"chunk_bytes": chunk, "files": {p.name: {"size": p.stat().st_size, "crc32_chunks": sums[p]}
                                                for p in files}}
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest))
    tmp.rename(folder / MANIFEST)   # a new inode, as a commit's rename makes
    return folder


def test_the_supervisors_verdicts_are_rank_0s_own_until_a_manifest_is_replaced(tmp_path):
    root, run = tmp_path / "checkpoints", tmp_path / "run"
    run.mkdir()
    for step in (1, 2, 3):
        checkpoint(root, step, os.urandom(5000))
    damaged = root / "step-3" / "__0_0.distcp"
    data = bytearray(damaged.read_bytes())
    data[4000] ^= 0xFF
    damaged.write_bytes(bytes(data))   # same size, one chunk's CRC wrong
    told = []
    check = Precheck(root, run, on_done=told.append)
    assert set(check.env) == {resume_check.ENV}
    verdicts = Verdicts.wait(root, env=check.env)
    check.close()
    assert not list(run.iterdir())   # the verdicts' file goes with the launch
    assert verdicts.problem(3, root / "step-3") == verify(root / "step-3") == "__0_0.distcp fails its CRC-32 check"
    assert verdicts.problem(2, root / "step-2") is None
    assert verdicts.problem(1, root / "step-1") is UNKNOWN   # older than the newest sound one: not read
    assert [v["step"] for v in told[0]["verdicts"]] == [3, 2] and told[0]["duration_s"] >= 0
    # step 2 written again (another life's save of the same step): its manifest is not the one checked
    manifest = root / "step-2" / MANIFEST
    copy = manifest.with_name("copy")
    copy.write_bytes(manifest.read_bytes())
    copy.rename(manifest)
    assert verdicts.problem(2, root / "step-2") is UNKNOWN
    # verdicts about another folder say nothing of this one
    assert Verdicts(tmp_path / "elsewhere", {"root": str(root.resolve()), "verdicts": told[0]["verdicts"]}).problem(
        3, root / "step-3") is UNKNOWN


def test_rank_0_waits_for_a_check_under_way_and_not_for_one_whose_supervisor_died(tmp_path):
    root = tmp_path / "checkpoints"
    checkpoint(root, 4, b"x" * 3000)
    path = tmp_path / "verdicts.json"
    env = {resume_check.ENV: str(path)}
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)   # the supervisor's check, under way
    got: list[Verdicts] = []
    reader = threading.Thread(target=lambda: got.append(Verdicts.wait(root, env=env)))
    reader.start()
    reader.join(timeout=0.5)
    assert reader.is_alive() and not got   # it cannot read before the unlock
    os.write(fd, json.dumps({"root": str(root.resolve()), "verdicts": resume_check.newest_sound(root)}).encode())
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    reader.join(timeout=10)
    assert got and got[0].problem(4, root / "step-4") is None

    # a supervisor killed while it checks: the kernel unlocks its file, and rank 0 checks for itself
    path.unlink()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
                               str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    got.clear()
    reader = threading.Thread(target=lambda: got.append(Verdicts.wait(root, env=env)))
    reader.start()
    time.sleep(0.2)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    reader.join(timeout=10)
    assert got and got[0].problem(4, root / "step-4") is UNKNOWN


def test_no_check_no_verdicts(tmp_path):
    """Several nodes (no root), no variable, no file: rank 0 checks every checkpoint itself."""
    root = tmp_path / "checkpoints"
    checkpoint(root, 1, b"y" * 100)
    check = Precheck(None, tmp_path, on_done=lambda doc: None)
    assert check.env == {}
    check.close()
    for env in ({}, {resume_check.ENV: str(tmp_path / "missing.json")}):
        assert Verdicts.wait(root, env=env).problem(1, root / "step-1") is UNKNOWN
