"""Batched rollouts: N envs in lockstep, the policy acting on all of them at once (``batch=N``).

Stored episodes are identical to serial ones: each env keeps its own seed and policy stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from envrigger.rollout.episode import WALL_TIMEOUT, EpisodePlay, failed_episode


def batched_backend(
    envs: list[Any],
    policies: list[Any],
    tasks: list[tuple[int, int | None]],
    emit: Callable[..., Any],
    spec_hash: str,
    spec_json: str,
    store_obs: str,
    episode_timeout: float | None,
) -> None:
    """Play ``tasks`` on ``len(envs)`` envs in lockstep, the policy choosing every env's action in one call where it can.

    A policy class with ``act_batch(policies, observations, infos)`` (the PPO learner's, a
    deterministic SB3 model's) acts for all running episodes at once; any other policy acts
    per episode. Each env has its own copy of the policy, reset with its episode's seed, so
    the stored episodes are the ones the serial backend stores. An episode running longer than
    ``episode_timeout`` is ended, between two steps, as ``timeout (wall)``.
    """
    queue = list(reversed(tasks))
    slots: list[EpisodePlay | None] = [None] * len(envs)
    act_batch = getattr(type(policies[0]), "act_batch", None)
    while queue or any(slots):
        for i, env in enumerate(envs):
            while slots[i] is None and queue:
                episode_id, seed = queue.pop()
                play = EpisodePlay(env, policies[i], episode_id, seed, spec_hash, spec_json, store_obs)
                if play.done:
                    emit(*play.record())
                else:
                    slots[i] = play
        live = [play for play in slots if play is not None]
        if not live:
            continue
        actions = None
        if act_batch is not None and len(live) > 1:
            try:
                actions = act_batch([p.policy for p in live], [p.obs for p in live], [p.info for p in live])
            except Exception:
                actions = None  # acted one by one below, so an error is recorded against its own episode
        for k, play in enumerate(live):
            if actions is not None:
                play.advance(actions[k])
            else:
                try:
                    play.advance(play.policy.act(play.obs, play.info))
                except Exception as exc:
                    play.fail(exc)
            if not play.done and episode_timeout and time.perf_counter() - play.started > episode_timeout:
                play.done = True
                emit(
                    failed_episode(
                        play.episode_id, play.seed, spec_hash, spec_json, f"the episode took more than {episode_timeout:g} s", WALL_TIMEOUT
                    ),
                    [],
                )
                slots[slots.index(play)] = None
            elif play.done:
                emit(*play.record())
                slots[slots.index(play)] = None
