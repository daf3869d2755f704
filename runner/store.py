"""Where checkpoints outlive the node: an S3-compatible object store (`s3://bucket/prefix`).

Chosen design (docs/checkpoints.md says why and what it measured): every checkpoint is first written
to the node's local folder as before (DCP, manifest, rename), then uploaded: its files, then its
manifest last, so that a checkpoint counts in the store only once it is complete there. Periodic
(async) saves upload in the background thread that writes them; the final save and the save on a
notice upload before the job exits (if the reclaim comes first, the previous checkpoint stays the
newest in the store). `keep` applies in the store; the local folder is a bounded cache (the newest
complete checkpoint). A job that starts on a node without a usable local copy downloads the newest
complete checkpoint of the store (`S3Store.fetch`: every file in ranges of the manifest's chunks, read in
parallel, each range checked against its CRC-32 as it arrives), into memory where all ranks are on this
host and it fits (runner.checkpoint: a tmpfs folder, dropped once loaded), else into its cache on the
disk, and loads it.

Endpoint, region and credentials come from the usual AWS variables and files (AWS_ENDPOINT_URL,
AWS_REGION, AWS_ACCESS_KEY_ID, AWS_PROFILE ...), never from plan.json. No torch here.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from runner import checkpoint_manifest, environment, layout
from runner.checkpoint_manifest import MANIFEST

SCHEME = "s3://"
# multipart part size; COSTSIM_S3_PART_MB sets another, at least S3's minimum of 5 MiB (tests use 8)
PART_BYTES = int(environment.real("COSTSIM_S3_PART_MB", 64, minimum=5) * (1 << 20))
TRANSFER_THREADS = 8       # parts in flight per file (uploads)
# ranges in flight when a checkpoint is fetched (all its files at once); COSTSIM_S3_FETCH_THREADS sets another
FETCH_THREADS = environment.whole("COSTSIM_S3_FETCH_THREADS", 16)
# processes they are shared among (COSTSIM_S3_FETCH_PROCESSES; 1, the default: the caller's own, or one of its own
# where the caller builds beside it: `fetch(apart=True)`, off with COSTSIM_S3_FETCH_APART=0). One process
# fetched faster wherever both were measured (scripts/bench_store_read.py): on 2 cores 0.64-0.81x of the store's
# bound against 0.35-0.37x with 4 (data/measurements/2026-12-03-store-read-local), on the 16-core H200 host 0.55x
# and 0.66x against 0.49x and 0.57x (2026-12-03-h200-async-streaming, 2026-12-04-h200-resume-check)
FETCH_PROCESSES = environment.whole("COSTSIM_S3_FETCH_PROCESSES", 1)
FETCH_APART = os.environ.get("COSTSIM_S3_FETCH_APART", "1") != "0"
PROCESS_BYTES = 1 << 30    # a fetch process for each GiB at most: a small checkpoint is fetched in the caller's
READ_BLOCK = 8 << 20       # what one read of a range's body takes at a time
DIRECT_READS = True        # body_reader's socket-to-buffer reads (False: the body's read(); the bench compares)


class StoreError(RuntimeError):
    """The store cannot be used (the message says what to fix, in one line)."""


class StoreUnavailable(StoreError):
    """The store did not answer, or failed, during the run (a drop-out: the job goes on from its local
    copy and tries again later). The message is one line: the store and the cause."""


class ConditionalWritesRefused(StoreError):
    """The store does not take S3's conditional writes (If-None-Match / If-Match)."""


