"""Money as pure functions: instance billing and the hourly cost of owning hardware.

Prices are per instance-hour in the data file's currency; durations are seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOURS_PER_YEAR = 8760.0


def billed_seconds(duration_s: float, increment_s: float = 1.0, minimum_s: float = 0.0) -> float:
    """Seconds charged for one instance run: rounded up to the increment, at least the minimum."""
    if duration_s <= 0:
        return 0.0
    charged = math.ceil(duration_s / increment_s - 1e-6) * increment_s   # the simulator's times carry rounding
    return max(charged, minimum_s)


def instance_cost(duration_s: float, price_per_h: float, *, increment_s: float = 1.0,
                  minimum_s: float = 0.0, count: int = 1) -> float:
    """Cost of `count` instances each held for `duration_s` at `price_per_h`."""
    return count * price_per_h * billed_seconds(duration_s, increment_s, minimum_s) / 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Ownership:
    """What it costs to own one server; every money figure in one currency."""

    price: float
    life_years: float
    residual_fraction: float = 0.0
    financing_rate: float = 0.0
    power_kw_load: float = 0.0
    power_kw_idle: float = 0.0
    pue: float = 1.0
    electricity_per_kwh: float = 0.0
    colocation_per_kw_month: float = 0.0
    staff_per_year: float = 0.0
    support_fraction_per_year: float = 0.0
    spares_fraction_per_year: float = 0.0


def capital_per_year(own: Ownership) -> float:
    """Yearly capital charge: annuity over the life at the financing rate, less the residual value."""
    residual = own.price * own.residual_fraction
    rate = own.financing_rate
    if rate == 0:
        return (own.price - residual) / own.life_years
    growth = (1.0 + rate) ** own.life_years
    annuity = own.price * rate * growth / (growth - 1.0)
    return annuity - residual * rate / (growth - 1.0)


def energy_per_hour(own: Ownership, utilization: float) -> float:
    """Electricity per wall-clock hour at a utilisation between idle (0) and load (1)."""
    kw = own.power_kw_idle + (own.power_kw_load - own.power_kw_idle) * utilization
    return kw * own.pue * own.electricity_per_kwh


def fixed_per_year(own: Ownership) -> float:
    """Costs that run whether the server works or not: colocation, staff, support, spares."""
    colocation = own.colocation_per_kw_month * own.power_kw_load * own.pue * 12.0
    upkeep = own.price * (own.support_fraction_per_year + own.spares_fraction_per_year)
    return colocation + own.staff_per_year + upkeep


def ownership_per_hour(own: Ownership, utilization: float = 1.0) -> float:
    """Cost of owning the server for one wall-clock hour at a given utilisation."""
    yearly = capital_per_year(own) + fixed_per_year(own)
    return yearly / HOURS_PER_YEAR + energy_per_hour(own, utilization)


def ownership_per_used_hour(own: Ownership, utilization: float) -> float:
    """Cost per hour the server is actually used: idle hours are paid by the used ones."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization!r}")
    return ownership_per_hour(own, utilization) / utilization


def break_even_utilization(own: Ownership, gpus: int, cloud_per_used_gpu_hour: float) -> float | None:
    """Utilisation above which owning costs less per used GPU-hour than the cloud (None: never).

    Owning costs a + b*u per wall-clock hour (a: capital, fixed costs and idle power; b: the extra
    power at load), spread over gpus*u used GPU-hours; equal to the cloud's c at u = a / (c*gpus - b).
    """
    a = ownership_per_hour(own, 0.0)
    b = ownership_per_hour(own, 1.0) - a
    denominator = cloud_per_used_gpu_hour * gpus - b
    if denominator <= 0:
        return None
    u = a / denominator
    return u if 0 < u <= 1 else None
