"""Telemetry: JSON lines in runs/<id>/telemetry.jsonl, appended by every rank and the supervisor.

The file name, the event names and the reader are the contract's (costsim.contract.telemetry).

Each line is written with one O_APPEND write, so lines from several processes never interleave; a
short write is written on until the whole buffer is out. A write that fails (a full disk) does not stop
training: its lines are dropped and counted, said once, and a line cut by it is ended so that the next
one starts whole (readers pass a damaged line over: costsim.contract.telemetry.parse_event).
Step events are buffered and flushed about once a second (and before anything that may kill us).
Thread-safe: the async checkpoint writer and the checksum check report from their own threads.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from costsim.contract.telemetry import TELEMETRY, check_event


class Telemetry:
    def __init__(self, run_dir: Path, run_id: str, rank: int | None, world_size: int | None,
                 flush_every_s: float = 1.0):
        self.path = Path(run_dir) / TELEMETRY
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.base = {"run": run_id, "rank": rank, "world_size": world_size}
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._buffer: list[str] = []
        self._flush_every_s = flush_every_s
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()
        self.dropped_lines = 0   # lines a failed write lost

    def event(self, event: str, *, buffered: bool = False, **figures) -> None:
        record = {"t": time.time(), **self.base, "event": check_event(event),
                  **{k: v for k, v in figures.items() if v is not None}}
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._buffer.append(line)
        if not buffered or time.monotonic() - self._last_flush >= self._flush_every_s:
            self.flush()

    def flush(self, durable: bool = False) -> None:
        with self._lock:
            if self._buffer:
                lines, data = len(self._buffer), "".join(self._buffer).encode()
                self._buffer.clear()
                self._write_all(lines, data)
            if durable:
                try:
                    os.fsync(self._fd)
                except OSError:   # what was written stays; nothing to stop training for
                    pass
            self._last_flush = time.monotonic()

    def _write_all(self, lines: int, data: bytes) -> None:
        view, written = memoryview(data), 0
        try:
            while written < len(data):
                written += os.write(self._fd, view[written:])
        except OSError as exc:
            self.dropped_lines += lines
            if written and data[written - 1:written] != b"\n":
                try:   # end the cut line: the next one starts whole
                    os.write(self._fd, b"\n")
                except OSError:
                    pass
            if self.dropped_lines == lines:
                print(f"runner: warning: telemetry {self.path} could not be written ({exc.strerror}); training "
                      "goes on, the lost lines are counted", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.flush(durable=True)
        os.close(self._fd)


def process_start_t() -> float | None:
    """When this process started (wall clock, Linux: /proc; 10 ms resolution), else None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])   # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
