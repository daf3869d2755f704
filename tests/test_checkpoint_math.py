"""Young and Daly as literal oracles (Daly 2006's own worked figures)."""

import math

import pytest

from costsim.checkpoint import daly_expected_wall_s, daly_interval_s, expected_wall_no_failures_s, young_interval_s


@pytest.mark.parametrize("mtbf_h, expected_min", [(24, 117), (6, 57), (0.25, 9.1)])
def test_daly_interval_matches_dalys_worked_figures(mtbf_h, expected_min):
    assert daly_interval_s(300, mtbf_h * 3600) / 60 == pytest.approx(expected_min, abs=0.5 if expected_min > 10 else 0.05)


def test_young_interval_is_sqrt_2_delta_m():
    assert young_interval_s(300, 86400) == pytest.approx(7200.0)


def test_daly_interval_is_mtbf_when_checkpoint_exceeds_two_mtbf():
    assert daly_interval_s(1000, 400) == 400


def test_daly_expected_wall_literal():
    # M e^{R/M} (e^{(tau+delta)/M} - 1) Ts/tau with M=6h, R=600, tau=3600, delta=300, Ts=10h
    expected = 21600 * math.exp(600 / 21600) * math.expm1(3900 / 21600) * 10
    assert daly_expected_wall_s(36000, 3600, 300, 21600, 600) == pytest.approx(expected)
    assert expected == pytest.approx(43946.596, abs=1e-3)


def test_daly_expected_wall_tends_to_failure_free_time_for_huge_mtbf():
    assert daly_expected_wall_s(36000, 3600, 300, 1e12, 600) == pytest.approx(39000, rel=1e-6)
    assert expected_wall_no_failures_s(36000, 3600, 300) == 39000


def test_rejects_non_positive_inputs():
    with pytest.raises(ValueError):
        young_interval_s(0, 100)
    with pytest.raises(ValueError):
        daly_expected_wall_s(100, 0, 1, 1, 0)
