"""Evaluating a cell on the ledger's held-out tasks, and drawing those tasks.

Contains :func:`draw_tasks` (N distinct levels of the original env from seeds no loop of
ours uses, skipping every level a given loop run played), :func:`loop_levels` (the levels a
loop run trained, collected, validated or selected on), :func:`check_env` (the env a cell
faces plays the ledger's tasks at their seeds), :func:`evaluate_cell` (one episode per
task, stored as a run beside the ledger, which an evaluation stopped or cut short goes
on with; one :class:`~envrigger.ledger.store.TaskResult` per task), :func:`diversity`
(behaviour diversity of any run, for the loop's rounds) and :func:`definitions` (what
each recorded metric means).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from envharness.adapters.base import is_reserved, level_group
from envharness.errors import TransformError
from envharness.reading import json_kind, read_json
from envharness.spec import HarnessSpec
from envrigger.data import TrajectoryError, TrajectoryStore
from envrigger.errors import LedgerError
from envrigger.ledger.factors import Cell
from envrigger.ledger.store import Ledger, TaskResult

# Far above every range a loop draws from (held-out 1M, selection 1.5M, collection 2M,
# validation 3M, training 4M upwards, transfer 5G): ledger S draws from LEDGER_SEED + S * 10M.
LEDGER_SEED = 8_000_000_000
LEDGER_STRIDE = 10_000_000


def _level(probe: Any, seed: int) -> str | None:
    """The original env's level id at ``seed``; None where the harness refuses the level (it starts solved)."""
    try:
        level = probe.reset(seed=int(seed))[1].get("level_id")
    except TransformError:
        return None
    return "" if level is None else str(level)


def draw_tasks(spec: HarnessSpec, count: int, seed: int, avoid: set[str] | None = None, scan: int = 20) -> list[tuple[int, str]]:
    """``count`` distinct levels of ``spec``'s original env, from the ledger's own seeds, none in ``avoid``.

    Distinct by level group (:func:`envharness.adapters.base.level_group`), and none of a group
    in ``avoid``: on HumanEvalFix, one level per problem, and no problem a loop played.

    Example:
        >>> tasks = draw_tasks(HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0"), 3, seed=0)
        >>> len({level for _, level in tasks}), tasks[0][0] >= LEDGER_SEED
        (3, True)
    """
    base = HarnessSpec(env_id=spec.env_id, env_kwargs=spec.env_kwargs)
    avoid = avoid or set()
    probe = base.build()
    tasks: list[tuple[int, str]] = []
    seen: set[str] = set()
    start = LEDGER_SEED + seed * LEDGER_STRIDE
    try:
        for candidate in range(start, start + scan * count):
            level = _level(probe, candidate)
            # Distinct by group, as held-out sets are: one bug per HumanEvalFix problem, none of an avoided problem.
            if level is None or is_reserved(level, avoid) or level_group(level) in seen:
                continue
            seen.add(level_group(level))
            tasks.append((candidate, level))
            if len(tasks) == count:
                return tasks
    finally:
        probe.close()
    raise LedgerError(
        f"{spec.env_id} gave {len(tasks)} distinct levels outside those to avoid in {scan * count} seeds, fewer than the "
        f"{count} tasks asked for; ask for fewer with --tasks, or use a procedurally generated env"
    )


def loop_levels(run: Path) -> set[str]:
    """Every level a loop run in ``run`` trained, collected, validated or selected rounds on."""
    from envrigger.loop.levels import FIX_SAVED, read_used_levels

    run = Path(run)
    split = run / "levels.json"
    if not split.exists():
        raise TrajectoryError(f"{run} holds no loop run (no levels.json); give the directory of an `envrigger run`")
    validation = read_json(split, dict, fix=FIX_SAVED, error=TrajectoryError).get("validation_levels", [])
    if not isinstance(validation, list) or not all(isinstance(level, str) for level in validation):
        raise TrajectoryError(f"{split}: validation_levels: holds {json_kind(validation)}, not a list of level ids; {FIX_SAVED}")
    levels = set(validation)
    for path in run.glob("levels-round-*.json"):
        for use, used in read_used_levels(path).items():
            if not use.startswith("heldout"):
                levels |= used
    return levels


def check_env(ledger: Ledger, spec: HarnessSpec) -> None:
    """Refuse an env that is not the ledger's, or that plays other levels than the ledger's tasks at their seeds."""
    own = ledger.env
    if spec.env_id != own.env_id:
        raise LedgerError(
            f"the env {spec.env_id} is not this ledger's ({own.env_id}); a ledger compares releases on its own env's tasks: "
            f"make another ledger for {spec.env_id}"
        )
    base = HarnessSpec(env_id=spec.env_id, env_kwargs=spec.env_kwargs)
    probe = base.build()
    try:
        for task_seed, level in ledger.tasks():
            got = _level(probe, task_seed)
            if got != level:
                raise LedgerError(
                    f"the env's arguments {json.dumps(spec.env_kwargs)} make seed {task_seed} another level ({got}) than the ledger's "
                    f"task ({level}); keep the arguments that define the levels, and reshape with transforms instead"
                )
    finally:
        probe.close()


