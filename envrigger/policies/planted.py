"""Agents with planted weaknesses, so diagnosis has something real to find.

Contains :class:`HastyCoder`, a code-repair agent that never runs the tests before
submitting.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


class HastyCoder:
    """Views the module, edits it, and submits without ever running the tests.

    With probability ``p_right`` it applies the right fix; otherwise an edit that changes
    nothing (a line rewritten as it was). With probability ``p_typo`` it first asks for a
    file that does not exist (a tool error). Seeded per episode.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", task="add")
        >>> agent, (obs, info) = HastyCoder(env, p_right=0.0), env.reset(seed=0)
        >>> agent.reset(0)
        >>> actions = []
        >>> while not actions or json.loads(actions[-1])["tool"] != "submit":
        ...     actions.append(agent.act(obs, info)); obs, _, _, _, info = env.step(actions[-1])
        >>> [json.loads(a)["tool"] for a in actions], info["verdict"].success
        (['view', 'replace', 'submit'], False)
    """

    name = "hasty-coder"

    def __init__(self, env: Any, p_right: float = 0.5, p_typo: float = 0.3, seed: int = 0) -> None:
        self.env, self.p_right, self.p_typo, self.seed = env, p_right, p_typo, seed
        self.plan: list[str] = []
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None) -> None:
        self.rng = np.random.default_rng([self.seed, 0 if seed is None else seed])
        self.plan = []

    def _make_plan(self) -> list[str]:
        task = self.env.unwrapped.task
        plan = []
        if self.rng.random() < self.p_typo:
            plan.append(json.dumps({"tool": "view", "path": "main.py"}))
        plan.append(json.dumps({"tool": "view", "path": task.path}))
        start, end, text = task.fix[0]
        if self.rng.random() < self.p_right:
            for s, e, t in sorted(task.fix, reverse=True):
                plan.append(json.dumps({"tool": "replace", "path": task.path, "start": s, "end": e, "text": t}))
        else:
            wrong = 1 if start > 1 else min(2, len(task.source.splitlines()))
            plan.append(
                json.dumps(
                    {"tool": "replace", "path": task.path, "start": wrong, "end": wrong, "text": task.source.splitlines()[wrong - 1]}
                )
            )
        plan.append(json.dumps({"tool": "submit"}))
        return plan

    def act(self, obs: Any, info: dict[str, Any]) -> str:
        if "task" in info or not self.plan:
            self.plan = self._make_plan()
        return self.plan.pop(0)
