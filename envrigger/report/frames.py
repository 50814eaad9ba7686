"""Pictures of what went wrong: frames replayed from an episode's spec, seed and stored actions.

Contains :func:`replay_frames`, which rebuilds an episode's env with ``render_mode="rgb_array"``,
resets it with the episode's seed, replays its recorded actions and keeps small PNG frames
around a step range, and :func:`finding_frames`, which does that for the evidence of every
finding of a diagnosis. Specs and seeds reproduce episodes exactly (the harness's
determinism), so the frames show the very steps the evidence names. An env that cannot
render, or a run without seeds, simply has no frames.
"""

from __future__ import annotations

import base64
import io
import json
import os
import warnings
from typing import Any

import numpy as np

from envrigger.data import TrajectoryStore
from envrigger.diagnose.model import Diagnosis

MAX_FRAMES = 6
FRAME_PIXELS = 160  # the longer side of each frame, after downscaling


def _png(frame: np.ndarray) -> str:
    from PIL import Image

    image = Image.fromarray(np.asarray(frame, dtype=np.uint8))
    image.thumbnail((FRAME_PIXELS, FRAME_PIXELS))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode()


def _shown(start: int, end: int) -> list[int]:
    """Which states to picture: the one before ``start`` (-1: after reset) through ``end``, at most :data:`MAX_FRAMES`."""
    states = list(range(start - 1, end + 1))
    if len(states) <= MAX_FRAMES:
        return states
    picks = np.linspace(0, len(states) - 1, MAX_FRAMES).round().astype(int)
    return [states[i] for i in sorted(set(picks.tolist()))]


def _draws_pictures(env_id: str) -> bool:
    """Whether the registered env declares ``rgb_array`` (text envs declare ``ansi`` only; asking them warned four times)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    try:
        entry = gym.spec(env_id).entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:  # an id this process cannot resolve: the build below says so, quietly
        return True
    modes = getattr(creator, "metadata", {}).get("render_modes")
    return modes is None or "rgb_array" in modes


def replay_frames(spec_json: str, seed: int, actions: list[Any], start: int, end: int) -> list[tuple[int, str]]:
    """``(t, PNG as base64)`` for the states after steps around ``[start, end]`` (``t = -1``: the reset state).

    Example:
        >>> from envharness import HarnessSpec
        >>> spec = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}).to_json()
        >>> [t for t, png in replay_frames(spec, 0, [2, 2, 1], start=1, end=2)]
        [0, 1, 2]
    """
    from envharness.errors import EnvHarnessError
    from envharness.spec import HarnessSpec

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame-drawn envs (classic control) render off screen, quietly
    try:
        spec = HarnessSpec.from_json(spec_json)
        if not _draws_pictures(spec.env_id):
            return []
        with warnings.catch_warnings():  # the env checker's render_fps advice is for the env's author, not the report's reader
            warnings.simplefilter("ignore", UserWarning)
            env = spec.model_copy(update={"env_kwargs": {**spec.env_kwargs, "render_mode": "rgb_array"}}).build()
    except (EnvHarnessError, TypeError, ValueError):
        return []
    wanted = set(_shown(start, end))
    out: list[tuple[int, str]] = []
    try:
        env.reset(seed=seed)
        if -1 in wanted:
            out.append((-1, _png(env.render())))
        for t, action in enumerate(actions[: end + 1]):
            _, _, terminated, truncated, _ = env.step(np.asarray(action) if isinstance(action, list) else action)
            if t in wanted:
                out.append((t, _png(env.render())))
            if terminated or truncated:
                break
    except Exception:  # an env that cannot render or replay here: no pictures, the excerpt still stands
        return []
    finally:
        env.close()
    return out


def finding_frames(diagnosis: Diagnosis, store: TrajectoryStore, per_finding: int = 2) -> dict[str, list[dict[str, Any]]]:
    """Per finding name, frame strips of its first ``per_finding`` evidence episodes: ``{episode_id, start, end, frames}``."""
    wanted = {(f.name, e.episode_id, e.start, e.end) for f in diagnosis.findings for e in f.evidence[:per_finding] if e.seed is not None}
    if not wanted:
        return {}
    episodes = store.episodes_table(columns=["episode_id", "seed", "spec_json"]).to_pylist()
    meta = {row["episode_id"]: row for row in episodes}
    ids = {w[1] for w in wanted}
    actions: dict[int, list[Any]] = {i: [] for i in ids}
    for batch in store.iter_step_batches(columns=["episode_id", "t", "action"]):
        for episode_id, action in zip(batch.column(0).to_pylist(), batch.column(2).to_pylist()):
            if episode_id in actions:
                actions[episode_id].append(json.loads(action))
    out: dict[str, list[dict[str, Any]]] = {}
    for name, episode_id, start, end in sorted(wanted):
        row = meta.get(episode_id)
        if row is None or row["seed"] is None:
            continue
        frames = replay_frames(row["spec_json"], int(row["seed"]), actions[episode_id], start, end)
        if frames:
            out.setdefault(name, []).append({"episode_id": episode_id, "start": start, "end": end, "frames": frames})
    return out


__all__ = ["finding_frames", "replay_frames"]
