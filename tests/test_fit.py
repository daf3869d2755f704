"""The step-time fit recovers known parameters from synthetic step times, and pins what it cannot see."""

from dataclasses import replace

import pytest

from costsim.fit import Point, fit, identifiable, predict_step_s
from costsim.spec import GpuProfile

TRUE = GpuProfile(gpu="X", source="synthetic", compute_overhead_s=0.05, compute_per_sample_s=0.04,
                  max_batch_per_gpu=16, intra_a_s=0.08, intra_b_s=0.01, inter_a_s=0.3, inter_b_s=0.02,
                  inter_at_gbps=400.0, overlap_gamma=2.5, checkpoint_save_s=10, checkpoint_stall_s=1, restart_s=60,
                  startup_s=60)
PRIOR = replace(TRUE, compute_overhead_s=0.2, compute_per_sample_s=0.1, intra_a_s=0.01, intra_b_s=0.05,
                inter_a_s=1.0, inter_b_s=0.1, overlap_gamma=1.5)


def points(grid):
    return [Point(k, n, m, 1, predict_step_s(TRUE, Point(k, n, m, 1, 0.0))) for k, n, m in grid]


def test_full_grid_recovers_every_term():
    grid = [(k, 1, m) for k in (1, 2, 4, 8) for m in (1, 4, 8, 16)] + [(16, 2, m) for m in (1, 4, 8)] + \
           [(32, 4, m) for m in (1, 4, 8)]
    result = fit(points(grid), PRIOR)
    assert not result.pinned
    for name in ("compute_overhead_s", "compute_per_sample_s", "intra_a_s", "intra_b_s", "inter_a_s", "inter_b_s",
                 "overlap_gamma"):
        assert getattr(result.profile, name) == pytest.approx(getattr(TRUE, name), rel=1e-3), name
    assert result.rms_relative_error < 1e-6


def test_one_and_two_gpu_profile_fits_compute_and_intra_a_and_pins_the_rest():
    result = fit(points([(k, 1, m) for k in (1, 2) for m in (1, 4, 8)]), PRIOR)
    assert set(result.fitted) == {"compute_overhead_s", "compute_per_sample_s", "intra_a_s", "overlap_gamma"}
    assert set(result.pinned) == {"intra_b_s", "inter_a_s", "inter_b_s"}
    assert result.profile.compute_per_sample_s == pytest.approx(0.04, rel=1e-3)
    assert result.profile.intra_a_s == pytest.approx(0.08, rel=1e-2)
    assert result.profile.intra_b_s == PRIOR.intra_b_s   # pinned, untouched


def test_a_single_point_only_rescales_the_compute_line():
    free, pinned = identifiable([Point(2, 1, 32, 1, 0.5)])
    assert free == ["compute_per_sample_s"]
    assert "one micro-batch size" in pinned["compute_overhead_s"]
    result = fit([Point(2, 1, 32, 1, 0.5)], PRIOR)
    assert predict_step_s(result.profile, Point(2, 1, 32, 1, 0)) == pytest.approx(0.5, rel=1e-6)


def test_noisy_points_give_small_errors():
    import numpy as np
    rng = np.random.default_rng(0)
    grid = [(k, 1, m) for k in (1, 2, 4, 8) for m in (1, 4, 8, 16)]
    noisy = [Point(p.gpus, p.nodes, p.micro_batch, 1, p.step_s * float(np.exp(rng.normal(0, 0.01))))
             for p in points(grid)]
    result = fit(noisy, PRIOR)
    assert result.profile.compute_per_sample_s == pytest.approx(0.04, rel=0.05)
    assert result.rms_relative_error < 0.02
