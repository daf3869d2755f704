"""Money math with literal numbers."""

import pytest

from costsim import cost


@pytest.mark.parametrize("duration, increment, minimum, billed", [
    (0, 1, 60, 0), (30, 1, 60, 60), (61.2, 1, 60, 62), (61, 60, 60, 120), (3600, 3600, 0, 3600), (1, 3600, 0, 3600)])
def test_billed_seconds(duration, increment, minimum, billed):
    assert cost.billed_seconds(duration, increment, minimum) == billed


def test_instance_cost_counts_nodes_and_rounds_up():
    # 2 nodes x 90 minutes at 10/h, per-minute billing: 2 * 10 * 1.5
    assert cost.instance_cost(5399.5, 10.0, increment_s=60, count=2) == pytest.approx(30.0)


def test_capital_straight_line_and_residual():
    own = cost.Ownership(price=600_000, life_years=3, residual_fraction=0.1)
    assert cost.capital_per_year(own) == pytest.approx(180_000)


def test_capital_with_financing_is_an_annuity():
    own = cost.Ownership(price=100_000, life_years=5, financing_rate=0.05)
    # standard annuity payment: P r (1+r)^n / ((1+r)^n - 1) = 23,097.48
    assert cost.capital_per_year(own) == pytest.approx(23_097.48, abs=0.01)


def test_ownership_per_hour_literal():
    own = cost.Ownership(price=87_600, life_years=1, power_kw_load=2.0, power_kw_idle=1.0, pue=1.5,
                         electricity_per_kwh=0.1, colocation_per_kw_month=100, staff_per_year=8_760,
                         support_fraction_per_year=0.1)
    # capital 10/h; colocation 100*2*1.5*12 = 3,600/y; staff 8,760/y; support 8,760/y
    fixed_per_h = (3_600 + 8_760 + 8_760) / 8760
    assert cost.ownership_per_hour(own, 1.0) == pytest.approx(10 + fixed_per_h + 2.0 * 1.5 * 0.1)
    assert cost.ownership_per_hour(own, 0.0) == pytest.approx(10 + fixed_per_h + 1.0 * 1.5 * 0.1)


def test_seed_case_cost_per_used_gpu_hour():
    # The seed articles' server: 600,000 + 50,000 upkeep over 3 years, 4 GPUs, used 30% of the time.
    own = cost.Ownership(price=650_000, life_years=3)
    per_used_server_hour = cost.ownership_per_used_hour(own, 0.3)
    assert per_used_server_hour / 4 == pytest.approx(650_000 / (3 * 8760 * 0.3) / 4)
    assert per_used_server_hour / 4 == pytest.approx(20.61, abs=0.01)   # CNY per used GPU-hour


def test_used_hour_rejects_zero_utilization():
    with pytest.raises(ValueError):
        cost.ownership_per_used_hour(cost.Ownership(price=1, life_years=1), 0)


def test_break_even_utilization_literal():
    # 8 GPUs; capital 8,760/y = 1/h; no power: owning costs 1/h, i.e. 1/(8u) per used GPU-hour.
    own = cost.Ownership(price=8_760 * 5, life_years=5)
    assert cost.break_even_utilization(own, 8, 0.25) == pytest.approx(0.5)     # 1/(8*0.5) = 0.25
    assert cost.break_even_utilization(own, 8, 0.1) is None                       # would need u = 1.25


def test_break_even_with_power_at_load():
    own = cost.Ownership(price=8_760, life_years=1, power_kw_load=2.0, power_kw_idle=0.0, pue=1.0,
                         electricity_per_kwh=0.5)
    # a = 1/h, b = 1/h at full load; cloud 1/GPU-h on 2 GPUs: u = 1 / (2 - 1) = 1.0
    assert cost.break_even_utilization(own, 2, 1.0) == pytest.approx(1.0)
    assert cost.break_even_utilization(own, 2, 0.5) is None


def test_seed_case_never_breaks_even_against_cloud_at_4_5():
    own = cost.Ownership(price=650_000, life_years=3)
    # 650,000 / (3 * 8760 * 4 * 4.5) = 1.374 > 1: owning never pays at that cloud price
    assert cost.break_even_utilization(own, 4, 4.5) is None
    assert cost.break_even_utilization(own, 4, 10.0) == pytest.approx(650_000 / (3 * 8760 * 4 * 10.0))
