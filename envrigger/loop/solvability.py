"""Solvability by search: a breadth-first search over a level's states with the env's own ``step``.

Contains :func:`search_levels`, :func:`search_level`, :func:`searchable` and, for the no-shortcut
gate, :func:`subgoals` and :func:`bypassed`. The search knows no family's
mission: it tries every action from every state it reaches, on the base env's live state
after the candidate's reset, and a level is solvable when some action sequence within the
step limit ends with the env's own success (``terminated`` with a positive reward, as
MiniGrid rewards a mission done: the goal tile, the ball picked up behind the locked
door, the right door faced). States are saved and restored in place (the grid's cells,
every object's attributes, the agent, the clock and the random generator), which costs a
small fraction of a deep copy. It answers only for envs whose family registers a level
search (MiniGrid's is :mod:`envharness.adapters.minigrid_search`; see :mod:`envrigger.families`)
and whose transforms leave the dynamics alone (state and observation transforms); rules change what a step does,
and the search would judge a different game, so there it does not answer.

Subgoals are what every solution of a level must pass through: a state predicate (the
agent carries the yellow key; the door at (3, 2) stands open) that no winning action
sequence within the step limit avoids. They are found by the same search with the states
where the predicate holds cut off: if the goal is then out of reach, the predicate is a
subgoal. A reshaped level keeps a subgoal when the predicate already holds at its start
(a start along the level's own solution) or when the cut-off search cannot win it either;
otherwise the reshaping is a shortcut around that part of the task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envharness.adapters.minigrid_search import MAX_STATES, Fact
from envharness.spec import HarnessSpec
from envharness.transforms import transform_from_spec
from envrigger.family_registry import LevelSearch, family_of


def searchable(spec: HarnessSpec) -> bool:
    """Whether :func:`search_level` can decide ``spec``'s levels: an env whose family has a level search, reshaped by state and observation transforms only.

    Example:
        >>> searchable(HarnessSpec(env_id="MiniGrid-KeyCorridorS3R2-v0"))
        True
        >>> from envharness.transforms import StepBudget
        >>> searchable(HarnessSpec(env_id="MiniGrid-DoorKey-5x5-v0", transforms=[StepBudget(max_steps=9).to_spec()]))
        False
    """
    if any(type(transform_from_spec(t)).kind not in ("state", "observation") for t in spec.transforms):
        return False
    env = spec.build()
    try:
        return family_of(env).has("search")
    finally:
        env.close()


def search_level(spec: HarnessSpec, seed: int, max_states: int = MAX_STATES) -> bool | None:
    """Whether the level ``spec`` plays at ``seed`` can be won within its step limit: True, False, or None (undecided at ``max_states``).

    Example:
        >>> search_level(HarnessSpec(env_id="MiniGrid-KeyCorridorS3R2-v0"), seed=0)
        True
        >>> search_level(HarnessSpec(env_id="MiniGrid-Empty-5x5-v0"), seed=0, max_states=3) is None
        True
    """
    return search_levels(spec, [seed], max_states)[0]


def search_levels(spec: HarnessSpec, seeds: list[int], max_states: int = MAX_STATES) -> list[bool | None]:
    """:func:`search_level` for each of ``seeds``, on one env built once."""
    env = spec.build()
    try:
        search = _level_search(env)
        found = []
        for seed in seeds:
            env.reset(seed=int(seed))
            raw = env.unwrapped
            raw.render_mode = None
            found.append(_search(raw, env.adapter.time_limit() or int(raw.max_steps), max_states, search=search))
        return found
    finally:
        env.close()


Subgoal = Fact
"""A state predicate (:data:`~envharness.adapters.minigrid_search.Fact`): carrying an object (that one, or any of its
kind), a door standing open (that one, or any)."""


def _level_search(env: Any) -> LevelSearch:
    """The level search of ``env``'s family (a wrapped env or a base env; a named absence if it has none)."""
    return family_of(env).part("search")  # type: ignore[no-any-return]


def _holds(raw: Any, goal: Subgoal, search: LevelSearch | None = None) -> bool:
    return goal in (search or _level_search(raw)).facts(raw)


def _search(
    raw: Any, limit: int, max_states: int, avoid: Callable[[Any], bool] | None = None, search: LevelSearch | None = None
) -> bool | None:
    """Whether a win is reachable from ``raw``'s current state (states where ``avoid`` holds are never entered)."""
    return (search or _level_search(raw)).solve(raw, limit, max_states, avoid)[0]


def _level(spec: HarnessSpec, seed: int) -> tuple[Any, Any, int, LevelSearch]:
    env = spec.build()
    try:
        search = _level_search(env)
    except BaseException:
        env.close()
        raise
    env.reset(seed=int(seed))
    raw = env.unwrapped
    raw.render_mode = None
    return env, raw, env.adapter.time_limit() or int(raw.max_steps), search


def subgoals(spec: HarnessSpec, seed: int, max_states: int = MAX_STATES) -> list[Subgoal] | None:
    """The predicates every solution of ``spec``'s level at ``seed`` passes through; None if the search cannot tell.

    Example:
        >>> subgoals(HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0"), seed=0)
        [('carrying', 'key', 'yellow'), ('carrying_any', 'key', None), ('door_open', 3, 1), ('door_open_any', None, None)]
        >>> subgoals(HarnessSpec(env_id="MiniGrid-Empty-5x5-v0"), seed=0)
        []
    """
    env, raw, limit, search = _level(spec, seed)
    try:
        start = search.save_state(raw)
        if _search(raw, limit, max_states, search=search) is not True:
            return None  # unsolvable or undecided: no solution to read subgoals from
        found: list[Subgoal] = []
        for goal in search.offered(raw):
            search.restore_state(raw, start)
            if _holds(raw, goal, search):
                continue
            avoided = _search(raw, limit, max_states, lambda r, g=goal: _holds(r, g, search), search)  # type: ignore[misc]
            if avoided is None:
                return None
            if avoided is False:
                found.append(goal)
            search.restore_state(raw, start)
        return found
    finally:
        env.close()


def bypassed(spec: HarnessSpec, seed: int, goals: list[Subgoal], max_states: int = MAX_STATES) -> list[Subgoal] | None:
    """The ``goals`` that ``spec``'s level at ``seed`` can be won without (a shortcut); None if the search cannot tell.

    A goal that already holds at the level's start, or that the level's setup passed through
    (a start along the level's own solution that picked the key up and dropped it again),
    is kept: the level starts past it.

    Example:
        >>> from envharness.transforms import RemoveWalls
        >>> base = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
        >>> goals = subgoals(base, seed=0)
        >>> bypassed(base, 0, goals)
        []
        >>> bypassed(base.extended(RemoveWalls(count=4)), 0, goals)
        [('carrying', 'key', 'yellow'), ('carrying_any', 'key', None), ('door_open', 3, 1), ('door_open_any', None, None)]
    """
    env, raw, limit, search = _level(spec, seed)
    try:
        start = search.save_state(raw)
        passed = set(getattr(env.adapter, "setup_facts", ()))
        out: list[Subgoal] = []
        for goal in goals:
            search.restore_state(raw, start)
            if _holds(raw, goal, search) or goal in passed:
                continue
            won = _search(raw, limit, max_states, lambda r, g=goal: _holds(r, g, search), search)  # type: ignore[misc]
            if won is None:
                return None
            if won:
                out.append(goal)
        return out
    finally:
        env.close()


__all__ = ["MAX_STATES", "Subgoal", "bypassed", "search_level", "search_levels", "searchable", "subgoals"]
