"""Adversarial tests of the no-shortcut gate, the subgoal search and the walkthrough start, on MiniGrid families the gate's own tests do not use.

The promises under attack:

* no catalog transform with in-bounds parameters can be admitted (``Validator.no_shortcut``
  passes) as a shortcut around a subgoal of the original MiniGrid level;
* the search's answers are correct (a solution it returns wins when replayed on a fresh
  env, "unsolvable" is really unsolvable within the step limit) and it leaves the env
  exactly as it found it;
* ``WalkthroughStart`` keeps every subgoal by construction.

Tests are grouped by root cause. Those that fail on today's code show a real break; the
ones that pass show the promise holding on a new family. Each docstring says the root
cause and what a user would lose.
"""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import pytest

from envharness import HarnessSpec
from envharness.adapters.minigrid_search import objects, restore_state, save_state, solve
from envrigger.loop.propose import Candidate
from envrigger.loop.solvability import _level, bypassed, subgoals
from envrigger.loop.validate import ValidationConfig, Validator
from envrigger.policies import RandomPolicy

DOORKEY5 = HarnessSpec(env_id="MiniGrid-DoorKey-5x5-v0")


@pytest.fixture(autouse=True)
def _first_search_of_each_level():
    """Each attack sees a level's first search in the process, as a fresh loop or worker does.

    ``minigrid_search`` keeps answers per level (``_solved``); without clearing it, whether a
    search runs at all (and so whether it leaks state into the env) depends on test order.
    """
    from envharness.adapters import minigrid_search

    kept = getattr(minigrid_search, "_solved", None)
    if kept is not None:
        kept.clear()
    yield


REMOVE4 = {"name": "RemoveWalls", "params": {"count": 4}}


def candidate(base: HarnessSpec, *transforms: dict) -> Candidate:
    return Candidate(
        spec=base.extended(*transforms), added=list(transforms), finding="timeout", finding_stats={}, rationale="attack", origin="catalog"
    )


def validator(base: HarnessSpec, tmp_path) -> Validator:
    env = base.build()
    try:
        return Validator(
            RandomPolicy(env.action_space, seed=0),
            base,
            tmp_path / "v",
            ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
        )
    finally:
        env.close()


def _any_door_open(raw) -> bool:
    return any(c is not None and c.type == "door" and c.is_open for c in raw.grid.grid)


def _won_without_any_door(spec: HarnessSpec, seed: int) -> tuple[bool | None, list[int]]:
    env, raw, limit = _level(spec, seed)
    try:
        return solve(raw, limit, avoid=_any_door_open)
    finally:
        env.close()


def _replay_raw(env_id: str, seed: int, path: list[int]) -> tuple[bool, float]:
    """Replay ``path`` on a fresh, unwrapped env: (terminated with positive reward, reward)."""
    raw = gym.make(env_id).unwrapped
    raw.reset(seed=seed)
    for action in path:
        _, reward, terminated, truncated, _ = raw.step(action)
        if terminated or truncated:
            return bool(terminated and reward > 0), float(reward)
    return False, 0.0


def _fingerprint(raw) -> tuple:
    """Everything observable about a MiniGrid env's state, by value, for before/after comparisons."""
    objs = []
    for obj in objects(raw):
        attrs = {k: (id(v) if k == "contains" else repr(v)) for k, v in vars(obj).items()}
        objs.append((id(obj), tuple(sorted(attrs.items()))))
    instrs = getattr(raw, "instrs", None)
    verifier = None
    if instrs is not None:
        # BabyAI's verifier keeps progress on the instruction objects (a_done, b_done, preCarrying).
        parts = [instrs] + [getattr(instrs, n) for n in ("instr_a", "instr_b") if hasattr(instrs, n)]
        verifier = tuple(
            tuple(sorted((k, repr(v)) for k, v in vars(p).items() if k in ("a_done", "b_done", "preCarrying", "lastStepMatch")))
            for p in parts
        )
    return (
        raw.grid.encode().tobytes(),
        tuple(int(v) for v in raw.agent_pos),
        int(raw.agent_dir),
        id(raw.carrying),
        int(raw.step_count),
        raw.mission,
        repr(raw.np_random.bit_generator.state),
        tuple(sorted(vars(raw))),
        tuple(sorted(objs)),
        verifier,
    )


