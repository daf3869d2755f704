"""A compare scenario built from flags: an owned SKU against every cloud offering of its GPU type."""

from __future__ import annotations

from costsim.errors import InputError
from costsim.fleet.strategies import Strategy
from costsim.io.files import Fields
from costsim.io.scenario import Scenario, load_fleet, parse_strategy
from costsim.io.specs import load_offerings, load_skus
from costsim.spec import ON_DEMAND, Offering


def scenario_for_hardware(fleet: str, sku: str, nodes: int, horizon_s: float, sources: tuple | None = None,
                          catalog: list[Offering] | None = None) -> Scenario:
    """Owned `sku` x nodes; on-demand (idle-timeout 30 min) and spot for each same-GPU offering; hybrid.
    The demand is the fleet file's, or `sources` (a history) named `fleet`."""
    skus = load_skus()
    if sku not in skus:
        raise InputError("--hardware", "hardware", f"unknown SKU {sku!r}; allowed: {', '.join(sorted(skus))}")
    gpu = skus[sku][0]["gpu"]
    offerings = [o for o in (catalog if catalog is not None else load_offerings()) if o.gpu == gpu]
    if not offerings:
        raise InputError("--hardware", "hardware", f"no cloud offering sells {gpu}; compare with a scenario file "
                         "that names other GPUs and their relative speed")
    entries = [{"name": f"own-{nodes}x-{sku}", "kind": "owned", "sku": sku, "nodes": nodes}]
    for o in offerings:
        entries.append({"name": f"{o.instance}-idle-30m", "kind": "on-demand", "offering": o.id,
                        "scaling": "idle-timeout", "idle_timeout": "30m"})
        if o.spot_per_h is not None:
            entries.append({"name": f"{o.instance}-spot", "kind": "spot", "offering": o.id})
    cheapest = min(offerings, key=lambda o: o.price_per_h(ON_DEMAND) / o.gpus_per_node)
    entries.append({"name": f"hybrid-{sku}-burst-{cheapest.instance}", "kind": "hybrid", "sku": sku, "nodes": nodes,
                    "burst": {"offering": cheapest.id, "scaling": "idle-timeout", "idle_timeout": "10m"}})
    strategies: tuple[Strategy, ...] = tuple(parse_strategy(Fields("--hardware", e, f"{e['name']}."), 1.0, offerings)
                                             for e in entries)
    return Scenario(name=f"{fleet} on {sku}", description=f"{nodes}x {sku} vs cloud {gpu}", currency="USD",
                    horizon_s=horizon_s, seed=0, sources=sources if sources is not None else load_fleet(fleet),
                    strategies=strategies)
