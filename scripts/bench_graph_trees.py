#!/usr/bin/env python3
"""CUDA graph trees' two output lookups, torch's scans against runner.graph_trees' index, side by side in one run.

The scale is the full SDXL UNet's backward recording under CUDA graphs as profiled on an H100
(data/measurements/2026-12-07-h100-graph-tree-index/profile): a path whose graphs have OUTPUTS outputs, and QUERIES
asks of each lookup (the backward's inputs and the parameters). The path holds torch's own storage weak references
to CPU tensors (recording a real graph needs CUDA; the lookups read only the references), a tenth of the queries are
outputs or views of them, a few outputs dead. Both ways answer every query and the answers are compared.

    python3 scripts/bench_graph_trees.py [--outputs 1620] [--queries 9930]
"""

from __future__ import annotations

import argparse
import time
import types

import torch
from torch._inductor import cudagraph_trees as trees

from runner import graph_trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=int, default=1620, help="outputs on the path (default: SDXL's backward)")
    parser.add_argument("--queries", type=int, default=9930, help="lookups of each kind (default: SDXL's backward)")
    args = parser.parse_args()
    torch.manual_seed(0)
    outputs = [torch.empty(4) for _ in range(args.outputs)]
    path = [[trees.StorageWeakRefWrapper(t) for t in outputs[: len(outputs) // 2]],
            [trees.StorageWeakRefWrapper(t) for t in outputs[len(outputs) // 2:]]]
    for dead in range(0, len(outputs), 97):   # a few outputs freed since their graph ran
        outputs[dead] = torch.empty(0)
    node = types.SimpleNamespace(path_weakrefs=path)
    strangers = [torch.empty(4) for _ in range(args.queries - args.queries // 10)]
    related = [outputs[i % len(outputs)][1:] for i in range(args.queries // 10)]
    queries = strangers + related
    ways = {"torch's scans": (trees.CUDAGraphNode._is_cuda_graph_recorded_tensor,
                              trees.CUDAGraphNode._is_alias_of_live_recorded_tensor),
            "index": (graph_trees.is_recorded, graph_trees.live_alias)}
    answers, seconds = {}, {}
    for name, (recorded, alias) in ways.items():
        started = time.perf_counter()
        answers[name] = ([recorded(node, t) for t in queries], [alias(node, t) for t in queries])
        seconds[name] = time.perf_counter() - started
    same = answers["torch's scans"] == answers["index"]
    print(f"path of {args.outputs} outputs, {len(queries)} lookups of each kind ({len(related)} of outputs or views)")
    for name, value in seconds.items():
        print(f"  {name:<14} {value:8.3f} s")
    ratio = seconds["index"] / seconds["torch's scans"]
    print(f"index / torch's scans: {ratio:.5f}x; the same answers: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