# ---------------------------------------------------------------------------------------
# Root cause 1: the gate fails OPEN whenever the stack holds a rule or link transform.
# ---------------------------------------------------------------------------------------

LAUNDERERS = {
    "ActionCost-zero": {"name": "ActionCost", "params": {"cost": 0.0}},  # changes nothing at all
    "StepBudget-huge": {"name": "StepBudget", "params": {"max_steps": 100_000}},  # looser than the env's own limit
    "Chain-same-env": {"name": "Chain", "params": {"env_id": "MiniGrid-DoorKey-5x5-v0"}},
}


@pytest.mark.parametrize("rule", sorted(LAUNDERERS))
def test_a_no_op_rule_stacked_on_a_shortcut_launders_it_past_the_gate(rule, tmp_path):
    """Root cause: ``no_shortcut`` returns passed=True (method "none") as soon as any transform is not
    state/observation (``searchable`` is False), instead of searching the state part of the stack
    or failing closed. A proposer (or a mutation) that adds a no-op rule such as ActionCost(cost=0)
    to RemoveWalls gets the very shortcut the gate refuses alone admitted. The user loses: the
    curriculum trains DoorKey with the locked-door wall knocked out, i.e. never the key and door."""
    v = validator(DOORKEY5, tmp_path)
    alone = v.check("no_shortcut", candidate(DOORKEY5, REMOVE4), [0, 1])
    assert not alone.passed and alone.statistic["shortcut_levels"] == 2  # the shortcut itself is caught
    laundered = v.check("no_shortcut", candidate(DOORKEY5, REMOVE4, LAUNDERERS[rule]), [0, 1])
    assert not laundered.passed, f"RemoveWalls + {rule} admitted by no_shortcut: {laundered.statistic}"


# ---------------------------------------------------------------------------------------
# Root cause 2: an undecided search (max_states) counts as "no shortcut".
# ---------------------------------------------------------------------------------------


def _reachable_avoiding(raw, blocked_types: set[str]) -> bool:
    """Grid BFS from the agent to a goal tile, never entering a cell holding one of ``blocked_types``."""
    w, h = raw.grid.width, raw.grid.height
    start = tuple(int(v) for v in raw.agent_pos)
    seen, queue = {start}, deque([start])
    while queue:
        x, y = queue.popleft()
        for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if not (0 <= nx < w and 0 <= ny < h) or (nx, ny) in seen:
                continue
            cell = raw.grid.get(nx, ny)
            if cell is not None and cell.type == "goal":
                return True
            if cell is None or cell.type not in blocked_types | {"ball", "box"}:  # objects block walking too
                seen.add((nx, ny))
                queue.append((nx, ny))
    return False


def test_a_level_too_big_for_the_search_lets_a_wall_removal_shortcut_through(tmp_path):
    """Root cause: ``subgoals`` returns None when a search exceeds MAX_STATES (DoorKey-16x16, LockedRoom
    already do), and ``no_shortcut`` only counts that as ``undecided`` while ``passed`` is
    ``shortcut_levels == 0``: undecided is a pass, against the module's own "undecided, never a
    pass". RemoveWalls(count=50) knocks the whole door column out of DoorKey-16x16 and is admitted.
    The user loses: on any larger MiniGrid family the gate is silently off."""
    base = HarnessSpec(env_id="MiniGrid-DoorKey-16x16-v0")
    opened = candidate(base, {"name": "RemoveWalls", "params": {"count": 50}})
    env = opened.spec.build()
    env.reset(seed=0)
    # The reshaped level is won walking on empty cells only: no key picked up, no door opened.
    assert _reachable_avoiding(env.unwrapped, {"wall", "door", "key", "lava"})
    env.close()
    gate = validator(base, tmp_path).check("no_shortcut", opened, [0])
    assert not gate.passed, f"an undecided search passed the gate: {gate.statistic}"


# ---------------------------------------------------------------------------------------
# Root cause 3: subgoals are single predicates; "open SOME door" (a disjunction) is not expressed.
# ---------------------------------------------------------------------------------------


