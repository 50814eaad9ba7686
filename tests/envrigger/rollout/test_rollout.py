"""Rollouts: determinism across backends, fault handling, and what gets stored."""

from __future__ import annotations

import json

import faulty_envs
import pytest
from stored import content as _content

import envharness
from envharness import HarnessSpec
from envrigger.data import TrajectoryError
from envrigger.errors import RolloutError
from envrigger.rollout import rollout

SPEC = HarnessSpec(
    env_id="MiniGrid-DoorKey-5x5-v0",
    transforms=[{"name": "MoveGoal", "params": {"max_dist": 4}}, {"name": "ActionSlip", "params": {"p": 0.2}}],
)


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    return rollout(SPEC, "random", seeds=range(10, 22), policy_seed=5, out=tmp_path_factory.mktemp("r") / "serial")


def test_serial_run_stores_every_episode_with_its_steps(serial_run):
    content = _content(serial_run)
    assert [row["seed"] for row, _ in content] == list(range(10, 22))
    for row, steps in content:
        assert row["length"] == len(steps) and [s["t"] for s in steps] == list(range(len(steps)))
        assert row["spec_hash"] == SPEC.hash() and row["policy_id"] == "random"
        assert row["reason"] in {"reached goal", "timeout"} and row["error"] is None
        assert dict(row["level_features"])["width"] == 5.0
        assert steps[-1]["terminated"] or steps[-1]["truncated"]
        assert all(json.loads(s["position"])[:2] != [0, 0] for s in steps)


def test_same_seeds_give_identical_episodes_serially(serial_run, tmp_path):
    again = rollout(SPEC, "random", seeds=range(10, 22), policy_seed=5, out=tmp_path / "again")
    assert _content(again) == _content(serial_run)


def test_process_backend_matches_serial_for_any_worker_count(serial_run, tmp_path):
    one = rollout(SPEC, "random", seeds=range(10, 22), policy_seed=5, backend="process", workers=1, out=tmp_path / "p1")
    two = rollout(SPEC, "random", seeds=range(10, 22), policy_seed=5, backend="process", workers=2, out=tmp_path / "p2")
    assert _content(one) == _content(serial_run)
    assert _content(two) == _content(serial_run)