# After a call found no store at its endpoint (connection refused or not made), the process's calls to that endpoint
# fail at once for this long instead of each spending the client's retries on it (2-6 s a call): a runner restarted
# while its store was out reached its workers' launch in 5.2-8.1 s against 12.4-14.1 s (scripts/bench_store_outage.py,
# which sets COSTSIM_S3_NO_ANSWER_HOLD_S to 0 for every call to try). The checkpointer's own backoff
# (runner.checkpoint) decides when an upload is tried again. Within the window a call first knocks on the endpoint's
# port (one TCP connect, PROBE_TIMEOUT_S at most, once per PROBE_EVERY_S): a store back meanwhile takes the call and
# ends the hold, so it is found within a second of its return rather than when the window ends.
NO_ANSWER_HOLD_S = environment.real("COSTSIM_S3_NO_ANSWER_HOLD_S", 10.0, minimum=0.0)
PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 0.25
_no_answer_until: dict[str, float] = {}   # endpoint -> time.monotonic() until which calls to it fail at once
_probed_at: dict[str, float] = {}         # endpoint -> time.monotonic() of the hold's last knock on its port
_no_answer_lock = threading.Lock()


def _no_answer(exc: BaseException) -> bool:
    """Whether the store was not reached at all (no connection made), as opposed to an answer or a slow one."""
    import botocore.exceptions as errors
    return isinstance(exc, (errors.EndpointConnectionError, errors.ConnectTimeoutError))


def _unavailable(store: S3Store, what: str, exc: BaseException) -> StoreUnavailable:
    if _no_answer(exc):
        cause = f"no answer from {store._client().meta.endpoint_url}"
    else:
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return StoreUnavailable(f"{store.url}: {what} failed: {cause}")


def _guarded(what: str):
    """Any botocore error or connection failure of the wrapped store operation is a StoreUnavailable; one within
    NO_ANSWER_HOLD_S of a call that found no store at the endpoint is one without trying, unless the endpoint's port
    answers now (`_held`)."""
    def wrap(method):
        def guarded(self, *args, **kwargs):
            import botocore.exceptions as errors
            endpoint = self._client().meta.endpoint_url
            if (held := _held(endpoint)) > 0:
                raise StoreUnavailable(f"{self.url}: {what} failed: no answer from {endpoint} (a call "
                                       f"{NO_ANSWER_HOLD_S - held:.1f} s ago found none; asked again once its "
                                       f"port answers, or after {NO_ANSWER_HOLD_S:g} s)")
            try:
                return method(self, *args, **kwargs)
            except (errors.BotoCoreError, errors.ClientError, ConnectionError, TimeoutError) as exc:
                if _no_answer(exc):
                    with _no_answer_lock:   # found dead just now: the first knock a PROBE_EVERY_S later
                        _probed_at[endpoint] = time.monotonic()
                        _no_answer_until[endpoint] = _probed_at[endpoint] + NO_ANSWER_HOLD_S
                raise _unavailable(self, what, exc) from None
        guarded.__doc__, guarded.__name__ = method.__doc__, method.__name__
        return guarded
    return wrap


def _held(endpoint: str) -> float:
    """Seconds left of the endpoint's hold (0: none, or its port answered a knock just now, which ends it)."""
    with _no_answer_lock:
        now = time.monotonic()
        held = _no_answer_until.get(endpoint, 0.0) - now
        if held <= 0 or now - _probed_at.get(endpoint, -PROBE_EVERY_S) < PROBE_EVERY_S:
            return max(held, 0.0)
        _probed_at[endpoint] = now
    if not _port_answers(endpoint):
        return held
    with _no_answer_lock:
        _no_answer_until.pop(endpoint, None)
    return 0.0


def _port_answers(endpoint: str) -> bool:
    """Whether a TCP connection to the endpoint's host and port is made within PROBE_TIMEOUT_S. False where the
    client would go through a proxy (the endpoint's port says nothing then) or the endpoint is not host:port."""
    import socket
    import urllib.parse
    import urllib.request
    parts = urllib.parse.urlsplit(endpoint)
    try:
        host, port = parts.hostname, parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:   # a port that is not a number
        return False
    if not host or port is None:
        return False
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(host):
        return False
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError:   # refused, unreachable, not resolved, or no answer within the timeout
        return False
    return True


