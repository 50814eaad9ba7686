"""The held-out experiment: every benchmark in ``benchmarks/suite``, every arm, several master seeds.

Each benchmark is one JSON file (:class:`Benchmark`): the base env spec, the learner and
its parameters, the arms, rounds and training steps per round, and the episode counts.
For each benchmark this runs ``envrigger run --seeds N`` (:func:`envrigger.loop.run_many`)
in ``OUT/NAME``: the arms train at equal steps on the same fresh levels; held-out and
validation levels are disjoint from every level trained on; each arm's round is picked
on validation levels and evaluated once on the held-out levels. Every arm x seed x
benchmark result is kept on disk, so an interrupted run continues where it stopped.

It writes ``OUT/results.json`` and ``OUT/results.md`` (held-out success per arm with a 95%
t interval across seeds, the paired gain of ``rigger`` over each other arm, steps per
solved held-out level and its change, env steps per arm, wall time, versions and machine
facts) and ``OUT/NAME.png`` (validation-level success per round against training steps,
mean and 95% band across seeds, with the final held-out result at the end).

Run: ``python benchmarks/heldout.py [--only NAME ...] [--seeds 5] [--jobs 2] [-o results/heldout]``;
``--jobs`` master seeds train at once, each in its own process (the results are the same
for any ``--jobs``). The report covers every finished benchmark in ``OUT`` (``--report``
rebuilds it without training); ``--quick`` (tiny budgets, 2 seeds, into
``results/heldout-quick``) is a smoke test of the whole pipeline, not a result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from envharness.spec import HarnessSpec
from envrigger.errors import TrajectoryError
from envrigger.loop import ARMS, LoopConfig, SeedsRun, across_seeds, run_many
from envrigger.loop.results import AcrossSeeds, FinalResults, RoundSummary, read_rounds
from envrigger.loop.seeds import COLLAPSED
from envrigger.stats import t_interval

# Every arm: the three effects (replay, reshaping at all, reshaping targeted by the diagnosis) need all seven.
SUITE_ARMS = tuple(a for a in ARMS if a not in ("original-select", "accel"))  # ablation and anchor: asked for by name (--arms)

SUITE = Path(__file__).parent / "suite"
QUICK = {
    "rounds": 2,
    "budget_steps": 2048,
    "eval_episodes": 20,
    "val_episodes": 10,
    "collect_episodes": 8,
    "candidates_per_round": 1,
    "min_rollouts": 6,
    "max_rollouts": 9,
}
# Smaller batches for the learners that take them, so two tiny rounds still update the policy.
QUICK_LEARNER: dict[str, dict[str, Any]] = {"ppo": {"n_envs": 2, "n_steps": 128, "batch_size": 64}}


class Benchmark(BaseModel):
    """One benchmark of the suite, as its JSON file declares it."""

    name: str
    domain: str
    title: str
    spec: HarnessSpec
    heldout_spec: HarnessSpec | None = None
    learner: str = "ppo"
    learner_params: dict[str, Any] = Field(default_factory=dict)
    # A benchmark's run keeps the arms it started with (seeds.json): the four-arm results in benchmarks/results/heldout,
    # whose `dr` drew any catalog reshaping (now `dr-any`), extend as four-arm runs; new runs train all seven.
    arms: list[str] = Field(default_factory=lambda: list(SUITE_ARMS))
    rounds: int = 3
    budget_steps: int = 50_000
    collect_episodes: int = 60
    eval_episodes: int = 200
    val_episodes: int = 100
    candidates_per_round: int = 4
    transfer_steps: int = 0
    transfer_episodes: int = 40
    step_out: bool = False
    # The settings the kept suite and hard-tier runs were measured with (envrigger run's defaults before 2026-12-06),
    # written out so that a benchmark file reproduces its kept runs; benchmarks/variants/shadow-stepin* set today's.
    step_in: bool = False
    credit_baseline: Literal["fork", "shadow"] = "fork"
    credit_chunks: int = 2
    credit_margin: float = 0.0
    budget_counts: Literal["train", "all"] = "train"  # "all": equal compute, every env step of an arm from one budget
    overhead_share: float = 0.5
    levels_per_seed: bool = False  # True: each master seed its own held-out, validation and training levels
    plr_score: Literal["value_loss", "success"] = "success"  # how PLR scores levels; results before 2026-12-07 used success
    reshape_when: Literal["always", "stalled"] = "always"  # "stalled": the rigger arm reshapes once the original env stops teaching
    notes: str = ""

    def config(self, quick: bool = False) -> LoopConfig:
        fields = {k: v for k, v in self.model_dump().items() if k in LoopConfig.model_fields}
        fields["spec"], fields["heldout_spec"] = self.spec, self.heldout_spec
        if quick:
            fields.update(QUICK)
            fields["learner_params"] = {**self.learner_params, **QUICK_LEARNER.get(self.learner, {})}
        return LoopConfig(**fields)


def load_suite(folder: Path | None = None, only: list[str] | None = None) -> list[Benchmark]:
    """Every benchmark definition in ``folder`` (default ``benchmarks/suite``), or those named in ``only``."""
    benchmarks = [Benchmark.model_validate_json(path.read_text()) for path in sorted((folder or SUITE).glob("*.json"))]
    if only:
        unknown = set(only) - {b.name for b in benchmarks}
        if unknown:
            raise SystemExit(f"--only: no benchmark named {', '.join(sorted(unknown))}; have {', '.join(b.name for b in benchmarks)}")
        benchmarks = [b for b in benchmarks if b.name in only]
    return benchmarks


def _finished(where: Path) -> list[Path]:
    """The master seeds' run directories that have their final held-out result, in seed order."""
    done = [p for p in where.glob("seed-*") if (p / "final.json").is_file()]
    return sorted(done, key=lambda p: int(p.name.split("-")[1]))


