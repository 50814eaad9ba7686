"""What each arm of the loop trains on: level samplers and the mixture env that plays them.

Contains the samplers (:class:`Fixed`, :class:`Uniform`, :class:`Curriculum`, :class:`PLR`),
:func:`random_specs` (domain randomization over the catalog), :class:`LevelSplit` (the
level ids training must never see) and :class:`MixtureEnv`, a Gymnasium env that at every
reset asks its sampler for ``(env index, seed)`` and plays that level, so one learner —
tabular, or a vectorized SB3 model — trains across all of an arm's envs.

A sampler hands out an env index and a seed and hears back each episode's success;
fresh seeds come in order from a shared counter, and a fresh seed whose *base* level (the
original env's level for that seed, before any state transform) is reserved for
validation or held-out evaluation is skipped before it is played.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envharness.errors import EnvHarnessError, TransformError
from envharness.spec import HarnessSpec
from envharness.transforms import TRANSFORMS
from envharness.transforms.base import _bounds


class Seeds:
    """Fresh training seeds in order, skipping every seed whose base level is reserved.

    Example:
        >>> from envharness import HarnessSpec
        >>> spec = HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0")
        >>> reserved = {Seeds(spec, 0).level(100)}
        >>> seeds = Seeds(spec, start=100, reserved=reserved)
        >>> seed = seeds.next()
        >>> seed > 100 and seeds.level(seed) not in reserved and seeds.skipped >= 1
        True
    """

    def __init__(self, base: HarnessSpec, start: int, reserved: set[str] | None = None) -> None:
        self.base, self.counter, self.reserved = base, start, reserved or set()
        self.skipped = 0
        self.issued: list[int] = []
        self.levels: set[str] = set()  # base level ids of every issued seed
        self._probe: Any = None

    def level(self, seed: int) -> str:
        """The original env's level id for ``seed`` (one reset of a plain base env)."""
        if self._probe is None:
            self._probe = self.base.build()
        level = self._probe.reset(seed=int(seed))[1].get("level_id")
        return "" if level is None else str(level)

    def next(self) -> int:
        while True:
            seed, self.counter = self.counter, self.counter + 1
            level = self.level(seed)
            if level in self.reserved:
                self.skipped += 1
                continue
            self.levels.add(level)
            self.issued.append(seed)
            return seed

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None


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

    def scores(self) -> np.ndarray:
        p = (self.wins + 1) / (self.tries + 2)
        return p * (1 - p)

    def pick(self) -> int:
        if self.n == 1:
            return 0
        self.clock += 1
        score = self.scores()
        stale = self.clock - self.last
        weights = (1 - self.staleness) * score / score.sum() + self.staleness * stale / max(stale.sum(), 1e-12)
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


def _draw(cls: Any, rng: np.random.Generator) -> Any:
    """An instance of catalog class ``cls`` with every bounded numeric parameter drawn uniformly.

    Integers and floats are drawn within their declared bounds, capped at four times the
    default (or the lower bound plus four) so a draw stays on the scale of the env.
    """
    params: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        lo, hi = _bounds(field)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            continue
        default = field.default if isinstance(field.default, (int, float)) else None
        if default is not None:
            hi = min(hi, max(4.0 * abs(default), lo + 4.0))
        if field.annotation is int:
            params[name] = int(rng.integers(math.ceil(lo), math.floor(hi) + 1))
        elif field.annotation is float or (default is None and "float" in str(field.annotation)):
            params[name] = float(rng.uniform(lo, hi))
    return cls(**params)


