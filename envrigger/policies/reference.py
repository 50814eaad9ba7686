"""Reference solvers: planners and controllers that solve the built-in families.

Contains :class:`TabularPlanner` (FrozenLake, Taxi, CliffWalking: breadth-first search
over the env's transition table), :class:`MiniGridPlanner` (breadth-first search over
position, direction, carried key and opened doors), :class:`CartPoleController` and
:class:`MountainCarController`, :class:`CodeRepairSolver` and :class:`TextWorldSolver` (a generated
text game's own walkthrough). Each family registers its solver in :mod:`envrigger.families`.

They read the base env's state (like a privileged planner would) and replan every step,
so they stay correct under rule transforms such as ``ActionSlip``.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class TabularPlanner:
    """Shortest plan to the best terminal transition in a toy-text transition table.

    Uses each action's most likely outcome, so on slippery FrozenLake it is a good
    heuristic, not an optimal policy.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", is_slippery=False)
        >>> policy = TabularPlanner(env)
        >>> obs, info = env.reset(seed=0)
        >>> done = False
        >>> while not done:
        ...     obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
        ...     done = terminated or truncated
        >>> info["verdict"].success
        True
    """

    name = "reference"

    def __init__(self, env: Any) -> None:
        self.env = env

    def _plan(self, start: int) -> list[int]:
        table = self.env.unwrapped.P
        goal_reward = max(r for s in table for a in table[s] for p, _, r, done in table[s][a] if done)
        parents: dict[int, tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            s = queue.popleft()
            for a in sorted(table[s]):
                p, s2, r, done = max(table[s][a], key=lambda outcome: outcome[0])
                if done and r == goal_reward and s2 != s:
                    path = [a]
                    step = parents[s]
                    while step is not None:
                        s, a_prev = step
                        path.append(a_prev)
                        step = parents[s]
                    return path[::-1]
                if not done and s2 not in parents:
                    parents[s2] = (s, a)
                    queue.append(s2)
        return []

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        plan = self._plan(int(self.env.unwrapped.s))
        return plan[0] if plan else 0


LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)
DIRS = ((1, 0), (0, 1), (-1, 0), (0, -1))


class MiniGridPlanner:
    """Shortest action sequence to a goal tile: turns, moves, key pickups and door toggles.

    Search state: position, direction, the key carried, and which doors are open. Keys
    open locked doors of their colour. ``targets`` names the tile types to reach (goal by
    default). With no plan (no reachable target) it turns left.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-DoorKey-8x8-v0")
        >>> policy = MiniGridPlanner(env)
        >>> obs, info = env.reset(seed=1)
        >>> done = False
        >>> while not done:
        ...     obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
        ...     done = terminated or truncated
        >>> info["verdict"].reason
        'reached goal'
    """

    name = "reference"
    max_expansions = 200_000

    def __init__(self, env: Any, targets: tuple[str, ...] = ("goal",)) -> None:
        self.env = env
        self.targets = targets

    def _plan(self) -> list[int]:
        raw = self.env.unwrapped
        grid = raw.grid
        cells = {(x, y): grid.get(x, y) for x in range(grid.width) for y in range(grid.height)}
        doors = sorted(p for p, c in cells.items() if c is not None and c.type == "door")
        door_index = {p: i for i, p in enumerate(doors)}
        opened = sum(1 << i for i, p in enumerate(doors) if cells[p].is_open)
        carrying = raw.carrying
        held = (carrying.type, carrying.color) if carrying is not None else None
        start: tuple = (int(raw.agent_pos[0]), int(raw.agent_pos[1]), int(raw.agent_dir), held, frozenset(), opened)
        parents: dict[tuple, tuple | None] = {start: None}
        queue = deque([start])
        expansions = 0
        while queue and expansions < self.max_expansions:
            state = queue.popleft()
            expansions += 1
            x, y, d, held, picked, opened = state
            cell = cells[(x, y)]
            if cell is not None and cell.type in self.targets:
                path = []
                link = parents[state]
                while link is not None:
                    state, action = link
                    path.append(action)
                    link = parents[state]
                return path[::-1]
            fx, fy = x + DIRS[d][0], y + DIRS[d][1]
            front = cells.get((fx, fy))
            if front is not None and (fx, fy) in picked:
                front = None
            successors = [((x, y, (d - 1) % 4, held, picked, opened), LEFT), ((x, y, (d + 1) % 4, held, picked, opened), RIGHT)]
            if (fx, fy) not in cells:
                pass  # off the grid (a door in the outer wall leads nowhere)
            elif (
                front is None
                or front.type == "goal"
                or front.type in self.targets
                or (front.type == "door" and opened >> door_index[(fx, fy)] & 1)
            ):
                successors.append(((fx, fy, d, held, picked, opened), FORWARD))
            elif front.type == "key" and held is None:
                successors.append(((x, y, d, (front.type, front.color), picked | {(fx, fy)}, opened), PICKUP))
            elif front.type == "door":
                can_open = not front.is_locked or held == ("key", front.color)
                if can_open:
                    successors.append(((x, y, d, held, picked, opened | 1 << door_index[(fx, fy)]), TOGGLE))
            for nxt, action in successors:
                if nxt not in parents:
                    parents[nxt] = (state, action)
                    queue.append(nxt)
        return []

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        plan = self._plan()
        return plan[0] if plan else LEFT


class CartPoleController:
    """A linear state-feedback controller that balances CartPole for its whole time limit.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("CartPole-v1")
        >>> policy, (obs, info), steps = CartPoleController(env), env.reset(seed=0), 0
        >>> while not info["verdict"].success and steps < 500:
        ...     obs, _, _, _, info = env.step(policy.act(obs, info)); steps += 1
        >>> steps, info["verdict"].reason
        (500, 'balanced to the time limit')
    """

    name = "reference"

    def __init__(self, env: Any) -> None:
        self.env = env

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        x, x_dot, theta, theta_dot = self.env.unwrapped.state
        return int(theta + 0.5 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


class MountainCarController:
    """Pushes along the velocity to pump energy until the car reaches the flag.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MountainCar-v0")
        >>> policy, (obs, info), done = MountainCarController(env), env.reset(seed=0), False
        >>> while not done:
        ...     obs, _, terminated, truncated, info = env.step(policy.act(obs, info)); done = terminated or truncated
        >>> info["verdict"].success
        True
    """

    name = "reference"

    def __init__(self, env: Any) -> None:
        self.env = env

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        return 2 if self.env.unwrapped.state[1] >= 0 else 0


class CodeRepairSolver:
    """Applies the task's known fix through the tools: view, replace (bottom-up), run tests, submit.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", task="fizzbuzz")
        >>> policy, (obs, info), done = CodeRepairSolver(env), env.reset(seed=0), False
        >>> while not done:
        ...     obs, _, terminated, truncated, info = env.step(policy.act(obs, info)); done = terminated or truncated
        >>> info["verdict"].reason
        'hidden tests pass'
    """

    name = "reference"

    def __init__(self, env: Any) -> None:
        self.env = env
        self.plan: list[str] = []

    def reset(self, seed: int | None) -> None:
        self.plan = []

    def _make_plan(self) -> list[str]:
        import json

        task = self.env.unwrapped.task
        plan = [json.dumps({"tool": "view", "path": task.path})]
        for start, end, text in sorted(task.fix, reverse=True):  # bottom-up keeps line numbers valid
            plan.append(json.dumps({"tool": "replace", "path": task.path, "start": start, "end": end, "text": text}))
        plan += [json.dumps({"tool": "run_tests"}), json.dumps({"tool": "submit"})]
        return plan

    def act(self, obs: Any, info: dict[str, Any]) -> str:
        if "task" in info or not self.plan:  # a reset's info names the task: start a new plan
            self.plan = self._make_plan()
        return self.plan.pop(0)


class TextWorldSolver:
    """Plays the game's own winning commands (TextWorld's ``policy_commands``), replanned every step.

    Reads the base env's current walkthrough and picks that command's slot in the listed
    commands; when the walkthrough's next command is not listed (cut by ``max_commands``)
    it takes slot 0. Needs the ``textworld`` extra, like the env.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/TextWorld-v0", levels=[5], games_per_level=2)
        >>> policy, (obs, info), done = TextWorldSolver(env), env.reset(seed=0), False
        >>> while not done:
        ...     obs, _, terminated, truncated, info = env.step(policy.act(obs, info)); done = terminated or truncated
        >>> info["verdict"]
        Verdict(success=True, score=1.0, reason='won the game')
    """

    name = "reference"

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, seed: int | None) -> None:
        pass

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        raw = self.env.unwrapped
        plan, listed = raw.policy, raw.commands
        return listed.index(plan[0]) if plan and plan[0] in listed else 0
