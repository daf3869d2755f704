"""Check a task from `costsim export --to skypilot` with SkyPilot's own code: its parser and its upload.

Runs under a Python that has `skypilot` installed (a separate venv: it pins click < 8.2). SkyPilot
checks instance types against its catalog, which it would download; nothing is downloaded here:
the catalog cache under $HOME/.sky is seeded from costsim's own dated offerings (which come from the
same SkyPilot catalog), so run this with HOME pointing at a scratch folder.

What reaches the node is what SkyPilot's client zips for upload (sky/client/common.py
`upload_mounts_to_api_server`: the workdir and every local file-mount source, through
`storage_utils.zip_files_and_folders`, which leaves out what .skyignore or git ignores in a folder
and keeps a file named on its own). Each file is listed at its place on the node, with its SHA-256.

Secrets named on the command line (`--secret NAME`, as `sky jobs launch --secret NAME` takes them
from the environment) are resolved like the launch does.

Usage: HOME=/tmp/scratch /path/to/sky-venv/bin/python scripts/skypilot_parse_check.py TASK.yaml OFFERINGS.csv
       [--secret NAME ...]
Prints one JSON line: num_nodes, accelerators, use_spot, instance_type, cloud, region, job_recovery, mounts,
storage_modes, disk_size, disk_tier, setup, run, envs, secrets, uploaded, excluded_from_workdir.
"""

import csv
import hashlib
import json
import os
import sys
import tempfile
import zipfile

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


def uploaded(task) -> dict:
    """Every file SkyPilot uploads, at its place on the node -> SHA-256 of its content."""
    from sky.data import data_utils, storage_utils
    from sky.skylet import constants
    places = [(task.workdir, constants.SKY_REMOTE_WORKDIR)] if isinstance(task.workdir, str) else []
    places += [(src, dest) for dest, src in (task.file_mounts or {}).items() if not data_utils.is_cloud_store_url(src)]
    found = {}
    with tempfile.TemporaryDirectory() as scratch:
        for number, (source, dest) in enumerate(places):
            archive = os.path.join(scratch, f"{number}.zip")
            storage_utils.zip_files_and_folders([source], archive)
            with zipfile.ZipFile(archive) as zipped:
                for info in zipped.infolist():
                    if info.is_dir():
                        continue
                    relative = os.path.relpath("/" + info.filename, source)   # zip names drop the leading /
                    place = dest if relative == "." else f"{dest}/{relative}"
                    found[place] = hashlib.sha256(zipped.read(info)).hexdigest()
    return found


def main() -> None:
    task_yaml, offerings_csv = sys.argv[1], sys.argv[2]
    secret_names = [sys.argv[i + 1] for i, arg in enumerate(sys.argv) if arg == "--secret"]
    seed_catalog(offerings_csv)
    import sky
    from sky.data import storage_utils
    from sky.utils import yaml_utils
    with open(task_yaml) as handle:
        config = yaml_utils.safe_load(handle.read())
    task = sky.Task.from_yaml_config(config, secrets_overrides=[(n, os.environ[n]) for n in secret_names])
    task.expand_and_validate_workdir()
    task.expand_and_validate_file_mounts()
    (resources,) = list(task.resources)
    excluded = storage_utils.get_excluded_files(task.workdir) if isinstance(task.workdir, str) else []
    print(json.dumps({"skypilot": sky.__version__, "num_nodes": task.num_nodes, "accelerators": resources.accelerators,
                      "use_spot": resources.use_spot, "instance_type": resources.instance_type,
                      "cloud": str(resources.cloud), "region": resources.region,
                      "job_recovery": getattr(resources, "job_recovery", None),
                      "mounts": sorted(list(task.storage_mounts or {}) + list(task.file_mounts or {})),
                      "storage_modes": {path: store.mode.value for path, store in (task.storage_mounts or {}).items()},
                      "storage_sources": {path: store.source for path, store in (task.storage_mounts or {}).items()},
                      "disk_size": resources.disk_size,
                      "disk_tier": None if resources.disk_tier is None else resources.disk_tier.value,
                      "setup": task.setup, "run": task.run, "envs": dict(task.envs),
                      "secrets": sorted(task.secrets), "secret_refs": sorted(r.name for r in task.managed_secret_refs),
                      "uploaded": uploaded(task), "excluded_from_workdir": sorted(excluded)}))


if __name__ == "__main__":
    main()
