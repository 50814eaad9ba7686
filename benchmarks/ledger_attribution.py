"""A ledger of five releases of a scripted code-repair agent, and what `compare` attributes each change to.

The agent is `envrigger.agents.scripted.repair_model` behind a local Chat Completions
server: the `strong` model knows every fix, `weak` every other one; both answer each turn
first with prose, so a harness with no retries wastes every turn; an env with a reviewer
(`ask_human`) lets the weak model fix what it does not know. So every cause is known:

    v1  weak,   retries 1, original env
    v2  strong, retries 1, original env            v1 -> v2: the model
    v3  strong, retries 0, original env            v2 -> v3: the harness
    v4  weak,   retries 1, env with a reviewer     v1 -> v4: the environment
    v5  strong, retries 1 at temperature 0.5       v1 -> v5: the model (the harness change does nothing)
                                                   v3 -> v1: the model and the harness at once

Prints each comparison's line, writes the report, and keeps the figures in
benchmarks/results/ledger_attribution.json.

    python benchmarks/ledger_attribution.py [--tasks 12] [--out /tmp/ledger-demo]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path

from envharness import HarnessSpec
from envrigger.agents import default_harness
from envrigger.agents.scripted import ChatServer, repair_model
from envrigger.cli import main
from envrigger.ledger import Ledger, compare, render_report

CODE = "envharness/CodeRepair-v0"
PAIRS = [
    ("v1", "v2", "model"),
    ("v2", "v3", "harness"),
    ("v1", "v4", "environment"),
    ("v1", "v5", "model"),
    ("v3", "v1", "harness and model"),
]


def cli(*args: str) -> None:
    try:
        main(list(args))
    except SystemExit as stop:
        if stop.code:
            raise


def harness(out: Path, retries: int, temperature: float = 0.0) -> str:
    base = default_harness(CODE)
    made = base.model_copy(update={"retries": retries, "sampling": base.sampling.model_copy(update={"temperature": temperature})})
    path = out / f"harness-r{retries}-t{temperature}.json"
    path.write_text(made.to_json())
    return str(path)


def run(tasks: int, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    os.environ.setdefault("OPENAI_API_KEY", "local")
    ledger = out / "ledger.db"
    reviewer = out / "reviewer.json"
    reviewer.write_text(HarnessSpec(env_id=CODE, env_kwargs={"reviewer": "fix"}).to_json())
    started = time.perf_counter()
    with ChatServer(repair_model, models=("weak", "strong")) as server:
        cli("ledger", "init", str(ledger), "--env", CODE, "--tasks", str(tasks))
        common = ["--base-url", server.url, "--concurrency", "4"]
        releases = [
            ("v1", "weak", harness(out, 1), []),
            ("v2", "strong", harness(out, 1), []),
            ("v3", "strong", harness(out, 0), []),
            ("v4", "weak", harness(out, 1), ["--env", str(reviewer)]),
            ("v5", "strong", harness(out, 1, 0.5), []),
        ]
        for name, model, harness_path, extra in releases:
            cli("ledger", "eval", str(ledger), "--release", name, "--model", model, "--harness", harness_path, *common, *extra)
        results = {}
        for a, b, cause in PAIRS:
            result = compare(Ledger(ledger), a, b, concurrency=4)
            results[f"{a}->{b}"] = {"known cause": cause, "changed": result["changed"], "headline": result["headline"],
                                   "findings": [f["name"] for f in result["findings"]]}  # fmt: skip
            print(f"{a} -> {b} (known cause: {cause}): {result['headline']}")
    (out / "ledger.html").write_text(render_report(Ledger(ledger)))
    print(f"report: {out / 'ledger.html'}")
    return {
        "tasks": tasks,
        "releases": [r[0] for r in releases],
        "comparisons": results,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path("/tmp/ledger-demo"))
    args = parser.parse_args()
    figures = run(args.tasks, args.out)
    target = Path(__file__).parent / "results" / "ledger_attribution.json"
    target.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"kept {target}")
