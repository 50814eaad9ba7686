"""Master seeds as tasks on a real two-node Ray cluster: the same results as a local run, file for file, even when a node dies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from ray_nodes import clean_env, free_port, start_node, stop_processes_of

from envharness import HarnessSpec
from envrigger.loop import LoopConfig, run_seeds
from envrigger.loop.library import Library

pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'envharness[ray]'")

LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
CONFIG = LoopConfig(
    spec=LAKE, learner="qlearning", rounds=2, budget_steps=3000, collect_episodes=20, eval_episodes=20, val_episodes=20,
    candidates_per_round=1, backend="serial", min_rollouts=20, max_rollouts=40, allow_seen_levels=True,
)  # fmt: skip
SEEDS = 2


@pytest.fixture(scope="module")
def cluster():
    """A head node with no CPUs of its own and two worker nodes of one CPU each, named so that one can be killed alone."""
    from envrigger.rollout.ray_backend import RAY_POOL

    RAY_POOL.close()
    port = free_port()
    root = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths live under it
    temp = os.path.join(root, "ray")
    address = f"127.0.0.1:{port}"
    start_node(["--head", "--num-cpus", "0", "--port", str(port), "--include-dashboard", "false", "--temp-dir", temp], root)
    try:
        for name in ("node-a", "node-b"):
            start_node(["--address", address, "--num-cpus", "1", "--node-name", f"envrigger-{name}"], root)
        yield address, root
    finally:
        stop_processes_of((temp, address))
        shutil.rmtree(root, ignore_errors=True)


def _kept(run: Path) -> dict[str, object]:
    """What a finished multi-seed run reports, seed by seed, without wall times (which differ between any two runs)."""
    out: dict[str, object] = {"result": json.loads((run / "result.json").read_text())}
    for seed in range(SEEDS):
        where = run / f"seed-{seed}"
        library = Library(where / "library.db", create=False)
        rounds = [{k: v for k, v in r.items() if k not in ("wall_time", "stage_seconds", "seconds")} for r in library.rounds()]
        components = [(c.hash, c.finding, c.round) for c in library.components()]
        library.close()
        out[f"seed-{seed}"] = {
            "final": json.loads((where / "final.json").read_text()),
            "loop": json.loads((where / "loop.json").read_text()),
            "levels": json.loads((where / "levels.json").read_text()),
            "rounds": rounds,
            "components": components,
            "files": sorted(str(p.relative_to(where)) for p in where.rglob("*.json") if "tensorboard" not in p.parts),
        }
    return out


def _run_on(address: str, root: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "envrigger"), "run", "--resume", str(out), "--ray-address", address, *extra],
        env=clean_env(root), capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def test_seeds_on_a_two_node_cluster_match_a_local_run_and_a_dead_node_only_reruns_its_seed(cluster, tmp_path):
    address, root = cluster
    local = run_seeds(tmp_path / "local", CONFIG, seeds=SEEDS)
    on_ray = tmp_path / "ray"
    # The same multi-seed run, planned (its seeds.json, as `envrigger run --seeds` writes it) and resumed on the cluster.
    on_ray.mkdir()
    (on_ray / "seeds.json").write_text(json.dumps({"config": json.loads(CONFIG.model_dump_json()), "seeds": SEEDS}))
    killed = threading.Event()

    def kill_node_a_once_it_works() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed.is_set():
            if _seed_running_on("envrigger-node-a"):
                time.sleep(2.0)  # mid-seed
                stop_processes_of(("envrigger-node-a",))
                killed.set()
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_node_a_once_it_works, daemon=True)
    killer.start()
    done = _run_on(address, root, on_ray)
    killer.join(timeout=5)
    assert done.returncode == 0, done.stderr[-3000:]
    assert killed.is_set()  # node-a died in the middle of a seed, and the run still finished: the seed ran again on node-b
    assert "finished on the cluster" in done.stdout + done.stderr
    assert local["arms"] == json.loads((on_ray / "result.json").read_text())["arms"]
    assert _kept(on_ray) == _kept(tmp_path / "local")
    again = _run_on(address, root, on_ray)  # a finished seed is never sent again
    assert again.returncode == 0 and (again.stdout + again.stderr).count("finished already") == SEEDS


def _cmdline(pid: str) -> str:
    try:
        return (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _seed_running_on(node: str) -> bool:
    """Whether a seed task runs in a worker process of the node named ``node`` (its parent is that node's raylet)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and "seed_task" in _cmdline(proc.name):
            try:
                parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if node in _cmdline(parent):
                return True
    return False
