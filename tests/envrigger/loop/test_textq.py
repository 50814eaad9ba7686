"""The text learner: it learns on some TextWorld games and wins unseen ones; it saves, loads and pickles."""

from __future__ import annotations

import importlib.util
import pickle
from typing import Any

import numpy as np
import pytest

import envharness
from envharness import HarnessSpec
from envrigger.loop.learners import LEARNERS, LoopLearner, load_learner, make_learner
from envrigger.loop.learners.textq import TEXTQ_DEFAULTS, TextQLearner, TextQPolicy, words
from envrigger.loop.mixture import MixtureEnv, Seeds
from envrigger.loop.samplers import Fixed

needs_textworld = pytest.mark.skipif(
    importlib.util.find_spec("textworld") is None,
    reason='needs the textworld extra: pip install "envharness[textworld]"',
)
# The 16 games of tests/envharness/envs/test_textworld.py, with 15 steps: a random walk rarely reaches the coin.
KWARGS: dict[str, Any] = {
    "levels": [4, 5, 6, 7],
    "games_per_level": 4,
    "max_episode_steps": 15,
}
SPEC = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs=KWARGS)


class RandomCommand:
    """Uniform over the listed commands (never an empty slot): the fair random baseline."""

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Any, info: dict) -> int:
        return int(self.rng.integers(len(obs["commands"].split("\n"))))


def success_rate(policy: Any, seeds: list[int], repeats: int = 3) -> float:
    env, wins = SPEC.build(), 0
    for r in range(repeats):
        for seed in seeds:
            policy.reset(seed * 10 + r)
            obs, info = env.reset(seed=seed)
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
                done = terminated or truncated
            wins += info["verdict"].success
    return wins / (repeats * len(seeds))


def held_out_games(n: int) -> tuple[list[int], set[str]]:
    """Seeds of ``n`` distinct games, and their level ids (what training must never play)."""
    probe, seeds, ids = SPEC.build(), [], set()
    for seed in range(1_000_000, 1_000_200):
        level = probe.reset(seed=seed)[1]["level_id"]
        if level not in ids:
            ids.add(level)
            seeds.append(seed)
        if len(seeds) == n:
            return seeds, ids
    raise AssertionError("too few games")


@needs_textworld
def test_textq_wins_unseen_games_far_more_often_than_random_commands():
    heldout, reserved = held_out_games(6)
    learner = make_learner("textq", SPEC.build(), seed=0)
    seeds = Seeds(SPEC, 0, reserved)  # the loop's own level stream: reserved games are skipped
    used = learner.train(lambda: MixtureEnv([SPEC], Fixed(), seeds), 3000, seed=0)
    assert used >= 3000 and seeds.levels and not seeds.levels & reserved
    learned, random = (
        success_rate(learner.policy(), heldout),
        success_rate(RandomCommand(), heldout),
    )
    assert learned >= 0.6 and learned >= random + 0.4, (learned, random)


@needs_textworld
def test_training_is_reproducible_from_the_seeds():
    def trained() -> np.ndarray:
        learner = make_learner("textq", SPEC.build(), seed=3)
        learner.train(lambda: MixtureEnv([SPEC], Fixed(), Seeds(SPEC, 0)), 200, seed=1)
        return learner.weights

    assert np.array_equal(trained(), trained())


@needs_textworld
def test_a_saved_learner_loads_with_everything_and_resumes_training_bit_for_bit(
    tmp_path,
):
    env = SPEC.build()

    def stream() -> MixtureEnv:
        return MixtureEnv([SPEC], Fixed(), Seeds(SPEC, 0))

    learner = make_learner("textq", env, seed=0, bits=14)
    learner.train(stream, 300, seed=0)
    written = learner.save(tmp_path / "original-round-1")
    assert written.name == "original-round-1.npz"
    assert sorted(p.name for p in tmp_path.iterdir()) == [written.name]  # no temporary file left
    loaded = load_learner("textq", tmp_path / "original-round-1", env)
    assert isinstance(loaded, LoopLearner) and loaded.policy_id == learner.policy_id
    assert loaded.params == learner.params and np.array_equal(loaded.weights, learner.weights)
    for mine, theirs in zip(learner._buffer, loaded._buffer, strict=True):
        (chosen, rewards, following, ended), (chosen2, rewards2, following2, ended2) = (
            mine,
            theirs,
        )
        assert rewards == rewards2 and ended == ended2
        assert all(np.array_equal(a, b) for a, b in zip(chosen, chosen2, strict=True))
        assert all(np.array_equal(a, b) for f, g in zip(following, following2, strict=True) for a, b in zip(f, g, strict=True))
    # A resumed run trains exactly what an uninterrupted one does.
    learner.train(stream, 200, seed=1)
    loaded.train(stream, 200, seed=1)
    assert np.array_equal(loaded.weights, learner.weights)


def test_the_policy_pickles_and_replays_the_same_choices():
    policy = TextQPolicy(
        np.random.default_rng(0).normal(size=2**10),
        {**TEXTQ_DEFAULTS, "bits": 10},
        seed=4,
        epsilon=0.3,
    )
    obs = {
        "text": "You are in a kitchen. There is a coin here.",
        "commands": "go east\ngo west\ntake coin\nlook",
    }
    copy = pickle.loads(pickle.dumps(policy))
    policy.reset(7)
    copy.reset(7)
    info = {"level_id": "x"}
    assert [policy.act(obs, info if i == 0 else {}) for i in range(20)] == [copy.act(obs, info if i == 0 else {}) for i in range(20)]


def test_textq_is_a_loop_learner_and_refuses_envs_without_command_slots():
    assert "textq" in LEARNERS
    with pytest.raises(ValueError, match="command slots"):
        make_learner("textq", envharness.wrap("FrozenLake-v1"))
    with pytest.raises(ValueError, match="unknown parameter"):
        TextQLearner.for_spaces(None, None, nope=1)  # type: ignore[arg-type]


def test_words_are_what_generalizes_across_games():
    assert words("You see a red potato on the counter.") == [
        "see",
        "red",
        "potato",
        "counter",
    ]


@needs_textworld
def test_an_agent_that_runs_out_of_time_in_text_games_is_offered_walkthrough_starts_first(tmp_path):
    from envrigger.diagnose import diagnose
    from envrigger.loop.propose import propose
    from envrigger.rollout import rollout

    report = diagnose(rollout(SPEC, "random", seeds=range(40), out=tmp_path / "random", backend="serial"))
    assert report.finding("timeout") is not None and report.success_rate < 0.2
    proposals = propose(report, SPEC, np.random.default_rng(0), easing_first=True)
    first = proposals[0].added[0]
    assert first.name == "WalkthroughStart" and proposals[0].finding == "timeout"
    # Every proposed start builds, leaves the agent a game to win, and is a level of its own.
    env = proposals[0].spec.build()
    _, info = env.reset(seed=0)
    assert 1 <= info["level"]["commands_to_win"] <= info["level"]["quest_length"] and "@" in info["level_id"]
