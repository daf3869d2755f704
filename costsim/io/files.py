"""The edge: every file the tool reads or writes goes through here, and nothing else parses.

YAML, the built-in data folder and references to it live here; the JSON helpers and `Fields` live in
costsim.contract.jsonfiles (a torchrun worker needs them without yaml) and are re-exported. Errors
name the file, the field and what is allowed (InputError); outputs are written atomically.
"""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from pathlib import Path

import yaml

from costsim.contract.jsonfiles import Fields, read_json, read_jsonl, write_atomic  # noqa: F401 (their home)
from costsim.errors import InputError

DATA_ENV = "COSTSIM_DATA"


def data_dir() -> Path:
    """The built-in data folder: $COSTSIM_DATA, else the source tree's `data/` (a checkout or an
    editable install), else the copy installed with the package (costsim/data in a wheel)."""
    if os.environ.get(DATA_ENV):
        candidates = [Path(os.environ[DATA_ENV])]
    else:
        candidates = [Path(__file__).resolve().parents[2] / "data", Path(str(resources.files("costsim") / "data"))]
    for root in candidates:
        if (root / "catalog").is_dir():
            return root
    raise InputError(str(candidates[0]), "data", f"no built-in data here; set {DATA_ENV} to the data/ folder")


def outside_shipped_data(path: str | Path, flag: str = "--out") -> Path:
    """`path`, where a command may write it: never into costsim's own data (the built-in profiles and
    catalog every plan reads), which an output would silently change for every later plan."""
    target = Path(path).resolve()
    shipped = data_dir().resolve()
    if target == shipped or shipped in target.parents:
        raise InputError(flag, "out", f"{path} is inside costsim's shipped data ({shipped}); write it elsewhere "
                         "(e.g. --out my-profile.yaml) and give that file to the commands that read it (--profile)")
    return Path(path)


# -- generic readers -------------------------------------------------------------------------
def read_yaml(path: Path) -> dict:
    """A YAML mapping, or an InputError naming the file."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise InputError(str(path), "file", "not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "file", f"cannot be read ({exc.__class__.__name__})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "document"
        raise InputError(str(path), where, "not valid YAML") from None
    if not isinstance(doc, dict):
        raise InputError(str(path), "document", "expected a mapping of fields at the top level")
    return doc


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def resolve(ref: str, folder: str, suffix: str = ".yaml") -> Path:
    """A path as given, or a built-in name looked up in data/<folder>/<name>.yaml."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml", ".json", ".csv") or path.exists() or "/" in ref:
        return path
    builtin = data_dir() / folder / f"{ref}{suffix}"
    if not builtin.exists():
        choices = sorted(p.stem for p in (data_dir() / folder).glob(f"*{suffix}"))
        raise InputError(ref, folder.rstrip("s"), f"no such file or built-in name; built-ins: {', '.join(choices)}")
    return builtin
