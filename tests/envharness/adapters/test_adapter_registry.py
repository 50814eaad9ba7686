"""Adapters register themselves by family module, and an env's family is found by its class."""

from __future__ import annotations

import gymnasium as gym
import pytest

from envharness.adapters import ADAPTERS, adapter_for, registry
from envharness.adapters.registry import family_of_id
from envharness.errors import EnvNotFoundError


def test_every_adapter_is_tried_before_the_adapters_it_derives_from():
    for i, cls in enumerate(ADAPTERS):
        assert not [parent for parent in ADAPTERS[:i] if issubclass(cls, parent)], cls.__name__


def test_an_ids_family_comes_from_its_entry_point_class_without_making_the_env(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("made the env")

    monkeypatch.setattr(registry, "make_base", refuse)
    assert [
        family_of_id(i) for i in ("MiniGrid-DoorKey-6x6-v0", "envharness/TextWorld-v0", "envharness/HumanEvalFix-v0", "FrozenLake-v1")
    ] == [
        "minigrid",
        "textworld",
        "code_repair",
        "toy_text",
    ]


def test_an_unregistered_id_is_a_clear_error():
    with pytest.raises(EnvNotFoundError, match="NoSuchEnv-v0"):
        family_of_id("NoSuchEnv-v0")


def test_an_env_no_adapter_matches_gets_the_generic_one():
    assert adapter_for(gym.make("Pendulum-v1")).family == "generic"
