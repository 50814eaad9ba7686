"""Which master seeds of a kept run a credit margin could change: its stored credit chunks replayed under ``--credit-margin Z``.

A margin changes a run only where a credit chunk the curriculum lost falls within it; up to
that chunk the run is the same call for call, and a run with no such chunk is the same run.
Runs kept before the margin existed store each chunk's two success rates but not the two
copies' outcomes level by level, so the standard error of the paired difference is
bounded: fewest disagreements (every level one copy won and the other lost favours the
same copy) and most (as many disagreements as the two rates allow). A seed is

- ``changed`` when its first lost chunk within the margin is within it for any pattern,
- ``maybe`` when one is within it only for some patterns (rerun it to know),
- ``unchanged`` when no lost chunk can be: its run under the margin is the kept run.

The margin variants of issue 42 (``benchmarks/variants/margin*``) rerun the changed and
maybe seeds and reuse the unchanged ones. Run: ``python benchmarks/credit_replay.py
benchmarks/results/shadow-stepin-hard/doorkey8 [--margin 1.0] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envrigger.loop.library import Library  # noqa: E402


def _se(lead: int, disagree: int, n: int) -> float:
    """Standard error of the mean paired difference of n 0/1 pairs: ``lead`` more levels won by one copy, ``disagree`` in all."""
    mean = lead / n
    return math.sqrt(max(disagree / n - mean * mean, 0.0) * n / (n - 1)) / math.sqrt(n)


def se_bounds(curriculum: float, original: float, n: int) -> tuple[float, float]:
    """The fewest and the most the paired standard error can be for these two success rates over the same ``n`` levels.

    Example:
        >>> [round(x, 4) for x in se_bounds(0.04, 0.06, 50)]   # one level apart: from one disagreement to five
        [0.02, 0.0451]
    """
    wins = round(curriculum * n), round(original * n)
    lead = abs(wins[0] - wins[1])
    most = min(sum(wins), 2 * n - sum(wins))
    return _se(lead, lead, n), _se(lead, most - (most - lead) % 2, n)


def replay(seed_dir: Path, margin: float, n: int) -> dict[str, Any]:
    """One master seed's verdict under ``margin``, with the first chunk it turns on (round, chunk, the two rates)."""
    library = Library(seed_dir / "library.db", create=False)
    try:
        rounds = library.rounds()
    finally:
        library.close()
    first = None  # the first chunk the margin may turn on: the run is the kept one up to it
    for summary in rounds:
        chunks = summary["arms"].get("rigger", {}).get("train", {}).get("credit", {}).get("chunks", [])
        for j, chunk in enumerate(chunks):
            behind = chunk["original"] - chunk["curriculum"]
            if behind <= 0:
                continue
            low, high = se_bounds(chunk["curriculum"], chunk["original"], n)
            if behind <= margin * high + 1e-9:
                first = first or {"round": summary["round"], "chunk": j, "curriculum": chunk["curriculum"], "original": chunk["original"]}
                if behind <= margin * low + 1e-9:  # turns here if nothing turned before: changed either way
                    return {"verdict": "changed", "at": first}
    return {"verdict": "unchanged" if first is None else "maybe", "at": first}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", type=Path, help="a kept benchmark's folder (its seed-S folders and seeds.json)")
    parser.add_argument("--margin", type=float, default=1.0, help="the credit margin Z to replay (default 1)")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    args = parser.parse_args(argv)
    plan = args.benchmark / "seeds.json"
    if not plan.is_file():
        parser.error(f"{args.benchmark} holds no seeds.json; give a kept benchmark's folder such as benchmarks/results/shadow/doorkey6")
    n = int(json.loads(plan.read_text())["config"].get("credit_episodes", 50))
    seeds = sorted((p for p in args.benchmark.glob("seed-*") if (p / "library.db").is_file()), key=lambda p: int(p.name[5:]))
    verdicts = {int(p.name[5:]): replay(p, args.margin, n) for p in seeds}
    if args.json:
        print(json.dumps(verdicts, indent=2))
        return 0
    for kind in ("changed", "maybe", "unchanged"):
        print(f"{kind}: {', '.join(str(s) for s, v in verdicts.items() if v['verdict'] == kind) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
