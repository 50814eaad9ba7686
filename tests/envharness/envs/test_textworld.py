"""The TextWorld domain: a generated game per level, cached; judged by the game's own end; forgery fails."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from harness_helpers import trajectory_digest, unaudited

import envharness
from envharness import EpisodeEndedError, Harness, TransformError, VerifierTamperError
from envharness.harness import make_base
from envharness.transforms import (
    ActionCost,
    BlockVerb,
    ObservationTransform,
    ReplayPrefix,
    RuleTransform,
    StateTransform,
    Step,
    StepBudget,
    TextHint,
    TruncateText,
    WalkthroughStart,
)
from envharness.verifier import Verdict

needs_textworld = pytest.mark.skipif(
    importlib.util.find_spec("textworld") is None,
    reason='needs the textworld extra: pip install "envharness[textworld]"',
)
ENV = "envharness/TextWorld-v0"
# 16 coin-collector games (levels 4-7, 4 games each), shared with the learner's tests; generated once into the cache.
KWARGS: dict[str, Any] = {"levels": [4, 5, 6, 7], "games_per_level": 4}
VICTIM: dict[str, Any] = {}


def make(*transforms: Any, **kwargs: Any) -> Harness:
    return envharness.wrap(ENV, *transforms, **{**KWARGS, **kwargs})


def solve(env: Harness, seed: int) -> list[Any]:
    """Play the game's walkthrough; the verdicts seen."""
    from envrigger.policies.reference import TextWorldSolver

    solver, (obs, info) = TextWorldSolver(env), env.reset(seed=seed)
    verdicts, done = [], False
    while not done:
        obs, _, terminated, truncated, info = env.step(solver.act(obs, info))
        verdicts.append(info["verdict"])
        done = terminated or truncated
    return verdicts


