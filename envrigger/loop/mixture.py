"""The mixture env: one Gymnasium env over an arm's specs, and the evidence it records.

Contains :class:`MixtureEnv`, a Gymnasium env that at every reset asks its sampler for
``(env index, seed)`` and plays that level, so one learner (tabular, or a vectorized SB3
model) trains across all of an arm's envs, and :class:`TrainingEpisodes`, the learner's own last
training episodes on the original env, kept for the diagnosis.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from envharness.adapters.base import is_reserved
from envharness.errors import TransformError
from envharness.offclock import steps_taken
from envharness.spec import HarnessSpec
from envharness.verifier import Verdict
from envrigger.errors import ArmError
from envrigger.loop.levels import Seeds


class TrainingEpisodes:
    """The learner's own last ``keep`` training episodes on the original env, recorded for diagnosis.

    Only episodes on env 0 (the original) that start once ``after`` training steps have
    been taken are recorded, so the evidence shows the learner near the end of its
    training and costs no extra interaction. :meth:`save` writes them as a run directory
    that :func:`~envrigger.diagnose.diagnose` reads like any collected run.

    Example:
        >>> evidence = TrainingEpisodes(keep=2, after=0)
        >>> evidence.active(), len(evidence.episodes)
        (True, 0)
    """

    def __init__(self, keep: int, after: int) -> None:
        self.episodes: deque[tuple[Any, list[Any]]] = deque(maxlen=keep)
        self.after, self.steps = after, 0

    def active(self) -> bool:
        return self.steps >= self.after

    def save(self, path: str | Path, base: HarnessSpec, policy_id: str) -> Any:
        from envrigger.data import TrajectoryStore

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
    reshaped levels played join ``seeds.levels`` beside the base levels. An env that raises
    (at reset or in a step) ends that episode as a failure for the learner; the error is
    kept in ``errors``, the level is dropped from the sampler, and the env is built afresh.

    Example:
        >>> from envharness import HarnessSpec
        >>> from envrigger.loop.samplers import Fixed
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
        evidence: TrainingEpisodes | None = None,
    ) -> None:
        self.specs, self.sampler, self.seeds, self.on_episode = list(specs), sampler, seeds, on_episode
        self.evidence = evidence
        self._recording: list[Any] | None = None
        self.envs: list[Any] = [None] * len(self.specs)
        first = self._env(0)
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self.steps = self.episodes = self.refused = 0
        self.search_steps = 0  # env steps the resets' searches took (a start along a MiniGrid level's solution)
        self.setup_steps = 0  # env steps the resets' setup played (a replayed prefix, the walked part of a start)
        self.errors: list[str] = []  # the env raised: each such episode ended as a failure, its level dropped
        self.current: tuple[int, int] | None = None
        self._last_obs: Any = None
        self._length = 0

    def _env(self, index: int) -> Any:
        if self.envs[index] is None:
            self.envs[index] = self.specs[index].build()
        return self.envs[index]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        for _ in range(1000):
            index, level_seed = self.sampler.draw(self.seeds.next)
            env = self._env(index)  # a spec that cannot be built at all is no level's crash: that error propagates
            searched, setup = steps_taken(kind="search"), steps_taken(kind="setup")
            try:
                obs, info = env.reset(seed=int(level_seed))
            except TransformError:
                self.refused += 1
                continue
            except Exception as error:  # the env itself crashed on this level: never train on it, draw another
                self._crashed(index, level_seed, error)
                continue
            finally:
                self.search_steps += steps_taken(kind="search") - searched
                self.setup_steps += steps_taken(kind="setup") - setup
            level = "" if info.get("level_id") is None else str(info["level_id"])
            if index != 0:
                # A reshaping can turn a training level into a reserved one (MoveAgent onto a held-out start): skip it too.
                if is_reserved(level, self.seeds.reserved):
                    self.seeds.skipped += 1
                    continue
            elif is_reserved(level, self.seeds.reserved):  # fresh seeds never are: a sampler handed out a level of its own
                raise ArmError(
                    f"the sampler picked seed {int(level_seed)}, a held-out or validation level ({level}); an arm's sampler "
                    "draws new levels through the fresh-seed callback it is given, and replays only levels it drew so"
                )
            self.seeds.levels.add(level)  # every level played, a replayed one too (its record is the round's)
            self.current, self._length = (index, int(level_seed)), 0
            self._return = 0.0
            if self.evidence is not None and index == 0 and self.evidence.active():
                self._recording, self._level, self._started = [], (info.get("level", {}), info.get("level_id")), time.perf_counter()
            else:
                self._recording = None
            info["mixture"] = {"index": index, "seed": int(level_seed)}
            self._last_obs = obs
            return obs, info
        raise TransformError(f"{self.specs[index].env_id}: 1000 levels in a row were refused by the state transforms")

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        assert self.current is not None, "reset() first"
        index, level_seed = self.current
        env = self.envs[index]
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as error:  # the env crashed mid-episode: a failed episode for the learner, the run goes on
            self.steps += 1
            self._crashed(index, level_seed, error)
            if self.on_episode is not None:
                self.on_episode(index, level_seed, False, self._length + 1)
            self.episodes += 1
            self._recording = None
            return self._last_obs, 0.0, True, False, {"verdict": Verdict(False, 0.0, "error"), "error": self.errors[-1]}
        self._last_obs = obs
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
        info["mixture"] = {"index": index, "seed": level_seed}  # the level this step was played on (a learner's scoring reads it)
        return obs, reward, terminated, truncated, info

    def score_level(self, index: int, seed: int, loss: float) -> None:
        """Pass a learner's positive value loss on a level it played to the sampler, if the sampler scores by it (PLR)."""
        score = getattr(self.sampler, "score", None)
        if score is not None:
            score(index, seed, loss)

    def _crashed(self, index: int, level_seed: int, error: BaseException) -> None:
        """Record the env's exception, drop the level from the sampler, and build the env afresh (its state is unknown)."""
        self.errors.append(f"{self.specs[index].env_id} (env {index}, seed {level_seed}): {type(error).__name__}: {str(error)[:120]}")
        drop = getattr(self.sampler, "drop", None)  # a sampler of your own may keep no buffer
        if drop is not None:
            drop(index, level_seed)
        broken, self.envs[index] = self.envs[index], None
        try:
            if broken is not None:
                broken.close()
        except Exception:  # a crashed env may fail to close too; it is dropped either way
            pass

    def close(self) -> None:
        for env in self.envs:
            if env is not None:
                env.close()
        self.envs = [None] * len(self.specs)
