"""Which offerings a workload may use: the cloud catalog, filtered, plus the team's own servers."""

from __future__ import annotations

from costsim import io
from costsim.errors import InputError
from costsim.spec import Offering, Workload


def offerings_for(workload: Workload, gpus: tuple[str, ...] | None = None) -> list[Offering]:
    """Cloud offerings of the allowed providers and GPU types, and the workload's owned servers."""
    catalog = io.load_offerings()
    cloud = catalog
    providers = {o.provider for o in cloud}
    if workload.clouds is not None:
        unknown = sorted(set(workload.clouds) - providers)
        if unknown:
            raise InputError(workload.source, "clouds", f"unknown {', '.join(unknown)}; allowed: "
                             f"{', '.join(sorted(providers))}")
        cloud = [o for o in cloud if o.provider in workload.clouds]
    skus = io.load_skus()
    owned = [io.owned_offering(o.sku, o.nodes, skus, workload.source) for o in workload.owned]
    offerings = cloud + owned
    wanted = gpus or workload.gpus
    if wanted:
        known = {o.gpu for o in catalog} | {o.gpu for o in owned}
        unknown = sorted(set(wanted) - known)
        if unknown:
            source, field = ("--gpu", "gpu") if gpus else (workload.source, "gpus")
            raise InputError(source, field, f"unknown GPU {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
        offerings = [o for o in offerings if o.gpu in wanted]
    return offerings


def find_offering(offering_id: str, workload: Workload | None = None) -> Offering:
    """One offering by id (provider/region/instance, or owned/SKU)."""
    pool = io.load_offerings()
    if workload is not None:
        skus = io.load_skus()
        pool += [io.owned_offering(o.sku, o.nodes, skus, workload.source) for o in workload.owned]
    for offering in pool:
        if offering.id == offering_id:
            return offering
    raise InputError("--offering", "offering", f"unknown {offering_id!r}; see `costsim catalog` for ids")
