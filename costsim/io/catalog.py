"""Price catalogs: the shipped one, or an overlay imported from the user's own SkyPilot catalog.

`costsim catalog --import DIR` reads SkyPilot's per-cloud `vms.csv` files (DIR/<cloud>/vms.csv, the
layout of SkyPilot's catalog cache, e.g. ~/.sky/catalogs/v8) and writes an overlay folder: the
shipped catalog with the prices of every offering SkyPilot quotes (the same cloud, region and
instance type; on-demand `Price`, and the cheapest zone's `SpotPrice`, as SkyPilot's optimizer
picks the cheapest zone), each updated row saying where and when its price was read (the file's
modification date: when SkyPilot fetched it). The hardware figures (GPU memory, interconnect, spot
notice and capacity model, provisioning time) stay the shipped ones: SkyPilot's catalog has none
of them. `--catalog DIR` makes plan, simulate, compare and catalog use the overlay.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from costsim.errors import InputError
from costsim.io.files import data_dir, write_atomic
from costsim.io.specs import load_offerings
from costsim.spec import Offering

BUILT_IN = "built-in"
OVERLAY_FILE = "offerings.csv"
OVERLAY_RECORD = "catalog.json"
SKYPILOT_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "Region",
                    "AvailabilityZone")
# SkyPilot's accelerator names where they differ from the catalog's GPU names
SKY_GPU = {"A100": "A100-40GB", "V100": "V100-16GB"}


def load_catalog(ref: str | Path | None = None) -> list[Offering]:
    """The offerings of a catalog: the shipped one (None), an overlay folder, or a catalog CSV."""
    if ref is None:
        return load_offerings()
    path = Path(ref)
    if path.is_dir():
        if not (path / OVERLAY_FILE).is_file():
            raise InputError(str(path), OVERLAY_FILE, "not a catalog overlay (make one with `costsim catalog --import "
                             "SKYPILOT_DIR --out DIR`)")
        return load_offerings(path / OVERLAY_FILE, catalog=str(path))
    return load_offerings(path, catalog=str(path))


@dataclass(slots=True)
class Quote:
    """SkyPilot's prices of one instance type in one region (the cheapest zone's spot price)."""

    gpu: str
    gpus: int
    on_demand: float
    spot: float | None
    file: Path
    read_date: str


@dataclass(slots=True)
class Imported:
    out: Path
    files: list[Path]
    updated: list[tuple[str, float | None, float | None, float | None, float | None]] = field(default_factory=list)
    not_quoted: list[str] = field(default_factory=list)        # shipped offerings SkyPilot has no price for
    mismatched: list[str] = field(default_factory=list)        # instance types whose GPUs differ from ours


def import_skypilot(source: Path, out: Path, today: str | None = None) -> Imported:
    """Read DIR/<cloud>/vms.csv and write the overlay folder `out` (offerings.csv and catalog.json)."""
    source = Path(source)
    files = sorted(source.glob("*/vms.csv"))
    if not files:
        raise InputError(str(source), "vms.csv", "no <cloud>/vms.csv here: give SkyPilot's catalog folder (e.g. "
                         "~/.sky/catalogs/v8), which holds aws/vms.csv, gcp/vms.csv, ...")
    quotes: dict[tuple[str, str, str], Quote] = {}
    for path in files:
        quotes.update({(path.parent.name, region, instance): q for (region, instance), q in _read_vms(path).items()})
    shipped = data_dir() / "catalog" / OVERLAY_FILE
    result = Imported(out=Path(out), files=files)
    lines = shipped.read_text().splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    rows = list(csv.DictReader(lines[header_at:]))
    today = today or dt.date.today().isoformat()
    for row in rows:
        key = (row["provider"], row["region"], row["instance"])
        quote = quotes.get(key)
        if quote is None:
            if row["provider"] in {f.parent.name for f in files}:
                result.not_quoted.append("/".join(key))
            continue
        if quote.gpus != int(row["gpus_per_node"]) or quote.gpu != row["gpu"]:
            result.mismatched.append(f"{'/'.join(key)}: SkyPilot {quote.gpu} x{quote.gpus}, the catalog {row['gpu']} "
                                     f"x{row['gpus_per_node']}")
            continue
        old_od, old_spot = float(row["on_demand_usd_h"]), float(row["spot_usd_h"]) if row["spot_usd_h"] else None
        row["on_demand_usd_h"] = _price(quote.on_demand)
        if quote.spot is not None and row["spot_model"]:   # a spot market needs a capacity model to plan with
            row["spot_usd_h"] = _price(quote.spot)
        row["source"] = f"SkyPilot catalog {quote.file} (costsim catalog --import, {today})"
        row["read_date"] = quote.read_date
        result.updated.append(("/".join(key), old_od, quote.on_demand, old_spot,
                               float(row["spot_usd_h"]) if row["spot_usd_h"] else None))
    head = [f"# Catalog overlay: the shipped catalog with prices from SkyPilot's catalog {source}, imported {today} "
            "by `costsim catalog --import`;", "# rows it quotes say so in `source` and carry its file's date in "
            "`read_date`; the others are the shipped rows, unchanged."]
    Path(out).mkdir(parents=True, exist_ok=True)
    text = "\n".join(head) + "\n" + _csv(rows, list(rows[0]))
    write_atomic(Path(out) / OVERLAY_FILE, text)
    write_atomic(Path(out) / OVERLAY_RECORD, json.dumps({
        "imported_from": str(source), "imported_on": today,
        "files": {str(f): {"sha256": hashlib.sha256(f.read_bytes()).hexdigest(), "read_date": _file_date(f)}
                  for f in files},
        "updated": [{"offering": o, "on_demand_usd_h": [a, b], "spot_usd_h": [c, d]} for o, a, b, c, d in result.updated],
        "not_quoted": result.not_quoted, "mismatched": result.mismatched}, indent=2) + "\n")
    return result


def _read_vms(path: Path) -> dict[tuple[str, str], Quote]:
    """(region, instance type) -> its quote, from one SkyPilot vms.csv; bad content names file, row, column."""
    try:
        reader = csv.DictReader(path.read_text().splitlines())
    except UnicodeDecodeError:
        raise InputError(str(path), "file", "not a text file") from None
    missing = [c for c in SKYPILOT_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{path} line 1", ", ".join(missing), f"missing; SkyPilot's vms.csv has "
                         f"{', '.join(SKYPILOT_COLUMNS)}")
    read_date = _file_date(path)
    quotes: dict[tuple[str, str], Quote] = {}
    for number, row in enumerate(reader, start=2):
        if not row["AcceleratorName"]:
            continue   # a CPU instance
        where = f"{path} line {number}"
        on_demand = _number(where, "Price", row["Price"])
        spot = _number(where, "SpotPrice", row["SpotPrice"]) if row["SpotPrice"].strip() else None
        count = _number(where, "AcceleratorCount", row["AcceleratorCount"])
        if on_demand is None:
            continue   # SkyPilot lists some instance types without a price
        key = (row["Region"], row["InstanceType"])
        known = quotes.get(key)
        if known is None:
            quotes[key] = Quote(gpu=SKY_GPU.get(row["AcceleratorName"], row["AcceleratorName"]), gpus=int(count or 0),
                                on_demand=on_demand, spot=spot, file=path, read_date=read_date)
        else:   # another zone: the cheapest on-demand and spot price of the region
            known.on_demand = min(known.on_demand, on_demand)
            if spot is not None:
                known.spot = spot if known.spot is None else min(known.spot, spot)
    return quotes


def _number(where: str, column: str, text: str) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(where, column, f"got {text!r}; expected a price (a number)") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(where, column, f"got {text!r}; expected a number >= 0")
    return value


def _file_date(path: Path) -> str:
    return dt.date.fromtimestamp(path.stat().st_mtime).isoformat()


def _price(value: float) -> str:
    return f"{value:.6g}"


def _csv(rows: list[dict], columns: list[str]) -> str:
    import io
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
