"""The figures README.md quotes for `make demo`, read from a finished demo run.

Run `make demo`, then `python benchmarks/demo_figures.py` (default run: runs/demo) to
rewrite `benchmarks/results/demo.json`; `tests/docs/test_readme_figures.py` fails while
the README quotes anything else. Regenerate whenever a change moves the demo's figures,
and update the README's "What make demo shows" from the printed lines.
"""

from __future__ import annotations

import argparse
import json
import platform
from importlib.metadata import version
from pathlib import Path

from envrigger.loop.library import Library
from envrigger.loop.results import FinalResults

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "demo.json"


def figures(run: Path) -> dict:
    """Per arm: held-out success with its Wilson interval, steps to success, training and total env steps; the admissions."""
    final = FinalResults.load(run / "final.json")
    loop = json.loads((run / "loop.json").read_text())
    arms = {}
    for name, arm in final.arms.items():
        held, spent = arm.heldout, arm.interaction
        assert held is not None and held.steps_to_success is not None, f"{name}: the demo plays held-out levels and wins some"
        arms[name] = {
            "heldout_success": round(held.success, 3),
            "ci": [round(held.ci[0], 2), round(held.ci[1], 2)],
            "steps_to_success": round(held.steps_to_success),
            "train_steps": spent["train"],
            "env_steps": spent["total"],
        }
    admitted = [label for r in Library(run / "library.db").rounds() for label in (r.get("admitted_labels") or [])]
    return {
        "command": "make demo (envrigger run --arms original,plr,rigger -o runs/demo)",
        "env": loop["spec"]["env_id"],
        "learner": loop["learner"],
        "heldout_episodes": loop["eval_episodes"],
        "heldout_levels": final["levels"]["heldout"],
        "arms": arms,
        "admitted": admitted,
        "versions": {name: version(name) for name in ("envharness", "gymnasium", "minigrid", "stable-baselines3", "torch")},
        "machine": {"python": platform.python_version(), "machine": platform.machine()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", type=Path, default=ROOT / "runs" / "demo", help="a finished demo run (default runs/demo)")
    parser.add_argument("-o", "--output", type=Path, default=RESULTS, help=f"where to write (default {RESULTS.relative_to(ROOT)})")
    args = parser.parse_args()
    found = figures(args.run)
    args.output.write_text(json.dumps(found, indent=2) + "\n")
    for name, arm in found["arms"].items():
        print(
            f"{name}: held-out {arm['heldout_success']:.3f} [{arm['ci'][0]:.2f}, {arm['ci'][1]:.2f}], "
            f"{arm['steps_to_success']} steps to success, {arm['train_steps']:,} training, {arm['env_steps']:,} env steps"
        )
    print(f"admitted: {', '.join(found['admitted']) or 'nothing'}; {found['heldout_levels']} distinct held-out levels; wrote {args.output}")


if __name__ == "__main__":
    main()