def test_a_task_that_needs_some_door_but_no_particular_one_has_no_subgoal_to_protect(tmp_path):
    """Root cause: ``_predicates`` offered one predicate per door; when a level has two routes, no single
    door is on every solution, so ``subgoals`` was [] and ``no_shortcut`` skipped the level, although
    every solution of the original opens a door. RemoveWalls(count=8) on BabyAI-GoToObjMazeS4 let
    the agent reach the target without opening any door. Fixed twice over: "some door open" and
    "carrying any key" are predicates too (see the DoorKey test), and on BabyAI, whose missions the
    search cannot follow (root cause 4), the gate fails closed instead of skipping the level."""
    base = HarnessSpec(env_id="BabyAI-GoToObjMazeS4-v0")
    reshaped = base.extended({"name": "RemoveWalls", "params": {"count": 8}})
    env = reshaped.build()
    env.reset(seed=0)
    assert not _any_door_open(env.unwrapped)
    env.close()
    gate = validator(base, tmp_path).check("no_shortcut", candidate(base, {"name": "RemoveWalls", "params": {"count": 8}}), [0])
    assert not gate.passed and gate.statistic["undecided"] == 1, f"a door-free reshaping of a door-only task passed: {gate.statistic}"


# ---------------------------------------------------------------------------------------
# Root cause 4: the search does not save or key BabyAI's verifier progress (raw.instrs).
# Fixed by refusing: on a level whose mission keeps progress outside the saved state, the
# search answers "undecided" (never a guess), the gate fails closed and the walkthrough
# start refuses the level.
# ---------------------------------------------------------------------------------------

TWO_DOORS = "BabyAI-OpenTwoDoors-v0"  # "open the X door, then open the Y door"


def test_babyai_sequence_search_returns_a_solution_that_does_not_replay():
    """Root cause: ``save_state``/``_save`` copy ``vars(raw)`` shallowly, so BabyAI's instruction
    objects (``BeforeInstr.a_done``/``b_done``, ``preCarrying``) are shared by every branch and not in
    the state key: once one branch opened the first door, every later branch only needed the
    second, and ``solve`` returned a "shortest solution" that loses on a fresh env. Any answer the
    search gives must now replay; on BabyAI it gives none."""
    raw = gym.make(TWO_DOORS).unwrapped
    raw.reset(seed=0)
    found, path = solve(raw, int(raw.max_steps))
    if found is True:
        won, _ = _replay_raw(TWO_DOORS, 0, path)
        assert won, f"the search's solution {path} does not win '{raw.mission}' on a fresh env"
    else:
        assert found is None and path == []  # undecided, never "lost"


def test_babyai_search_leaves_the_verifier_progress_changed():
    """Root cause: as above; ``restore_state`` puts back the grid and ``vars(raw)`` but not the
    instruction objects the env's ``step`` mutates. After ``solve`` returns, the live env's
    verifier must not believe a door was already opened."""
    raw = gym.make(TWO_DOORS).unwrapped
    raw.reset(seed=0)
    before = _fingerprint(raw)
    solve(raw, int(raw.max_steps))
    assert _fingerprint(raw) == before, f"instrs after search: a_done={raw.instrs.a_done!r}, b_done={raw.instrs.b_done!r}"


def test_babyai_subgoals_miss_the_first_door_of_an_ordered_mission():
    """Root cause: the leaked verifier progress made the cut-off search (never open door A) "win" by
    opening door B, so door A, which every real solution opens, was not a subgoal. Now the search
    says it cannot tell (None), and the gate that reads it fails closed."""
    raw = gym.make(TWO_DOORS).unwrapped
    raw.reset(seed=0)
    first = raw.instrs.instr_a.desc.obj_set[0]
    goals = subgoals(HarnessSpec(env_id=TWO_DOORS), 0)
    assert goals is None or ("door_open", *map(int, first.cur_pos)) in goals, goals


def test_babyai_walkthrough_start_admits_skipping_the_first_door(tmp_path):
    """Root cause: ``WalkthroughStart`` ran ``solve`` on the live env at reset; the leak left
    ``a_done == "success"``, so under WalkthroughStart(0, 0) (an identity start) the agent won
    "open A, then open B" by opening B alone, and ``no_shortcut`` passed the candidate. Now the
    gate refuses it and the start itself refuses a level it cannot solve honestly."""
    from envharness.errors import TransformError

    base = HarnessSpec(env_id=TWO_DOORS)
    start = {"name": "WalkthroughStart", "params": {"min_share": 0.0, "max_share": 0.0}}
    gate = validator(base, tmp_path).check("no_shortcut", candidate(base, start), [0])
    assert not gate.passed, f"gate passed ({gate.statistic}) on a mission the search cannot follow"
    env = base.extended(start).build()
    with pytest.raises(TransformError, match="no solution of this MiniGrid level"):
        env.reset(seed=0)
    env.close()


