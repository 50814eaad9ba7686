"""Minari datasets in and out (optional extra: ``pip install "envharness[minari]"``).

Contains :func:`export_minari` and :func:`import_minari`.

Our runs keep digests, not every observation, so export *replays* each episode from its
spec, seed and actions (the harness is deterministic) to recover the full observations,
and refuses if a replay does not reproduce the stored digests. Import reads any local
Minari dataset; success comes from the last step's ``success``/``is_success`` info when
present, else from a termination with positive reward.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from envharness.errors import EnvHarnessError
from envrigger.data.records import (
    EpisodeRecord,
    StepRecord,
    dumps,
    inline_observation,
    observation_digest,
)
from envrigger.data.store import TrajectoryStore
from envrigger.errors import TrajectoryError


def _minari() -> Any:
    try:
        import minari
    except ImportError:
        raise TrajectoryError('Minari is not installed; pip install "envharness[minari]"') from None
    return minari


def _stack(items: list[Any]) -> Any:
    if items and isinstance(items[0], dict):
        return {k: _stack([i[k] for i in items]) for k in items[0]}
    return np.asarray(items)


def export_minari(store: TrajectoryStore, dataset_id: str) -> int:
    """Write every episode of ``store`` as a local Minari dataset ``dataset_id``; returns the count."""
    from minari.data_collector import EpisodeBuffer

    from envharness.spec import HarnessSpec

    minari = _minari()
    buffers: list[Any] = []
    env: Any = None
    spec_json: str | None = None
    for episode, steps in store.iter_episode_steps():
        if episode.error is not None:
            continue
        if not episode.spec_json or "env_id" not in json.loads(episode.spec_json):
            raise TrajectoryError(f"episode {episode.episode_id}: no spec to replay; only runs collected from a spec export to Minari")
        if spec_json is None:
            spec_json = episode.spec_json
            try:
                env = HarnessSpec.from_json(spec_json).build()
            except EnvHarnessError as error:
                raise TrajectoryError(
                    f"episode {episode.episode_id}: cannot rebuild its env to replay it ({error}); only runs collected from a buildable spec export to Minari"
                ) from None
        elif episode.spec_json != spec_json:
            raise TrajectoryError(f"episode {episode.episode_id}: a second spec in one run; export one spec per dataset")
        obs, _ = env.reset(seed=episode.seed)
        observations, actions = [obs], []
        for step in steps:
            action = json.loads(step.action)
            obs, *_ = env.step(action)
            if observation_digest(obs) != step.obs_digest:
                raise TrajectoryError(
                    f"episode {episode.episode_id} step {step.t}: replay diverged from the stored trajectory; was it collected with another version?"
                )
            observations.append(obs)
            actions.append(action)
        buffers.append(
            EpisodeBuffer(
                id=len(buffers),
                seed=episode.seed,
                observations=_stack(observations),
                actions=np.asarray(actions),
                rewards=[s.reward for s in steps],
                terminations=[s.terminated for s in steps],
                truncations=[s.truncated for s in steps],
                # a column per step, shape (T+1, 1): Minari's Arrow storage cannot decode 1-D info arrays
                infos={"success": np.asarray([False] * len(steps) + [episode.success]).reshape(-1, 1)},
            )
        )
    if not buffers:
        raise TrajectoryError(f"{store.path}: no error-free episodes to export")
    with warnings.catch_warnings():  # Minari nags about optional metadata (author, permalink...)
        warnings.simplefilter("ignore", UserWarning)
        minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=buffers,
            env=env.spec,
            eval_env=env.spec,
            data_format="arrow",
            observation_space=env.observation_space,
            action_space=env.action_space,
            author="envrigger",
            algorithm_name=f"envrigger run {store.path.name}",
            description=f"exported from {store.path}",
        )
    return len(buffers)


def import_minari(dataset_id: str, out: str | Path) -> TrajectoryStore:
    """Read a local Minari dataset into a run directory."""
    minari = _minari()
    try:
        dataset = minari.load_dataset(dataset_id)
    except Exception as error:
        raise TrajectoryError(f"minari:{dataset_id}: cannot load it locally ({type(error).__name__}); check `minari list local`") from None
    env_id = dataset.spec.env_spec.id if dataset.spec.env_spec is not None else "minari"
    spec_json = json.dumps({"env_id": env_id})
    from envharness.spec import HarnessSpec

    spec_hash = HarnessSpec(env_id=env_id).hash()
    store = TrajectoryStore.create(out, meta={"source": f"minari:{dataset_id}", "format": "minari"}, exist_ok=True)
    first = store.next_episode_id()
    episodes, all_steps = [], []
    for index, data in enumerate(dataset.iterate_episodes()):
        episode_id = first + index
        n = len(data.rewards)
        infos = data.infos or {}
        flag = infos.get("success", infos.get("is_success"))
        for t in range(n):
            obs = _index(data.observations, t + 1)
            all_steps.append(
                StepRecord(
                    episode_id=episode_id,
                    t=t,
                    action=dumps(_index(data.actions, t)),
                    reward=float(data.rewards[t]),
                    terminated=bool(data.terminations[t]),
                    truncated=bool(data.truncations[t]),
                    obs_digest=observation_digest(obs),
                    obs=inline_observation(obs),
                )
            )
        success = (
            bool(np.asarray(flag).reshape(-1)[-1])
            if flag is not None and len(flag)
            else bool(n and data.terminations[-1] and data.rewards[-1] > 0)
        )
        reason = "success" if success else ("timeout" if n and data.truncations[-1] else "failure")
        episodes.append(
            EpisodeRecord(
                episode_id=episode_id,
                spec_hash=spec_hash,
                spec_json=spec_json,
                seed=None,
                policy_id=f"minari:{dataset_id}",
                length=n,
                return_=float(np.sum(data.rewards)),
                success=success,
                score=float(success),
                reason=reason,
                terminal_cause=None if success else reason,
            )
        )
    store.append(episodes, all_steps)
    return store


def _index(data: Any, i: int) -> Any:
    if isinstance(data, dict):
        return {k: _index(v, i) for k, v in data.items()}
    return data[i]
