#!/usr/bin/env python3
"""What the first step after a start spends beyond a steady step, function by function.

`COSTSIM_PROFILE_FIRST_STEP=FILE runner execute ...` dumps rank 0's first step of each start and the step after
it (a steady one) as FILE.<pid>.<step>.prof (pstats' format; FILE's headings name them). This prints the
functions whose time grew the most from the steady step to the first: by own time (where the interpreter was)
and by cumulative time (which call paths hold it), with the two steps' totals. Both profiles ran the same code
under the same profiler, so its overhead largely cancels in the difference.

    python3 scripts/profile_diff.py prof.txt.4242.51.prof prof.txt.4242.52.prof --top 30

Read only profiles you made: pstats' files are Python's marshal format.
"""
from __future__ import annotations

import argparse
import pstats
import sys
from pathlib import Path

Key = tuple[str, int, str]


def load(path: Path) -> tuple[dict[Key, tuple[float, float, int]], float]:
    """Each function's (own seconds, cumulative seconds, calls) and the profile's total seconds."""
    try:
        stats = pstats.Stats(str(path))
    except (OSError, EOFError, ValueError, TypeError) as exc:
        sys.exit(f"profile_diff: {path}: not a pstats profile ({exc})")
    table = {key: (tt, ct, nc) for key, (_cc, nc, tt, ct, _callers) in stats.stats.items()}   # type: ignore[attr-defined]
    return table, float(stats.total_tt)   # type: ignore[attr-defined]


def name(key: Key) -> str:
    path, line, function = key
    if path == "~":   # a built-in
        return function
    parts = Path(path).parts
    short = "/".join(parts[-3:]) if "site-packages" in parts or len(parts) > 3 else path
    return f"{short}:{line}({function})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="the first step's profile (FILE.<pid>.<step>.prof)")
    parser.add_argument("steady", type=Path, help="the steady step's profile (the next step's)")
    parser.add_argument("--top", type=int, default=30, help="rows in each table (default 30)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top {args.top}: must be 1 or more")
    first, first_total = load(args.first)
    steady, steady_total = load(args.steady)
    print(f"first step {first_total:.2f} s, steady step {steady_total:.2f} s under the profiler: "
          f"{first_total - steady_total:+.2f} s")
    for column, label in ((0, "own time"), (1, "cumulative time")):
        grown = sorted(((first[k][column] - steady.get(k, (0.0, 0.0, 0))[column], k) for k in first),
                       reverse=True)[:args.top]
        print(f"\nthe most {label} added by the first step (s: first - steady, first, steady; calls first/steady)")
        for extra, key in grown:
            was = steady.get(key, (0.0, 0.0, 0))
            print(f"  {extra:+7.3f}  {first[key][column]:7.3f}  {was[column]:7.3f}  {first[key][2]:>6}/{was[2]:<6} "
                  f"{name(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
