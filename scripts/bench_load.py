"""Checkpoint load paths side by side: DCP's own reader (one thread) against the runner's
(runner.checkpoint_reader.SafeFileSystemReader: a pool of threads, each tensor record read by its own
parser straight into the target, or through a pinned buffer to a GPU; "torch.load" rows: the same pool
reading each record with torch.load, as before), on one synthetic state saved once with DCP, loaded into
tensors on --device. Rounds alternate the readers, so drift on the machine falls on all of them; the
ratio is to DCP's reader in the same round.

Usage: python scripts/bench_load.py --gb 8 --device cuda --dir /tmp/bench-load --threads 1,8 --rounds 3
(on a GPU host, a state the size of a rank's share: 15.4 GB for SDXL on 2 GPUs). `--tensors 6700`
cuts the state into as many tensors as SDXL's training state has (its parameters, both Adam moments
and the step counts), where the cost per record shows. "each read" rows: the runner's reader finding
each record's fields with a read of its own (RECORD_BLOCK_BYTES=0, as before 2026-12-04) instead of
in the record's first and last 4 KB. "batched" rows: the runner's batched path (COSTSIM_READ_BATCHED: one
read and one copy call per 256 MB batch after every record's place is set; "cuda" on a GPU, "always" on CPU);
the other runner rows read each record on its own ("never"). `--beside`: also each runner row with a thread
running Python beside the load from where the reader calls `prepared` (as the runner's warm step; the
start of the read for the per-record rows), where every take of the interpreter lock after a read waits
behind it; such a row also prints the busy thread's rate as a share of its rate alone (what the load costs
the work beside it). `--rows` picks rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter  # noqa: E402

from runner import checkpoint_reader as checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="state size (GB), in 64 MB fp32 tensors")
    parser.add_argument("--tensors", type=int, help="in this many equal fp32 tensors instead")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-load"))
    parser.add_argument("--threads", default="1,8", help="runner reader thread counts, e.g. 1,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beside", action="store_true", help="also each runner row beside a thread running Python")
    parser.add_argument("--rows", default="batched,records,each,torch.load",
                        help="runner rows: batched, records (each record on its own), each (its fields a read each), "
                             "torch.load")
    args = parser.parse_args()
    rows = set(args.rows.split(","))
    if rows - {"batched", "records", "each", "torch.load"}:
        parser.error(f"--rows {args.rows}: allowed batched, records, each, torch.load")
    batched = "cuda" if args.device.startswith("cuda") else "always"
    count = args.tensors or max(1, round(args.gb * 1e9 / (64 << 20)))
    state = {f"t{i}": torch.randn(max(1, int(args.gb * 1e9 / 4 / count)), device=args.device) for i in range(count)}
    size = sum(t.numel() * t.element_size() for t in state.values())
    shutil.rmtree(args.dir, ignore_errors=True)
    dcp.save(state, storage_writer=FileSystemWriter(str(args.dir), thread_count=4), no_dist=True)
    block = checkpoint.RECORD_BLOCK_BYTES
    readers: list[tuple[str, tuple[int, bool, int, bool, str] | None]] = [("dcp", None)]
    for n in args.threads.split(","):   # the runner caps its threads at the process's share of the cores
        checkpoint.READ_THREADS = int(n)
        for beside in (False, True) if args.beside else (False,):
            for row, records, blocks, mode, how in (("batched", True, block, batched, " batched"),
                                                    ("records", True, block, "never", ""),
                                                    ("each", True, 0, "never", " each read"),
                                                    ("torch.load", False, block, "never", " torch.load")):
                if row not in rows or (beside and not records):   # torch.load beside a busy thread: minutes
                    continue
                label = f"runner x{checkpoint.read_threads()}{how}" + (" beside" if beside else "")
                readers.append((label, (int(n), records, blocks, beside, mode)))
    times: dict[str, list[float]] = {name: [] for name, _ in readers}
    shares: dict[str, list[float]] = {}
    alone = busy_rate(1.0) if args.beside else 0.0
    for round_ in range(args.rounds):
        for name, setting in readers:
            target = {k: torch.empty_like(v) for k, v in state.items()}
            beside = False
            if setting:
                checkpoint.READ_THREADS, checkpoint.RECORDS, checkpoint.RECORD_BLOCK_BYTES, beside, mode = setting
                os.environ["COSTSIM_READ_BATCHED"] = mode
            busy = Busy()
            try:
                started = time.perf_counter()
                reader = None
                if setting:
                    reader = checkpoint.SafeFileSystemReader(str(args.dir), prepared=busy.start if beside else None)
                    dcp.load(target, storage_reader=reader, planner=checkpoint.SafeLoadPlanner(), no_dist=True)
                else:
                    dcp.load(target, storage_reader=FileSystemReader(str(args.dir)), no_dist=True)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - started)
            finally:
                busy.stop()
            if beside:
                shares.setdefault(name, []).append(busy.rounds / busy.seconds / alone)
            assert all(torch.equal(target[k], state[k]) for k in state), f"{name} loaded different values"
            parts = "".join(f", {k} {v:.2f} s" for k, v in (reader.timings if reader else {}).items())
            print(f"round {round_ + 1}: {name}: {times[name][-1]:.2f} s{parts}", file=sys.stderr)
    base = statistics.median(times["dcp"])
    print(f"{size / 1e9:.1f} GB into {args.device} (page cache warm after the first round), medians of {args.rounds}:")
    for name, values in times.items():
        median = statistics.median(values)
        rate = (f"  the busy thread at {statistics.median(shares[name]):.2f} of its rate alone" if name in shares
                else "")
        print(f"  {name:<32} {median:7.2f} s  {size / 1e9 / median:6.2f} GB/s  x{base / median:.2f} of DCP's reader"
              + rate)
    shutil.rmtree(args.dir, ignore_errors=True)


class Busy:
    """A thread running Python (never leaving the interpreter lock of its own accord) from start() (the
    reader's `prepared`: where the runner's warm step starts) to stop(); `rounds` of work done, `seconds`."""

    def __init__(self) -> None:
        self.rounds, self.seconds, self._began = 0, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)

    def start(self) -> None:
        self._began = time.perf_counter()
        self._thread.start()

    def _spin(self) -> None:
        x = 0
        while not self._stop.is_set():
            for i in range(1000):
                x += i * i
            self.rounds += 1

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.seconds = time.perf_counter() - self._began


def busy_rate(seconds: float) -> float:
    """The busy thread's rounds per second with nothing beside it."""
    busy = Busy()
    busy.start()
    time.sleep(seconds)
    busy.stop()
    return busy.rounds / busy.seconds


if __name__ == "__main__":
    main()
