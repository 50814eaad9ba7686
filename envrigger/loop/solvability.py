"""Solvability by search: a breadth-first search over a level's states with the env's own ``step``.

Contains :func:`search_levels`, :func:`search_level` and :func:`searchable`. The search knows no family's
mission: it tries every action from every state it reaches, on the base env's live state
after the candidate's reset, and a level is solvable when some action sequence within the
step limit ends with the env's own success (``terminated`` with a positive reward, as
MiniGrid rewards a mission done: the goal tile, the ball picked up behind the locked
door, the right door faced). States are saved and restored in place (the grid's cells,
every object's attributes, the agent, the clock and the random generator), which costs a
small fraction of a deep copy. It answers only for MiniGrid envs whose transforms leave
the dynamics alone (state and observation transforms); rules change what a step does,
and the search would judge a different game, so there it does not answer.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from envharness.spec import HarnessSpec
from envharness.transforms import transform_from_spec

MAX_STATES = 20_000  # distinct states expanded per level before the search gives up (undecided, never a pass)


def searchable(spec: HarnessSpec) -> bool:
    """Whether :func:`search_level` can decide ``spec``'s levels: a MiniGrid env reshaped by state and observation transforms only.

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
        return bool(env.adapter.family == "minigrid")
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
        found = []
        for seed in seeds:
            env.reset(seed=int(seed))
            raw = env.unwrapped
            raw.render_mode = None
            found.append(_search(raw, env.adapter.time_limit() or int(raw.max_steps), max_states))
        return found
    finally:
        env.close()


def _search(raw: Any, limit: int, max_states: int) -> bool | None:
    actions = list(range(raw.action_space.n))
    start = _save(raw)
    seen = {_key(raw)}
    queue = deque([(start, 0)])
    expanded = 0
    while queue:
        state, depth = queue.popleft()
        if depth >= limit:
            continue
        expanded += 1
        if expanded > max_states:
            return None
        for action in actions:
            _restore(raw, state)
            _, reward, terminated, truncated, _ = raw.step(action)
            if terminated:
                if float(reward) > 0:
                    return True
                continue  # lava, a wrong door: that branch is lost
            key = _key(raw)
            if key not in seen and not truncated:
                seen.add(key)
                queue.append((_save(raw), depth + 1))
    return False


def _objects(raw: Any) -> list[Any]:
    found = {id(c): c for c in raw.grid.grid if c is not None}
    if raw.carrying is not None:
        found[id(raw.carrying)] = raw.carrying
    for cell in list(found.values()):
        inside = getattr(cell, "contains", None)
        if inside is not None:
            found[id(inside)] = inside
    return list(found.values())


def _save(raw: Any) -> tuple[Any, ...]:
    objects = _objects(raw)
    return (
        list(raw.grid.grid),
        [(obj, vars(obj).copy()) for obj in objects],
        vars(raw).copy(),
        raw.np_random.bit_generator.state,
    )


def _restore(raw: Any, state: tuple[Any, ...]) -> None:
    cells, objects, attrs, rng = state
    for name in [n for n in vars(raw) if n not in attrs]:
        delattr(raw, name)
    vars(raw).update(attrs)
    raw.grid.grid[:] = cells
    for obj, saved in objects:
        vars(obj).clear()
        vars(obj).update(saved)
    raw.np_random.bit_generator.state = rng


def _key(raw: Any) -> tuple[Any, ...]:
    """What tells two states apart: the agent, what it carries, where every object is and how each door stands."""
    doors = tuple((getattr(c, "is_open", None), getattr(c, "is_locked", None)) for c in raw.grid.grid if c is not None and c.type == "door")
    return (
        tuple(int(v) for v in raw.agent_pos),
        int(raw.agent_dir),
        id(raw.carrying),
        tuple(id(c) for c in raw.grid.grid),
        doors,
    )


__all__ = ["MAX_STATES", "search_level", "search_levels", "searchable"]