def _per_seed(where: Path) -> list[dict[str, Any]]:
    """Each master seed's held-out success per arm and the components its rigger arm admitted."""
    from envrigger.loop.library import Library

    rows = []
    for seed_dir in _finished(where):
        final = FinalResults.load(seed_dir / "final.json")
        library = Library(seed_dir / "library.db", create=False)
        admitted = [
            " + ".join(
                f"{t.name}({', '.join(f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in t.params.items() if v is not None)})"
                for t in c.spec.transforms
            )
            + f" [round {c.round}, for {c.finding}]"
            for c in library.components()
        ]
        library.close()
        rows.append(
            {
                "seed": int(seed_dir.name.split("-")[1]),
                "admitted": admitted,
                "heldout": {arm: a.heldout.success if a.heldout is not None else None for arm, a in final.arms.items()},
                "round": {arm: a.round for arm, a in final.arms.items()},
                "heldout_digest": final.levels.heldout_digest,
                "cpu_seconds": _cpu_seconds(seed_dir),
            }
        )
    return rows


def _cpu_seconds(seed_dir: Path) -> dict[str, float]:
    """Each arm's CPU seconds over a master seed's rounds (stage_seconds[arm]["cpu"]; a round written before it was measured adds 0)."""
    from envrigger.loop.library import Library

    library = Library(seed_dir / "library.db", create=False)
    try:
        rounds = library.rounds()
    finally:
        library.close()
    total: dict[str, float] = {}
    for r in rounds:
        for arm, seconds in (r.get("stage_seconds") or {}).items():
            total[arm] = round(total.get(arm, 0.0) + float(seconds.get("cpu", 0.0)), 3)
    return total


def _rounds(where: Path) -> dict[int, list[RoundSummary]]:
    """Each master seed's round summaries, from its library."""
    from envrigger.loop.library import Library

    out = {}
    for seed_dir in _finished(where):
        library = Library(seed_dir / "library.db", create=False)
        out[int(seed_dir.name.split("-")[1])] = read_rounds(library.rounds(), str(seed_dir / "library.db"))
        library.close()
    return out


def run_benchmarks(
    benchmarks: list[Benchmark], out: Path, seeds: int, quick: bool, jobs: int = 1, log: Any = print, ray_address: str | None = None
) -> None:
    """Train and evaluate every arm x seed of these benchmarks in ``OUT/NAME`` (continuing what is already there).

    ``jobs`` master seeds train at once, each in its own process, seed 0 of every
    benchmark first (:func:`envrigger.loop.run_many`); a seed's result does not depend on ``jobs``.
    """
    runs = []
    for benchmark in benchmarks:
        where = out / benchmark.name
        resume = (where / "seeds.json").is_file()
        runs.append(SeedsRun(out=where, config=None if resume else benchmark.config(quick), seeds=seeds, label=f"[{benchmark.name}] "))
    run_many(runs, jobs, log=log, ray_address=ray_address)


