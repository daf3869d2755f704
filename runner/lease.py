"""One runner per run folder: a lease (RUN/lease.json) with its holder and a heartbeat.

`runner execute` takes the lease before it writes anything in the folder, renews it every
HEARTBEAT_S while it runs, and gives it back when it exits. A second runner on the same folder finds
it held and exits 2 with one line naming the holder. A holder that stopped renewing has let it go:
on this host when its process is gone (pid and start time), elsewhere once its heartbeat is TTL_S old
(a runner that finds a fresh lease of another host waits at most that long to tell a dead holder from a
live one). A SIGKILL never leaves a folder locked for good. The holder that finds its lease taken over
(it was thought dead) stops its workers before they write again.

Node 0 holds the lease for every node of a job (the others join its rendezvous). No torch here.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from costsim.contract.jsonfiles import write_atomic
from costsim.errors import InputError
from runner import environment

LEASE = "lease.json"
TTL_S = environment.real("COSTSIM_LEASE_TTL_S", 30.0, minimum=1.0)   # a heartbeat this old is a dead holder's
HEARTBEAT_S = TTL_S / 3


@dataclass
class Holder:
    token: str          # this holding's own id (a runner taking over writes a new one)
    host: str
    pid: int
    run_id: str
    started: float      # epoch seconds
    heartbeat: float
    proc_start: int | None = None   # the holder's start in clock ticks (/proc): a reused pid is not it

    def describe(self, now: float) -> str:
        return (f"runner pid {self.pid} on {self.host} (run {self.run_id}), heartbeat {now - self.heartbeat:.0f} s "
                "ago")


def _proc_start(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def read(path: Path) -> Holder | None:
    """The lease's holder; None when there is none; an InputError for a file that is not a lease."""
    try:
        doc = json.loads(path.read_text())
        return Holder(**{k: doc[k] for k in Holder.__dataclass_fields__ if k in doc})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError):
        raise InputError(str(path), "lease", "not a runner's lease (unreadable or missing fields); remove it if "
                         "no runner uses this folder") from None


def _gone(holder: Holder, now: float) -> bool:
    """Whether the holder has let the lease go: its process is gone (on this host: the pid is not running,
    or is another process now), or it has been silent for TTL_S."""
    if holder.host == socket.gethostname():
        running = _proc_start(holder.pid)
        if running is None or (holder.proc_start is not None and running != holder.proc_start):
            return True
    return now - holder.heartbeat >= TTL_S


def _this_holder(run_id: str, now: float) -> Holder:
    """This process as a lease's holder, with a token of its own."""
    return Holder(token=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid(), run_id=run_id, started=now,
                  heartbeat=now, proc_start=_proc_start(os.getpid()))


def _watch(holder: Holder, reread: Callable[[], Holder | None], wait: Callable[[float], None],
           held: Callable[[Holder], InputError]) -> Holder | None:
    """Another host's fresh lease, watched for up to TTL_S: a heartbeat that moves is a live holder (`held`'s
    error); one that lets TTL_S pass, or a lease that goes, is gone. Returns the holder as last read."""
    seen = holder.heartbeat
    while True:
        wait(min(HEARTBEAT_S / 2, 5.0))
        found = reread()
        if found is None or _gone(found, time.time()):
            return found
        if found.heartbeat != seen:
            raise held(found)