def test_ray_backend_matches_serial(serial_run, tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'envharness[ray]'")
    run = rollout(SPEC, "random", seeds=range(10, 22), policy_seed=5, backend="ray", workers=2, out=tmp_path / "ray")
    assert _content(run) == _content(serial_run)


def test_reference_policy_solves_on_every_backend(tmp_path):
    for backend in ("serial", "process"):
        run = rollout(SPEC, "reference", seeds=range(6), backend=backend, workers=2, out=tmp_path / backend)
        assert all(e.success for e in run.iter_episodes())


def test_policy_seed_changes_the_random_episodes(serial_run, tmp_path):
    other = rollout(SPEC, "random", seeds=range(10, 22), policy_seed=6, out=tmp_path / "other")
    assert _content(other) != _content(serial_run)


@pytest.mark.parametrize("backend", ["serial", "process"])
def test_crashing_env_is_a_recorded_failed_episode_and_the_run_goes_on(backend, tmp_path):
    spec = HarnessSpec(env_id="faulty_envs:Crashy-v0", env_kwargs={"crash_seeds": [2, 4]})
    # Spawned workers import the env's module, which a spec may do only when the caller opts in.
    run = rollout(spec, "random", seeds=range(6), backend=backend, workers=2, out=tmp_path / "run", allow_imports=["faulty_envs"])
    by_seed = {e.seed: e for e in run.iter_episodes()}
    assert sorted(by_seed) == list(range(6))
    for seed in (2, 4):
        assert by_seed[seed].error == f"RuntimeError: simulator exploded on seed {seed}"
        assert not by_seed[seed].success and by_seed[seed].reason == "error"
    assert all(by_seed[s].error is None for s in (0, 1, 3, 5))


def test_crashing_policy_is_recorded_too(tmp_path):
    run = rollout("FrozenLake-v1", lambda env: faulty_envs.ExplodingPolicy(), seeds=range(3), out=tmp_path / "run")
    errors = {e.seed: e.error for e in run.iter_episodes()}
    assert errors == {0: None, 1: "ValueError: policy bug", 2: None}


def test_killed_worker_is_replaced_and_its_episode_retried_once(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    run = rollout(
        "FrozenLake-v1", faulty_envs.make_killer([3], str(markers)), seeds=range(6), backend="process", workers=2, out=tmp_path / "run"
    )
    episodes = {e.seed: e for e in run.iter_episodes()}
    assert sorted(episodes) == list(range(6))
    assert all(e.error is None for e in episodes.values())  # seed 3 died once, then ran


def test_worker_that_dies_twice_records_a_failed_episode(tmp_path):
    run = rollout("FrozenLake-v1", faulty_envs.make_killer([1]), seeds=range(5), backend="process", workers=2, out=tmp_path / "run")
    episodes = {e.seed: e for e in run.iter_episodes()}
    assert sorted(episodes) == list(range(5))
    assert "worker process was killed by SIGKILL" in episodes[1].error and not episodes[1].success
    assert all(episodes[s].error is None for s in (0, 2, 3, 4))


def test_appending_a_second_rollout_continues_episode_ids(tmp_path):
    out = tmp_path / "run"
    rollout("CartPole-v1", "random", seeds=range(3), out=out)
    store = rollout("CartPole-v1", "random", seeds=range(3, 5), out=out)
    assert [e.episode_id for e in store.iter_episodes()] == [0, 1, 2, 3, 4]


def test_bad_backend_and_empty_seeds_are_clear_errors(tmp_path):
    with pytest.raises(RolloutError, match="backend"):
        rollout("CartPole-v1", backend="gpu", out=tmp_path / "a")
    with pytest.raises(RolloutError, match="episodes"):
        rollout("CartPole-v1", seeds=[], out=tmp_path / "b")
    with pytest.raises(TrajectoryError, match="policy"):
        rollout("CartPole-v1", "genius", out=tmp_path / "c")


def test_ray_worker_that_dies_twice_records_a_failed_episode(tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'envharness[ray]'")
    import cloudpickle

    cloudpickle.register_pickle_by_value(faulty_envs)  # Ray workers do not share the tests' sys.path
    try:
        run = rollout("FrozenLake-v1", faulty_envs.make_killer([2]), seeds=range(4), backend="ray", workers=2, out=tmp_path / "run")
    finally:
        cloudpickle.unregister_pickle_by_value(faulty_envs)
    episodes = {e.seed: e for e in run.iter_episodes()}
    assert sorted(episodes) == [0, 1, 2, 3]
    assert "ray worker failed twice" in episodes[2].error
    assert all(episodes[s].error is None for s in (0, 1, 3))


def test_a_serial_rollout_never_touches_the_live_learners_stream(tmp_path):
    from envrigger.policies.qlearning import QLearner

    env = envharness.wrap("FrozenLake-v1", is_slippery=False)
    learner = QLearner(env.action_space, env.observation_space, seed=3)
    before = json.dumps(learner.rng.bit_generator.state)
    runs = {b: rollout("FrozenLake-v1", learner, seeds=range(8), backend=b, workers=2, out=tmp_path / b) for b in ("serial", "process")}
    assert json.dumps(learner.rng.bit_generator.state) == before
    assert _content(runs["serial"]) == _content(runs["process"])


def test_an_envs_own_searches_are_recorded_with_each_episode_on_every_backend(tmp_path):
    # A start along the level's own solution costs a breadth-first search at reset: env steps the
    # run is charged. Each episode records its own, the same on every backend and with episodes
    # played at once in threads, so what a run is charged never depends on where it ran.
    from envharness.adapters.minigrid_search import steps_taken

    walk = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0", transforms=[{"name": "WalkthroughStart", "params": {"min_share": 0.5}}])
    before = steps_taken()
    serial = rollout(walk, "random", seeds=range(6), out=tmp_path / "serial")
    searched = [row["search_steps"] for row, _ in _content(serial)]
    assert all(s is not None and s > 0 for s in searched) and sum(searched) == steps_taken() - before
    for backend, options in (("process", {"workers": 2}), ("serial", {"batch": 3}), ("serial", {"concurrency": 3})):
        other = rollout(walk, "random", seeds=range(6), out=tmp_path / f"{backend}-{len(options)}-{sorted(options)[0]}", backend=backend,
                        **options)  # fmt: skip
        assert [row["search_steps"] for row, _ in _content(other)] == searched, (backend, options)
    from envrigger.data.jsonl import export_jsonl, import_jsonl

    export_jsonl(serial, tmp_path / "walk.jsonl")  # and a run exported and imported keeps them
    assert [row["search_steps"] for row, _ in _content(import_jsonl(tmp_path / "walk.jsonl", tmp_path / "imported"))] == searched
    plain = rollout("MiniGrid-DoorKey-6x6-v0", "random", seeds=range(3), out=tmp_path / "plain")
    assert [row["search_steps"] for row, _ in _content(plain)] == [None] * 3  # no search, nothing charged