def test_importing_envharness_and_envrigger_needs_no_textworld():
    code = (
        "import sys; sys.modules['textworld'] = None\n"
        "import envharness, envharness.envs, envharness.adapters, envrigger.loop.learners, envrigger.loop.learners.textq\n"
        "import envharness.envs.textworld_games as tw\n"
        "import gymnasium as gym\n"
        "try:\n    gym.make('envharness/TextWorld-v0')\nexcept gym.error.DependencyNotInstalled as e:\n    print(e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert 'pip install "envharness[textworld]"' in out.stdout


@needs_textworld
def test_same_seed_gives_the_same_game_and_trajectory_and_other_seeds_other_games():
    actions = np.random.default_rng(0).integers(4, size=40).tolist()
    assert trajectory_digest(make(), 3, actions) == trajectory_digest(make(), 3, actions)
    env = make()
    ids = {env.reset(seed=seed)[1]["level_id"] for seed in range(40)}
    assert len(ids) > 10  # many games: a level is a game, not a seed


@needs_textworld
def test_a_game_is_one_level_whatever_seed_drew_it():
    env = make()
    by_game: dict[tuple[int, int], set[str]] = {}
    for seed in range(40):
        _, info = env.reset(seed=seed)
        game = env.unwrapped.game
        by_game.setdefault((game.level, game.game), set()).add(info["level_id"])
    assert all(len(ids) == 1 for ids in by_game.values())
    assert len({i for ids in by_game.values() for i in ids}) == len(by_game)


@needs_textworld
def test_the_raw_env_and_the_harness_pass_the_gymnasium_env_checker():
    from gymnasium.utils.env_checker import check_env

    env = make()
    check_env(env.unwrapped, skip_render_check=True)
    check_env(env, skip_render_check=True)


@needs_textworld
def test_observations_list_the_commands_and_stay_in_the_space():
    env = make()
    obs, _ = env.reset(seed=5)
    raw = env.unwrapped
    assert obs["commands"].split("\n") == raw.commands
    assert raw.commands[-2:] == ["inventory", "look"]  # information-only commands last
    for _ in range(10):
        obs, *_ = env.step(0)
        assert env.observation_space.contains(obs)


@needs_textworld
def test_an_index_past_the_list_is_a_wasted_turn_that_changes_nothing():
    env = make()
    obs, _ = env.reset(seed=5)
    empty = env.action_space.n - 1
    assert empty >= len(env.unwrapped.commands) and env.action_space.contains(empty)
    after, reward, terminated, _, info = env.step(empty)
    assert after == obs and reward == 0.0 and not terminated
    assert "nothing happened" in info["wasted"] and info["moves"] == 0


@needs_textworld
def test_the_reference_solver_wins_every_game_in_its_walkthrough_length():
    env = make()
    for seed in range(6):
        verdicts = solve(env, seed)
        assert verdicts[-1] == Verdict(True, 1.0, "won the game")
        assert len(verdicts) == env.unwrapped.game.quest_length


@needs_textworld
def test_a_game_is_generated_once_then_reused_from_the_cache(tmp_path, monkeypatch):
    import envharness.envs.textworld_cache as cache

    env = make(cache_dir=str(tmp_path))
    _, info = env.reset(seed=0)
    folders = list(tmp_path.iterdir())
    game, version = env.unwrapped.game, __import__("textworld").__version__
    assert [f.name for f in folders] == [f"tw-coin_collector-L{game.level}-s{game.tw_seed}-tw{version}"]
    assert sorted(p.name for p in folders[0].iterdir()) == ["game.json", "game.z8"]

    def no_generation(*args: Any) -> None:
        raise AssertionError("a cached game was generated again")

    monkeypatch.setattr(cache, "_generate", no_generation)
    again = make(cache_dir=str(tmp_path))
    assert again.reset(seed=0)[1]["level_id"] == info["level_id"]
    # Generated afresh in another cache, the game is byte-identical: the same level.
    assert make().reset(seed=0)[1]["level_id"] == info["level_id"]


@needs_textworld
def test_a_game_compiled_on_another_day_is_the_same_level(tmp_path):
    from envharness.envs.textworld_cache import SERIAL

    env = make(cache_dir=str(tmp_path))
    _, info = env.reset(seed=3)
    story = next(tmp_path.glob("*/game.z8"))
    assert story.read_bytes()[0x12:0x18] == SERIAL  # the file itself does not carry the day it was made
    # A cache filled by an older release, whose files carry Inform's compile date as their serial number.
    old = bytearray(story.read_bytes())
    old[0x12:0x18] = b"261130"
    story.write_bytes(bytes(old))
    again = make(cache_dir=str(tmp_path))
    assert again.reset(seed=3)[1]["level_id"] == info["level_id"]
    assert again.step(0)[1:4] == env.step(0)[1:4]  # and it plays


@needs_textworld
def test_two_processes_generating_the_same_game_at_once_both_get_one_complete_copy(
    tmp_path,
):
    from envharness.envs.textworld_cache import generate_game

    with ProcessPoolExecutor(2) as pool:
        paths = list(
            pool.map(
                generate_game,
                ["tw-coin_collector"] * 2,
                [3, 3],
                [1, 1],
                [str(tmp_path)] * 2,
            )
        )
    assert paths[0] == paths[1] and paths[0].is_file()
    assert [p.name for p in tmp_path.iterdir()] == [paths[0].parent.name]  # no temporary folder left behind


@needs_textworld
def test_a_pickled_env_continues_the_same_episode():
    env = make()
    env.reset(seed=2)
    env.step(0)
    clone = cloudpickle.loads(cloudpickle.dumps(env))
    for action in (0, 1, 0):
        a, b = env.step(action), clone.step(action)
        assert a[0] == b[0] and a[1:4] == b[1:4] and a[4]["verdict"] == b[4]["verdict"]


@needs_textworld
@pytest.mark.parametrize("vector", ["sync", "async"])
def test_it_runs_in_vector_envs(vector):
    fns = [lambda: make() for _ in range(2)]
    # Gymnasium's shared memory garbles Text observations: Async vector envs of text envs run without it.
    envs = gym.vector.SyncVectorEnv(fns) if vector == "sync" else gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    obs, _ = envs.reset(seed=0)
    assert all("go " in commands for commands in obs["commands"])
    envs.step(np.array([0, 0]))
    envs.close()


@needs_textworld
def test_taking_the_wrong_object_in_treasure_hunter_loses_the_game():
    env = make(challenge="tw-treasure_hunter", levels=[1], games_per_level=3)
    for seed in range(10):
        env.reset(seed=seed)
        raw = env.unwrapped
        wrong = [c for c in raw.commands if c.startswith("take ") and c not in raw.policy]
        if wrong:
            break
    _, reward, terminated, _, info = env.step(raw.commands.index(wrong[0]))
    assert terminated and info["lost"] and reward == 0.0
    assert info["verdict"] == Verdict(False, 0.0, "lost the game")


# -- catalog transforms on text -------------------------------------------------------------
@needs_textworld
def test_text_transforms_apply_and_keep_the_spaces_the_loop_needs():
    base = make()
    env = make(TruncateText(max_chars=30), BlockVerb(verbs=["look"]), ActionCost(cost=0.1))
    assert env.observation_space == base.observation_space and env.action_space == base.action_space
    obs, _ = env.reset(seed=5)
    assert len(obs["text"]) == 30
    look = env.unwrapped.commands.index("look")
    obs, reward, _, _, info = env.step(look)
    assert info["blocked"] == "look is not available" and env.unwrapped.history == []
    obs, reward, _, _, info = env.step(env.unwrapped.commands.index(env.unwrapped.policy[0]))
    assert reward == pytest.approx(-0.1) and env.unwrapped.history
    hinted = make(TextHint(text="never walk back", field="text"))
    assert hinted.reset(seed=5)[0]["text"].endswith("Hint: never walk back")


@needs_textworld
def test_step_budget_and_action_cost_never_reach_the_verdict():
    env = make(StepBudget(max_steps=2), ActionCost(cost=5.0))
    env.reset(seed=5)
    env.step(0)
    _, reward, _, truncated, info = env.step(0)
    assert truncated and reward == -5.0 and info["verdict"] == Verdict(False, 0.0, "timeout")


@needs_textworld
def test_a_replayed_prefix_is_setup_that_makes_another_level_and_a_winning_prefix_is_refused():
    env = make()
    _, info = env.reset(seed=5)
    walkthrough = list(env.unwrapped.policy)
    slots = []
    for command in walkthrough:
        slots.append(env.unwrapped.commands.index(command))
        env.step(slots[-1])
    prefixed = make(ReplayPrefix(actions=slots[:2]))
    _, started = prefixed.reset(seed=5)
    assert started["level"]["commands_to_win"] == info["level"]["commands_to_win"] - 2
    assert started["level_id"] != info["level_id"] and started["level_id"].startswith(info["level_id"].split("+")[0] + "@")
    with pytest.raises(TransformError, match="ended at setup"):
        make(ReplayPrefix(actions=slots)).reset(seed=5)


@needs_textworld
@pytest.mark.parametrize("audit", [False, True])
def test_a_walkthrough_start_is_setup_on_another_level_and_never_wins_for_the_agent(audit):
    # The most a WalkthroughStart may play, on every game of the pool: the agent still has to win it.
    for seed in range(16):
        plain = make()
        _, original = plain.reset(seed=seed)
        env = Harness(make_base(ENV, **KWARGS), [WalkthroughStart(min_share=0.95, max_share=0.95)], audit=audit)
        _, info = env.reset(seed=seed)
        assert info["verdict"].success is False and not env.unwrapped.won
        assert info["level"]["commands_to_win"] == 1 < original["level"]["commands_to_win"]
        assert info["level_id"].startswith(original["level_id"].split("+")[0] + "@")
        verdicts = solve_from_here(env, info)
        assert len(verdicts) == 1 and verdicts[-1].success
        plain.close()
        env.close()
    # The agent's clock starts after the setup: the registered 50 steps are all the agent's.
    env = make(WalkthroughStart(min_share=0.5, max_share=0.5))
    env.reset(seed=3)
    truncated_at = next(n for n in range(1, 60) if env.step(19)[3])  # slot 19 is empty: a wasted turn
    assert truncated_at == 50


class Greedy(StateTransform):
    """A hostile start: the whole walkthrough through the handle, again and again, then the last command as setup."""

    finish: bool = True

    def apply(self, adapter: Any, obs: Any, rng: Any) -> Any:
        while adapter.play_walkthrough(1.0):
            pass
        if self.finish:
            obs = adapter.observe()
            adapter.step(obs["commands"].split("\n").index(VICTIM["last"]))
        return adapter.observe()


@needs_textworld
def test_no_start_can_win_the_game_for_the_agent():
    env = make()
    env.reset(seed=2)
    while len(env.unwrapped.policy) > 1:
        env.step(env.unwrapped.commands.index(env.unwrapped.policy[0]))
    VICTIM["last"] = env.unwrapped.policy[0]
    # Playing the walkthrough through the handle stops one command short however often it is asked...
    hostile = Harness(make_base(ENV, **KWARGS), [Greedy(finish=False)], audit=True)
    _, info = hostile.reset(seed=2)
    assert info["level"]["commands_to_win"] == 1 and not info["verdict"].success
    # ...and taking the last command as setup ends the game before the agent acts: refused at reset.
    with pytest.raises(TransformError, match="ended at setup"):
        Harness(make_base(ENV, **KWARGS), [Greedy()], audit=True).reset(seed=2)


@needs_textworld
def test_a_walkthrough_start_draws_its_share_per_episode_from_the_seed():
    env = make(WalkthroughStart(min_share=0.0, max_share=0.9))
    left = [env.reset(seed=seed)[1]["level"]["commands_to_win"] / env.unwrapped.game.quest_length for seed in range(12)]
    again = [env.reset(seed=seed)[1]["level"]["commands_to_win"] / env.unwrapped.game.quest_length for seed in range(12)]
    assert left == again and len(set(left)) > 3 and min(left) < 0.5 and max(left) == 1.0


def solve_from_here(env: Harness, info: dict) -> list[Any]:
    """Play the rest of the game's walkthrough from the current state; the verdicts seen."""
    verdicts, done = [], False
    while not done:
        command = env.unwrapped.policy[0]
        _, _, terminated, truncated, info = env.step(env.unwrapped.commands.index(command))
        verdicts.append(info["verdict"])
        done = terminated or truncated
    return verdicts


@needs_textworld
def test_the_audit_sees_no_tampering_in_honest_play():
    env = Harness(make_base(ENV, **KWARGS), [StepBudget(max_steps=40), BlockVerb()], audit=True)
    assert solve(env, 5)[-1].success


# -- forgery ------------------------------------------------------------------------------------
class ClaimWin(RuleTransform):
    """Says the game was won: info, a big reward, the episode's end."""

    def on_transition(self, step: Step, memo: dict) -> None:
        step.info.update(won=True, score=1, verdict=Verdict(True, 1.0, "forged"))
        step.reward, step.terminated = 100.0, True


class ShowVictory(ObservationTransform):
    """Writes the game's victory text into what the agent sees."""

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        return {**obs, "text": "*** The End ***\nYou scored 1 out of a possible 1."}


class Tamper(RuleTransform):
    """Edits the live base env before the action, the way a careless or hostile author could."""

    edit: str

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        raw = VICTIM["env"].unwrapped
        if self.edit == "won":
            raw.won = True
        elif self.edit == "engine":  # play the walkthrough on the interpreter behind the env's back
            for command in raw.policy[:-1]:
                raw._engine.env.step(command)
        elif self.edit == "game":
            raw.game = raw.game._replace(digest="0" * 16)
        return action


@needs_textworld
@pytest.mark.parametrize("attacker", [ClaimWin(), ShowVictory()], ids=lambda t: t.name)
def test_claiming_a_win_in_info_reward_ends_or_text_is_not_success(attacker, monkeypatch):
    env = unaudited(make_base(ENV, **KWARGS), [attacker], monkeypatch)
    env.reset(seed=5)
    _, _, terminated, _, info = env.step(env.unwrapped.commands.index("look"))
    assert not info["verdict"].success
    if terminated:
        with pytest.raises(EpisodeEndedError):
            env.step(0)


@needs_textworld
@pytest.mark.parametrize("edit", ["won", "engine", "game"])
def test_editing_the_live_game_from_a_custom_transform_is_caught(edit):
    env = make(Tamper(edit=edit))
    VICTIM["env"] = env
    env.reset(seed=5)
    with pytest.raises(VerifierTamperError, match="Tamper.on_action"):
        env.step(env.action_space.n - 1)
    with pytest.raises(EpisodeEndedError):
        env.step(0)


@needs_textworld
def test_control_without_the_audit_a_forged_won_flag_would_count(monkeypatch):
    env = unaudited(make_base(ENV, **KWARGS), [Tamper(edit="won")], monkeypatch)
    VICTIM["env"] = env
    env.reset(seed=5)
    # A wasted turn does not step the game, so nothing re-reads its state: only the audit stands in the way.
    assert env.step(env.action_space.n - 1)[4]["verdict"].success


@needs_textworld
def test_without_the_audit_a_swapped_game_is_still_not_success(monkeypatch):
    env = unaudited(make_base(ENV, **KWARGS), [Tamper(edit="game")], monkeypatch)
    VICTIM["env"] = env
    env.reset(seed=5)
    assert env.step(0)[4]["verdict"] == Verdict(False, 0.0, "the game changed during the episode")


def test_making_it_without_textworld_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "textworld" else real(name, *a),
    )
    with pytest.raises(envharness.EnvNotFoundError, match=r"envharness\[textworld\]"):
        envharness.wrap(ENV)


@needs_textworld
def test_games_built_and_played_in_four_threads_at_once_are_the_games_played_one_by_one(tmp_path):
    # TextWorld's parser and generator are process-global: without the lock, threads building games
    # at once fail (`FailedParse`, `IndexError: pop from empty list`), on a cold cache and a warm one.
    import threading

    def play(cache: str, seed: int) -> list[str]:
        env = make(cache_dir=cache)
        obs, info = env.reset(seed=seed)
        seen = [info["level_id"], obs["text"], obs["commands"]]
        for step in range(6):
            obs, _, terminated, truncated, _ = env.step(step % 3)
            seen += [obs["text"], obs["commands"]]
            if terminated or truncated:
                break
        env.close()
        return seen

    seeds = [11, 12, 13, 14]
    alone = [play(str(tmp_path / "alone"), seed) for seed in seeds]
    for cache in ("cold", "cold"):  # the second pass finds the cache warm
        together: dict[int, Any] = {}

        def run(seed: int, cache: str = cache, into: dict[int, Any] = together) -> None:
            try:
                into[seed] = play(str(tmp_path / cache), seed)
            except Exception as error:  # noqa: BLE001 - the test reports what a thread raised
                into[seed] = error

        threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [together[seed] for seed in seeds] == alone