def collect(benchmark: Benchmark, out: Path) -> dict[str, Any] | None:
    """The result of one benchmark, read from ``OUT/NAME``; None before two master seeds have finished.

    A benchmark still running is reported over its finished seeds, and says so (``partial``).
    """
    where = out / benchmark.name
    if not (where / "seeds.json").is_file():
        return None
    plan = json.loads((where / "seeds.json").read_text())
    config = plan["config"]
    finished = _finished(where)
    saved = AcrossSeeds.load(where / "result.json") if (where / "result.json").is_file() else None
    if saved is not None and len(saved.seeds) >= len(finished):  # written when its seeds finished; a run extended since is recomputed
        result = saved
    elif len(finished) >= 2:
        result = across_seeds({int(p.name.split("-")[1]): FinalResults.load(p / "final.json") for p in finished})
    else:
        return None
    partial = None if len(result.seeds) >= plan["seeds"] else f"{len(result.seeds)} of {plan['seeds']} master seeds finished"
    rounds = _rounds(where)
    curves = {}
    for arm in result.arms:
        per_seed = np.array([[r.arms[arm].validation.success for r in rounds[s]] for s in sorted(rounds)])
        steps = np.cumsum([r.arms[arm].train.steps for r in rounds[min(rounds)]]).tolist()
        # Every kind of env step, summed round by round, mean over seeds: the x of the success-against-compute plot.
        spent = np.mean([np.cumsum([r.arms[arm].interaction.total for r in rounds[s]]) for s in sorted(rounds)], axis=0).tolist()
        curves[arm] = {
            "train_steps": steps,
            "env_steps": spent,
            "validation": [t_interval(per_seed[:, i], (0.0, 1.0)) for i in range(per_seed.shape[1])],
        }
    wall = [sum(r.wall_time for r in rounds[s]) for s in sorted(rounds)]
    return {
        "benchmark": benchmark.model_dump(mode="json"),
        "config": config,
        "result": result.dump(),
        "curves": curves,
        "wall_time": {"per_seed_mean": float(np.mean(wall)), "total": float(np.sum(wall))},
        "per_seed": _per_seed(where),
        "partial": partial,
    }


