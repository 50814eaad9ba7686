"""A breadth-first search over a MiniGrid level's states with the env's own ``step``.

Contains :func:`solve` (the shortest winning action sequence from the env's current
state, or a proof there is none within the step limit), :func:`steps_taken` (every env
step the searches of this process took: the interaction a search costs, which the loop
charges to the arm that used it), and :func:`save_state` /
:func:`restore_state`, which it is built from. The search knows no
family's mission: it tries every action from every state it reaches, and a state is won
when the env's own step ends it with a positive reward (MiniGrid rewards a mission done:
the goal tile, the ball picked up behind the locked door, the right door faced). States
are saved and restored in place (the grid's cells, every object's attributes, the agent,
the clock and the random generator), a small fraction of a deep copy's cost.

Used by the walkthrough start (:class:`~envharness.transforms.WalkthroughStart` on
MiniGrid levels: start part-way along this level's own solution) and by envrigger's
solvability and no-shortcut gates.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from envharness.offclock import settle, steps_taken
from envharness.offclock import taken as _taken  # a search's steps count where every off-clock step does

MAX_STATES = 20_000  # distinct states expanded per level before the search gives up (undecided, never a pass)
SOLVED_KEPT = 4096  # answers kept per process: the same level searched again (another candidate, a gate, a paired copy) costs nothing


_solved: OrderedDict[str, tuple[bool | None, list[int], int]] = OrderedDict()
_solved_lock = threading.Lock()


def solve(raw: Any, limit: int, max_states: int = MAX_STATES, avoid: Callable[[Any], bool] | None = None) -> tuple[bool | None, list[int]]:
    """Search from ``raw``'s current state: ``(True, actions)`` of a shortest win, ``(False, [])``, or ``(None, [])`` undecided.

    States where ``avoid`` holds are never entered. ``raw`` is left as it was found. An
    answer without ``avoid`` is kept, by everything the search depends on (the grid with
    what boxes hold, the agent, what it carries, the clock, the limits and the random
    generator's state), so the same level searched again takes no time; its env steps are
    charged again (:func:`steps_taken`), so that what a run is charged never depends on
    what this process happened to search before.

    Example:
        >>> import gymnasium as gym
        >>> raw = gym.make("MiniGrid-Empty-5x5-v0").unwrapped
        >>> _ = raw.reset(seed=0)
        >>> solve(raw, limit=100)
        (True, [2, 2, 1, 2, 2])
        >>> tuple(raw.agent_pos), raw.step_count
        ((1, 1), 0)
        >>> _solved.clear(); before = steps_taken(); _ = solve(raw, limit=100); steps_taken() - before  # the search's cost, in env steps
        164
        >>> before = steps_taken(); _ = solve(raw, limit=100); steps_taken() - before  # the kept answer, charged alike
        164
    """
    before = _taken.search
    try:
        return _solve(raw, limit, max_states, avoid)
    finally:
        settle("search", _taken.search - before)


def _solve(raw: Any, limit: int, max_states: int, avoid: Callable[[Any], bool] | None) -> tuple[bool | None, list[int]]:
    if getattr(raw, "instrs", None) is not None:
        # BabyAI keeps a mission's progress on its instruction objects, outside the state saved here: undecided, never guessed.
        return None, []
    key = _level_key(raw, limit, max_states) if avoid is None else None
    if key is not None:
        with _solved_lock:  # threads share the kept answers
            kept = _solved.get(key)
            if kept is not None:
                _solved.move_to_end(key)
        if kept is not None:
            found, path, cost = kept
            _taken.search += cost  # charged as if searched again: what a run is charged does not depend on what this process saw before
            return found, list(path)
    before = _taken.search
    found, path = _search(raw, limit, max_states, avoid)
    if key is not None:
        with _solved_lock:
            _solved[key] = (found, list(path), _taken.search - before)
            if len(_solved) > SOLVED_KEPT:
                _solved.popitem(last=False)
    return found, path


Fact = tuple[str, Any, Any]
"""A state predicate: ``("carrying", type, color)``, ``("carrying_any", type, None)``, ``("door_open", x, y)`` or ``("door_open_any", None, None)``."""


def facts(raw: Any) -> frozenset[Fact]:
    """The predicates that hold in ``raw``'s current state: what the agent carries, which doors stand open (each, and any).

    Example:
        >>> import gymnasium as gym
        >>> raw = gym.make("MiniGrid-DoorKey-5x5-v0").unwrapped
        >>> _ = raw.reset(seed=0)
        >>> sorted(facts(raw))
        []
    """
    found: set[Fact] = set()
    if raw.carrying is not None:
        found |= {("carrying", raw.carrying.type, raw.carrying.color), ("carrying_any", raw.carrying.type, None)}
    width = raw.grid.width
    for index, cell in enumerate(raw.grid.grid):
        if cell is not None and cell.type == "door" and cell.is_open:
            found |= {("door_open", index % width, index // width), ("door_open_any", None, None)}
    return frozenset(found)


def offered(raw: Any) -> list[Fact]:
    """Every predicate a level's objects offer: carrying each pickable object (and any of its kind), each door open (and any)."""
    found: dict[Fact, None] = {}
    for obj in objects(raw):
        if obj.type in ("key", "ball", "box"):
            found[("carrying", obj.type, obj.color)] = None
            found[("carrying_any", obj.type, None)] = None
    width = raw.grid.width
    for index, cell in enumerate(raw.grid.grid):
        if cell is not None and cell.type == "door":
            found[("door_open", index % width, index // width)] = None
            found[("door_open_any", None, None)] = None
    return list(found)


def _level_key(raw: Any, limit: int, max_states: int) -> str:
    """Everything a search's answer depends on, as a digest."""
    held = [(tuple(int(v) for v in o.cur_pos) if o.cur_pos is not None else None, o.contains.type, o.contains.color)
            for o in objects(raw) if getattr(o, "contains", None) is not None]  # fmt: skip
    carrying = None if raw.carrying is None else (raw.carrying.type, raw.carrying.color)
    facts = (type(raw).__qualname__, raw.mission, tuple(int(v) for v in raw.agent_pos), int(raw.agent_dir), carrying, held,
             int(raw.step_count), int(raw.max_steps), limit, max_states, raw.grid.width, raw.grid.height)  # fmt: skip
    digest = hashlib.sha256(raw.grid.encode().tobytes())
    digest.update(repr(facts).encode())
    digest.update(repr(raw.np_random.bit_generator.state).encode())
    return digest.hexdigest()


def _search(raw: Any, limit: int, max_states: int, avoid: Callable[[Any], bool] | None) -> tuple[bool | None, list[int]]:
    actions = list(range(raw.action_space.n))
    # The search never looks at an observation: while it runs, the env's step makes none (most of a step's cost).
    own_view = vars(raw).get("gen_obs")
    vars(raw)["gen_obs"] = _no_observation
    start = save_state(raw)
    dynamic = [o for o in objects(raw) if o.type not in STATIC]  # walls, floor, goal and lava never change: not saved per state
    width = raw.grid.width
    for index, cell in enumerate(raw.grid.grid):  # objects placed with grid.set have no position of their own (MultiRoom's doors)
        if cell is not None and cell.type not in STATIC and cell.cur_pos is None:
            cell.cur_pos = (index % width, index // width)  # put back with the rest at the end
    seen = {_key(raw, dynamic)}
    # Each queued state keeps its parent's index and the action that led to it, to read the path back.
    parents: list[tuple[int, int]] = [(-1, -1)]
    queue = deque([(_save(raw, dynamic), 0, 0)])
    expanded = 0
    try:
        while queue:
            state, depth, node = queue.popleft()
            if depth >= limit:
                continue
            expanded += 1
            if expanded > max_states:
                return None, []
            for action in actions:
                _restore(raw, state)
                _taken.search += 1
                _, reward, terminated, truncated, _ = raw.step(action)
                if terminated:
                    if float(reward) > 0:
                        path = [action]
                        while node > 0:
                            node, taken = parents[node]
                            path.append(taken)
                        return True, path[::-1]
                    continue  # lava, a wrong door: that branch is lost
                if avoid is not None and avoid(raw):
                    continue
                key = _key(raw, dynamic)
                if key not in seen and not truncated:
                    seen.add(key)
                    parents.append((node, action))
                    queue.append((_save(raw, dynamic), depth + 1, len(parents) - 1))
        return False, []
    finally:
        restore_state(raw, start)
        if own_view is None:
            del vars(raw)["gen_obs"]
        else:
            vars(raw)["gen_obs"] = own_view


def _no_observation() -> None:
    return None


STATIC = frozenset({"wall", "floor", "goal", "lava"})  # object kinds no MiniGrid step changes


def _save(raw: Any, dynamic: list[Any]) -> tuple[Any, ...]:
    return (list(raw.grid.grid), [(obj, vars(obj).copy()) for obj in dynamic], vars(raw).copy(), raw.np_random.bit_generator.state)


def _restore(raw: Any, state: tuple[Any, ...]) -> None:
    cells, saved_objects, attrs, rng = state
    if len(vars(raw)) != len(attrs):
        for name in [n for n in vars(raw) if n not in attrs]:
            delattr(raw, name)
    vars(raw).update(attrs)
    raw.grid.grid[:] = cells
    for obj, saved in saved_objects:
        vars(obj).update(saved)
    raw.np_random.bit_generator.state = rng


def _key(raw: Any, dynamic: list[Any]) -> tuple[Any, ...]:
    """The agent, what it carries, and where each changeable object is, whether it is still on the grid, and how it stands."""
    grid = raw.grid.grid
    width = raw.grid.width
    where = []
    for obj in dynamic:
        pos = obj.cur_pos
        on_grid = pos is not None and int(pos[0]) >= 0 and grid[int(pos[1]) * width + int(pos[0])] is obj
        where.append((int(pos[0]), int(pos[1]), getattr(obj, "is_open", None), getattr(obj, "is_locked", None)) if on_grid else None)
    return (int(raw.agent_pos[0]), int(raw.agent_pos[1]), int(raw.agent_dir), id(raw.carrying), tuple(where))


def objects(raw: Any) -> list[Any]:
    """Every world object of the level: on the grid, carried, or inside a box."""
    found = {id(c): c for c in raw.grid.grid if c is not None}
    if raw.carrying is not None:
        found[id(raw.carrying)] = raw.carrying
    for cell in list(found.values()):
        inside = getattr(cell, "contains", None)
        if inside is not None:
            found[id(inside)] = inside
    return list(found.values())


def save_state(raw: Any) -> tuple[Any, ...]:
    """Everything a step can change: the grid's cells, each object's attributes, the env's attributes, its generator."""
    return (
        list(raw.grid.grid),
        [(obj, vars(obj).copy()) for obj in objects(raw)],
        vars(raw).copy(),
        raw.np_random.bit_generator.state,
    )


def restore_state(raw: Any, state: tuple[Any, ...]) -> None:
    """Put back what :func:`save_state` saved, in place."""
    cells, saved_objects, attrs, rng = state
    for name in [n for n in vars(raw) if n not in attrs]:
        delattr(raw, name)
    vars(raw).update(attrs)
    raw.grid.grid[:] = cells
    for obj, saved in saved_objects:
        vars(obj).clear()
        vars(obj).update(saved)
    raw.np_random.bit_generator.state = rng


__all__ = ["MAX_STATES", "Fact", "facts", "objects", "offered", "restore_state", "save_state", "solve", "steps_taken"]
