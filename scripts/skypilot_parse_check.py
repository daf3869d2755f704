"""Check that SkyPilot's own task parser accepts a YAML from `costsim export --to skypilot`.

Runs under a Python that has `skypilot` installed (a separate venv: it pins click < 8.2). SkyPilot
checks instance types against its catalog, which it would download; nothing is downloaded here:
the catalog cache under $HOME/.sky is seeded from costsim's own dated offerings (which come from the
same SkyPilot catalog), so run this with HOME pointing at a scratch folder.

Usage: HOME=/tmp/scratch /path/to/sky-venv/bin/python scripts/skypilot_parse_check.py TASK.yaml OFFERINGS.csv
Prints one JSON line: num_nodes, accelerators, use_spot, instance_type, cloud, region, job_recovery, mounts,
storage_modes, disk_size, disk_tier, run.
"""

import csv
import json
import os
import sys

NAMES = {"A100-40GB": "A100", "A100-80GB": "A100-80GB", "V100-16GB": "V100"}


def seed_catalog(offerings_csv: str) -> None:
    lines = [line for line in open(offerings_csv) if not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    for provider in ("aws",):
        folder = os.path.join(os.path.expanduser("~"), ".sky", "catalogs", "v8", provider)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "vms.csv"), "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo",
                             "Price", "SpotPrice", "Region", "AvailabilityZone"])
            for row in (r for r in rows if r["provider"] == provider):
                gpus = int(row["gpus_per_node"])
                for zone in ("a", "b"):
                    writer.writerow([row["instance"], NAMES.get(row["gpu"], row["gpu"]), gpus, 8 * gpus, 32 * gpus, "",
                                     row["on_demand_usd_h"], row["spot_usd_h"], row["region"], row["region"] + zone])


def main() -> None:
    task_yaml, offerings_csv = sys.argv[1], sys.argv[2]
    seed_catalog(offerings_csv)
    import sky
    task = sky.Task.from_yaml(task_yaml)
    (resources,) = list(task.resources)
    print(json.dumps({"skypilot": sky.__version__, "num_nodes": task.num_nodes, "accelerators": resources.accelerators,
                      "use_spot": resources.use_spot, "instance_type": resources.instance_type,
                      "cloud": str(resources.cloud), "region": resources.region,
                      "job_recovery": getattr(resources, "job_recovery", None),
                      "mounts": sorted(list(task.storage_mounts or {}) + list(task.file_mounts or {})),
                      "storage_modes": {path: store.mode.value for path, store in (task.storage_mounts or {}).items()},
                      "disk_size": resources.disk_size,
                      "disk_tier": None if resources.disk_tier is None else resources.disk_tier.value,
                      "run": task.run}))


if __name__ == "__main__":
    main()
