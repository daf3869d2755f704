"""CUDA graph trees' recording without its quadratic scans (COSTSIM_GRAPH_TREE_INDEX, on by default).

When torch.compile's CUDA graph trees (compile modes reduce-overhead and max-autotune) record a graph, they ask, for
every input of the graph and every static input (the parameters), whether its storage is an output of a graph
recorded before it on the tree's path: `CUDAGraphNode._is_cuda_graph_recorded_tensor` and
`_is_alias_of_live_recorded_tensor` answer by walking every output of every graph on the path. The backward of a
whole model's graph takes the forward's saved activations and the parameters as inputs, and the forward's outputs
are those activations: the full SDXL UNet's backward recording made 16 million storage comparisons and 10 million
liveness checks, 31 s of a 37.4 s first step under the profiler, in every process's first step (an H100, micro-batch
4, the precompiled model resumed: data/measurements/2026-12-07-h100-graph-tree-index). Torch's code for both has not
changed since graph trees came (2023) but for its annotations. With the index, recording SDXL's 140 graphs under
compile=blocks took 4.9-7.5 s against 20.7-22.1 s on one H100, in one process, the losses the same
(`scripts/bench_graph_trees.py --record`).

`install` replaces the two methods with lookups in an index of the path's outputs by storage address, built once per
node and rebuilt whenever an output list on the path grows (the tree only appends to them; an entry it replaces
keeps its address, and the lookup reads the entry in place, so its liveness is always the current one). The answers
are the same by construction, in the same order (the first live output by depth, then by index). For safety the
first CHECKED_CALLS calls of each also ask torch's own method, and at the first disagreement (or a lookup that fails:
a torch whose graph trees differ) the originals are put back for the rest of the process, with a warning.
"""

from __future__ import annotations

import os
import sys
from typing import Any

ENV = "COSTSIM_GRAPH_TREE_INDEX"
CHECKED_CALLS = 64   # each method's first calls in a process, answered by both ways and compared
_INDEX = "_costsim_output_index"


class _State:
    def __init__(self):
        self.originals: dict[str, Any] = {}
        self.checked = {"_is_cuda_graph_recorded_tensor": 0, "_is_alias_of_live_recorded_tensor": 0}
        self.disagreed: str | None = None


_state = _State()


def enabled(env=os.environ) -> bool:
    from runner.speed import env_switch  # runner.speed imports this module
    return env_switch(env, ENV, "1", "index CUDA graph trees' outputs, the default", "torch's own scans")


def install() -> bool:
    """Put the indexed lookups on torch's CUDAGraphNode (once a process); whether they are on."""
    try:
        from torch._inductor import cudagraph_trees
    except ImportError:   # a torch without graph trees
        return False
    node = getattr(cudagraph_trees, "CUDAGraphNode", None)
    if node is None or not all(callable(getattr(node, name, None)) for name in _state.checked):
        return False
    if _state.originals or _state.disagreed:
        return not _state.disagreed
    _state.originals = {name: getattr(node, name) for name in _state.checked}
    node._is_cuda_graph_recorded_tensor = _checked("_is_cuda_graph_recorded_tensor", is_recorded)
    node._is_alias_of_live_recorded_tensor = _checked("_is_alias_of_live_recorded_tensor", live_alias)
    return True


def uninstall() -> None:
    """torch's own methods back (a disagreement, or a test)."""
    if not _state.originals:
        return
    from torch._inductor import cudagraph_trees
    for name, original in _state.originals.items():
        setattr(cudagraph_trees.CUDAGraphNode, name, original)
    _state.originals = {}


def report() -> dict:
    """For the compile event: whether the index is on, and a disagreement if one put torch's scans back."""
    return {"graph_tree_index": bool(_state.originals), **({"graph_tree_disagreed": _state.disagreed}
                                                            if _state.disagreed else {})}


def output_index(node) -> dict[int, list[tuple[int, int]]]:
    """Each storage address of an output on `node`'s path: where it is, (depth, index), in the path's order."""
    levels = list(node.path_weakrefs)
    lengths = [len(refs) for refs in levels]
    cached = node.__dict__.get(_INDEX)   # a node without a __dict__ fails here: _checked gives torch's back
    # the same lists (held here, so that no other list can take one's place at its address) of the same lengths
    if (cached is not None and len(cached[0]) == len(levels) and all(a is b for a, b in zip(cached[0], levels))
            and cached[1] == lengths):
        return cached[2]
    index: dict[int, list[tuple[int, int]]] = {}
    for depth, refs in enumerate(levels):
        for position, ref in enumerate(refs):
            if ref is not None:
                index.setdefault(ref.data_ptr(), []).append((depth, position))
    node.__dict__[_INDEX] = (levels, lengths, index)
    return index


def is_recorded(node, tensor) -> bool:
    """Is `tensor`'s storage an output of a graph on `node`'s path (live or not)."""
    address = tensor.untyped_storage().data_ptr()
    return any(ref is not None and ref.data_ptr() == address
               for ref in (_at(node, where) for where in output_index(node).get(address, ())))


def live_alias(node, tensor) -> tuple[int, int] | None:
    """The first live output on `node`'s path sharing `tensor`'s storage, as (depth, index)."""
    from torch._inductor.cudagraph_trees import maybe_deref
    address = tensor.untyped_storage().data_ptr()
    for where in output_index(node).get(address, ()):
        found = maybe_deref(_at(node, where))
        if found is not None and found[1] == address:
            return where
    return None


def _at(node, where: tuple[int, int]):
    depth, position = where
    return node.path_weakrefs[depth][position]


def _give_back(reason: str) -> None:
    """torch's own methods back for the rest of the process, with a warning."""
    _state.disagreed = reason[:300]
    uninstall()
    print(f"runner: warning: {ENV}: the indexed lookup disagreed with torch's ({_state.disagreed}); torch's own "
          "scans from now on", file=sys.stderr, flush=True)


def _checked(name: str, fast):
    def method(self, tensor):
        original = _state.originals.get(name)
        if original is None:   # put back meanwhile
            from torch._inductor.cudagraph_trees import CUDAGraphNode
            return getattr(CUDAGraphNode, name)(self, tensor)
        try:
            answer = fast(self, tensor)
        except Exception as exc:   # noqa: BLE001 - a torch whose graph trees differ: theirs from now on
            _give_back(f"{name} failed: {type(exc).__name__}: {exc}")
            return original(self, tensor)
        if _state.checked[name] < CHECKED_CALLS:
            _state.checked[name] += 1
            expected = original(self, tensor)
            if expected != answer:
                _give_back(f"{name}: {answer!r}, torch's own {expected!r}")
                return expected
        return answer
    method.__name__ = name
    return method
