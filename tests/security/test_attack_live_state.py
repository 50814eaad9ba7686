"""Attacks, category 1: a custom transform edits the live base env during an episode.

Each edit in ``hostile.EDITS`` is tried from a rule or observation hook of a custom
transform. The audit must report it (``VerifierTamperError`` naming the hook), no success
may have been published, and the episode must be over. A control shows that most of these
edits do forge success when the audit is switched off, so they are real attacks.
"""

from __future__ import annotations

import pytest
from harness_helpers import unaudited
from hostile import (
    EDITS,
    VICTIM,
    StashHandle,
    Tamper,
    TamperView,
    UseStashedHandle,
    make,
    play,
)

import envharness
from envharness import EpisodeEndedError, TransformError, VerifierTamperError
from envharness.harness import make_base
from envharness.transforms import RuleTransform

HOOKS = ("on_action", "on_transition", "observe", "on_reset")
# The edits that make the env succeed when nothing watches for them.
FORGES = (
    "minigrid_agent_to_goal",
    "minigrid_clear_lava",
    "frozenlake_teleport",
    "frozenlake_dynamics",
    "frozenlake_replace_step",
    "taxi_rewrite_state",
    "cliff_teleport",
    "cartpole_threshold",
    "mountaincar_position",
    "acrobot_swing",
    "coderepair_fix_file",
    "button_arm",
)


def _attacker(edit: str, hook: str):
    if hook == "observe":
        return TamperView(edit=edit)
    # Rewinding a clock that has not moved yet changes nothing: do it once it has.
    return Tamper(edit=edit, hook=hook, at=2 if edit == "minigrid_rewind_clock" else 1)


def _assert_caught(env, actions, where: str) -> None:
    published = []
    with pytest.raises(VerifierTamperError, match=where):
        published = play(env, actions)
    assert not any(v.success for v in published)
    with pytest.raises(EpisodeEndedError):
        env.step(actions[0])


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_live_state_edit_from_a_custom_transform_is_caught(edit):
    hook = HOOKS[sorted(EDITS).index(edit) % len(HOOKS)]
    env_id, kwargs, actions = make(edit)
    attacker = _attacker(edit, hook)
    env = envharness.wrap(env_id, attacker, **kwargs)
    VICTIM["env"] = env
    _assert_caught(env, actions, f"{attacker.name}.{hook if hook != 'observe' else '(observe|on_reset)'}")


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_of_a_custom_transform_is_watched(hook):
    env_id, kwargs, actions = make("frozenlake_teleport")
    env = envharness.wrap(env_id, _attacker("frozenlake_teleport", hook), **kwargs)
    VICTIM["env"] = env
    _assert_caught(env, actions, hook if hook != "observe" else "TamperView")


@pytest.mark.parametrize("edit", FORGES)
def test_control_without_the_audit_these_edits_do_forge_success(edit, monkeypatch):
    env_id, kwargs, actions = make(edit)
    env = unaudited(make_base(env_id, **kwargs), [_attacker(edit, "on_action")], monkeypatch)
    VICTIM["env"] = env
    assert play(env, actions)[-1].success


def test_the_audit_follows_a_custom_transform_hidden_in_a_catalog_subclass():
    from envharness.transforms import StepBudget

    class QuietBudget(StepBudget):  # looks like the catalog's, is not
        def on_transition(self, step, memo):
            super().on_transition(step, memo)
            VICTIM["env"].unwrapped.s = 14

    env = envharness.wrap("FrozenLake-v1", QuietBudget(max_steps=5), is_slippery=False)
    VICTIM["env"] = env
    _assert_caught(env, [2, 2], "QuietBudget.on_transition")


def test_a_stashed_state_handle_is_dead_after_apply():
    env = envharness.wrap("MiniGrid-Empty-8x8-v0", StashHandle(), UseStashedHandle())
    env.reset(seed=0)
    with pytest.raises(TransformError, match="StashHandle: its state handle was used after apply"):
        env.step(2)


def test_the_view_given_to_check_cannot_write():
    seen = []

    class Peek(RuleTransform):
        def check(self, adapter, observation_space, action_space):
            seen.append(adapter)

    envharness.wrap("CartPole-v1", Peek()).reset(seed=0)
    view = seen[0]
    for name in ("raw", "env", "set_state", "set_physics", "move_agent", "judge", "begin_episode"):
        assert not hasattr(view, name), name
    with pytest.raises(AttributeError):
        view.capabilities = frozenset({"physics"})
    with pytest.raises(AttributeError):
        view.anything = 1  # no instance dict to hang new surfaces on
    state = view.get_state()
    state["state"][:] = 0.0  # a copy: the env is untouched
    assert view.get_state()["state"].any()


def test_a_state_handle_only_offers_the_edits_the_env_supports():
    from envharness.transforms import StateTransform

    class Overreach(StateTransform):
        def apply(self, adapter, obs, rng):
            adapter.move_goal(rng, 1, 1)  # CartPole has no goal
            return obs

    with pytest.raises(envharness.IncompatibleTransformError, match="Overreach: CartPoleEnv"):
        envharness.wrap("CartPole-v1", Overreach()).reset(seed=0)