def random_specs(base: HarnessSpec, rng: np.random.Generator, n: int, tries: int = 200) -> list[HarnessSpec]:
    """Up to ``n`` domain-randomized specs: one catalog transform each, parameters drawn at random.

    Every state, rule and observation transform of the catalog that builds on ``base``
    with defaults-or-drawn parameters, is one an automatic proposer may offer there, keeps
    the base env's observation and action spaces, and survives one reset is a candidate;
    no diagnosis is involved. Draws that fail to build are skipped.

    Example:
        >>> import numpy as np
        >>> from envharness import HarnessSpec
        >>> specs = random_specs(HarnessSpec(env_id="MiniGrid-DoorKey-5x5-v0"), np.random.default_rng(0), 4)
        >>> len(specs), all(len(s.transforms) == 1 for s in specs)
        (4, True)
    """
    probe = base.build()
    spaces = (probe.observation_space, probe.action_space)
    view = probe.adapter
    probe.close()
    kinds = sorted(
        name
        for name, cls in TRANSFORMS.items()
        if cls.kind in ("state", "rule", "observation") and cls.__module__.startswith("envharness.")
    )
    out: list[HarnessSpec] = []
    seen: set[str] = set()
    for _ in range(tries):
        if len(out) >= n:
            break
        cls = TRANSFORMS[kinds[int(rng.integers(len(kinds)))]]
        try:
            transform = _draw(cls, rng)
            if not transform.proposable(view):
                continue
            spec = base.extended(transform)
            if spec.hash() in seen:
                continue
            env = spec.build()
            try:
                if (env.observation_space, env.action_space) != spaces:
                    continue
                env.reset(seed=int(rng.integers(2**31)))
            finally:
                env.close()
        except (EnvHarnessError, ValueError, TypeError):
            continue  # parameters the transform refuses, or an env it does not apply to
        seen.add(spec.hash())
        out.append(spec)
    return out


class Evidence:
    """The learner's own last ``keep`` training episodes on the original env, recorded for diagnosis.

    Only episodes on env 0 (the original) that start once ``after`` training steps have
    been taken are recorded, so the evidence shows the learner near the end of its
    training and costs no extra interaction. :meth:`save` writes them as a run directory
    that :func:`~envrigger.diagnose.diagnose` reads like any collected run.

    Example:
        >>> evidence = Evidence(keep=2, after=0)
        >>> evidence.active(), len(evidence.episodes)
        (True, 0)
    """

    def __init__(self, keep: int, after: int) -> None:
        self.episodes: deque[tuple[Any, list[Any]]] = deque(maxlen=keep)
        self.after, self.steps = after, 0

    def active(self) -> bool:
        return self.steps >= self.after

    def save(self, path: str | Path, base: HarnessSpec, policy_id: str) -> Any:
        from envrigger.trajectory import TrajectoryStore

        store = TrajectoryStore.create(
            path, meta={"spec": base.model_dump(mode="json"), "spec_hash": base.hash(), "policy": policy_id, "source": "training episodes"}
        )
        episodes: list[Any] = []
        steps: list[Any] = []
        for number, (episode, records) in enumerate(self.episodes):
            episodes.append(dataclasses.replace(episode, episode_id=number, policy_id=policy_id))
            steps.extend(dataclasses.replace(r, episode_id=number) for r in records)
        if episodes:
            store.append(episodes, steps)
        return store