def _agent(cell: Cell, concurrency: int, prices: dict[str, tuple[float, float]], timeout: float) -> Any:
    model, harness = cell.model, cell.harness
    if model.kind == "endpoint":
        from envrigger.agents import ChatAgentFactory, Endpoint

        if harness.kind != "agent":
            raise LedgerError("a model behind an endpoint needs an agent harness (--harness FILE, or the env's default)")
        endpoint = Endpoint(str(model.base_url), str(model.model), api_key_env=model.api_key_env, timeout_s=timeout, prices=prices)
        return ChatAgentFactory(harness.agent_harness(), endpoint)
    if harness.kind != "direct":
        raise LedgerError("a Python policy acts itself: it takes no agent harness (drop --harness)")
    return model.policy


def evaluate_cell(
    ledger: Ledger, cell: Cell, concurrency: int = 1, prices: dict[str, tuple[float, float]] | None = None, timeout: float = 60.0,
    progress: bool = False,
) -> tuple[list[TaskResult], str]:  # fmt: skip
    """Play every held-out task once with ``cell``; the results (in task order) and the run directory they were stored in."""
    from envrigger.rollout import rollout

    spec = cell.environment.harness_spec()
    check_env(ledger, spec)
    for problem in (cell.model.secret_problem(), cell.model.changed()):
        if problem is not None:  # a key never reaches the run; a policy file changed since its identity was taken is another policy
            raise LedgerError(problem)
    agent = _agent(cell, concurrency, prices or {}, timeout)
    run = ledger.path.with_name(ledger.path.name + ".runs") / cell.key()
    seeds = [seed for seed, _ in ledger.tasks()]
    played = _played(run, seeds)  # an evaluation a stop or a crash cut short goes on: its stored tasks are not played again
    missing = [seed for seed in seeds if seed not in played]
    backend = "serial" if concurrency > 1 or cell.model.kind == "endpoint" else "process"
    if missing:
        store = rollout(spec, agent, seeds=missing, out=run, backend=backend, concurrency=concurrency, progress=progress, workers=2)
    else:
        store = TrajectoryStore(run)
    changed = cell.model.changed()
    if changed is not None:  # it changed while it played: what was played is not what the identity names
        raise LedgerError(changed)
    return results_of(store, seeds), str(run.relative_to(ledger.path.parent))


def _played(run: Path, seeds: list[int]) -> set[int]:
    """The task seeds whose episode ``run`` holds (all of this cell: the directory is the cell's key); a damaged run starts over."""
    if not (run / "run.json").is_file():
        shutil.rmtree(run, ignore_errors=True)  # not a run (made and left before its first write): start it afresh
        return set()
    try:
        stored = {int(seed) for seed in TrajectoryStore(run).episodes_table(["seed"]).column("seed").to_pylist() if seed is not None}
    except TrajectoryError:
        shutil.rmtree(run, ignore_errors=True)
        return set()
    return stored & set(seeds)


def results_of(store: TrajectoryStore, seeds: list[int]) -> list[TaskResult]:
    """One result per seed (in that order) from a run holding one episode per seed."""
    by_seed: dict[int, TaskResult] = {}
    for episode, steps in store.iter_episode_steps():
        actions = hashlib.sha256("\x1f".join(s.action for s in steps).encode()).hexdigest()[:16]
        by_seed[int(episode.seed if episode.seed is not None else -1)] = TaskResult(
            success=bool(episode.success),
            score=float(episode.score),
            steps=int(episode.length),
            input_tokens=int(episode.input_tokens or 0),
            output_tokens=int(episode.output_tokens or 0),
            cost_usd=float(episode.cost_usd or 0.0),
            wall_s=float(episode.wall_time),
            tool_errors=int(episode.tool_errors or 0) + sum(1 for s in steps if '"tool_error"' in s.info),
            retries=int(episode.retries or 0),
            human_interventions=int(episode.human_interventions or 0),
            irreversible=episode.irreversible is not None,
            error=episode.error,
            actions=actions,
            visits=dict(Counter(s.obs_digest for s in steps)),
        )
    missing = [seed for seed in seeds if seed not in by_seed]
    if missing:
        raise TrajectoryError(f"the evaluation stored no episode for task seeds {missing[:3]}; evaluate again")
    return [by_seed[seed] for seed in seeds]


def definitions() -> dict[str, str]:
    """What each ledger metric means (shown by `envrigger ledger show` and in docs/ledgers.md)."""
    return {
        "accepted": "accepted-task rate: the share of held-out tasks the original verifier judged a success (Wilson 95% interval)",
        "tokens": "model tokens per task, input plus output (the endpoint's usage, or a stated estimate)",
        "cost_usd": "money per task from the price table (0 without one)",
        "wall_s": "wall seconds per task (an episode's own time; with --concurrency episodes overlap)",
        "tool_errors": "tool errors per task: invalid tool calls the harness sent back, and tool calls the env refused",
        "retries": "endpoint retries and re-asked replies per task",
        "human_interventions": "calls per task of a tool that hands the step to a person (code repair's ask_human)",
        "irreversible": "share of tasks ended by an irreversible failure: an ending the adapter marks so (lava, a hole, "
        "the pole falling, a failed submit, losing a text game) or a step that destroyed something for good (a file emptied)",
        "steps_per_solved": "steps per solved task: the mean episode length over the tasks it solved",
        "distinct_actions": "behaviour diversity: the share of held-out tasks whose action sequence no other task repeats exactly",
        "visit_entropy": "behaviour diversity: the entropy (bits) of the states visited, pooled over the held-out episodes",
    }