def is_store(location: str | None) -> bool:
    return bool(location) and str(location).startswith(SCHEME)


def _without_expect_continue(request, **_) -> None:
    """botocore's `Expect: 100-continue` off every request: after a PUT of no bytes (an empty file of a
    checkpoint) the pooled connection read the next response against the empty PUT's and stalled for the
    whole read timeout, 120 s, before a retry (boto/botocore#3755; SeaweedFS, minio). The header is not
    signed; without it a refused upload costs its body's bytes on the wire, nothing else. Returns None:
    anything else would be taken as the response."""
    request.headers.pop("Expect", None)


@dataclass
class S3Store:
    bucket: str
    prefix: str
    _cached: object = field(default=None, init=False, repr=False, compare=False)   # the boto3 client

    @classmethod
    def from_url(cls, url: str) -> S3Store:
        match = re.match(r"^s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(.*))?$", url)
        if not match:
            raise StoreError(f"{url!r} is not an object store URL: expected s3://bucket/prefix")
        return cls(bucket=match.group(1), prefix=(match.group(2) or "").strip("/"))

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    # -- the client -------------------------------------------------------------------------------
    def _client(self):
        if self._cached is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise StoreError("an s3:// checkpoint location needs boto3: pip install 'costsim[store]'") from None
            # 3 attempts: a store that refuses connections is known out within seconds (5 took ~14 s a call);
            # the checkpointer's own backoff (runner.checkpoint) spaces the tries after that
            config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=120,
                            max_pool_connections=max(TRANSFER_THREADS * 2, FETCH_THREADS))
            client = boto3.client("s3", config=config)
            client.meta.events.register("before-send.s3", _without_expect_continue)
            self._cached = client
        return self._cached

    def _transfer(self):
        from boto3.s3.transfer import TransferConfig
        return TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES,
                              max_concurrency=TRANSFER_THREADS, use_threads=True)

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def check(self) -> None:
        """Before training: the endpoint answers, the bucket is there, the credentials may write and delete."""
        import botocore.exceptions as errors
        client = self._client()
        endpoint = client.meta.endpoint_url
        probe = self._key(f".write-probe-{time.time_ns()}")
        try:
            client.head_bucket(Bucket=self.bucket)
            client.put_object(Bucket=self.bucket, Key=probe, Body=b"ok")
            client.delete_object(Bucket=self.bucket, Key=probe)
        except errors.EndpointConnectionError:
            raise StoreUnavailable(f"{self.url}: no object store answers at {endpoint} (set AWS_ENDPOINT_URL for an "
                                   "S3-compatible store)") from None
        except errors.NoCredentialsError:
            raise StoreError(f"{self.url}: no credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
                             "AWS_PROFILE)") from None
        except errors.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("404", "NoSuchBucket") or status == 404:
                raise StoreError(f"{self.url}: bucket {self.bucket!r} does not exist at {endpoint}; create it first")
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch") or status == 403:
                raise StoreError(f"{self.url}: the credentials may not write to bucket {self.bucket!r} at {endpoint} "
                                 f"({code}): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE") from None
            raise StoreError(f"{self.url}: {code or status} from {endpoint}") from None
        except errors.BotoCoreError as exc:
            raise StoreError(f"{self.url}: {exc}") from None

    # -- checkpoints --------------------------------------------------------------------------------
    @_guarded("listing its checkpoints")
    def steps(self) -> list[int]:
        """The complete checkpoints in the store (their manifest is there), newest first."""
        found = []
        paginator = self._client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key("step-")):
            for item in page.get("Contents", []):
                folder, _, name = item["Key"][len(self._key("")):].lstrip("/").partition("/")
                step = layout.step_of(folder)
                if name == MANIFEST and step is not None:
                    found.append(step)
        return sorted(set(found), reverse=True)

    @_guarded("an upload")
    def upload(self, folder: Path, step: int) -> int:
        """A complete local checkpoint into the store: its files, then its manifest; returns the bytes."""
        client, config = self._client(), self._transfer()
        files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name != MANIFEST)
        for path in files:
            client.upload_file(str(path), self.bucket, self._key(f"step-{step}", path.name), Config=config)
        client.upload_file(str(Path(folder) / MANIFEST), self.bucket, self._key(f"step-{step}", MANIFEST), Config=config)
        return sum(p.stat().st_size for p in files)

    @_guarded("a download")
    def download(self, step: int, root: Path) -> Path:
        """Checkpoint `step` into a partial folder under `root` (layout.partial_folder) with boto3's transfer
        manager, one file after another, its manifest last; the caller verifies it and renames it into place.
        The runner fetches with `fetch`; this is the earlier path, kept as the benchmark's baseline."""
        client, config = self._client(), self._transfer()
        tmp = layout.partial_folder(root, step)
        tmp.mkdir(parents=True, exist_ok=True)
        manifest = client.get_object(Bucket=self.bucket, Key=self._key(f"step-{step}", MANIFEST))["Body"].read()
        for name in json.loads(manifest)["files"]:
            client.download_file(self.bucket, self._key(f"step-{step}", name), str(tmp / name), Config=config)
        (tmp / MANIFEST).write_bytes(manifest)
        return tmp

    @_guarded("a fetch")
    def fetch(self, step: int, folder: Path, *, threads: int = FETCH_THREADS,
              processes: int = FETCH_PROCESSES, apart: bool = False) -> str | None:
        """Checkpoint `step` into `folder` (created; the caller renames it into place): every file in ranges
        of its manifest's chunk size (64 MiB), `threads` ranges in flight across all the files, each written
        where it belongs and its CRC-32 computed on the bytes as they arrive, then the manifest. Returns None
        when every file is complete and matches the manifest, else what does not (nothing is read twice; a
        manifest of an earlier runner, one CRC-32 a file, is checked by reading the files back).

        The ranges are shared out among `processes` processes (`python -m runner.store`, this module, with
        the ranges on its stdin), each with its share of the threads: in one process the reading threads'
        interpreter work competed with the caller's own (the SDXL build beside the fetch took 9.8 s, 2.6-3.2 s
        alone) and with each other. `apart`: in a process of its own even where one process fetches (the
        runner's start, whose build runs beside the fetch: a fetch in the builder's process holds the
        interpreter's lock at every socket read), unless the checkpoint is under PROCESS_BYTES."""
        from runner.checkpoint_manifest import CHUNK_BYTES, verify
        client = self._client()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        manifest = client.get_object(Bucket=self.bucket, Key=self._key(f"step-{step}", MANIFEST))["Body"].read()
        try:
            doc = json.loads(manifest)
            files, chunk = doc["files"], int(doc.get("chunk_bytes", CHUNK_BYTES))
            sizes = {str(name): int(entry["size"]) for name, entry in files.items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            return "its manifest in the store is not readable"
        if any(not re.fullmatch(r"[A-Za-z0-9._-]+", name) or name == MANIFEST for name in sizes) or chunk <= 0:
            return "its manifest names files outside its folder"
        for name, size in sizes.items():
            with open(folder / name, "wb") as handle:
                handle.truncate(size)
        # round-robin over the files: writes to one file take its inode's lock in turn (on a tmpfs one
        # file took 2.3 GB/s of a store that serves 7.5), so the ranges in flight spread over all of them
        ranges = [(name, start, min(chunk, size - start)) for start in range(0, max(sizes.values(), default=0), chunk)
                  for name, size in sizes.items() if start < size]
        crcs = self._fetch_in_processes(step, folder, ranges, threads, processes, apart)
        (folder / MANIFEST).write_bytes(manifest)
        for name, size in sizes.items():
            got = [crcs[(name, start)] for start in range(0, size, chunk)] or [0]   # an empty file: CRC-32 of nothing
            if any(crc is None for crc in got):
                return f"{name} in the store is shorter than its manifest's {size} bytes"
            expected = files[name].get("crc32_chunks")
            if expected is None:   # an earlier runner's manifest: one CRC-32 over the whole file
                return verify(folder)
            if got != list(expected):
                return f"{name} fails its CRC-32 check"
        return None

    def _fetch_in_processes(self, step: int, folder: Path, ranges: list, threads: int, processes: int,
                            apart: bool = False) -> dict[tuple[str, int], int | None]:
        import errno
        import subprocess
        import sys
        total = sum(length for _, _, length in ranges)   # a process pays its start (about 0.5 s): one per GB or more
        processes = max(1, min(processes, len(ranges), -(-total // PROCESS_BYTES)))
        if processes == 1 and (not (apart and FETCH_APART) or total < PROCESS_BYTES):
            return self.fetch_ranges(step, folder, ranges, threads)
        share = max(1, threads // processes)
        children = []
        for index in range(processes):   # each starts on its share at once; its stdin is read whole first
            job = json.dumps({"url": self.url, "step": step, "folder": str(folder), "threads": share,
                              "ranges": ranges[index::processes]})
            child = subprocess.Popen([sys.executable, "-m", "runner.store"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert child.stdin is not None
            child.stdin.write(job)
            child.stdin.close()
            child.stdin = None   # written and closed: communicate() below only drains the outputs
            children.append(child)
        crcs: dict[tuple[str, int], int | None] = {}
        failures = []
        for child in children:
            out, err = child.communicate()   # both pipes drained together: a long stderr cannot stall it
            code = child.returncode
            if code == 0:
                crcs.update(((name, start), crc) for name, start, crc in json.loads(out))
            else:
                failures.append((code, (err.strip().splitlines() or ["no message"])[-1]))
        for code, message in failures:   # a full disk first: the caller falls back from memory to the disk
            if code == _CHILD_NO_ROOM:
                raise OSError(errno.ENOSPC, message)
        if failures:
            code, message = failures[0]
            if code == _CHILD_STORE:
                raise StoreUnavailable(message)
            raise RuntimeError(f"{self.url}: a fetch process failed: {message}")
        return crcs

    @_guarded("a fetch")
    def fetch_ranges(self, step: int, folder: Path, ranges: list, threads: int) -> dict[tuple[str, int], int | None]:
        """The byte ranges (name, start, length) of checkpoint `step`'s files into the files of `folder`
        (already their full size); each range's CRC-32, or None where the object ended before it."""
        from concurrent.futures import ThreadPoolExecutor
        descriptors = {}
        try:
            for name in {name for name, _, _ in ranges}:
                descriptors[name] = os.open(Path(folder) / name, os.O_WRONLY)

            def one(job) -> tuple[str, int, int | None]:
                name, start, length = job
                return name, start, self._range_into(step, name, start, length, descriptors[name])

            with ThreadPoolExecutor(max_workers=max(1, min(threads, len(ranges) or 1))) as pool:
                return {(name, start): crc for name, start, crc in pool.map(one, ranges)}
        finally:
            for fd in descriptors.values():
                os.close(fd)

    def _range_into(self, step: int, name: str, start: int, length: int, fd: int) -> int | None:
        """Bytes [start, start + length) of the store's file into `fd` at `start`; their CRC-32, or None
        when the object ends before them. Each block goes from the socket into this thread's buffer and from
        there into the file (`body_reader`: the body's read() copies each block once more, twice in urllib3)."""
        import botocore.exceptions as errors
        try:
            body = self._client().get_object(Bucket=self.bucket, Key=self._key(f"step-{step}", name),
                                             Range=f"bytes={start}-{start + length - 1}")["Body"]
        except errors.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("InvalidRange", "NoSuchKey", "404", "416"):
                return None
            raise
        buffer = _thread_buffer()
        crc, done = 0, 0
        with body:
            readinto = body_reader(body)
            while done < length and (got := readinto(buffer[:min(len(buffer), length - done)])):
                view, at = buffer[:got], start + done
                crc = checkpoint_manifest.crc32(view, crc)
                while view:   # a regular file takes it whole; a signal may cut it short
                    written = os.pwrite(fd, view, at)
                    view, at = view[written:], at + written
                done += got
            release_read(body)
        return crc if done == length else None

    @_guarded("an upload")
    def put_file(self, path: Path, name: str) -> None:
        """A file into the store at `name` under the prefix (multipart: the object appears once complete)."""
        self._client().upload_file(str(path), self.bucket, self._key(name), Config=self._transfer())

    @_guarded("a download")
    def get_file(self, name: str, path: Path) -> int | None:
        """The store's `name` under the prefix into the file `path`; its bytes, or None when there is none."""
        import botocore.exceptions as errors
        try:
            self._client().download_file(self.bucket, self._key(name), str(path), Config=self._transfer())
        except errors.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return Path(path).stat().st_size

    @_guarded("a delete")
    def delete(self, step: int) -> None:
        """The manifest first (it stops counting at once), then its files."""
        client = self._client()
        client.delete_object(Bucket=self.bucket, Key=self._key(f"step-{step}", MANIFEST))
        listed = client.list_objects_v2(Bucket=self.bucket, Prefix=self._key(f"step-{step}") + "/").get("Contents", [])
        for item in listed:
            client.delete_object(Bucket=self.bucket, Key=item["Key"])

    # -- small JSON records at the prefix's root: the job it holds, its runner's lease --------------------
    @_guarded("reading a record")
    def get_json(self, name: str) -> tuple[dict | None, str | None]:
        """The record `name` and its ETag; (None, None) when there is none. A record that is not JSON is
        a StoreError naming it."""
        import botocore.exceptions as errors
        try:
            got = self._client().get_object(Bucket=self.bucket, Key=self._key(name))
        except errors.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None, None
            raise
        try:
            doc = json.loads(got["Body"].read())
        except ValueError:
            raise StoreError(f"{self.url}/{name}: not a costsim record (not JSON); remove it if nothing uses this "
                             "prefix") from None
        if not isinstance(doc, dict):
            raise StoreError(f"{self.url}/{name}: not a costsim record (not a JSON object)")
        return doc, got.get("ETag")

    @_guarded("writing a record")
    def put_json(self, name: str, doc: dict, *, if_none_match: bool = False, if_match: str | None = None) -> str | None:
        """Write the record `name`; with a condition (create only, or replace only this ETag) None when the
        store refused it (HTTP 412: another writer came first). Returns the new ETag."""
        import botocore.exceptions as errors
        extra = {"IfNoneMatch": "*"} if if_none_match else {"IfMatch": if_match} if if_match else {}
        try:
            put = self._client().put_object(Bucket=self.bucket, Key=self._key(name), Body=json.dumps(doc).encode(),
                                            ContentType="application/json", **extra)
        except errors.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return None
            if code in ("NotImplemented", "InvalidArgument") or status == 501:
                raise ConditionalWritesRefused(f"{self.url}: the store refuses conditional writes ({code})") from None
            raise
        return put.get("ETag")

    @_guarded("removing a record")
    def delete_json(self, name: str, *, if_match: str | None = None) -> bool:
        """Remove the record `name` (only if its ETag is still `if_match`, where given); False when refused."""
        import botocore.exceptions as errors
        try:
            self._client().delete_object(Bucket=self.bucket, Key=self._key(name),
                                         **({"IfMatch": if_match} if if_match else {}))
        except errors.ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
                return False
            raise
        return True

    def honours_conditions(self) -> bool:
        """Whether the store refuses a second create-only write of one key (S3's If-None-Match: *)."""
        probe = f".conditional-probe-{time.time_ns()}"
        try:
            first = self.put_json(probe, {}, if_none_match=True)
            second = self.put_json(probe, {}, if_none_match=True)
        except ConditionalWritesRefused:
            return False
        finally:
            self.delete_json(probe)
        return first is not None and second is None

    # -- the job's lives: each run folder's telemetry, for the job's other nodes -------------------------
    @_guarded("uploading a life's telemetry")
    def upload_telemetry(self, run_dir: Path) -> None:
        """RUN/telemetry.jsonl up to its last complete line, as lives/<folder key>/telemetry.jsonl."""
        from costsim.contract.telemetry import OTHER_LIVES, TELEMETRY
        data = (Path(run_dir) / TELEMETRY).read_bytes()
        data = data[:data.rfind(b"\n") + 1]
        self._client().put_object(Bucket=self.bucket, Key=self._key(OTHER_LIVES, folder_key(run_dir), TELEMETRY),
                                  Body=data)

    @_guarded("fetching the job's other lives")
    def fetch_lives(self, run_dir: Path) -> int:
        """Every other run folder's telemetry of this prefix into RUN/lives/<folder key>/ (replacing older
        copies, atomically); returns how many."""
        from costsim.contract.jsonfiles import write_atomic
        from costsim.contract.telemetry import OTHER_LIVES, TELEMETRY
        client, own, count = self._client(), folder_key(run_dir), 0
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(OTHER_LIVES) + "/"):
            for item in page.get("Contents", []):
                key, _, name = item["Key"][len(self._key(OTHER_LIVES)) + 1:].partition("/")
                if name != TELEMETRY or key == own or not re.fullmatch(r"[A-Za-z0-9._-]+", key):
                    continue
                body = client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()
                target = Path(run_dir) / OTHER_LIVES / key / TELEMETRY
                target.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(target, body.decode("utf-8", errors="replace"))
                count += 1
        return count

    def prune(self, keep: int) -> list[int]:
        """`keep` newest complete checkpoints stay; the older ones go, oldest first. Returns those removed."""
        removed = sorted(self.steps()[max(keep, 1):])
        for step in removed:
            self.delete(step)
        return removed


_buffers = threading.local()


def _thread_buffer() -> memoryview:
    """This thread's READ_BLOCK buffer for a fetch's reads (allocated once a thread, not once a block)."""
    buffer = getattr(_buffers, "buffer", None)
    if buffer is None or len(buffer) != READ_BLOCK:
        buffer = _buffers.buffer = memoryview(bytearray(READ_BLOCK))
    return buffer


def body_reader(body):
    """readinto(view) -> bytes read (0 at the end) for a GET's streaming body: http.client's own readinto under
    urllib3's response where the body is that plain stream (the socket's bytes straight into the caller's
    buffer), else the body's read() copied in. The caller counts what it got against the length it asked for
    (botocore's length check is read()'s)."""
    raw = getattr(body, "_raw_stream", None)
    stream = getattr(raw, "_fp", None)
    headers = getattr(raw, "headers", None) or {}
    direct = getattr(stream, "readinto", None)
    if DIRECT_READS and callable(direct) and headers.get("content-encoding", "identity") == "identity":
        return direct

    def readinto(view: memoryview) -> int:
        block = body.read(len(view))
        view[:len(block)] = block
        return len(block)
    return readinto


def release_read(body) -> None:
    """The connection of a body that body_reader read to its end, back to the client's pool: urllib3 releases
    it itself only when its own read() meets the end, and closing the body otherwise closes the connection
    (a new connection, over TLS a new handshake, for every range)."""
    raw = getattr(body, "_raw_stream", None)
    stream = getattr(raw, "_fp", None)
    release = getattr(raw, "release_conn", None)
    if stream is not None and callable(getattr(stream, "isclosed", None)) and stream.isclosed() and callable(release):
        release()


def folder_key(run_dir: Path) -> str:
    """A run folder's name among the job's folders in the store: its host and a hash of its path."""
    import hashlib
    import socket
    path = str(Path(run_dir).resolve())
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())
    return f"{host}-{hashlib.sha256(path.encode()).hexdigest()[:12]}"


def checkpoint_place(run_dir: Path, location: str | None) -> tuple[Path, S3Store | None]:
    """Where a run's checkpoints are written (a local folder) and the store they are uploaded to, if any:
    no location: RUN/checkpoints; a folder (local, or shared storage): that folder; s3://...: the store,
    with RUN/checkpoints as its local cache."""
    if location is None:
        return Path(run_dir) / layout.CHECKPOINTS, None
    if is_store(location):
        return Path(run_dir) / layout.CHECKPOINTS, S3Store.from_url(location)
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", location):   # s3:/b, gs://b: a folder named "s3:" otherwise
        raise StoreError(f"{location!r} is neither a folder nor an object store URL: the runner's store is "
                         f"S3 or S3-compatible, {SCHEME}bucket/prefix")
    return Path(location), None


JOB_RECORD = "job.json"   # at the prefix's root: the job its checkpoints belong to (costsim.contract.job)


def check_job(store: S3Store, plan, *, accept_change: bool = False) -> bool:
    """Whether `plan`'s job may use the prefix (reads only): a StoreError naming what differs when the prefix
    holds another job's checkpoints (another workload, seed, batch, options), or checkpoints with no job
    record; with `accept_change` those are taken as this job's. True when the record is to be (re)written."""
    from costsim.contract.job import defining, differences_of, fingerprint
    doc, _ = store.get_json(JOB_RECORD)
    if doc is not None and doc.get("fingerprint") == fingerprint(plan):
        return False
    if doc is None and not store.steps():
        return True
    if accept_change:
        return True
    if doc is None:
        raise StoreError(f"{store.url}: holds checkpoints but no record of their job ({JOB_RECORD}: written by another "
                         "tool or an older costsim): give another --checkpoint-dir, or --accept-plan-change to take "
                         "them as this job's")
    changes = differences_of(doc.get("defining") or {}, defining(plan)) or ["fingerprint differs"]
    raise StoreError(f"{store.url}: holds another job's checkpoints (run {doc.get('run_id')}: {'; '.join(changes)}): "
                     "give another --checkpoint-dir, or --accept-plan-change to go on from them with this plan")


def record_job(store: S3Store, plan, run_id: str) -> None:
    """The prefix's job record, written by the runner that holds the prefix's lease."""
    from costsim.contract.job import defining, fingerprint
    store.put_json(JOB_RECORD, {"fingerprint": fingerprint(plan), "defining": defining(plan), "run_id": run_id,
                                "created": time.time()})


_CHILD_NO_ROOM, _CHILD_STORE = 3, 4   # a fetch process's exit: the target filesystem is full; the store failed


def _fetch_ranges_main() -> int:
    """`python -m runner.store`: one fetch process (S3Store.fetch): the job as JSON on stdin, each range's
    CRC-32 as JSON on stdout; a one-line error on stderr."""
    import errno
    import sys
    job = json.load(sys.stdin)
    store = S3Store.from_url(job["url"])
    try:
        crcs = store.fetch_ranges(int(job["step"]), Path(job["folder"]), [tuple(r) for r in job["ranges"]],
                                  int(job["threads"]))
    except StoreError as exc:
        print(exc, file=sys.stderr)
        return _CHILD_STORE
    except OSError as exc:
        print(f"{job['folder']}: {exc.strerror or exc}", file=sys.stderr)
        return _CHILD_NO_ROOM if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 1
    json.dump([[name, start, crc] for (name, start), crc in crcs.items()], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(_fetch_ranges_main())
