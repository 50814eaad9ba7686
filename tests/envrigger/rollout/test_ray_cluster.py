"""The Ray backend joins a real cluster started with ``ray start --head`` (as a user running it on many machines would)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from ray_nodes import RAY, free_port, stop_processes_of
from stored import content as _content

from envharness import HarnessSpec
from envrigger.data import TrajectoryStore
from envrigger.errors import RolloutError
from envrigger.rollout import rollout

pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'envharness[ray]'")

SPEC = HarnessSpec(env_id="MiniGrid-DoorKey-5x5-v0", transforms=[{"name": "ActionSlip", "params": {"p": 0.2}}])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node with 2 CPUs on a free port and a temp dir of its own, whose processes (and only those) are killed afterwards."""
    from envrigger.rollout.ray_backend import RAY_POOL

    RAY_POOL.close()  # this process's own local Ray, if an earlier test started one: `--ray-address auto` must find the head node
    port = free_port()
    root = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths live under it
    # The head writes its address to <temp-dir>/ray_current_cluster; a driver looks in $RAY_TMPDIR/ray/.
    temp = os.path.join(root, "ray")
    _CLUSTER_DIR[:] = [root]
    env = _clean_env()
    started = subprocess.run(
        [RAY, "start", "--head", "--num-cpus", "2", "--port", str(port), "--disable-usage-stats", "--include-dashboard", "false",
         "--temp-dir", temp],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_processes_of((temp, f"127.0.0.1:{port}"))
        shutil.rmtree(root, ignore_errors=True)
        _CLUSTER_DIR.clear()


def _clean_env() -> dict[str, str]:
    """This process's environment, with Ray's token authentication off for the head node and every driver alike.

    Left to itself, Ray decides per process: a local ``ray.init()`` (any test using the ray
    backend, in either xdist worker) writes ``~/.ray/auth_token`` and sets ``RAY_AUTH_MODE``
    in its own environment, and a process started after that turns token mode on, so a head
    node and its drivers started at different moments disagree.
    """
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("RAY_AUTH")}
    env["RAY_AUTH_MODE"] = "disabled"
    if _CLUSTER_DIR:  # where the head node keeps its files and its address (so `--ray-address auto` finds it, not a test's local Ray)
        env["RAY_TMPDIR"] = _CLUSTER_DIR[0]
    return env


_CLUSTER_DIR: list[str] = []  # the running head node's temp dir, set by the fixture


def _driver_env(**extra: str) -> dict[str, str]:
    env = _clean_env()
    env.update(extra)
    return env


def test_a_driver_joins_the_cluster_named_by_ray_address_and_stores_what_serial_stores(cluster, tmp_path):
    serial = rollout(SPEC, "random", seeds=range(12), policy_seed=3, out=tmp_path / "serial")
    script = textwrap.dedent(f"""
        import json, sys, ray
        from envharness import HarnessSpec
        from envrigger.rollout import rollout
        spec = HarnessSpec.from_json({SPEC.to_json(indent=None)!r})
        rollout(spec, "random", seeds=range(12), policy_seed=3, backend="ray", out={str(tmp_path / "ray")!r})
        rollout(spec, "random", seeds=range(12, 14), policy_seed=3, backend="ray", out={str(tmp_path / "ray2")!r})  # the same actors again
        context = ray.get_runtime_context()
        print(json.dumps({{"gcs": context.gcs_address, "cpus": ray.cluster_resources().get("CPU")}}))
    """)
    # The head node and the driver agree on authentication (off for both: see _clean_env).
    done = subprocess.run(
        [sys.executable, "-c", script], env=_driver_env(RAY_ADDRESS=cluster),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["gcs"].endswith(f":{cluster.rpartition(':')[2]}")  # the cluster's own GCS, not a new local Ray
    assert facts["cpus"] == 2.0
    assert _content(TrajectoryStore(tmp_path / "ray")) == _content(serial)
    assert len(TrajectoryStore(tmp_path / "ray2")) == 2


def test_collect_ray_address_auto_joins_the_running_cluster(cluster, tmp_path):
    serial = rollout(SPEC, "random", seeds=range(5, 15), out=tmp_path / "serial")
    spec = tmp_path / "spec.json"
    spec.write_text(SPEC.to_json())
    done = subprocess.run(
        [str(Path(sys.executable).parent / "envrigger"), "collect", str(spec), "-n", "10", "--seed", "5", "--backend", "ray",
         "--ray-address", "auto", "-o", str(tmp_path / "run")],
        env=_driver_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert _content(TrajectoryStore(tmp_path / "run")) == _content(serial)


def test_an_address_where_no_cluster_runs_is_one_clear_error(tmp_path, monkeypatch):
    from envrigger.rollout.ray_backend import RAY_POOL

    RAY_POOL.close()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")
    with pytest.raises(RolloutError, match="cannot reach a Ray cluster at 127.0.0.1"):
        rollout("FrozenLake-v1", "random", episodes=2, backend="ray", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing left behind
