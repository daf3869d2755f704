"""costsim catalog --import: the user's SkyPilot catalog as a dated overlay that plan, simulate and
compare use, every output naming the catalog and date its prices come from."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from costsim import io
from costsim.contract.plan import Plan
from costsim.io.catalog import SKYPILOT_COLUMNS, load_catalog

# SkyPilot's vms.csv (AWS's, catalog v8) has these columns, in this order
VMS_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice,AvailabilityZone"
SKY_NAME = {"A100-40GB": "A100", "V100-16GB": "V100"}
READ = dt.datetime(2026, 11, 28, 12, 0)


def skypilot_folder(root: Path, spot_factor: float = 0.5) -> Path:
    """SkyPilot's layout (root/<cloud>/vms.csv) made from the shipped catalog: each offering in two
    zones, on-demand 10% dearer than shipped, spot `spot_factor` of shipped in the cheaper zone; and a
    CPU instance and an unpriced row, as real files have."""
    for cloud in ("aws", "gcp"):
        rows = [VMS_HEADER, f"m5.large,,,2,8,0.096,{'us-east-1' if cloud == 'aws' else 'us-central1'},,0.04,x-a",
                f"mystery.xlarge,H100,8,192,2048,,{'us-east-1' if cloud == 'aws' else 'us-central1'},,,x-a"]
        for o in io.load_offerings():
            if o.provider != cloud:
                continue
            for zone, bump in (("a", 1.0), ("b", 1.2)):
                spot = "" if o.spot_per_h is None else f"{o.spot_per_h * spot_factor * bump:.4f}"
                rows.append(f"{o.instance},{SKY_NAME.get(o.gpu, o.gpu)},{o.gpus_per_node},96,1152,"
                            f"{o.on_demand_per_h * 1.1:.4f},{o.region},\"{{'Gpus': []}}\",{spot},{o.region}{zone}")
        folder = root / cloud
        folder.mkdir(parents=True)
        (folder / "vms.csv").write_text("\n".join(rows) + "\n")
        os.utime(folder / "vms.csv", (READ.timestamp(), READ.timestamp()))
    return root


def test_an_imported_catalog_prices_the_plan_and_every_output_says_so(run_cli, tmp_path):
    sky = skypilot_folder(tmp_path / "sky", spot_factor=0.5)
    overlay = tmp_path / "my-prices"
    imported = run_cli("catalog", "--import", str(sky), "--out", str(overlay))
    assert imported.exit_code == 0, imported.stderr
    record = json.loads((overlay / "catalog.json").read_text())
    shipped = {o.id: o for o in io.load_offerings()}
    p5en = "aws/us-east-1/p5en.48xlarge"
    update = next(u for u in record["updated"] if u["offering"] == p5en)
    assert update["spot_usd_h"][1] == pytest.approx(shipped[p5en].spot_per_h * 0.5, rel=1e-3)   # the cheaper zone
    assert update["on_demand_usd_h"][1] == pytest.approx(shipped[p5en].on_demand_per_h * 1.1, rel=1e-3)
    assert not any("azure" in u["offering"] for u in record["updated"])   # no azure/vms.csv: shipped prices kept
    listed = run_cli("catalog", "--catalog", str(overlay), "--format", "json").json()
    row = next(r for r in listed if r["offering"] == p5en)
    assert (row["read_date"], row["catalog"]) == ("2026-11-28", str(overlay)) and "vms.csv" in row["source"]

    out = tmp_path / "plan.json"
    planned = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--catalog", str(overlay),
                      "--out", str(out))
    assert planned.exit_code == 0, planned.stderr
    plan = Plan.read(out)
    assert plan.resources.catalog == str(overlay) and plan.resources.price_read_date == "2026-11-28"
    chosen = next(o for o in load_catalog(overlay) if o.id == plan.resources.offering)
    assert plan.resources.price_per_node_h == {m: chosen.price_per_h(m) for m in chosen.markets}
    assert f"Prices: {overlay} catalog, read 2026-11-28" in " ".join(planned.stdout.split())
    default = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "40", "--out", str(tmp_path / "d.json"))
    assert "Prices: built-in catalog, read 2026-11-09" in " ".join(default.stdout.split())
    compared = run_cli("compare", "--scenario", "h100-team", "--catalog", str(overlay), "--format", "json").json()
    # AWS and GCP rows priced from the import; Lambda's (no lambda/vms.csv) the overlay keeps as shipped
    assert set(compared["prices"]) == {f"{overlay} catalog, read 2026-11-28", f"{overlay} catalog, read 2026-11-09"}


def _price_of_line(text: str, number: int, price: str) -> str:
    """The file with line `number`'s Price (column 6) replaced: a GPU row, which the import reads."""
    lines = text.splitlines()
    cells = lines[number - 1].split(",")
    cells[5] = price
    lines[number - 1] = ",".join(cells)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("edit, fragments", [
    (lambda text: text.replace("SpotPrice", "Spot"), ["vms.csv line 1", "SpotPrice", "missing"]),
    (lambda text: text.replace(",Region,", ",Place,"), ["vms.csv line 1", "Region", "missing"]),
    (lambda text: _price_of_line(text, 4, "cheap"), ["aws/vms.csv line 4", "Price", "'cheap'"]),
    (lambda text: _price_of_line(text, 5, "-3"), ["aws/vms.csv line 5", "Price", "'-3'"]),
])
def test_a_file_that_does_not_parse_is_one_line_naming_file_row_and_column(run_cli, tmp_path, edit, fragments):
    sky = skypilot_folder(tmp_path / "sky")
    vms = sky / "aws" / "vms.csv"
    vms.write_text(edit(vms.read_text()))
    result = run_cli("catalog", "--import", str(sky), "--out", str(tmp_path / "o"))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert not (tmp_path / "o").exists()


def test_a_folder_without_skypilot_files_and_an_overlay_that_is_not_one(run_cli, tmp_path):
    result = run_cli("catalog", "--import", str(tmp_path))
    assert result.exit_code == 2 and "vms.csv" in result.stderr
    result = run_cli("plan", "--workload", "sdxl", "--catalog", str(tmp_path))
    assert result.exit_code == 2 and "not a catalog overlay" in result.stderr
    assert set(SKYPILOT_COLUMNS) <= set(VMS_HEADER.split(","))
