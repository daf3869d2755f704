"""runner.graph_trees: CUDA graph trees' two output lookups by an index, answering as torch's own scans do. The
nodes here are stand-ins holding what the lookups read (a path of output lists of torch's own storage weak
references, over CPU tensors): recording a real graph needs CUDA."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
trees = pytest.importorskip("torch._inductor.cudagraph_trees")

from runner import graph_trees  # noqa: E402
from runner.speed import RuntimeConfigError  # noqa: E402

ORIGINAL = {name: getattr(trees.CUDAGraphNode, name) for name in
            ("_is_cuda_graph_recorded_tensor", "_is_alias_of_live_recorded_tensor")}


@pytest.fixture
def installed():
    assert graph_trees.install()
    yield
    graph_trees.uninstall()
    graph_trees._state.__init__()


def _path(outputs: list[list[torch.Tensor | None]]):
    """A node whose path's graphs had these outputs (None: an output the tree does not track)."""
    return types.SimpleNamespace(path_weakrefs=[[None if t is None else trees.StorageWeakRefWrapper(t) for t in level]
                                                for level in outputs])


def test_the_index_answers_as_torchs_scans_for_outputs_views_dead_ones_and_strangers(installed):
    torch.manual_seed(0)
    forward = [torch.randn(3) for _ in range(50)] + [None]
    backward = [torch.randn(2) for _ in range(30)]
    shared = forward[7]
    backward.append(shared[1:])   # a later graph's output aliasing an earlier one's
    node = _path([forward, backward])
    strangers = [torch.randn(3) for _ in range(5)]
    dead = forward[3]
    forward[3] = None
    del dead   # its storage freed: recorded still, but no live alias
    asked = [*(t for t in forward if t is not None), *backward, *strangers, shared[::2], backward[4].view(2, 1)]
    for tensor in asked:
        for name, original in ORIGINAL.items():
            assert getattr(trees.CUDAGraphNode, name)(node, tensor) == original(node, tensor), name
    assert graph_trees.live_alias(node, shared[1:]) == (0, 7)   # the first live output by depth, then index
    assert graph_trees.is_recorded(node, forward[10][1:]) and not graph_trees.is_recorded(node, strangers[0])
    # an output list that grows (the tree appends a new graph's outputs) is indexed again
    extra = torch.randn(4)
    node.path_weakrefs[1].append(trees.StorageWeakRefWrapper(extra))
    assert graph_trees.live_alias(node, extra) == (1, len(backward))
    assert graph_trees.report() == {"graph_tree_index": True}


def test_a_disagreement_puts_torchs_scans_back_with_a_warning(installed, capsys):
    a, b = torch.randn(3), torch.randn(3)
    node = _path([[a]])
    assert trees.CUDAGraphNode._is_cuda_graph_recorded_tensor(node, a)
    node.path_weakrefs[0][0] = trees.StorageWeakRefWrapper(b)   # replaced in place at another address: unindexed
    assert trees.CUDAGraphNode._is_cuda_graph_recorded_tensor(node, b)   # torch's answer, not the stale index's
    assert "disagreed with torch's" in capsys.readouterr().err
    assert trees.CUDAGraphNode._is_cuda_graph_recorded_tensor is ORIGINAL["_is_cuda_graph_recorded_tensor"]
    assert graph_trees.report()["graph_tree_index"] is False and "graph_tree_disagreed" in graph_trees.report()


def test_a_lookup_that_fails_puts_torchs_scans_back_and_answers_as_torch(installed, capsys):
    a = torch.randn(3)
    node = types.SimpleNamespace(path_weakrefs=[[trees.StorageWeakRefWrapper(a)]])
    assert trees.CUDAGraphNode._is_cuda_graph_recorded_tensor(node, a)
    node.path_weakrefs = [[(1, 2)]]   # not what this index reads (a torch whose nodes hold other things): it fails
    with pytest.raises(AttributeError):   # and so do torch's own scans on such a node: the same answer, an error
        trees.CUDAGraphNode._is_cuda_graph_recorded_tensor(node, a)
    assert "failed: AttributeError" in capsys.readouterr().err
    assert trees.CUDAGraphNode._is_cuda_graph_recorded_tensor is ORIGINAL["_is_cuda_graph_recorded_tensor"]


def test_the_switch_takes_0_or_1():
    assert graph_trees.enabled({}) and graph_trees.enabled({graph_trees.ENV: "1"})
    assert not graph_trees.enabled({graph_trees.ENV: "0"})
    with pytest.raises(RuntimeConfigError, match="COSTSIM_GRAPH_TREE_INDEX='on': expected 1"):
        graph_trees.enabled({graph_trees.ENV: "on"})


def test_the_benchmark_compares_both_ways_answers():
    """scripts/bench_graph_trees.py at a small scale: it runs, and both ways answer alike (its timings are its own)."""
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_graph_trees.py"
    done = subprocess.run([sys.executable, str(script), "--outputs", "60", "--queries", "40"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "the same answers: True" in done.stdout, done.stdout + done.stderr
    bad = subprocess.run([sys.executable, str(script), "--outputs", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--outputs: '0': expected a whole number >= 1" in bad.stderr
