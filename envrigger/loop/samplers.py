"""Level samplers: which env of an arm, and which seed, each training episode plays.

Contains :class:`Fixed` (the original env), :class:`Uniform`, :class:`Curriculum`
(learnability-weighted over the arm's envs) and :class:`PLR` (prioritized replay of the
original env's levels). A sampler hands out an env index and a seed and hears back each
episode's success; fresh seeds come in order from a shared :class:`~envrigger.loop.levels.Seeds`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class Fixed:
    """Always env 0 (the original), fresh seeds: the original-env arm.

    Example:
        >>> Fixed().pick(), Fixed().n
        (0, 1)
    """

    n = 1
    replays = 0

    def pick(self) -> int:
        return 0

    def draw(self, fresh: Callable[[], int]) -> tuple[int, int]:
        """The next episode's ``(env index, seed)``; ``fresh()`` issues a new training seed."""
        return self.pick(), fresh()

    def update(self, index: int, seed: int, success: bool) -> None:
        pass

    def drop(self, index: int, seed: int) -> None:
        """Never offer this level again: the env crashed on it (a sampler without a buffer offers only fresh seeds)."""


class Uniform(Fixed):
    """Each of ``n`` envs equally often, fresh seeds: domain randomization over a pool of specs.

    Example:
        >>> import numpy as np
        >>> sampler = Uniform(4, np.random.default_rng(0))
        >>> sorted({sampler.pick() for _ in range(100)})
        [0, 1, 2, 3]
    """

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.n, self.rng = n, rng

    def pick(self) -> int:
        return int(self.rng.integers(self.n))


class Curriculum(Fixed):
    """Samples training environments by learnability p(1-p), mixed with staleness (as in PLR).

    Example:
        >>> import numpy as np
        >>> c = Curriculum(3, np.random.default_rng(0))
        >>> for _ in range(50):
        ...     c.update(0, 0, True)      # env 0 is solved: nothing left to learn there
        >>> picks = [c.pick() for _ in range(200)]
        >>> picks.count(0) < picks.count(1)
        True
    """

    def __init__(self, n: int, rng: np.random.Generator, staleness: float = 0.3, decay: float = 0.95) -> None:
        self.n, self.rng, self.staleness, self.decay = n, rng, staleness, decay
        self.wins, self.tries = np.zeros(n), np.zeros(n)
        self.last = np.zeros(n)
        self.clock = 0
        self.weights = np.ones(n)  # each env's multiplier (the credit from the original env); 0 never picks it

    def scores(self) -> np.ndarray:
        p = (self.wins + 1) / (self.tries + 2)
        return p * (1 - p)

    def pick(self) -> int:
        if self.n == 1:
            return 0
        self.clock += 1
        score = self.scores()
        stale = self.clock - self.last
        weights = ((1 - self.staleness) * score / score.sum() + self.staleness * stale / max(stale.sum(), 1e-12)) * self.weights
        if weights.sum() <= 0:
            return 0
        choice = int(self.rng.choice(self.n, p=weights / weights.sum()))
        self.last[choice] = self.clock
        return choice

    def update(self, index: int, seed: int, success: bool) -> None:
        self.wins[index] = self.decay * self.wins[index] + success
        self.tries[index] = self.decay * self.tries[index] + 1


