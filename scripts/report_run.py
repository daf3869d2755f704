"""Kept for the commands in data/measurements READMEs: `runner report RUN_DIR` does this now.

Usage: python scripts/report_run.py RUN_DIR [--json] [--skip 5]   (= runner report RUN_DIR [--format json])
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runner.cli import main  # noqa: E402

if __name__ == "__main__":
    main(["report", *[("--format=json" if a == "--json" else a) for a in sys.argv[1:]]])
