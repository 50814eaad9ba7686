"""A proposal variant, measured on validation levels only: the rigger arm with and without it, paired by master seed.

Issue 33's honesty rule: variants are chosen on validation levels, and held-out levels are
looked at once, at the end, by the suite. So this script runs a suite benchmark's loop
with ``heldout`` off (no held-out level is ever played) for ``--seeds`` master seeds, once
as the suite defines it and once with ``--set FIELD=VALUE`` changes (e.g. ``step_out=true``),
the same arms in both, and reports each arm's validation success at its picked round
per seed, the paired difference of the variant's rigger arm against the plain one, with a
95% t interval across seeds, and what the variant's rigger arm admitted.

The master seeds default to 100, 101, ...: never a seed the suite's kept results use.

Writes ``OUT/NAME/variant-LABEL.json`` (the plain runs are kept and reused by the next variant). Run: ``python benchmarks/variant_check.py doorkey6 --set
step_out=true [--suite benchmarks/hard] [--arms plr,rigger] [--seeds 4] [--jobs 2] [-o results/variants]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from heldout import load_suite  # noqa: E402

FIRST_SEED = 100


def one_loop(task: tuple[str, str]) -> str:
    """Run (or resume) one loop in a process of its own; returns its directory."""
    from envrigger.loop import LoopConfig, run_loop

    where, config = task
    path = Path(where)
    run_loop(path, None if (path / "loop.json").is_file() else LoopConfig.model_validate_json(config))
    return where


def validation(where: Path) -> dict[str, Any]:
    """Each arm's validation success at its picked round, and what the rigger arm admitted (from the run's library)."""
    from envrigger.loop.library import Library
    from envrigger.loop.results import FinalResults

    final = FinalResults.load(where / "final.json")
    library = Library(where / "library.db", create=False)
    admitted = [
        f"{', '.join(t.name + json.dumps(t.params) for t in c.spec.transforms)} [round {c.round}, {c.origin}]" for c in library.components()
    ]
    library.close()
    return {"validation": {arm: a.validation for arm, a in final.arms.items()}, "admitted": admitted}


def _folder_name(label: str) -> bool:
    """A label names one folder inside the benchmark's: safe characters, not only dots, not the plain runs' folder, not too long."""
    return bool(re.fullmatch(r"[A-Za-z0-9_.,=-]{1,200}", label)) and set(label) != {"."} and label != "plain"


def _parse(changes: list[str]) -> dict[str, Any]:
    out = {}
    for change in changes:
        field, _, value = change.partition("=")
        if not field or not value:
            raise ValueError(f"--set: got {change!r}; give FIELD=VALUE with a JSON value, e.g. step_out=true")
        try:
            out[field] = json.loads(value)
        except json.JSONDecodeError:
            out[field] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", help="a suite benchmark's name (SUITE/NAME.json)")
    parser.add_argument(
        "--suite", type=Path, default=None, help="folder of benchmark JSON files (default benchmarks/suite; e.g. benchmarks/hard)"
    )
    parser.add_argument(
        "--set", dest="changes", action="append", default=[], metavar="FIELD=VALUE", help="the variant's LoopConfig changes"
    )
    parser.add_argument("--arms", default="plr,rigger", help="arms trained in both runs (default plr,rigger)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=FIRST_SEED,
        help=f"the first master seed (default {FIRST_SEED}: none the suite's kept results use); a seed where the engine "
        "failed may be checked again, on validation levels",
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("-o", "--out", type=Path, default=Path("results") / "variants")
    parser.add_argument("--label", default=None, help="the variant's folder and file name (default: its --set changes, e.g. step_out=true)")
    parser.add_argument("--quick", action="store_true", help="the suite's tiny budgets (heldout.py --quick): a smoke test, not a result")
    args = parser.parse_args(argv)
    (benchmark,) = load_suite(args.suite, only=[args.benchmark])
    try:
        changes = _parse(args.changes)
    except ValueError as error:
        parser.error(str(error))
    base = benchmark.config(args.quick).model_copy(update={"heldout": False, "arms": [a.strip() for a in args.arms.split(",")]})
    from pydantic import ValidationError

    from envrigger.loop import LoopConfig

    unknown = sorted(set(changes) - set(LoopConfig.model_fields))
    if unknown:
        parser.error(f"--set: no LoopConfig field {', '.join(unknown)}; use one of {', '.join(LoopConfig.model_fields)}")
    try:
        variant = LoopConfig.model_validate({**json.loads(base.model_dump_json()), **changes})
    except ValidationError as error:
        first = error.errors()[0]
        parser.error(f"--set {'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
    if args.label is not None and not _folder_name(args.label):
        parser.error(
            f"--label: got {args.label!r}; give a folder name (up to 200 of letters, digits and _.,=-, not only dots) other than plain"
        )
    label = args.label or ",".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(changes.items())) or "plain"
    if args.label is None and label != "plain" and not _folder_name(label):  # a URL among the changes is no folder name
        parser.error(f"--label: the changes name no folder ({label[:60]!r}...); give the variant a name with --label NAME")
    out = args.out / benchmark.name
    tasks = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name, config in (("plain", base), (label, variant)):
            tasks.append((str(out / name / f"seed-{seed}"), config.model_copy(update={"seed": seed}).model_dump_json()))
    started = time.perf_counter()
    # Not a multiprocessing.Pool: its workers are daemons, and a loop whose rollouts use the
    # process backend (textq's) must start processes of its own.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=context, max_tasks_per_child=1) as pool:
        for done in as_completed([pool.submit(one_loop, task) for task in tasks]):
            print(f"finished {done.result()}")
    rows: list[dict[str, Any]] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        plain, changed = validation(out / "plain" / f"seed-{seed}"), validation(out / label / f"seed-{seed}")
        rows.append({"seed": seed, "plain": plain, "variant": changed})
    gains = np.array([r["variant"]["validation"]["rigger"] - r["plain"]["validation"]["rigger"] for r in rows])
    from envrigger.stats import t_interval

    summary = t_interval(gains, (-1.0, 1.0))
    print(f"{benchmark.name}: variant {label} against the suite's rigger arm, validation levels only, {args.seeds} master seeds")
    for r in rows:
        cells = "  ".join(
            f"{arm} {r['plain']['validation'][arm]:.3f} -> {r['variant']['validation'][arm]:.3f}" for arm in r["plain"]["validation"]
        )
        print(f"  seed {r['seed']}: {cells}")
        print(f"    variant admitted: {'; '.join(r['variant']['admitted']) or 'nothing'}")
    print(f"  rigger, variant - plain: {summary['mean'] * 100:+.1f} points [{summary['ci'][0] * 100:+.1f}, {summary['ci'][1] * 100:+.1f}]")
    result = {"benchmark": benchmark.name, "variant": changes, "arms": base.arms, "rows": rows, "rigger_gain": summary,
              "wall_time": time.perf_counter() - started}  # fmt: skip
    (out / f"variant-{label}.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
