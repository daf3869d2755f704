#!/usr/bin/env python3
"""CUDA graph trees' two output lookups, torch's scans against runner.graph_trees' index, side by side in one run.

The scale is the full SDXL UNet's backward recording under CUDA graphs as profiled on an H100
(data/measurements/2026-12-07-h100-graph-tree-index/profile): a path whose graphs have OUTPUTS outputs, and QUERIES
asks of each lookup (the backward's inputs and the parameters). The path holds torch's own storage weak references
to CPU tensors (recording a real graph needs CUDA; the lookups read only the references), a tenth of the queries are
outputs or views of them, a few outputs dead. Both ways answer every query and the answers are compared.

    python3 scripts/bench_graph_trees.py [--outputs 1620] [--queries 9930]

On a GPU, `--record`: the real thing, in one process. The SDXL UNet from its config (random weights), compiled under
CUDA graphs (`--compile blocks`: 140 graphs on one path; `model`: two), a step of micro-batch `--batch` under bf16
autocast and AdamW as bench_precompile's. After the compile, ROUNDS rounds each clear Dynamo and the graph
trees (torch._dynamo.reset, reset_cudagraph_trees) and run two steps with torch's scans and two with the index,
alternating which goes first: the first step after a reset compiles again from the warm cache and warms the trees up,
the second records the graphs again; only the recording differs between the ways. Prints each round's two steps
per way, the medians, the ratio, a steady step, and whether every step's loss is the same (the learning rate is 0).

    python3 scripts/bench_graph_trees.py --record [--compile blocks|model] [--batch 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
import types

import torch
from torch._inductor import cudagraph_trees as trees

from runner import graph_trees


def record(args) -> None:
    """--record: the graphs recorded again with each way, alternating, in one process (module docstring)."""
    import json
    import statistics

    from bench_precompile import SDXL_CONFIG, sdxl_batch  # this script's folder is on the path when it runs
    from diffusers import UNet2DConditionModel

    from costsim.runtime import parse_pairs
    from runner import speed
    device = torch.device("cuda")
    config = json.loads(SDXL_CONFIG.read_text())
    runtime = parse_pairs([f"compile={args.compile}", "ddp_graph=whole", "compile_mode=reduce-overhead",
                           "geglu=split"])
    torch.manual_seed(0)
    with device:
        model = UNet2DConditionModel.from_config(config)
    speed.configure_backends(runtime)
    speed.prepare_model(model, runtime)   # installs the index (COSTSIM_GRAPH_TREE_INDEX, on by default)
    # lr 0: the optimizer runs (its state is among the graphs' inputs) and the weights stay, so every step's loss is
    # the same number whichever way recorded its graphs
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    inputs, kwargs, target = sdxl_batch(config, args.batch, device)

    def step() -> tuple[float, float]:
        started = time.perf_counter()
        torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(*inputs, **kwargs)[0]
        loss = torch.nn.functional.mse_loss(out.float(), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        value = float(loss.detach())   # synchronises
        return time.perf_counter() - started, value

    started = time.perf_counter()
    compiled = [step() for _ in range(3)]   # compile, warm up, record
    print(f"compile and first recording: {time.perf_counter() - started:.1f} s "
          f"(steps {', '.join(f'{s:.2f}' for s, _ in compiled)} s)", flush=True)
    steady = statistics.median(step()[0] for _ in range(5))
    ways: dict[str, list[float]] = {"torch's scans": [], "index": []}
    losses: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(args.rounds):
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        for name in order:
            if name == "index":
                graph_trees.install()
            else:
                graph_trees.uninstall()
            torch._dynamo.reset()   # the compiled functions hold their graphs: compiled again, from the cache
            trees.reset_cudagraph_trees()
            (warm_s, warm_loss), (record_s, record_loss) = step(), step()
            ways[name].append(warm_s + record_s)
            losses[name] += [warm_loss, record_loss]
            print(f"round {round_ + 1} {name:<14} warm-up step {warm_s:6.2f} s, recording step {record_s:6.2f} s",
                  flush=True)
    print(f"steady step {steady:.3f} s; the two steps after a reset, median: " +
          ", ".join(f"{name} {statistics.median(v):.2f} s" for name, v in ways.items()))
    scans, index = (statistics.median(v) for v in ways.values())
    print(f"index / torch's scans: {index / scans:.3f}x, {scans - index:.2f} s less a recording; "
          f"graph_trees {graph_trees.report()}")
    every = {value for v in losses.values() for value in v} | {loss for _, loss in compiled}
    print(f"every step's loss the same: {len(every) == 1} ({sorted(every)[:3]})")


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=positive, default=1620, help="outputs on the path (default: SDXL's backward)")
    parser.add_argument("--queries", type=positive, default=9930, help="lookups of each kind (default: SDXL's backward)")
    parser.add_argument("--record", action="store_true", help="on a GPU: record SDXL's CUDA graphs with each way")
    parser.add_argument("--compile", choices=("blocks", "model"), default="blocks", help="with --record")
    parser.add_argument("--batch", type=positive, default=4, help="with --record: the micro-batch")
    parser.add_argument("--rounds", type=positive, default=3, help="with --record: rounds of both ways")
    args = parser.parse_args()
    if args.record:
        if not torch.cuda.is_available():
            raise SystemExit("bench_graph_trees: --record records CUDA graphs: it needs a GPU")
        record(args)
        return
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
        # the node a stand-in holding what both read (module docstring)
        answers[name] = ([recorded(node, t) for t in queries],   # type: ignore[arg-type]
                         [alias(node, t) for t in queries])   # type: ignore[arg-type]
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
