"""--demo-start: the rigger arm's own rare successes become starts along them (DemoStart), validated like any candidate."""

from __future__ import annotations

import json

import envharness
from envharness import HarnessSpec
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.demos import demos_from
from envrigger.loop.library import Library
from envrigger.rollout import rollout

SMALL_LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False})


def test_the_won_episodes_of_a_run_become_recordings_that_win_again_and_skip_reserved_levels(tmp_path):
    store = rollout(SMALL_LAKE, "random", seeds=range(400), out=tmp_path / "run")
    won = [e for e in store.iter_episodes() if e.success]
    assert won  # a random walk wins the 4x4 lake now and then
    demos = demos_from(store, reserved=set())
    assert demos and [len(d["actions"]) for d in demos] == sorted(len(d["actions"]) for d in demos)
    for demo in demos:
        env = envharness.wrap(SMALL_LAKE.env_id, **SMALL_LAKE.env_kwargs)
        env.reset(seed=demo["seed"])
        for action in demo["actions"]:
            *_, info = env.step(action)
        assert info["verdict"].success
    assert demos_from(store, reserved={e.level_id for e in won}) == []  # a reserved level is never a recording


def test_the_loop_validates_a_start_along_its_own_successes_first(tmp_path):
    config = LoopConfig(
        spec=HarnessSpec(env_id="FrozenLake-v1"), learner="qlearning", rounds=2, budget_steps=4000, collect_episodes=40, eval_episodes=20, val_episodes=20,
        candidates_per_round=2, min_rollouts=10, max_rollouts=30, credit_chunks=0, arms=["original", "rigger"],
        allow_seen_levels=True, demo_start=True, seed=1,
    )  # fmt: skip
    run_loop(tmp_path / "run", config)
    library = Library(tmp_path / "run" / "library.db", create=False)
    try:
        first = library.rounds()[0]
    finally:
        library.close()
    assert first["collected_success"] > 0, first["collected_success"]  # the learner won some of its episodes
    tried = first["tried"][0]
    assert tried["origin"] == "demos" and tried["label"].startswith("DemoStart"), tried
    assert tried["error"] is None or not tried["error"].startswith(("Traceback", "exception")), tried
    assert json.loads((tmp_path / "run" / "loop.json").read_text())["demo_start"] is True
