"""The SIGTERM notice: acted on by a live worker, and not waited for by one stuck in a collective."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runner_helpers import free_port

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

WORKER = """
import sys, time
import torch, torch.distributed as dist
from runner.faults import NoticeFlag
rank, mode, port = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
if rank == 1:
    time.sleep(120)          # alive, but never joins rank 0's collective (as a dead peer)
    sys.exit(0)
flag = NoticeFlag(stuck_after_s=1.0)
print("ready", flush=True)
if mode == "stuck":
    dist.recv(torch.zeros(1), src=1)      # blocked in native code until rank 1 sends: never
else:
    while not flag.requested:
        time.sleep(0.01)
    print("noticed", flush=True)
"""


@pytest.mark.parametrize("mode, code, said", [("live", 0, "noticed"), ("stuck", 143, "blocked in native code")])
def test_sigterm_is_acted_on_or_the_stuck_worker_exits_at_once(mode, code, said):
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(rank), mode, port], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        assert procs[0].stdout.readline().strip() == "ready", procs[0].stderr.read()
        time.sleep(0.5)                       # into the blocking call
        sent = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        out, err = procs[0].communicate(timeout=30)
        waited = time.monotonic() - sent
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert procs[0].returncode == code, err
    assert said in out + err
    assert waited < 15                        # not the 30 s torchrun would otherwise wait
