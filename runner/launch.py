"""From a plan and the node's environment to the torchrun command line (a list; never a shell).

Node rank and peers come from, in order: the command-line flags; SkyPilot's SKYPILOT_* variables;
Slurm's SLURM_* variables; MASTER_ADDR/MASTER_PORT with NNODES/NODE_RANK. Otherwise one node.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from dataclasses import dataclass
from typing import Mapping

from runner.faults import DRILL_MARK, FATAL_EXIT, PREEMPTED_EXIT

DEFAULT_PORT = 29500


@dataclass(frozen=True, kw_only=True)
class Node:
    nnodes: int
    node_rank: int
    endpoint: str | None   # HOST:PORT of the rendezvous; None on one node
    run_id: str | None
    source: str


class LaunchError(ValueError):
    """Bad or missing node information (the message names the flag or variable)."""


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"{name}={value!r} is not an integer") from None


def expand_slurm_nodelist(nodelist: str) -> list[str]:
    """Slurm's compact host list in full: `gpu[01-03,07],cpu1` -> gpu01, gpu02, gpu03, gpu07, cpu1; text may
    follow a bracket (`node[1-2]-ib` -> node1-ib, node2-ib) and brackets combine in order (`r[1-2]n[1-2]` ->
    r1n1, r1n2, r2n1, r2n2), as `scontrol show hostnames` expands them."""
    hosts: list[str] = []
    for expression in _top_level(nodelist):
        names = [""]
        for literal, ranges in re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", expression):
            suffixes = [literal + number for number in _numbers(ranges)] if ranges else [literal]
            names = [name + suffix for name in names for suffix in suffixes]
        hosts.extend(name for name in names if name)
    return hosts


def _top_level(nodelist: str) -> list[str]:
    """The comma-separated host expressions, commas inside brackets kept."""
    parts, depth, current = [], 0, ""
    for char in nodelist:
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in parts + [current] if p]


def _numbers(ranges: str) -> list[str]:
    """`01-03,07` -> 01, 02, 03, 07 (zero-padded to the width written)."""
    out = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise LaunchError(f"SLURM_JOB_NODELIST: cannot read the range [{ranges}]")
        out += [f"{number:0{len(low)}d}" for number in range(int(low), int(high or low) + 1)]
    return out


def discover(*, nnodes: int | None, node_rank: int | None, endpoint: str | None, env: Mapping[str, str]) -> Node:
    """Where this node stands in the job."""
    if nnodes is not None or node_rank is not None or endpoint is not None:
        if nnodes is None or nnodes < 1:
            raise LaunchError("--nnodes is required with --node-rank/--rdzv-endpoint")
        if nnodes > 1 and (node_rank is None or endpoint is None):
            raise LaunchError("--nnodes > 1 needs --node-rank and --rdzv-endpoint HOST:PORT")
        return _checked(Node(nnodes=nnodes, node_rank=node_rank or 0, endpoint=endpoint, run_id=None, source="flags"))
    if "SKYPILOT_NODE_RANK" in env:
        ips = [ip for ip in env.get("SKYPILOT_NODE_IPS", "").split() if ip]
        count = _int(env.get("SKYPILOT_NUM_NODES", str(len(ips) or 1)), "SKYPILOT_NUM_NODES")
        if count > 1 and not ips:
            raise LaunchError("SKYPILOT_NUM_NODES > 1 but SKYPILOT_NODE_IPS is empty")
        return _checked(Node(nnodes=count, node_rank=_int(env["SKYPILOT_NODE_RANK"], "SKYPILOT_NODE_RANK"),
                             endpoint=f"{ips[0]}:{DEFAULT_PORT}" if count > 1 else None,
                             run_id=env.get("SKYPILOT_TASK_ID"), source="skypilot"))
    if "SLURM_NODEID" in env and "SLURM_NNODES" in env:
        count = _int(env["SLURM_NNODES"], "SLURM_NNODES")
        hosts = expand_slurm_nodelist(env.get("SLURM_JOB_NODELIST", ""))
        host = env.get("MASTER_ADDR") or (hosts[0] if hosts else None)
        if count > 1 and not host:
            raise LaunchError("Slurm job of several nodes without SLURM_JOB_NODELIST or MASTER_ADDR")
        port = env.get("MASTER_PORT", str(DEFAULT_PORT))
        return _checked(Node(nnodes=count, node_rank=_int(env["SLURM_NODEID"], "SLURM_NODEID"),
                             endpoint=f"{host}:{port}" if count > 1 else None, run_id=env.get("SLURM_JOB_ID"),
                             source="slurm"))
    if "MASTER_ADDR" in env and _int(env.get("NNODES", "1"), "NNODES") > 1:
        return _checked(Node(nnodes=_int(env["NNODES"], "NNODES"), node_rank=_int(env.get("NODE_RANK", "0"), "NODE_RANK"),
                             endpoint=f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', DEFAULT_PORT)}", run_id=None,
                             source="MASTER_ADDR"))
    return Node(nnodes=1, node_rank=0, endpoint=None, run_id=None, source="single node")


def _checked(node: Node) -> Node:
    if not 0 <= node.node_rank < node.nnodes:
        raise LaunchError(f"node rank {node.node_rank} is outside 0..{node.nnodes - 1} ({node.source})")
    if node.endpoint is not None:
        host, _, port = node.endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise LaunchError(f"rendezvous endpoint {node.endpoint!r} is not HOST:PORT ({node.source})")
    return node


def wait_for_rendezvous(endpoint: str, timeout_s: float) -> None:
    """A node other than the host checks that the rendezvous answers before starting workers."""
    host, _, port = endpoint.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2.0):
                return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise LaunchError(f"cannot reach the rendezvous at {endpoint} after {timeout_s:.0f}s: {exc}") from None
            time.sleep(1.0)


def torchrun_argv(node: Node, *, nproc_per_node: int, run_id: str, worker_args: list[str],
                  join_timeout_s: int = 600, min_nodes: int | None = None) -> list[str]:
    """The torchrun invocation: one process per GPU (or per CPU worker), restarts left to the supervisor
    (runner.torchrun: torchrun, without the interpreter's teardown after it)."""
    argv = [sys.executable, "-m", "runner.torchrun", "--nproc-per-node", str(nproc_per_node),
            "--max-restarts", "0", "--monitor-interval", "0.2"]
    if node.nnodes == 1:
        argv += ["--standalone"]
    else:
        if node.endpoint is None:   # discover() gives every node of a multi-node job one
            raise LaunchError(f"{node.nnodes} nodes and no rendezvous endpoint")
        # MIN:MAX lets the job go on with fewer nodes (elastic); a single count is a fixed gang.
        nnodes = f"{min_nodes}:{node.nnodes}" if min_nodes and min_nodes < node.nnodes else str(node.nnodes)
        argv += ["--nnodes", nnodes, "--node-rank", str(node.node_rank), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", node.endpoint, "--rdzv-id", run_id,
                 "--rdzv-conf", f"join_timeout={join_timeout_s}"]
    return argv + ["-m", "runner.worker"] + worker_args


class TorchrunReportFilter:
    """Passes the job's stderr through, less torchrun's own failure report: a traceback through
    torch/distributed/run.py ending in a ChildFailedError table between two '=====' lines. The
    supervisor says in one line why the job stopped (out of memory, a setting, a restart); the
    workers' own output, their tracebacks included, is kept."""

    _LOOKAHEAD = 8   # lines of a traceback read before deciding whose it is
    # torchrun's log lines for a worker that stopped on purpose (a notice, or a reason restarting cannot
    # mend), and for the workers it then stops itself (when one rank stops before the others)
    QUIET = tuple(f"failed (exitcode: {code})".encode() for code in (PREEMPTED_EXIT, FATAL_EXIT)) + (
        b"closing signal SIGTERM",)

    def __init__(self, out) -> None:
        self.out = out
        self.pending: list[bytes] = []
        self.borders = -1   # >= 0 while dropping torchrun's report: the '=====' lines seen
        self.drilled = False   # an injected fault fired: what the peers and torchrun say next is its doing
        self.record: bytes | None = None   # the log prefix of torchrun's record of a failed worker, while in it

    def feed(self, line: bytes) -> None:
        # torchrun's record of a worker that failed: one log line, and with forked workers (runner.torchrun) the
        # traceback of its ProcessExitedException, each line under the record's prefix ("E1203 16:12:03.40 28925
        # .../api.py:836] "): the traceback only repeats the exit code, which the supervisor says in its line
        if self.record is not None:
            if line.startswith(self.record):
                return
            self.record = None
        if b"failed (exitcode: " in line and b"] " in line:
            self.record = line[:line.index(b"] ") + 2]
        if any(marker in line for marker in self.QUIET):
            return
        if self.drilled:
            return
        if DRILL_MARK.encode() in line:
            self.flush()
            self.drilled = True
            self.out.write(line[line.index(DRILL_MARK.encode()):])
            self.out.flush()
            return
        if self.borders >= 0:
            if line.startswith(b"====="):
                self.borders += 1
                if self.borders == 2:
                    self.borders = -1
            return
        if self.pending:
            if line.startswith(b"Traceback (most recent call last):"):   # another one: the last was not torchrun's
                self.flush()
            else:
                self.pending.append(line)
                if b"torch/distributed/run.py" in line:
                    self.pending, self.borders = [], 0
                elif (line.startswith(b'  File "') and b"<frozen" not in line) or len(self.pending) >= self._LOOKAHEAD:
                    self.flush()   # its first frame of code is not torchrun's: a worker's, kept
                return
        if line.startswith(b"Traceback (most recent call last):"):
            self.pending = [line]
            return
        self.out.write(line)
        self.out.flush()

    def flush(self) -> None:
        for line in self.pending:
            self.out.write(line)
        self.pending = []
        self.out.flush()

    def pump(self, stream) -> None:
        """Feed every line of `stream` until it ends (run in a thread)."""
        for line in iter(stream.readline, b""):
            self.feed(line)
        self.flush()
