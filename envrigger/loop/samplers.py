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

PLR_SCORES = ("value_loss", "success")  # the published score (positive value loss), and learnability p(1-p)


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
    """Prioritized level replay of the original env's levels, most worth learning first (Jiang et al., 2021).

    With probability ``replay_p`` (once ``min_buffer`` levels have been played) an episode
    replays a seen level of env 0 (the original), drawn by rank of its score (temperature
    ``beta``) mixed with staleness ``rho``; otherwise a fresh seed is played, on env 0 or on
    the env ``chooser`` picks (a :class:`Curriculum` over the original and admitted
    components). The buffer keeps the ``capacity`` highest-scoring levels.

    ``score="value_loss"`` is the published score: the positive value loss of the level's
    latest episode, the mean over its steps of ``max(GAE advantage, 0)``, which a learner
    with a value function reports through :meth:`score` (the PPO learner does, after each
    rollout). A level not yet scored that way (a learner without a value function reports
    none) ranks by ``score="success"``'s score: p(1-p), p the learner's smoothed success
    rate there, a learner-independent stand-in that is flat while nothing is solved.
    Reshaped levels are never replayed: replaying the easiest of them taught a learner the
    reshaping instead of the task.

    Example:
        >>> import numpy as np
        >>> plr = PLR(np.random.default_rng(0), min_buffer=2, score="success")
        >>> for seed in (10, 11, 12):
        ...     plr.update(0, seed, success=False)
        >>> plr.update(0, 11, success=True)   # sometimes solved: the most learnable
        >>> replays = [plr.replay() for _ in range(400)]
        >>> max({(0, 10), (0, 11), (0, 12)}, key=replays.count)
        (0, 11)
        >>> plr = PLR(np.random.default_rng(0), min_buffer=2)   # the published score
        >>> for seed, loss in ((10, 0.01), (11, 0.4), (12, 0.02)):
        ...     plr.update(0, seed, success=False); plr.score(0, seed, loss)
        >>> replays = [plr.replay() for _ in range(400)]
        >>> max({(0, 10), (0, 11), (0, 12)}, key=replays.count)   # where the value function is most wrong
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
        score: str = "value_loss",
        replay_reshaped: bool = False,
    ) -> None:
        if score not in PLR_SCORES:
            raise ValueError(f"PLR score {score!r} is unknown; use one of {', '.join(PLR_SCORES)}")
        self.rng, self.replay_p, self.beta, self.rho = rng, replay_p, beta, rho
        self.capacity, self.min_buffer, self.chooser, self.scoring = capacity, min_buffer, chooser, score
        self.losses: dict[tuple[int, int], float] = {}  # each level's latest positive value loss (score="value_loss")
        self.replay_reshaped = replay_reshaped  # ACCEL replays edited levels too; PLR and the rigger arm only original ones
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
        score = np.array([self._score(k) for k in levels])
        ranks = np.empty(len(levels))
        ranks[np.argsort(-score, kind="stable")] = np.arange(1, len(levels) + 1)
        h = (1.0 / ranks) ** (1.0 / self.beta)
        stale = np.array([self.clock - self.last[k] for k in levels], dtype=float)
        weights = (1 - self.rho) * h / h.sum() + self.rho * (stale / stale.sum() if stale.sum() > 0 else 1.0 / len(levels))
        level = levels[int(self.rng.choice(len(levels), p=weights / weights.sum()))]
        self.last[level] = self.clock
        self.replays += 1
        return level

    def _score(self, key: tuple[int, int]) -> float:
        """A level's score: its latest positive value loss where scored so, else its learnability p(1-p)."""
        if self.scoring == "value_loss" and key in self.losses:
            return self.losses[key]
        p = (self.wins[key] + 1) / (self.tries[key] + 2)
        return float(p * (1 - p))

    def score(self, index: int, seed: int, loss: float) -> None:
        """Record a played level's positive value loss (the learner's, after its episode); only env 0's levels are kept."""
        key = (index, seed)
        if key in self.tries and np.isfinite(loss):  # a level the buffer keeps (env 0's, or any with replay_reshaped)
            self.losses[key] = float(loss)

    def level_scores(self) -> dict[int, float]:
        """Each env's mean score over the levels the buffer keeps of it (what ACCEL ranks its edits by)."""
        by_env: dict[int, list[float]] = {}
        for key in self.tries:
            by_env.setdefault(key[0], []).append(self._score(key))
        return {index: float(np.mean(scores)) for index, scores in by_env.items()}

    def forget_reshaped(self) -> None:
        """Drop every level not of env 0: the envs behind the other indices are about to change."""
        for key in [k for k in self.tries if k[0] != 0]:
            for table in (self.wins, self.tries, self.last, self.losses):
                table.pop(key, None)

    def draw(self, fresh: Callable[[], int]) -> tuple[int, int]:
        level = self.replay()
        if level is not None:
            return level
        return (self.chooser.pick() if self.chooser is not None else 0), fresh()

    def state(self) -> dict[str, Any]:
        """The buffer and the generator, as JSON-able data (:meth:`restore` reads it back)."""
        return {
            "levels": [[i, s, self.wins[(i, s)], self.tries[(i, s)], self.last[(i, s)]] for i, s in self.tries],
            "losses": [[i, s, loss] for (i, s), loss in self.losses.items()],
            "clock": self.clock,
            "replays": self.replays,
            "rng": self.rng.bit_generator.state,
        }

    def restore(self, state: dict[str, Any]) -> None:
        for index, seed, wins, tries, last in state["levels"]:
            key = (int(index), int(seed))
            self.wins[key], self.tries[key], self.last[key] = float(wins), float(tries), int(last)
        for index, seed, loss in state.get("losses", []):  # a buffer saved before value losses were kept has none
            self.losses[(int(index), int(seed))] = float(loss)
        self.clock, self.replays = int(state["clock"]), int(state["replays"])
        self.rng.bit_generator.state = state["rng"]

    def drop(self, index: int, seed: int) -> None:
        for table in (self.wins, self.tries, self.last, self.losses):
            table.pop((index, seed), None)

    def update(self, index: int, seed: int, success: bool) -> None:
        if self.chooser is not None:
            self.chooser.update(index, seed, success)
        if index != 0 and not self.replay_reshaped:
            return  # only the original env's levels are replayed: reshaped levels are fresh draws of the curriculum
        key = (index, seed)
        self.wins[key] = self.wins.get(key, 0.0) + success
        self.tries[key] = self.tries.get(key, 0.0) + 1
        self.last.setdefault(key, self.clock)
        if len(self.tries) > self.capacity:  # forget the level least worth replaying
            worst = min(self.tries, key=self._score)
            for table in (self.wins, self.tries, self.last, self.losses):
                table.pop(worst, None)