# ---------------------------------------------------------------------------------------
# Root cause 5: "kept" means "holds at the start"; a subgoal passed earlier and no longer
# holding (the key dropped to pick up the box) reads as bypassed: WalkthroughStart refused.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["MiniGrid-UnlockPickup-v0", "MiniGrid-KeyCorridorS3R1-v0", "MiniGrid-ObstructedMaze-1Dlh-v0"])
def test_a_late_walkthrough_start_is_refused_as_a_shortcut_on_pickup_missions(env_id, tmp_path):
    """Root cause: ``bypassed`` only looks at the reshaped start state; along these families' own
    shortest solution the agent picks the key, opens the door, then DROPS the key (the mission is to
    pick up the box/ball, which needs empty hands). A start after the drop has the door open but no
    key in hand, so the key reads as "bypassed", and the transform claimed to keep every subgoal by
    construction is refused. The user loses: the reverse curriculum on UnlockPickup, KeyCorridor,
    ObstructedMaze, BlockedUnlockPickup (the hard families it exists for)."""
    base = HarnessSpec(env_id=env_id)
    late = {"name": "WalkthroughStart", "params": {"min_share": 0.9, "max_share": 0.95}}
    goals = subgoals(base, 0)
    assert goals and goals[0][0] == "carrying"
    env, raw, limit, _ = _level(base, 0)
    _, path = solve(raw, limit)
    env.close()
    assert 3 in path[: int(0.9 * len(path))]  # the prefix played does pick the key up: the subgoal is behind the start
    gate = validator(base, tmp_path).check("no_shortcut", candidate(base, late), [0])
    assert gate.passed, f"a start along the level's own solution was refused: {gate.statistic}"


# ---------------------------------------------------------------------------------------
# Promises that hold on new families.
# ---------------------------------------------------------------------------------------

SHORTCUTS = [
    ("MiniGrid-DoorKey-8x8-v0", {"name": "RemoveWalls", "params": {"count": 1}}),
    ("MiniGrid-DoorKey-8x8-v0", {"name": "MoveGoal", "params": {"min_dist": 1, "max_dist": 2}}),
    ("MiniGrid-UnlockPickup-v0", REMOVE4),
    ("MiniGrid-BlockedUnlockPickup-v0", REMOVE4),
    ("MiniGrid-ObstructedMaze-1Dlh-v0", REMOVE4),
    ("MiniGrid-MultiRoom-N2-S4-v0", {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 3}}),
]


@pytest.mark.parametrize("env_id,transform", SHORTCUTS, ids=[f"{e.split('-')[1]}-{t['name']}" for e, t in SHORTCUTS])
def test_state_transform_shortcuts_are_refused_on_new_families(env_id, transform):
    """Holds: on DoorKey-8x8, UnlockPickup, BlockedUnlockPickup (ball in front of the door),
    ObstructedMaze-1Dlh (key in a box) and MultiRoom, a state transform that opens a way around the
    key/door is reported bypassed on level 0."""
    base = HarnessSpec(env_id=env_id)
    goals = subgoals(base, 0)
    assert goals
    assert bypassed(base.extended(transform), 0, goals)


def test_key_in_hand_then_teleported_past_the_locked_door_is_still_refused():
    """Holds: the "already holds at start" escape. ReplayPrefix up to the key pickup makes the key
    subgoal hold at the start; MoveAgent then puts the agent beside the goal, behind the still-locked
    door. The door subgoal does not hold and is reported bypassed."""
    base = HarnessSpec(env_id="MiniGrid-DoorKey-8x8-v0")
    env, raw, limit, _ = _level(base, 0)
    _, path = solve(raw, limit)
    env.close()
    prefix = path[: path.index(3) + 1]
    stacked = base.extended(
        {"name": "ReplayPrefix", "params": {"actions": prefix}}, {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}}
    )
    goals = subgoals(base, 0)
    env = stacked.build()
    env.reset(seed=0)
    assert env.unwrapped.carrying is not None and env.unwrapped.carrying.type == "key"
    env.close()
    door = next(g for g in goals if g[0] == "door_open")
    assert bypassed(stacked, 0, goals) == [door, ("door_open_any", None, None)]


