"""Which master seeds of a kept run a credit margin could change: its stored credit chunks replayed under ``--credit-margin Z``.

A margin changes a run only where a credit chunk the curriculum lost falls within it; up to
that chunk the run is the same call for call, and a run with no such chunk is the same run.
Runs kept before the margin existed store each chunk's two success rates but not the two
copies' outcomes level by level, so the standard error of the paired difference is
bounded: fewest disagreements (every level one copy won and the other lost favours the
same copy) and most (as many disagreements as the two rates allow). A seed is

- ``changed`` when its first lost chunk within the margin is within it for any pattern,
- ``maybe`` when one is within it only for some patterns (rerun it to know),
- ``unchanged`` when no lost chunk can be: its run under the margin is the kept run,
- ``missing`` when seeds.json counts it but it has no library (not finished: run it).

A run kept with a margin of its own is replayed against the decisions it stored (a chunk
it kept within its margin turns under a smaller one; since the margin, each chunk stores
its standard error, so its decision is known exactly), and the ``original-select`` arm's
chunks, which the margin decides too, are read beside the rigger arm's.

The margin variants of issue 42 (``benchmarks/variants/margin*``) rerun the changed and
maybe seeds and reuse the unchanged ones. Run: ``python benchmarks/credit_replay.py
benchmarks/results/shadow-stepin-hard/doorkey8 [--margin 1.0] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envrigger.errors import LibraryError  # noqa: E402
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


ARMS = ("rigger", "original-select")  # the arms whose chunks the margin decides


def _turns(chunk: dict[str, Any], margin: float, n: int) -> str:
    """Whether ``margin`` decides this stored chunk as it was decided: ``same``, ``other`` or ``maybe`` (the level pattern unknown)."""
    behind = chunk["original"] - chunk["curriculum"]
    if behind <= 0:
        return "same"  # kept by any margin, as by none
    if "se" in chunk:  # recorded since the margin existed: the decision is known exactly
        keep = behind <= margin * chunk["se"] + 1e-9
    else:
        low, high = se_bounds(chunk["curriculum"], chunk["original"], n)
        if low * margin + 1e-9 < behind <= high * margin + 1e-9:
            return "maybe"
        keep = behind <= margin * low + 1e-9
    return "same" if ("curriculum" if keep else "original") == chunk["kept"] else "other"


def replay(seed_dir: Path, margin: float, n: int) -> dict[str, Any]:
    """One master seed's verdict under ``margin``, with the first chunk it may turn on (round, arm, chunk, the two rates)."""
    library = Library(seed_dir / "library.db", create=False)
    try:
        rounds = library.rounds()
    finally:
        library.close()
    first = None  # the first chunk the margin may turn on: the run is the kept one up to it
    for summary in rounds:
        for arm in ARMS:
            chunks = summary.get("arms", {}).get(arm, {}).get("train", {}).get("credit", {}).get("chunks", [])
            for j, chunk in enumerate(chunks):
                turn = _turns(chunk, margin, n)
                if turn == "same":
                    continue
                where = {
                    "round": summary["round"],
                    "arm": arm,
                    "chunk": j,
                    "curriculum": chunk["curriculum"],
                    "original": chunk["original"],
                }
                first = first or where
                if turn == "other":  # turns here if nothing turned before: changed either way
                    return {"verdict": "changed", "at": first}
    return {"verdict": "unchanged" if first is None else "maybe", "at": first}


def _plan(benchmark: Path) -> tuple[dict[str, Any], int]:
    """The kept benchmark's saved config and master seed count, or a one-line reason it cannot be read."""
    plan = benchmark / "seeds.json"
    if not plan.is_file():
        raise ValueError(f"{benchmark} holds no seeds.json; give a kept benchmark's folder such as benchmarks/results/shadow/doorkey6")
    try:
        saved = json.loads(plan.read_text())
        config, seeds = saved["config"], int(saved["seeds"])
        if not isinstance(config, dict):
            raise TypeError("config is not an object")
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{plan}: not a multi-seed run's seeds.json ({error}); restore it from the kept results") from None
    episodes = config.get("credit_episodes", 50)
    if not isinstance(episodes, int) or episodes < 2:
        raise ValueError(f"{plan}: credit_episodes is {episodes!r}; a paired standard error needs 2 or more scoring levels")
    return config, seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", type=Path, help="a kept benchmark's folder (its seed-S folders and seeds.json)")
    parser.add_argument("--margin", type=float, default=1.0, help="the credit margin Z to replay, 0 to 10 (default 1)")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    args = parser.parse_args(argv)
    if not math.isfinite(args.margin) or not 0 <= args.margin <= 10:
        parser.error(f"--margin: got {args.margin}; give a number of standard errors from 0 to 10, as --credit-margin takes")
    try:
        config, count = _plan(args.benchmark)
    except ValueError as error:
        parser.error(str(error))
    first = int(config.get("seed", 0))
    verdicts: dict[int, dict[str, Any]] = {}
    for seed in range(first, first + count):
        seed_dir = args.benchmark / f"seed-{seed}"
        if not (seed_dir / "library.db").is_file():
            verdicts[seed] = {"verdict": "missing", "at": None}  # not finished: nothing kept to reuse, run it
            continue
        try:
            verdicts[seed] = replay(seed_dir, args.margin, int(config.get("credit_episodes", 50)))
        except (LibraryError, sqlite3.DatabaseError) as error:
            parser.error(f"{seed_dir / 'library.db'}: {str(error).splitlines()[0]}")
    if args.json:
        print(json.dumps(verdicts, indent=2))
        return 0
    for kind in ("changed", "maybe", "unchanged", "missing"):
        print(f"{kind}: {', '.join(str(s) for s, v in verdicts.items() if v['verdict'] == kind) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
