"""The report of a loop run as one self-contained HTML page: :func:`render_run_report` and :func:`write_run_report`.

The page (``templates/run.html.j2``) shows, from what the run directory holds — finished or
interrupted: each arm's validation success by round with its interval, its training success
and what it trained on each round; each candidate with its finding and every gate's outcome,
and the admitted components with their provenance; the held-out table with paired
differences over the held-out levels; the interaction each arm spent; the config and the
versions. A directory of several master seeds (``envrigger run --seeds N``) gets an index:
the across-seed table and a page per seed.
"""

from __future__ import annotations

import json
import math
import platform
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, select_autoescape

from envharness.reading import read_text
from envrigger.loop.results import AcrossSeeds, FinalResults, RoundSummary, read_rounds
from envrigger.report.plots import figure_png
from envrigger.stats import normal_interval

TEMPLATE = resources.files("envrigger.report").joinpath("templates/run.html.j2").read_text(encoding="utf-8")
SEEDS_TEMPLATE = resources.files("envrigger.report").joinpath("templates/seeds.html.j2").read_text(encoding="utf-8")
_VERSIONS = ("envharness", "gymnasium", "minigrid", "numpy", "stable-baselines3", "torch")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _VERSIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _paired(a: dict[int, float], b: dict[int, float]) -> dict[str, Any] | None:
    """Mean of ``a - b`` over the levels both played, with a 95% normal interval (None without shared levels)."""
    shared = sorted(a.keys() & b.keys())
    if not shared:
        return None
    d = np.array([a[s] - b[s] for s in shared])
    return {"mean": float(d.mean()), "ci": normal_interval(d), "levels": len(shared)}


def _heldout_by_seed(run: Path, arm: str) -> dict[int, float]:
    """Each held-out level's success for ``arm`` (by level seed), from its held-out run; empty without one."""
    from envrigger.data import TrajectoryStore

    where = run / f"heldout-{arm}"
    if not where.is_dir():
        return {}
    try:
        table = TrajectoryStore(where).episodes_table(columns=["seed", "success"]).to_pydict()
    except Exception:  # an evaluation cut short, or not a run: no per-level results
        return {}
    return {int(s): float(ok) for s, ok in zip(table["seed"], table["success"], strict=True) if s is not None}


def _figures(rounds: list[RoundSummary], arms: list[str]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, str] = {}
    if not rounds:
        return out
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
    for arm in arms:
        points = [(r.round, r.arms[arm]) for r in rounds if arm in r.arms]
        if not points:
            continue
        x = [n for n, _ in points]
        y = [a.validation.success for _, a in points]
        lo = [(a.validation.ci or [v, v])[0] for (_, a), v in zip(points, y, strict=True)]
        hi = [(a.validation.ci or [v, v])[1] for (_, a), v in zip(points, y, strict=True)]
        (line,) = left.plot(x, y, marker="o", label=arm)
        left.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
        train = [sum(a.train.wins) / max(sum(a.train.picks), 1) for _, a in points]
        right.plot(x, train, marker="o", label=arm, color=line.get_color())
    left.set(title="validation success by round (95% interval)", xlabel="round", ylabel="success", ylim=(-0.02, 1.02))
    right.set(title="training success by round (all envs trained on)", xlabel="round", ylabel="wins / episodes", ylim=(-0.02, 1.02))
    from matplotlib.ticker import MaxNLocator

    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.legend(fontsize=8)
    out["curves"] = figure_png(figure)
    return out


def _settings(path: Path) -> dict[str, Any]:
    """The settings a run ran with: its loop.json, with what a file from before a default changed lacks filled in as it ran.

    A file this version cannot read whole is a one-line error naming it and its first bad field.
    """
    from envrigger.data import TrajectoryError
    from envrigger.loop.config import FIX_SAVED, LoopConfig

    return LoopConfig.saved(read_text(path, FIX_SAVED, TrajectoryError), where=str(path)).model_dump(mode="json")