class Lease:
    """This runner's hold on a run folder."""

    def __init__(self, run_dir: Path, run_id: str, *, say: Callable[[str], None]):
        self.path = Path(run_dir) / LEASE
        self.say = say
        now = time.time()
        self.mine = _this_holder(run_id, now)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def where(self) -> str:
        return f"the run folder {self.path.parent}"

    def acquire(self, wait: Callable[[float], None] = time.sleep) -> None:
        """Take the lease, or an InputError naming its holder. Another host's fresh lease is watched for
        up to TTL_S: a heartbeat that moves is a live holder."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:   # runner execute says it as the run folder's (exit 2)
            raise PermissionError(f"{self.path.parent}: run folder is not writable ({exc.strerror or exc})") from None
        holder = read(self.path)
        if holder is not None and not _gone(holder, time.time()):
            if holder.host == socket.gethostname():
                raise self._held(holder)
            self.say(f"runner: {self.path.parent} is held by {holder.describe(time.time())}: waiting up to "
                     f"{TTL_S:.0f} s for its heartbeat")
            holder = _watch(holder, lambda: read(self.path), wait, self._held)
        if holder is not None:
            self.say(f"runner: taking over {self.path.parent} from {holder.describe(time.time())} (gone)")
        self._write()
        time.sleep(0.05)   # two that took over at once: the later write wins, the other sees it and stops
        if (read(self.path) or self.mine).token != self.mine.token:
            raise self._held(read(self.path) or self.mine)

    def _held(self, holder: Holder) -> InputError:
        return InputError(str(self.path.parent), "run-dir", f"held by {holder.describe(time.time())}: one runner "
                          f"per run folder; when that runner is gone its lease is taken over (at once on its own "
                          f"host, after {TTL_S:.0f} s without a heartbeat elsewhere), or give another --run-dir")

    def _write(self) -> None:
        self.mine.heartbeat = time.time()
        write_atomic(self.path, json.dumps(asdict(self.mine), indent=1) + "\n")

    def start(self, on_lost: Callable[[Holder], None]) -> None:
        """Renew every HEARTBEAT_S; on finding another holder's token, `on_lost(holder)` once."""
        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    holder = read(self.path)
                except InputError:
                    holder = None
                if holder is not None and holder.token != self.mine.token:
                    self.lost.set()
                    on_lost(holder)
                    return
                self._write()
        self._thread = threading.Thread(target=beat, name="lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing; give the lease back if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_S)
        try:
            if not self.lost.is_set() and (read(self.path) or self.mine).token == self.mine.token:
                self.path.unlink(missing_ok=True)
        except InputError:
            pass


class StoreLease:
    """This runner's hold on an s3:// checkpoint prefix: PREFIX/lease.json, created only if absent and
    renewed only if unchanged (S3's conditional writes: If-None-Match, If-Match), so two runners can never
    both believe they hold it. A holder is gone as for a run folder (its pid on this host, else TTL_S
    without a heartbeat). A store that does not honour conditional writes gets a best-effort lease (write,
    then read back), said in a line. A store that drops out does not end the hold: renewals are tried
    again, and a holder taken over meanwhile finds out at its next renewal and stops."""

    NAME = LEASE

    def __init__(self, store, run_id: str, *, say: Callable[[str], None]):
        self.store, self.say = store, say
        now = time.time()
        self.mine = _this_holder(run_id, now)
        self.etag: str | None = None
        self.conditional = True
        self.pending = False   # not taken yet: the store did not answer at the start (taken by the heartbeat)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def where(self) -> str:
        return f"the checkpoint prefix {self.store.url}"

    def _read(self) -> tuple[Holder | None, str | None]:
        doc, etag = self.store.get_json(self.NAME)
        if doc is None:
            return None, None
        try:
            return Holder(**{k: doc[k] for k in Holder.__dataclass_fields__ if k in doc}), etag
        except TypeError:
            raise InputError(f"{self.store.url}/{self.NAME}", "lease", "not a runner's lease (missing fields); "
                             "remove it if no runner uses this prefix") from None

    def _held(self, holder: Holder) -> InputError:
        return InputError(f"{self.store.url}/{self.NAME}", "checkpoint-dir",
                          f"held by {holder.describe(time.time())}: one runner per checkpoint prefix; when that runner "
                          f"is gone its lease is taken over (at once on its own host, after {TTL_S:.0f} s without a "
                          "heartbeat elsewhere), or give another --checkpoint-dir")

    def acquire(self, wait: Callable[[float], None] = time.sleep) -> None:
        """Take the prefix, or an InputError naming its holder (as Lease.acquire)."""
        self.conditional = self.store.honours_conditions()
        if not self.conditional:
            self.say(f"runner: warning: {self.store.url}: the store does not honour conditional writes: the prefix's "
                     "lease is best-effort (written, then read back), as on shared storage")
        holder, etag = self._read()
        if holder is None and self._put(create=True):
            return
        if holder is None:   # another runner created it between the read and the write
            holder, etag = self._read()
            if holder is None:
                raise InputError(f"{self.store.url}/{self.NAME}", "lease", "changed while it was read: run again")
        if not _gone(holder, time.time()):
            if holder.host == socket.gethostname():
                raise self._held(holder)
            self.say(f"runner: {self.store.url} is held by {holder.describe(time.time())}: waiting up to {TTL_S:.0f} s "
                     "for its heartbeat")
            read_now: list[str | None] = [etag]

            def reread() -> Holder | None:
                found, read_now[0] = self._read()
                return found
            holder = _watch(holder, reread, wait, self._held)
            etag = read_now[0]
        if holder is not None:
            self.say(f"runner: taking over {self.store.url} from {holder.describe(time.time())} (gone)")
        if not self._put(create=holder is None, replace=etag):
            raise self._held(self._read()[0] or self.mine)

    def _put(self, *, create: bool = False, replace: str | None = None) -> bool:
        """Write our holding: create-only, or over the ETag `replace`; whether it is ours now."""
        self.mine.heartbeat = time.time()
        doc = asdict(self.mine)
        if not self.conditional:
            self.store.put_json(self.NAME, doc)
            time.sleep(0.05)
            holder, self.etag = self._read()
            return holder is not None and holder.token == self.mine.token
        etag = self.store.put_json(self.NAME, doc, if_none_match=create, if_match=None if create else replace)
        if etag is None:
            return False
        self.etag = etag
        return True

    def start(self, on_lost: Callable[[Holder], None]) -> None:
        """Renew every HEARTBEAT_S over our own ETag; a refused renewal is another holder: `on_lost` once.
        A lease not taken yet (`pending`: the store was out at the start) is taken at the first beat the
        store answers; a live holder found then is `on_lost` too."""
        from runner.store import StoreError

        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                if self.pending:
                    try:
                        self.acquire()
                        self.pending = False
                        self.say(f"runner: {self.store.url} answers again: its lease is this runner's now")
                        continue
                    except StoreError:
                        continue
                    except InputError:   # held by a live runner: this one must not write there
                        try:
                            holder = self._read()[0]
                        except (StoreError, InputError):
                            holder = None
                        self.lost.set()
                        on_lost(holder or self.mine)
                        return
                try:
                    if self._put(replace=self.etag):
                        continue
                    holder = self._read()[0]
                except (StoreError, InputError):   # the store dropped out: try again at the next beat
                    continue
                if holder is not None and holder.token == self.mine.token:
                    continue   # a best-effort store's read-back: still ours
                self.lost.set()
                on_lost(holder or self.mine)
                return
        self._thread = threading.Thread(target=beat, name="store-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing; give the prefix back if it is still ours."""
        from runner.store import StoreError
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_S)
        if self.lost.is_set() or self.etag is None:   # taken over, or never held
            return
        try:
            if self.conditional:
                self.store.delete_json(self.NAME, if_match=self.etag)
            elif (self._read()[0] or self.mine).token == self.mine.token:
                self.store.delete_json(self.NAME)
        except (StoreError, InputError):
            pass   # it lapses: TTL_S without a heartbeat
