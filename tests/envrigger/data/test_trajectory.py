"""The Parquet store: atomic appends, streaming reads, clear errors; the JSONL format."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from envrigger.data import EpisodeRecord, StepRecord, TrajectoryError, TrajectoryStore
from envrigger.data.jsonl import export_jsonl, import_jsonl
from envrigger.errors import RolloutError
from envrigger.rollout import rollout


def _episode(i: int, n_steps: int) -> tuple[EpisodeRecord, list[StepRecord]]:
    episode = EpisodeRecord(
        episode_id=i,
        spec_hash="h",
        seed=i,
        policy_id="p",
        length=n_steps,
        return_=float(n_steps),
        success=i % 2 == 0,
        score=1.0,
        reason="r",
    )
    steps = [
        StepRecord(episode_id=i, t=t, action=str(t % 4), reward=1.0, terminated=t == n_steps - 1, truncated=False, obs_digest=f"{t:016x}")
        for t in range(n_steps)
    ]
    return episode, steps


WRITER = textwrap.dedent(
    """
    import sys
    from envrigger.data import TrajectoryStore, EpisodeRecord, StepRecord
    store = TrajectoryStore.create(sys.argv[1], exist_ok=True)
    i = store.next_episode_id()
    while True:
        episodes, steps = [], []
        for j in range(20):
            n = 50 + (i + j) % 30
            episodes.append(EpisodeRecord(episode_id=i + j, spec_hash="h", seed=i + j, policy_id="p", length=n,
                                          return_=float(n), success=True, score=1.0, reason="r"))
            steps += [StepRecord(episode_id=i + j, t=t, action="0", reward=1.0, terminated=t == n - 1,
                                 truncated=False, obs_digest="0") for t in range(n)]
        store.append(episodes, steps)
        i += 20
    """
)


def test_a_writer_killed_mid_append_leaves_only_whole_episodes(tmp_path):
    run = tmp_path / "run"
    for delay in (0.0, 0.007, 0.013, 0.031):
        committed = len(list((run / "episodes").glob("part-*"))) if run.exists() else 0
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(run)])
        deadline = time.monotonic() + 60
        # let it commit a part first, then kill it at an arbitrary point of the next one
        while time.monotonic() < deadline and (
            not (run / "episodes").exists() or len(list((run / "episodes").glob("part-*"))) <= committed
        ):
            time.sleep(0.002)
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        store = TrajectoryStore(run)
        seen = 0
        for episode, steps in store.iter_episode_steps():
            assert len(steps) == episode.length and [s.t for s in steps] == list(range(episode.length))
            seen += 1
        assert seen == len(store) and seen % 20 == 0
    assert len(store) > 0
    # and the run keeps accepting appends after the crashes
    episode, steps = _episode(store.next_episode_id(), 3)
    store.append([episode], steps)
    assert len(TrajectoryStore(run)) == seen + 1


def test_steps_stream_in_batches_without_loading_the_run(tmp_path):
    store = TrajectoryStore.create(tmp_path / "run")
    for part in range(3):
        items = [_episode(part * 10 + i, 100) for i in range(10)]
        store.append([e for e, _ in items], [s for _, steps in items for s in steps])
    batches = list(store.iter_step_batches(columns=["episode_id", "reward"], batch_size=256))
    assert max(b.num_rows for b in batches) <= 256
    assert sum(b.num_rows for b in batches) == 3000
    assert batches[0].schema.names == ["episode_id", "reward"]


def test_append_refuses_duplicate_ids_and_stray_steps(tmp_path):
    store = TrajectoryStore.create(tmp_path / "run")
    episode, steps = _episode(0, 2)
    store.append([episode], steps)
    with pytest.raises(TrajectoryError, match="already stored"):
        store.append([episode], steps)
    other, _ = _episode(1, 2)
    with pytest.raises(TrajectoryError, match="not in this batch"):
        store.append([other], steps)
    assert len(store) == 1


def test_opening_what_is_not_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(TrajectoryError, match="does not exist"):
        TrajectoryStore(tmp_path / "nothing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(TrajectoryError, match="not a run directory"):
        TrajectoryStore(tmp_path / "plain")
    with pytest.raises(TrajectoryError, match="already holds a run"):
        TrajectoryStore.create(rollout("CartPole-v1", seeds=[0], out=tmp_path / "r").path)


def test_corrupt_parquet_names_the_file(tmp_path):
    store = rollout("CartPole-v1", seeds=[0, 1], out=tmp_path / "run")
    part = next((store.path / "steps").glob("part-*.parquet"))
    part.write_bytes(b"PAR1 garbage")
    with pytest.raises(TrajectoryError, match=part.name):
        list(store.iter_episode_steps())


def test_a_part_written_before_search_steps_reads_it_as_null_and_the_run_takes_new_episodes(tmp_path):
    import hashlib

    import pyarrow.parquet as pq

    store = rollout("CartPole-v1", seeds=[0, 1], out=tmp_path / "run")
    part = next((store.path / "episodes").glob("part-*.parquet"))
    pq.write_table(pq.read_table(part).drop_columns(["search_steps"]), part)  # as an earlier envrigger wrote it
    manifest = json.loads((store.path / "manifest.json").read_text())
    manifest["parts"][0]["episodes_bytes"] = part.stat().st_size
    manifest["parts"][0]["episodes_sha256"] = hashlib.sha256(part.read_bytes()).hexdigest()
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    old = TrajectoryStore(store.path)
    assert old.verify() == [] and [e.search_steps for e in old.iter_episodes()] == [None, None]
    rollout("CartPole-v1", seeds=[2], out=tmp_path / "run")  # appending to it goes on
    table = TrajectoryStore(store.path).episodes_table(["seed", "search_steps"])
    assert table.column("seed").to_pylist() == [0, 1, 2] and table.column("search_steps").null_count == 3


def test_jsonl_round_trip_keeps_every_field(tmp_path):
    original = rollout("MiniGrid-Empty-5x5-v0", "random", seeds=range(4), out=tmp_path / "a")
    count = export_jsonl(original, tmp_path / "a.jsonl")
    assert count == 4
    copy = import_jsonl(tmp_path / "a.jsonl", tmp_path / "b")

    def content(store):
        out = []
        for episode, steps in store.iter_episode_steps():
            row = episode.to_row()
            row.pop("wall_time")
            out.append((row, [s.to_row() for s in steps]))
        return out

    assert content(copy) == content(original)


LINE = {
    "episode_id": 7,
    "env_id": "code-repair",
    "policy_id": "gpt-agent",
    "seed": 3,
    "verdict": {"success": False, "reason": "hidden tests fail"},
    "costs": {"tokens": 5120, "model_calls": 4, "tool_errors": 1, "retries": 1},
    "steps": [
        {"action": {"tool": "view", "path": "calc.py"}, "observation": "def add(a, b): ..."},
        {"action": {"tool": "run_tests"}, "info": {"tool_error": "timeout"}},
        {"action": {"tool": "submit"}, "terminated": True},
    ],
}


def test_external_harness_jsonl_imports_with_costs(tmp_path):
    source = tmp_path / "agent.jsonl"
    source.write_text(json.dumps(LINE) + "\n\n" + json.dumps({**LINE, "episode_id": 8, "verdict": {"success": True}}) + "\n")
    store = import_jsonl(source, tmp_path / "run")
    first, second = list(store.iter_episodes())
    assert (first.episode_id, first.length, first.tokens, first.tool_errors) == (7, 3, 5120, 1)
    assert first.reason == first.terminal_cause == "hidden tests fail" and not first.success
    assert second.success and second.score == 1.0
    steps = next(iter(store.iter_episode_steps()))[1]
    assert json.loads(steps[1].info) == {"tool_error": "timeout"}
    assert json.loads(steps[0].action) == {"path": "calc.py", "tool": "view"}


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("{not json", ":2: not valid JSON"),
        (json.dumps({"steps": []}), ":2: field verdict: field required"),
        (json.dumps({**LINE, "seed": "three"}), ":2: field seed"),
        (json.dumps({**LINE, "steps": [{"reward": 1}]}), ":2: field steps.0.action"),
        (json.dumps({**LINE, "steps": [{"action": 1, "reward": "lots"}]}), ":2: field steps.0.reward"),
        (json.dumps({**LINE, "verdict": {"sucess": True}}), ":2: field verdict.success"),
    ],
)
def test_malformed_jsonl_names_file_line_and_field_and_stores_nothing(tmp_path, line, fragment):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps(LINE) + "\n" + line + "\n")
    run = rollout("CartPole-v1", seeds=[0], out=tmp_path / "run")
    before = sorted(p.name for p in (run.path / "episodes").iterdir())
    with pytest.raises(TrajectoryError) as error:
        import_jsonl(source, run.path)
    message = str(error.value)
    assert message.startswith(str(source)) and fragment.lower() in message.lower() and "\n" not in message
    assert sorted(p.name for p in (run.path / "episodes").iterdir()) == before


def _general_json(value):
    from envrigger.data import to_jsonable

    return json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"))


def test_the_recorders_fast_json_is_exactly_the_general_json():
    """Recording takes a fast path for common values; stored text must be what json.dumps gives, byte for byte."""
    import numpy as np

    from envrigger.data import dumps

    rng = np.random.default_rng(7)
    values = [0, -3, 2**70, 1.5, -0.0, 1e-7, 1e300, float("nan"), float("inf"), "é\n\"", True, None, (), [], {}, (1, 2.5, "x"),
              {"b": 1, "a": [1, {"c": None}]}, {1: "int key"}, np.int64(-4), np.float32(0.1), np.bool_(True),
              np.zeros((0, 3)), np.array(5), np.array(2.5), np.array([True, False]), np.array([1.0, np.nan]),
              np.arange(10_000), np.array(["a", "b"])]  # fmt: skip
    for dtype in (np.uint8, np.int16, np.int64, np.uint64, np.float16, np.float32, np.float64):
        for shape in ((), (1,), (4,), (2, 3), (7, 7, 3), (2, 1, 2, 1)):
            raw = rng.normal(0, 1e3, size=shape) if np.dtype(dtype).kind == "f" else rng.integers(0, 200, size=shape)
            values.append(np.asarray(raw).astype(dtype))
            values.append({"image": np.asarray(raw).astype(dtype), "direction": np.int64(2), "mission": "get the key"})
    for value in values:
        assert dumps(value) == _general_json(value), repr(value)


def test_which_observations_are_stored_whole_is_a_documented_choice(tmp_path):
    import numpy as np

    from envrigger.data import inline_observation

    image = {"image": np.ones((7, 7, 3), dtype=np.uint8), "direction": 1, "mission": "go"}
    assert inline_observation(np.array([0.5, 1.0])) == "[0.5,1.0]" and inline_observation(3) == "3"
    assert inline_observation(image) is None  # 149 numbers: digest only, by default
    assert inline_observation(image, "fit") == _general_json(image)  # its JSON fits 512 characters
    assert inline_observation(np.zeros(600), "fit") is None and inline_observation(3, "none") is None
    small = rollout("MiniGrid-Empty-5x5-v0", "random", episodes=2, out=tmp_path / "small")
    fit = rollout("MiniGrid-Empty-5x5-v0", "random", episodes=2, out=tmp_path / "fit", store_obs="fit")
    small_steps = [s for _, steps in small.iter_episode_steps() for s in steps]
    fit_steps = [s for _, steps in fit.iter_episode_steps() for s in steps]
    assert all(s.obs is None for s in small_steps) and all(s.obs is not None for s in fit_steps)
    assert [s.obs_digest for s in small_steps] == [s.obs_digest for s in fit_steps]  # the digests are kept either way
    with pytest.raises(RolloutError, match="store_obs"):
        rollout("CartPole-v1", episodes=1, store_obs="most", out=tmp_path / "bad")


def test_a_text_games_observations_are_stored_whole_however_long(tmp_path):
    """TextWorld's room descriptions run past 512 characters; they were digests only, so an LLM agent's context was lost."""
    store = rollout("envharness/TextWorld-v0", "random", seeds=[0], backend="serial", out=tmp_path / "tw")
    steps = [s for _, steps in store.iter_episode_steps() for s in steps]
    assert all(s.obs is not None for s in steps) and max(len(s.obs) for s in steps) > 512
    assert all("text" in json.loads(s.obs) for s in steps)
    assert len({s.obs_digest for s in steps}) > 1
    long_context = {"text": "You are in a kitchen. " * 1000, "turn": 3}
    assert json.loads(inline_observation_of(long_context)) == long_context
    assert inline_observation_of({"mission": "x" * 600, "image": list(range(100))}) is None  # an image with a caption is not text


def inline_observation_of(obs):
    from envrigger.data import inline_observation

    return inline_observation(obs)