class PLR(Fixed):
    """Prioritized level replay of the original env's levels, most worth learning first.

    With probability ``replay_p`` (once ``min_buffer`` levels have been played) an episode
    replays a seen level of env 0 (the original), drawn by rank of its score p(1-p) (p the
    learner's smoothed success rate there; temperature ``beta``) mixed with staleness
    ``rho``; otherwise a fresh seed is played, on env 0 or on the env ``chooser`` picks (a
    :class:`Curriculum` over the original and admitted components). The buffer keeps the
    ``capacity`` most learnable levels (Jiang et al., 2021, with learnability in place of
    the value-loss score, which is learner-specific). Reshaped levels are never replayed:
    replaying the easiest of them taught a learner the reshaping instead of the task.

    Example:
        >>> import numpy as np
        >>> plr = PLR(np.random.default_rng(0), min_buffer=2)
        >>> for seed in (10, 11, 12):
        ...     plr.update(0, seed, success=False)
        >>> plr.update(0, 11, success=True)   # sometimes solved: the most learnable
        >>> replays = [plr.replay() for _ in range(400)]
        >>> max({(0, 10), (0, 11), (0, 12)}, key=replays.count)
        (0, 11)
    """

    def __init__(
        self,
        rng: np.random.Generator,
        replay_p: float = 0.5,
        beta: float = 0.3,
        rho: float = 0.3,
        capacity: int = 2000,
        min_buffer: int = 50,
        chooser: Any = None,
    ) -> None:
        self.rng, self.replay_p, self.beta, self.rho = rng, replay_p, beta, rho
        self.capacity, self.min_buffer, self.chooser = capacity, min_buffer, chooser
        self.wins: dict[tuple[int, int], float] = {}
        self.tries: dict[tuple[int, int], float] = {}
        self.last: dict[tuple[int, int], int] = {}
        self.clock = 0
        self.replays = 0

    def replay(self) -> tuple[int, int] | None:
        """A level to replay, or None for a fresh one."""
        self.clock += 1
        if len(self.tries) < self.min_buffer or self.rng.random() >= self.replay_p:
            return None
        levels = list(self.tries)
        p = np.array([(self.wins[k] + 1) / (self.tries[k] + 2) for k in levels])
        score = p * (1 - p)
        ranks = np.empty(len(levels))
        ranks[np.argsort(-score, kind="stable")] = np.arange(1, len(levels) + 1)
        h = (1.0 / ranks) ** (1.0 / self.beta)
        stale = np.array([self.clock - self.last[k] for k in levels], dtype=float)
        weights = (1 - self.rho) * h / h.sum() + self.rho * (stale / stale.sum() if stale.sum() > 0 else 1.0 / len(levels))
        level = levels[int(self.rng.choice(len(levels), p=weights / weights.sum()))]
        self.last[level] = self.clock
        self.replays += 1
        return level

    def draw(self, fresh: Callable[[], int]) -> tuple[int, int]:
        level = self.replay()
        if level is not None:
            return level
        return (self.chooser.pick() if self.chooser is not None else 0), fresh()

    def state(self) -> dict[str, Any]:
        """The buffer and the generator, as JSON-able data (:meth:`restore` reads it back)."""
        return {
            "levels": [[i, s, self.wins[(i, s)], self.tries[(i, s)], self.last[(i, s)]] for i, s in self.tries],
            "clock": self.clock,
            "replays": self.replays,
            "rng": self.rng.bit_generator.state,
        }

    def restore(self, state: dict[str, Any]) -> None:
        for index, seed, wins, tries, last in state["levels"]:
            key = (int(index), int(seed))
            self.wins[key], self.tries[key], self.last[key] = float(wins), float(tries), int(last)
        self.clock, self.replays = int(state["clock"]), int(state["replays"])
        self.rng.bit_generator.state = state["rng"]

    def drop(self, index: int, seed: int) -> None:
        for table in (self.wins, self.tries, self.last):
            table.pop((index, seed), None)

    def update(self, index: int, seed: int, success: bool) -> None:
        if self.chooser is not None:
            self.chooser.update(index, seed, success)
        if index != 0:
            return  # only the original env's levels are replayed: reshaped levels are fresh draws of the curriculum
        key = (index, seed)
        self.wins[key] = self.wins.get(key, 0.0) + success
        self.tries[key] = self.tries.get(key, 0.0) + 1
        self.last.setdefault(key, self.clock)
        if len(self.tries) > self.capacity:  # forget the least learnable level

            def learnability(k: tuple[int, int]) -> float:
                p = (self.wins[k] + 1) / (self.tries[k] + 2)
                return p * (1 - p)

            worst = min(self.tries, key=learnability)
            for table in (self.wins, self.tries, self.last):
                table.pop(worst, None)
