"""Step time and throughput: the Pollux model, evaluated for a GPU type, GPU count and batch.

T_compute = a_c + b_c * m (m = per-GPU micro-batch; accumulated micro-batches repeat it),
T_net = a + b * max(K - 2, 0) within a node, or the inter-node terms across nodes (0 for K = 1),
T_step = (T_compute^g + T_net^g)^(1/g), throughput = global batch / T_step.
"""

from __future__ import annotations

from dataclasses import dataclass

from costsim.contract.batching import BatchSplitError, split_batch
from costsim.spec import GpuProfile


@dataclass(frozen=True, slots=True)
class StepModel:
    step_s: float
    per_gpu_batch: int
    accumulation: int
    samples_per_s: float


class Infeasible(ValueError):
    """This configuration cannot run the workload (the message says why)."""


def network_s(gpu: GpuProfile, gpus: int, nodes: int, inter_node_gbps: float) -> float:
    """Gradient synchronisation time per step (Pollux T_net)."""
    if gpus <= 1:
        return 0.0
    extra = max(gpus - 2, 0)
    if nodes <= 1:
        return gpu.intra_a_s + gpu.intra_b_s * extra
    if inter_node_gbps <= 0:
        raise Infeasible("no network between nodes for a multi-node job")
    slowdown = gpu.inter_at_gbps / inter_node_gbps
    return (gpu.inter_a_s + gpu.inter_b_s * extra) * slowdown


def combine(compute_s: float, net_s: float, gamma: float) -> float:
    """Overlap of compute and communication: gamma 1 = serial, large = full overlap."""
    if net_s <= 0:
        return compute_s
    return (compute_s ** gamma + net_s ** gamma) ** (1.0 / gamma)


def step_model(gpu: GpuProfile, *, global_batch: int, gpus_per_node: int, nodes: int,
               inter_node_gbps: float) -> StepModel:
    """Step time and throughput of data-parallel training at a fixed global batch."""
    gpus = gpus_per_node * nodes
    try:   # the runner's own rule: the largest micro-batch that fits and divides each GPU's share
        split = split_batch(global_batch, gpus, gpu.max_batch_per_gpu)
    except BatchSplitError as exc:
        raise Infeasible(str(exc)) from None
    micro, accumulation = split.micro_batch, split.accumulation
    compute_s = accumulation * (gpu.compute_overhead_s + gpu.compute_per_sample_s * micro)
    step_s = combine(compute_s, network_s(gpu, gpus, nodes, inter_node_gbps), gpu.overlap_gamma)
    return StepModel(step_s=step_s, per_gpu_batch=micro, accumulation=accumulation,
                     samples_per_s=global_batch / step_s)