def run_facts(run: str | Path) -> dict[str, Any]:
    """What the page shows, read from the run directory (finished or interrupted)."""
    from envrigger.loop.library import Library

    run = Path(run)
    config = _settings(run / "loop.json")
    rounds: list[dict[str, Any]] = []
    components: list[Any] = []
    if (run / "library.db").is_file():
        library = Library(run / "library.db", create=False, read_only=True)
        try:
            rounds, components = library.rounds(), library.components()
        finally:
            library.close()
    final = FinalResults.load(run / "final.json").dump() if (run / "final.json").exists() else None
    arms = list(config.get("arms", []))
    differences: list[dict[str, Any]] = []
    if final is not None and config.get("heldout", True):
        by_seed = {arm: _heldout_by_seed(run, arm) for arm in arms}
        for baseline in ("original", "plr"):
            for arm in arms:
                compared = arm not in ("original", baseline)  # every arm against the original env; the others against PLR too
                if compared and baseline in arms and by_seed.get(arm) and by_seed.get(baseline):
                    paired = _paired(by_seed[arm], by_seed[baseline])
                    if paired is not None:
                        differences.append({"arm": arm, "baseline": baseline, **paired})
    return {
        "run": str(run),
        "config": config,
        "config_json": json.dumps(config, indent=2, sort_keys=True),
        "arms": arms,
        "rounds": rounds,
        "planned": int(config.get("rounds", len(rounds))),
        "components": [c.model_dump(mode="json") for c in components],
        "final": final,
        "differences": differences,
        "figures": _figures(read_rounds(rounds, str(run / "library.db")), arms),
        "versions": _versions(),
    }


def _environment() -> Environment:
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["f3"] = lambda x: "-" if x is None else f"{x:.3f}"
    env.filters["pp"] = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}"
    env.filters["n"] = lambda x: "-" if x is None else f"{int(x):,}"
    return env


def render_run_report(run: str | Path) -> str:
    """The report of one loop run as one HTML page (plots inline, everything from the run escaped)."""
    return _environment().from_string(TEMPLATE).render(r=run_facts(run))


def render_seeds_report(out: str | Path) -> str:
    """The index of a multi-seed run: the across-seed table (``result.json``) and a link to each seed's page."""
    out = Path(out)
    result = AcrossSeeds.load(out / "result.json").dump() if (out / "result.json").exists() else None
    seeds = sorted((p for p in out.glob("seed-*") if (p / "loop.json").is_file()), key=lambda p: int(p.name.split("-")[1]))
    finished = {p.name: (p / "final.json").is_file() for p in seeds}
    return _environment().from_string(SEEDS_TEMPLATE).render(out=str(out), result=result, seeds=[p.name for p in seeds], finished=finished)


def write_run_report(run: str | Path, within: str | Path | None = None) -> Path:
    """Write ``RUN/report.html`` (for a multi-seed directory: its index and every seed's page); the page written.

    Never through a link or into a special file planted in the run (a seed folder, the page itself): refused in one line.
    """
    from envharness.command_line import write_atomically
    from envharness.files import check_inside

    run = Path(run)
    root = Path(within) if within is not None else run
    if (run / "loop.json").exists():
        target = run / "report.html"
        write_atomically(target, render_run_report(run), within=root)
        return target
    if (run / "seeds.json").is_file():
        index = render_seeds_report(run)  # its result.json read before any page is written
        for seed in run.glob("seed-*"):
            if (seed / "loop.json").is_file():
                check_inside(seed, root, folder=True)  # a seed folder that is a planted link: refused before its page is drawn
                write_run_report(seed, within=root)
        target = run / "report.html"
        write_atomically(target, index, within=root)
        return target
    from envrigger.data import TrajectoryError

    raise TrajectoryError(f"{run}: no loop run here (no loop.json or seeds.json); give the directory of `envrigger run -o DIR`")


__all__ = ["render_run_report", "render_seeds_report", "run_facts", "write_run_report"]