def figure(entry: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for k, (arm, curve) in enumerate(entry["curves"].items()):
        x = curve.get("env_steps") or curve["train_steps"]  # results kept before env steps were plotted: training steps
        mean = [v["mean"] for v in curve["validation"]]
        lo = [v["ci"][0] for v in curve["validation"]]
        hi = [v["ci"][1] for v in curve["validation"]]
        (line,) = ax.plot(x, mean, marker="o", label=f"{arm} (validation levels)")
        ax.fill_between(x, np.clip(lo, 0, 1), np.clip(hi, 0, 1), alpha=0.12, color=line.get_color())
        held = entry["result"]["arms"][arm]["success"]
        ax.errorbar(
            [x[-1] * (1.03 + 0.02 * k)],
            [held["mean"]],
            yerr=[[held["mean"] - held["ci"][0]], [held["ci"][1] - held["mean"]]],
            fmt="s",
            color=line.get_color(),
            capsize=3,
        )
    name = entry["benchmark"]["name"]
    seeds = len(entry["result"]["seeds"])
    ax.set(
        xlabel="env steps per arm, every kind (mean over seeds)",
        ylabel="success",
        ylim=(-0.02, 1.02),
        title=f"{name}: validation success by round; squares: held-out, once ({seeds} seeds, 95% CI)",
    )
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _record_commit(out: Path, names: list[str]) -> None:
    """Append the commit this code is at (and whether the tree had changes) to ``OUT/commits.json``: what each training call ran."""
    import subprocess

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    path = out / "commits.json"
    kept = json.loads(path.read_text()) if path.is_file() else []
    kept.append({"commit": git("rev-parse", "HEAD") or None, "changed": bool(git("status", "--porcelain")), "benchmarks": names})
    path.write_text(json.dumps(kept, indent=2) + "\n")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("envharness", "gymnasium", "minigrid", "numpy", "stable-baselines3", "torch"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def _aims(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's aims, checked on the means: +9 points over original on 3 benchmarks, 10% fewer steps, beat DR and PLR."""
    gain, fewer, beat = [], [], []
    for entry in entries:
        r = entry["result"]
        diff = r["difference"]
        name = entry["benchmark"]["name"]
        if "original" in diff:
            if diff["original"]["mean"] >= 0.09:
                gain.append(name)
            change = diff["original"].get("steps_to_success_change")
            if change is not None and change <= -0.10:
                fewer.append(name)
        if all(arm in diff and diff[arm]["mean"] > 0 for arm in ("dr", "plr")):
            beat.append(name)
    return {"gain_9_points": gain, "steps_10_percent_fewer": fewer, "beats_dr_and_plr": beat, "benchmarks": len(entries)}


def _gain(diff: dict[str, Any], arm: str, with_ci: bool = False) -> str:
    if arm not in diff:
        return "-"
    d = diff[arm]
    ci = f" [{100 * d['ci'][0]:+.1f}, {100 * d['ci'][1]:+.1f}]" if with_ci else ""
    return f"{100 * d['mean']:+.1f}{ci}"


def _focus(entries: list[dict[str, Any]]) -> str:
    """The arm the differences are taken from: rigger, or the last arm a run without it trained (``original,dr``: dr)."""
    found = {e["result"].get("focus", "rigger") for e in entries}
    return found.pop() if len(found) == 1 else "rigger"


def summary(entries: list[dict[str, Any]]) -> list[str]:
    """One row per benchmark: held-out success of each arm, the paired gains, steps and spend."""
    shown = [a for a in ARMS if any(a in e["result"]["arms"] for e in entries)]  # every arm any benchmark trained, in ARMS order
    focus = _focus(entries)
    others = [a for a in shown if a not in (focus, "original")]
    lines = [
        "| benchmark | "
        + " | ".join(shown)
        + f" | {focus} − original (95% CI) | "
        + "".join(f"{focus} − {a} | " for a in others)
        + f"steps per solved level vs original | {focus} env steps ÷ original | loop time (sum over seeds) |",
        "|---" * (len(shown) + len(others) + 5) + "|",
    ]
    for entry in entries:
        r = entry["result"]
        arms, diff = r["arms"], r["difference"]
        cells = [f"{arms[a]['success']['mean']:.3f}" if a in arms else "-" for a in shown]

        change = diff.get("original", {}).get("steps_to_success_change")
        ratio = (
            arms["rigger"]["env_steps"]["total"] / arms["original"]["env_steps"]["total"]
            if "rigger" in arms and "original" in arms
            else None
        )
        name = entry["benchmark"]["name"] + (f" ({entry['partial']})" if entry.get("partial") else "")
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {_gain(diff, 'original', True)} | "
            + "".join(f"{_gain(diff, a)} | " for a in others)
            + f"{'-' if change is None else f'{change:+.1%}'} | {'-' if ratio is None else f'{ratio:.2f}×'} | "
            f"{entry['wall_time']['total'] / 60:.0f} min |"
        )
    aims = _aims(entries)
    lines += [
        "",
        f"Aims (on the means): +9 points over original on {len(aims['gain_9_points'])} of {aims['benchmarks']} "
        f"({', '.join(aims['gain_9_points']) or 'none'}; the aim is 3 of 5); at least 10% fewer steps per solved held-out level on "
        f"{len(aims['steps_10_percent_fewer'])} ({', '.join(aims['steps_10_percent_fewer']) or 'none'}); "
        f"beats both DR and PLR on {len(aims['beats_dr_and_plr'])} ({', '.join(aims['beats_dr_and_plr']) or 'none'}).",
    ]
    return lines


ABLATIONS = ("original", "plr", "plr-random", "rigger-noreplay")  # replay, reshaping at all, reshaping targeted by the diagnosis


def ablation(entries: list[dict[str, Any]]) -> list[str]:
    """The paired differences that separate the three effects, with their intervals, and each arm's collapsed seeds.

    Beneath the table, issue 33's aims checked on the intervals: rigger − plr above zero on
    2 of 5, rigger − original at least +9 points with its interval above zero on 3 of 5.
    """
    shown = [a for a in ARMS if any(a in e["result"]["arms"] for e in entries)]
    focus = _focus(entries)
    lines = [
        "| benchmark | seeds | " + " | ".join(f"{focus} − {a} (95% CI)" for a in ABLATIONS) + " | seeds collapsed (held-out < 0.2): "
        + ", ".join(shown) + " |",
        "|---" * (len(ABLATIONS) + 3) + "|",
    ]  # fmt: skip
    above_plr, above_original = [], []
    for entry in entries:
        r = entry["result"]
        diff, arms = r["difference"], r["arms"]
        name = entry["benchmark"]["name"]
        collapsed = ", ".join(str(arms[a]["collapsed"]) if a in arms else "-" for a in shown)
        lines.append(f"| {name} | {len(r['seeds'])} | " + " | ".join(_gain(diff, a, True) for a in ABLATIONS) + f" | {collapsed} |")
        if "plr" in diff and diff["plr"]["ci"][0] > 0:
            above_plr.append(name)
        if "original" in diff and diff["original"]["mean"] >= 0.09 and diff["original"]["ci"][0] > 0:
            above_original.append(name)
    lines += [
        "",
        f"Aims (on the intervals): rigger − plr above zero on {len(above_plr)} of {len(entries)} "
        f"({', '.join(above_plr) or 'none'}; the aim is 2 of 5); rigger − original at least +9 points with the interval above zero "
        f"on {len(above_original)} ({', '.join(above_original) or 'none'}; the aim is 3 of 5).",
        "",
        *no_harm_and_help(entries),
    ]
    return lines


def no_harm_and_help(entries: list[dict[str, Any]]) -> list[str]:
    """Issue 42's aims on the intervals: never measurably worse than the original env, and +20 points where help is possible."""
    no_harm, harm, plus_plr, plus_original = [], [], [], []
    for entry in entries:
        diff, name = entry["result"]["difference"], entry["benchmark"]["name"]
        if "original" in diff:
            d = diff["original"]
            (no_harm if d["mean"] >= -0.01 and d["ci"][0] >= -0.03 else harm).append(
                f"{name} {100 * d['mean']:+.1f} [{100 * d['ci'][0]:+.1f}, {100 * d['ci'][1]:+.1f}]"
            )
            if d["mean"] >= 0.20 and d["ci"][0] > 0:
                plus_original.append(name)
        if "plr" in diff and diff["plr"]["mean"] >= 0.20 and diff["plr"]["ci"][0] > 0:
            plus_plr.append(name)
    return [
        f"Do no harm (rigger − original ≥ −1 point on the mean, interval's low end ≥ −3): met on {len(no_harm)} of "
        f"{len(no_harm) + len(harm)} ({'; '.join(no_harm) or 'none'}); missed on {'; '.join(harm) or 'none'}.",
        f"Help (rigger − plr and rigger − original ≥ +20 points with the interval above zero; the hard tier's aim is 2 of 3): "
        f"over plr on {len(plus_plr)} ({', '.join(plus_plr) or 'none'}), over original on {len(plus_original)} "
        f"({', '.join(plus_original) or 'none'}).",
    ]


def markdown(entries: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    counts = sorted({len(e["result"]["seeds"]) for e in entries}) or [meta["seeds"]]
    seeds = (
        f"{counts[0]} master seeds per benchmark"
        if len(counts) == 1
        else "master seeds: " + ", ".join(f"{e['benchmark']['name']} {len(e['result']['seeds'])}" for e in entries)
    )
    lines = [
        "# Held-out results",
        "",
        f"{seeds}; {'QUICK smoke run: not a result' if meta['quick'] else 'full budgets'}; "
        + (f"trained at {', '.join(sorted({str(c['commit'])[:7] for c in meta['commits']}))}; " if meta.get("commits") else "")
        + f"machine: {meta['machine']['cpus']} CPUs, {meta['machine']['platform']}; versions: "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "Held-out success is the share of held-out levels solved (the original env's verifier), mean across master seeds; "
        "gains are in points, paired by seed, with a 95% t interval across seeds. Loop times are each seed's own, summed; "
        "seeds that trained at once (`--jobs`) shared the cores.",
        "",
        *(
            [f"This call trained with --jobs {meta['jobs']} and took {meta['wall_time_this_call'] / 60:.1f} min, report included.", ""]
            if meta.get("trained")
            else []
        ),
        *summary(entries),
        "",
        "Replay, reshaping at all, and reshaping targeted by the diagnosis, separated (paired by master seed; "
        "collapsed counts in the order of the arms named):",
        "",
        *ablation(entries),
        "",
    ]
    for entry in entries:
        b, r = entry["benchmark"], entry["result"]
        held = entry["config"].get("heldout_spec")
        levels = (
            f"Held-out levels: {held['env_id']} with {json.dumps(held['env_kwargs'])}; training and validation levels: "
            f"{json.dumps(entry['config']['spec']['env_kwargs'])}."
            if held
            else "Held-out and validation levels: seeds whose levels no arm trained on (checked by level id)."
        )
        lines += [
            f"## {b['name']} — {b['domain']}",
            "",
            b["title"] + ".",
            "",
            levels,
            f"Budget: {entry['config']['rounds']} rounds x {entry['config']['budget_steps']:,} training steps per arm, "
            f"learner {entry['config']['learner']}; loop wall time {entry['wall_time']['per_seed_mean'] / 60:.1f} min per seed.",
            "",
            "| arm | held-out success (mean) | 95% interval across seeds | steps per solved level | train steps | env steps (all) "
            "| CPU seconds per seed | seeds collapsed (held-out < 0.2) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for arm, a in r["arms"].items():
            s, steps = a["success"], a["steps_to_success"]
            cpu = [row["cpu_seconds"][arm] for row in entry["per_seed"] if arm in (row.get("cpu_seconds") or {})]
            lines.append(
                f"| {arm} | {s['mean']:.3f} | [{s['ci'][0]:.3f}, {s['ci'][1]:.3f}] | "
                f"{'-' if steps is None else f'{steps:.1f}'} | {a['env_steps']['train']:,.0f} | {a['env_steps']['total']:,.0f} | "
                f"{f'{np.mean(cpu):,.0f}' if cpu else '-'} | "
                f"{sum(row['heldout'][arm] < COLLAPSED for row in entry['per_seed'])} of {len(entry['per_seed'])} |"
            )
        for arm, d in r["difference"].items():
            change = d.get("steps_to_success_change")
            lines.append(
                f"| **{r['focus']} − {arm}** (paired) | {100 * d['mean']:+.1f} points | "
                f"[{100 * d['ci'][0]:+.1f}, {100 * d['ci'][1]:+.1f}] | {'-' if change is None else f'{change:+.1%}'} | | | | |"
            )
        arms = list(r["arms"])
        lines += [
            "",
            "Per master seed (held-out success; the round each arm was picked at, on validation levels, in brackets):",
            "",
            "| seed | held-out set | " + " | ".join(arms) + " | admitted by the rigger arm |",
            "|---" * (len(arms) + 3) + "|",
        ]
        for row in entry["per_seed"]:
            cells = [f"{row['heldout'][a]:.3f} ({row['round'][a]})" for a in arms]
            digest = row.get("heldout_digest") or "-"
            lines.append(f"| {row['seed']} | {digest} | " + " | ".join(cells) + f" | {'; '.join(row['admitted']) or 'nothing'} |")
        lines += ["", f"![{b['name']}]({b['name']}.png)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="benchmark names (default: all in the suite)")
    parser.add_argument(
        "--suite", type=Path, default=None, help="folder of benchmark JSON files (default benchmarks/suite); e.g. a variant to compare"
    )
    parser.add_argument("--seeds", type=int, default=None, help="master seeds per benchmark (default 5; 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="tiny budgets: a smoke test of the pipeline, not a result")
    parser.add_argument("-o", "--out", type=Path, default=None, help="results directory (default results/heldout[-quick])")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="master seeds trained at once, each in its own process (default: 2, or 1 on one core); results do not depend on it",
    )
    parser.add_argument(
        "--arms",
        default=None,
        help="comma-separated arms for benchmarks started by this call (default: each benchmark's own, all seven); "
        "a benchmark already started keeps its arms",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="run every master seed as a task on this Ray cluster (auto, HOST:PORT or ray://HOST:PORT) instead of --jobs "
        "local processes; resumable the same way, results the same",
    )
    parser.add_argument(
        "--report", action="store_true", help="train nothing: rebuild the table and figures from the finished benchmarks in OUT"
    )
    parser.add_argument(
        "--html",
        action="store_true",
        help="also write OUT/report.html, an index of the benchmarks, each with its page of master seeds and a page per seed",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: got {args.jobs}; give 1 or more processes")
    if args.suite is not None and not sorted(args.suite.glob("*.json")):
        parser.error(f"--suite: {args.suite} holds no benchmark JSON files; give a folder like benchmarks/suite")
    benchmarks = load_suite(args.suite, only=args.only)
    if args.arms is not None:
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        try:
            LoopConfig.model_validate({"spec": benchmarks[0].spec, "arms": arms})
        except ValueError as error:
            parser.error(str(error).splitlines()[2].strip().split(" [type=")[0])
        benchmarks = [b.model_copy(update={"arms": arms}) for b in benchmarks]
    out = args.out or Path("results") / ("heldout-quick" if args.quick else "heldout")
    seeds = args.seeds or (2 if args.quick else 5)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if not args.report:
        _record_commit(out, [b.name for b in benchmarks])
        run_benchmarks(benchmarks, out, seeds, args.quick, args.jobs, ray_address=args.ray_address)
    # The report covers every finished benchmark in OUT, so runs of --only NAME add up to the whole suite.
    entries = []
    for benchmark in load_suite(args.suite):
        try:
            entry = collect(benchmark, out)
        except TrajectoryError as error:  # a damaged record: one line naming it, as the envrigger commands say it
            print(f"heldout.py: error: {error}", file=sys.stderr)
            return 2
        if entry is not None:
            figure(entry, out / f"{benchmark.name}.png")
            entries.append(entry)
    meta = {
        "seeds": seeds,
        "quick": args.quick,
        "versions": _versions(),
        "wall_time_this_call": time.perf_counter() - started,
        "jobs": args.jobs,
        "trained": not args.report,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.machine()},
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "commits": json.loads((out / "commits.json").read_text()) if (out / "commits.json").is_file() else [],
    }
    (out / "results.json").write_text(json.dumps({"meta": meta, "benchmarks": entries}, indent=2))
    (out / "results.md").write_text(markdown(entries, meta))
    print((out / "results.md").read_text())
    if args.html:
        print(f"wrote {write_index(out, entries)}")
    return 0


INDEX = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>held-out suite: {{ out }}</title>
<style>body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1000px; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: .25rem .5rem; } th { background: #f3f3f3; }</style>
</head><body><h1>Held-out suite <code>{{ out }}</code></h1>
<p>Each benchmark's page has the across-seed table and a page per master seed (what each arm trained on, every candidate's gates).</p>
<table><tr><th>benchmark</th><th>env</th><th>seeds</th><th>rigger − original (points, 95% interval)</th></tr>
{% for e in entries %}{% set d = e.result.difference.get("original") %}<tr><td><a href="{{ e.benchmark.name }}/report.html">{{ e.benchmark.name }}</a></td>
<td>{{ e.config.spec.env_id }}</td><td>{{ e.result.seeds|length }}</td>
<td>{% if d %}{{ "%+.1f"|format(100 * d.mean) }} [{{ "%+.1f"|format(100 * d.ci[0]) }}, {{ "%+.1f"|format(100 * d.ci[1]) }}]{% else %}-{% endif %}</td></tr>{% endfor %}
</table></body></html>
"""


def write_index(out: Path, entries: list[dict[str, Any]]) -> Path:
    """``OUT/report.html``: a link to each finished benchmark's page (its master seeds), written with ``envrigger report``'s pages."""
    from jinja2 import Environment, select_autoescape

    from envrigger.report.run import write_run_report

    for entry in entries:
        write_run_report(out / entry["benchmark"]["name"])
    page = Environment(autoescape=select_autoescape(default=True, default_for_string=True)).from_string(INDEX)
    target = out / "report.html"
    target.write_text(page.render(out=str(out), entries=entries))
    return target


if __name__ == "__main__":
    sys.exit(main())