class MixtureEnv(gym.Env):
    """One Gymnasium env over several specs: each reset plays the level the sampler picks.

    Several MixtureEnvs (the sub-envs of a vectorized learner) share one sampler and one
    :class:`Seeds`, so the arm's level stream is one sequence. ``on_episode`` hears
    ``(index, seed, success, length)`` at the end of every episode. A reset that a state
    transform refuses for this seed (no valid placement) is skipped, and so is a reshaped
    level whose own level id is reserved: the next level is drawn. The level ids of
    reshaped levels played join ``seeds.levels`` beside the base levels.

    Example:
        >>> from envharness import HarnessSpec
        >>> base = HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0")
        >>> env = MixtureEnv([base], Fixed(), Seeds(base, start=0))
        >>> obs, info = env.reset()
        >>> info["mixture"]
        {'index': 0, 'seed': 0}
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        specs: list[HarnessSpec],
        sampler: Any,
        seeds: Seeds,
        on_episode: Callable[..., None] | None = None,
        evidence: Evidence | None = None,
    ) -> None:
        self.specs, self.sampler, self.seeds, self.on_episode = list(specs), sampler, seeds, on_episode
        self.evidence = evidence
        self._recording: list[Any] | None = None
        self.envs: list[Any] = [None] * len(self.specs)
        first = self._env(0)
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self.steps = self.episodes = self.refused = 0
        self.current: tuple[int, int] | None = None
        self._length = 0

    def _env(self, index: int) -> Any:
        if self.envs[index] is None:
            self.envs[index] = self.specs[index].build()
        return self.envs[index]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        for _ in range(1000):
            index, level_seed = self.sampler.draw(self.seeds.next)
            try:
                obs, info = self._env(index).reset(seed=int(level_seed))
            except TransformError:
                self.refused += 1
                continue
            if index != 0:
                # A reshaping can turn a training level into a reserved one (MoveAgent onto a held-out start): skip it too.
                level = "" if info.get("level_id") is None else str(info["level_id"])
                if level in self.seeds.reserved:
                    self.seeds.skipped += 1
                    continue
                self.seeds.levels.add(level)
            self.current, self._length = (index, int(level_seed)), 0
            self._return = 0.0
            if self.evidence is not None and index == 0 and self.evidence.active():
                self._recording, self._level, self._started = [], (info.get("level", {}), info.get("level_id")), time.perf_counter()
            else:
                self._recording = None
            info["mixture"] = {"index": index, "seed": int(level_seed)}
            return obs, info
        raise TransformError(f"{self.specs[index].env_id}: 1000 levels in a row were refused by the state transforms")

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        assert self.current is not None, "reset() first"
        index, level_seed = self.current
        env = self.envs[index]
        obs, reward, terminated, truncated, info = env.step(action)
        self.steps += 1
        if self.evidence is not None:
            self.evidence.steps += 1
        if self._recording is not None:
            from envrigger.rollout import step_record

            self._recording.append(step_record(0, self._length, action, obs, reward, terminated, truncated, info, env.adapter))
            self._return += float(reward)
        self._length += 1
        if terminated or truncated:
            if self._recording is not None and self.evidence is not None:
                from envrigger.rollout import episode_record

                level, level_id = self._level
                spec = self.specs[0]
                self.evidence.episodes.append(
                    (
                        episode_record(
                            0,
                            spec.hash(),
                            spec.to_json(indent=None),
                            level_seed,
                            "",
                            self._recording,
                            self._return,
                            info["verdict"],
                            level,
                            level_id,
                            None,
                            time.perf_counter() - self._started,
                        ),
                        self._recording,
                    )
                )
                self._recording = None
            success = bool(info["verdict"].success)
            self.sampler.update(index, level_seed, success)
            self.episodes += 1
            if self.on_episode is not None:
                self.on_episode(index, level_seed, success, self._length)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        for env in self.envs:
            if env is not None:
                env.close()
        self.envs = [None] * len(self.specs)


def first_free(base: HarnessSpec, seeds: Iterable[int], reserved: set[str], count: int, levels: set[str] | None = None) -> list[int]:
    """The first ``count`` of ``seeds`` whose base level is not reserved; ``levels``, if given, collects their levels.

    Example:
        >>> from envharness import HarnessSpec
        >>> spec = HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0")
        >>> taken = Seeds(spec, 0).level(0)
        >>> 0 in first_free(spec, range(10), {taken}, 3)
        False
    """
    picker = Seeds(base, 0, reserved)
    out: list[int] = []
    try:
        for seed in seeds:
            if len(out) >= count:
                break
            level = picker.level(seed) if reserved or levels is not None else ""
            if level not in reserved:
                out.append(int(seed))
                if levels is not None:
                    levels.add(level)
    finally:
        picker.close()
    return out
