"""Fitting the Pollux step-time model to measured step times (scipy least squares on log time).

Each point is (gpus, nodes, micro-batch per GPU, accumulation, step time). A term is fitted only
when the points can identify it; otherwise it is pinned at the prior profile's value and the fit
says so:
  compute a_c, b_c   need two micro-batch sizes (else b_c alone scales the prior's compute line)
  intra a_r          needs single-node points with K >= 2 GPUs and a compute line to stand on
  intra b_r          needs single-node points with K > 2
  inter a_n, b_n     need multi-node points (b_n: with K > 2 at several node counts)
  overlap gamma      needs three or more micro-batch sizes at some K >= 2
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares

from costsim.spec import GpuProfile
from costsim.throughput import combine

NAMES = ("compute_overhead_s", "compute_per_sample_s", "intra_a_s", "intra_b_s", "inter_a_s", "inter_b_s",
         "overlap_gamma")
BOUNDS = {"compute_overhead_s": (0.0, 100.0), "compute_per_sample_s": (1e-9, 100.0), "intra_a_s": (0.0, 100.0),
          "intra_b_s": (0.0, 10.0), "inter_a_s": (0.0, 100.0), "inter_b_s": (0.0, 10.0), "overlap_gamma": (1.0, 10.0)}


@dataclass(frozen=True, slots=True)
class Point:
    gpus: int
    nodes: int
    micro_batch: int
    accumulation: int
    step_s: float


@dataclass(frozen=True, slots=True)
class Fit:
    profile: GpuProfile
    fitted: tuple[str, ...]
    pinned: dict = field(default_factory=dict)       # name -> why
    residuals: tuple[float, ...] = ()                # relative errors of the points, in order

    @property
    def rms_relative_error(self) -> float:
        return math.sqrt(sum(r * r for r in self.residuals) / len(self.residuals)) if self.residuals else 0.0


def predict_step_s(p: GpuProfile, point: Point, inter_node_gbps: float | None = None) -> float:
    """Pollux step time of one point under a profile."""
    compute = point.accumulation * (p.compute_overhead_s + p.compute_per_sample_s * point.micro_batch)
    extra = max(point.gpus - 2, 0)
    if point.gpus <= 1:
        net = 0.0
    elif point.nodes <= 1:
        net = p.intra_a_s + p.intra_b_s * extra
    else:
        slowdown = p.inter_at_gbps / inter_node_gbps if inter_node_gbps else 1.0
        net = (p.inter_a_s + p.inter_b_s * extra) * slowdown
    return combine(compute, net, p.overlap_gamma)


def identifiable(points: list[Point]) -> tuple[list[str], dict]:
    """Which terms the points can identify, and why the others are pinned."""
    batches = {p.micro_batch for p in points}
    single_multi = [p for p in points if p.nodes == 1 and p.gpus >= 2]
    multi_node = [p for p in points if p.nodes > 1]
    free, pinned = ["compute_per_sample_s"], {}
    if len(batches) >= 2:
        free.append("compute_overhead_s")
    else:
        pinned["compute_overhead_s"] = "one micro-batch size only: the compute line's intercept is the prior's"
    if single_multi and any(p.gpus == 1 for p in points):
        free.append("intra_a_s")
    else:
        pinned["intra_a_s"] = "needs 1-GPU and multi-GPU points of one node"
    if any(p.gpus > 2 for p in single_multi):
        free.append("intra_b_s")
    else:
        pinned["intra_b_s"] = "needs a single-node point with more than 2 GPUs"
    if multi_node:
        free.append("inter_a_s")
        if len({p.gpus for p in multi_node}) >= 2:
            free.append("inter_b_s")
        else:
            pinned["inter_b_s"] = "needs multi-node points at two GPU counts"
    else:
        pinned["inter_a_s"] = pinned["inter_b_s"] = "no multi-node points"
    if any(len({p.micro_batch for p in points if p.gpus == k}) >= 3 for k in {p.gpus for p in points if p.gpus >= 2}) \
            and "intra_a_s" in free:
        free.append("overlap_gamma")
    else:
        pinned["overlap_gamma"] = "needs three micro-batch sizes at one multi-GPU count"
    return free, pinned


def fit(points: list[Point], prior: GpuProfile, inter_node_gbps: float | None = None) -> Fit:
    """Least squares on log step time over the identifiable terms, within physical bounds."""
    if not points:
        raise ValueError("no step-time points to fit")
    free, pinned = identifiable(points)
    measured = np.log([p.step_s for p in points])

    def profile_of(x) -> GpuProfile:
        return replace(prior, **dict(zip(free, x)))

    def residual(x):
        model = profile_of(x)
        return np.log([predict_step_s(model, p, inter_node_gbps) for p in points]) - measured

    start = [min(max(getattr(prior, n), BOUNDS[n][0] + 1e-9), BOUNDS[n][1] - 1e-9) for n in free]
    solution = least_squares(residual, start, bounds=([BOUNDS[n][0] for n in free], [BOUNDS[n][1] for n in free]),
                             x_scale="jac")
    fitted = profile_of(solution.x)
    relative = tuple(float(math.expm1(r)) for r in residual(solution.x))
    return Fit(profile=fitted, fitted=tuple(free), pinned=pinned, residuals=relative)
