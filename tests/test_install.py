"""A wheel plans without the source tree: built from a copy of the project, installed into a fresh
virtual environment, run from an empty folder with no COSTSIM_DATA."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_plans_the_shipped_workload(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("costsim", "runner", "data", "pyproject.toml", "README.md"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "measurements"))
        else:
            shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("costsim-*.whl"))
    # The venv sees this interpreter's packages (numpy, scipy, simpy...: nothing is downloaded) but
    # gets its own costsim, from the wheel. This interpreter may itself be a venv's, whose packages
    # --system-site-packages would not show (it shows the base interpreter's): a .pth names them.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    outer = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (Path(own) / "outer-interpreter.pth").write_text("".join(f"{path}\n" for path in outer))
    installed = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("COSTSIM_DATA", "PYTHONPATH")}
    where = subprocess.run([str(python), "-c", "import costsim, costsim.io as i; print(costsim.__file__); "
                            "print(i.data_dir())"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60)
    module, data = where.stdout.split()
    assert str(venv) in module and str(venv) in data, where.stdout   # the wheel's copy, not this checkout's
    plan = subprocess.run([str(venv / "bin" / "costsim"), "plan", "--workload", "sdxl", "--trials", "20",
                           "--jobs", "1"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert (elsewhere / "plan.json").exists() and "wrote plan.json" in plan.stdout
