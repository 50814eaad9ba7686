"""Minari export (by deterministic replay) and import."""

from __future__ import annotations

import pytest

pytest.importorskip("minari", reason="Minari is an optional extra: pip install 'envharness[minari]'")

from envharness import HarnessSpec
from envrigger.data import TrajectoryError
from envrigger.data.minari import export_minari, import_minari
from envrigger.rollout import rollout


@pytest.fixture(autouse=True)
def _local_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))


@pytest.mark.parametrize("env_id", ["FrozenLake-v1", "CartPole-v1"])
def test_run_exports_to_minari_and_imports_back_with_the_same_steps(env_id, tmp_path):
    spec = HarnessSpec(env_id=env_id, transforms=[{"name": "StepBudget", "params": {"max_steps": 30}}])
    run = rollout(spec, "random", seeds=range(6), out=tmp_path / "run")
    assert export_minari(run, "envrigger/test-v0") == 6
    back = import_minari("envrigger/test-v0", tmp_path / "back")
    original = [(e.length, e.success, round(e.return_, 6)) for e in run.iter_episodes()]
    assert [(e.length, e.success, round(e.return_, 6)) for e in back.iter_episodes()] == original
    digests = lambda store: [[s.obs_digest for s in steps] for _, steps in store.iter_episode_steps()]
    assert digests(back) == digests(run)


def test_unknown_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(TrajectoryError, match="cannot load it locally"):
        import_minari("nobody/nothing-v0", tmp_path / "run")


def test_runs_without_a_spec_cannot_be_exported(tmp_path):
    import json

    source = tmp_path / "ext.jsonl"
    source.write_text(json.dumps({"verdict": {"success": True}, "steps": [{"action": 1}]}) + "\n")
    from envrigger.data.jsonl import import_jsonl

    store = import_jsonl(source, tmp_path / "run")
    with pytest.raises(TrajectoryError):
        export_minari(store, "envrigger/ext-v0")
