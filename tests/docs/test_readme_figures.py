"""The figures README.md and docs/envrigger.md quote for `make demo` are those of benchmarks/results/demo.json.

The file is written from a real demo run by `python benchmarks/demo_figures.py`; a change
that moves the demo's figures regenerates it, and then these pages must follow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
FIGURES = json.loads((ROOT / "benchmarks" / "results" / "demo.json").read_text())


def _section(page: str, heading: str) -> str:
    text = (ROOT / page).read_text()
    start = text.index(heading)
    following = re.search(r"\n## ", text[start + len(heading) :])
    section = text[start : start + len(heading) + following.start()] if following else text[start:]
    return " ".join(section.split())  # line breaks in prose do not matter; table rows keep their single spaces


def _interval(arm: dict) -> str:
    return f"{arm['heldout_success']:.3f} [{arm['ci'][0]:.2f}, {arm['ci'][1]:.2f}]"


def test_the_readme_table_is_the_committed_demo_run():
    section = _section("README.md", "## What `make demo` shows")
    for name, arm in FIGURES["arms"].items():
        row = f"| `{name}` | {_interval(arm)} | {arm['steps_to_success']} | {arm['train_steps']:,} | {arm['env_steps']:,} |"
        assert row in section, f"README's demo table should read {row}; regenerate it from benchmarks/results/demo.json"
    assert f"on {FIGURES['heldout_levels']} distinct held-out levels" in section
    for label in FIGURES["admitted"]:
        assert f"`{label}`" in section


def test_the_loop_docs_quote_the_same_run():
    section = _section("docs/envrigger.md", "## What the default run shows")
    for name, arm in FIGURES["arms"].items():
        assert f"`{name}` {_interval(arm)}" in section
    assert f"{FIGURES['arms']['rigger']['env_steps']:,} env" in section


def test_make_demo_runs_the_arms_the_figures_come_from():
    makefile = (ROOT / "Makefile").read_text()
    arms = ",".join(FIGURES["arms"])
    assert f"envrigger run --arms {arms} -o runs/demo" in makefile and arms in FIGURES["command"]
