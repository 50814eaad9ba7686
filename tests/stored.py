"""What tests compare between runs: everything a run stores except wall times."""

from __future__ import annotations

from typing import Any


def content(store: Any) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every episode row (without ``wall_time``) with its step rows, in episode order."""
    episodes = []
    for episode, steps in sorted(store.iter_episode_steps(), key=lambda item: item[0].episode_id):
        row = episode.to_row()
        row.pop("wall_time")
        episodes.append((row, [s.to_row() for s in steps]))
    return episodes
