"""What data/ cites is in the repository: a figure's source is a file the repository holds (data/SOURCES.md
gives each figure's original source) or the original itself, never a note kept elsewhere."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        return [ROOT / name for name in listed.stdout.splitlines()]
    return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]   # a source tree without git


def test_nothing_cites_a_file_outside_the_repository():
    outside = re.compile(r"FACTS\.md|\.\./shared/")
    cited = [f"{path.relative_to(ROOT)}:{number}" for path in tracked() if path.suffix in
             {".md", ".py", ".yaml", ".csv", ".txt", ".json", ".sh", ".toml"} and path.is_file()
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if outside.search(line)]
    assert not cited, cited


def test_the_sources_page_the_data_cites_ships_with_it():
    assert (ROOT / "data" / "SOURCES.md").is_file()
    citing = [p for p in (ROOT / "data").rglob("*") if p.is_file() and p.suffix in {".csv", ".yaml"}
              and "SOURCES.md" in p.read_text(errors="replace")]
    assert {"offerings.csv", "skus.yaml", "sdxl-unet.yaml"} <= {p.name for p in citing}
    from costsim.io.files import data_dir
    assert (data_dir() / "SOURCES.md").is_file()
    # a wheel carries data/ as costsim.data: its top-level .md files with it (tests/test_install builds one)
    assert '"costsim.data" = ["*.md"' in (ROOT / "pyproject.toml").read_text()
