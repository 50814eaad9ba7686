"""Frames the HTML report replays: pictures where the env draws them, silence where it does not."""

from __future__ import annotations

import warnings

from envharness import HarnessSpec
from envrigger.report.frames import replay_frames


def test_a_text_env_gives_no_frames_and_no_render_mode_warnings():
    """A TextWorld report once printed four render_mode UserWarnings for pictures it could never have."""
    spec = HarnessSpec(env_id="envharness/TextWorld-v0").to_json()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert replay_frames(spec, 0, ["look"], start=0, end=0) == []


def test_a_drawn_env_still_gives_its_frames_quietly():
    spec = HarnessSpec(env_id="MiniGrid-Empty-5x5-v0").to_json()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frames = replay_frames(spec, 0, [2, 2], start=0, end=1)
    assert [t for t, _ in frames] == [-1, 0, 1] and all(png for _, png in frames)
