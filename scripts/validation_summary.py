"""One line per `costsim validate` table (a file as the command printed it): the goal met / within noise / missed,
the mean |stated - realised| P(deadline) of each period's groups, the us-west-2 zones' errors and the pooled cost
CRPS: the figures the measurement READMEs and docs/model.md compare runs by.

    python3 scripts/validation_summary.py data/measurements/2026-12-05-market-validation-region/*.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

GOALS = ("yes", "noise", "no")


def summary(path: Path) -> str | None:
    """The file's line; None where it holds no validate table (a README, an offline check's output)."""
    errors: dict[str, float] = {}
    goals: list[str] = []
    crps = ""
    for line in path.read_text().splitlines():
        words = line.split()
        if words and words[0] == "pooled":
            crps = words[-1]
        elif words and re.fullmatch(r"[^/\s]+/\S+", words[0]) and "stated" not in line:
            at = next((i for i, w in enumerate(words) if re.fullmatch(r"[+-]\d\.\d{3}", w)), None)
            # the goal column is the first of its words after the error ("if right" may say "no" too, later)
            goal = next((w for w in words[at:] if w in GOALS), None) if at is not None else None
            if at is None or goal is None:
                continue
            errors[words[0]] = float(words[at])
            goals.append(goal)
    if not errors:
        return None
    periods: dict[str, list[float]] = {}
    for name, error in errors.items():
        periods.setdefault(name.split("/")[0], []).append(abs(error))
    west = [f"{errors[g]:+.3f}" for g in sorted(errors) if "/us-west-2" in g and g.startswith("2023/")]
    return (f"{path.name}: met {goals.count('yes')} / noise {goals.count('noise')} / missed {goals.count('no')}; "
            + "; ".join(f"{period} mean |error| {sum(v) / len(v):.3f} ({len(v)})" for period, v in sorted(periods.items()))
            + (f"; 2023 us-west-2 {', '.join(west)}" if west else "") + f"; pooled cost CRPS {crps}")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for name in sys.argv[1:]:
        path = Path(name)
        if not path.is_file():
            sys.exit(f"validation_summary: {name}: not a file")
        line = summary(path)
        if line is not None:
            print(line)


if __name__ == "__main__":
    main()