def test_subgoals_of_new_families_name_what_their_missions_need():
    """Holds: the subgoal search reads the right predicates on families it was not written against."""

    def specific(goals):
        return [g for g in goals if not g[0].endswith("_any")]

    assert [g[:2] for g in specific(subgoals(HarnessSpec(env_id="MiniGrid-BlockedUnlockPickup-v0"), 1))] == [
        ("carrying", "ball"),
        ("carrying", "key"),
        ("door_open", 5),
    ]
    assert specific(subgoals(HarnessSpec(env_id="MiniGrid-Unlock-v0"), 0)) == [("carrying", "key", "purple")]
    red = specific(subgoals(HarnessSpec(env_id="MiniGrid-RedBlueDoors-6x6-v0"), 0))
    raw = gym.make("MiniGrid-RedBlueDoors-6x6-v0").unwrapped
    raw.reset(seed=0)
    red_door = next(i for i, c in enumerate(raw.grid.grid) if c is raw.red_door)
    assert red == [("door_open", red_door % raw.grid.width, red_door // raw.grid.width)]
    assert subgoals(HarnessSpec(env_id="MiniGrid-Fetch-5x5-N2-v0"), 0) == []  # the pickup that wins is not a subgoal
    assert subgoals(HarnessSpec(env_id="MiniGrid-GoToDoor-5x5-v0"), 0) == []


FAMILIES = [
    "MiniGrid-Unlock-v0",
    "MiniGrid-UnlockPickup-v0",
    "MiniGrid-KeyCorridorS3R1-v0",
    "MiniGrid-ObstructedMaze-1Dlh-v0",
    "MiniGrid-MultiRoom-N2-S4-v0",
    "MiniGrid-DoorKey-5x5-v0",
    "MiniGrid-Fetch-5x5-N2-v0",
    "MiniGrid-PutNear-6x6-N2-v0",
    "MiniGrid-GoToDoor-5x5-v0",
    "MiniGrid-RedBlueDoors-6x6-v0",
    "MiniGrid-Dynamic-Obstacles-5x5-v0",
]


@pytest.mark.parametrize("env_id", FAMILIES)
def test_search_solution_replays_and_leaves_the_env_untouched_on_plain_minigrid(env_id):
    """Holds: on non-BabyAI MiniGrid families the search's solution wins on a fresh env, one step
    shorter it proves the level lost, and the env (grid, objects incl. a box's contents, agent,
    clock, generator) is left exactly as found."""
    for seed in (0, 1):
        raw = gym.make(env_id).unwrapped
        raw.reset(seed=seed)
        before = _fingerprint(raw)
        found, path = solve(raw, int(raw.max_steps))
        assert found is True and _fingerprint(raw) == before
        assert _replay_raw(env_id, seed, path)[0]
        assert solve(raw, len(path) - 1)[0] is False and _fingerprint(raw) == before


def _exhaustive_win(raw, depth: int) -> bool:
    """Every action sequence of length <= depth, by save/restore: an independent check of "unsolvable"."""
    state = save_state(raw)
    try:
        for action in range(raw.action_space.n):
            restore_state(raw, state)
            _, reward, terminated, truncated, _ = raw.step(action)
            if terminated:
                if reward > 0:
                    return True
                continue
            if not truncated and depth > 1 and _exhaustive_win(raw, depth - 1):
                return True
        return False
    finally:
        restore_state(raw, state)


def test_unsolvable_within_the_limit_is_really_unsolvable_with_random_obstacles():
    """Holds: Dynamic-Obstacles moves its balls with the env's generator, which the state key leaves
    out; an exhaustive search still finds no win shorter than the search's shortest one."""
    for seed in (0, 1, 2):
        raw = gym.make("MiniGrid-Dynamic-Obstacles-5x5-v0").unwrapped
        raw.reset(seed=seed)
        found, path = solve(raw, 50)
        assert found is True
        assert not _exhaustive_win(raw, len(path) - 1)
