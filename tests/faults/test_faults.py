"""Fault injection on the trajectory store, collection and the loop directory: nothing lost, nothing silently wrong.

Each test breaks something the way a crash, a second user, a bad disk or a bad env would,
and asserts an exact recovery or a clear refusal naming the file or the holder.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import faulty_envs  # noqa: F401 - registers faulty_envs:Crashy-v0 for the workers
import pytest
from stored import answer_after_ctrl_c, committed_parts, wait_for

from envharness import HarnessSpec
from envharness.cli import run_cli
from envrigger.cli import app
from envrigger.data import DirectoryLock, TrajectoryError, TrajectoryStore
from envrigger.errors import LibraryError
from envrigger.loop import run_loop
from envrigger.rollout import rollout

TESTS = Path(__file__).resolve().parents[1]
CRASHY = "faulty_envs:Crashy-v0"


# The child starts as a user's shell starts it: Ctrl-C neither ignored nor blocked, whatever the test
# runner's worker inherited (in the full suite, on 3 workers, both Ctrl-C tests met children that ignored it).
CTRL_C_AS_A_SHELL_GIVES_IT = (
    "import signal; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); signal.signal(signal.SIGINT, signal.default_int_handler); "
)


def cli(*args: str) -> int:
    return run_cli(app, list(args), "envrigger")


def collect_cli(out: Path, *extra: str) -> subprocess.Popen:
    """`envrigger collect` in its own process (so it can be killed), FrozenLake, serial, flushing every episode's part."""
    code = "import sys; from envrigger.cli import main; sys.argv = ['envrigger', *sys.argv[1:]]; main()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    return subprocess.Popen(
        [sys.executable, "-c", code, "collect", "FrozenLake-v1", "-n", "400", "--backend", "serial", "-o", str(out), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )


def small_run(tmp_path: Path, episodes: int = 6, flush_steps: int = 1) -> TrajectoryStore:
    return rollout("FrozenLake-v1", "random", seeds=range(episodes), out=tmp_path / "run", flush_steps=flush_steps)


def episodes_of(store: TrajectoryStore) -> dict[int, tuple]:
    return {e.episode_id: (e.seed, e.length, e.reason, e.return_) for e in store.iter_episodes()}


# -- one writer at a time ------------------------------------------------------------------------
def test_a_second_collect_into_a_run_being_written_is_refused_naming_the_holder(tmp_path, capsys):
    store = small_run(tmp_path, 3)
    before = episodes_of(store)
    with DirectoryLock(store.path):  # another writer holds the run
        with pytest.raises(TrajectoryError, match=f"being written by pid {os.getpid()} on "):
            rollout("FrozenLake-v1", "random", seeds=range(5), out=store.path)
        assert cli("collect", "FrozenLake-v1", "-n", "2", "--backend", "serial", "-o", str(store.path)) == 2
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "being written by pid" in line and "wait for it to finish" in line
    assert episodes_of(TrajectoryStore(store.path)) == before  # nothing stored was touched
    rollout("FrozenLake-v1", "random", seeds=range(2), out=store.path)  # released: appending works again
    assert sorted(episodes_of(TrajectoryStore(store.path))) == [0, 1, 2, 3, 4]


def test_a_lock_left_by_a_killed_writer_is_not_stale(tmp_path):
    store = small_run(tmp_path, 2)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import time; from envrigger.data import DirectoryLock; DirectoryLock({str(store.path)!r}).acquire(); "
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(TrajectoryError, match=f"pid {holder.pid}"):
        rollout("FrozenLake-v1", "random", seeds=range(1), out=store.path)
    holder.kill()
    holder.wait()
    rollout("FrozenLake-v1", "random", seeds=range(1), out=store.path)  # the kernel released it with the process
    assert len(TrajectoryStore(store.path)) == 3


def test_two_loop_runs_on_one_directory_the_second_is_refused(tmp_path):
    out = tmp_path / "loop"
    out.mkdir()
    with DirectoryLock(out):
        with pytest.raises(TrajectoryError, match="being written by"):
            run_loop(out, None)
    with pytest.raises(TrajectoryError, match="no loop.json"):  # free again: the usual message for an empty dir
        run_loop(out, None)
    fresh = tmp_path / "never-made"
    with pytest.raises(TrajectoryError, match="no loop.json"):
        run_loop(fresh, None)
    assert not fresh.exists()  # a refusal leaves nothing behind


# -- integrity: detected, never silently wrong ---------------------------------------------------
def test_a_deleted_middle_part_is_an_error_naming_it(tmp_path, capsys):
    store = small_run(tmp_path, 6)
    victim = store.path / "episodes" / "part-000002.parquet"
    victim.unlink()
    with pytest.raises(TrajectoryError, match=f"{victim}: missing"):
        TrajectoryStore(store.path)
    assert cli("diagnose", str(store.path)) == 2
    assert str(victim) in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["episodes", "steps"])
def test_a_truncated_part_is_an_error_naming_it(tmp_path, kind):
    store = small_run(tmp_path, 4)
    victim = store.path / kind / "part-000001.parquet"
    victim.write_bytes(victim.read_bytes()[:-7])
    with pytest.raises(TrajectoryError, match=f"{victim}: .* bytes where .* were committed"):
        TrajectoryStore(store.path)


@pytest.mark.parametrize("kind", ["episodes", "steps"])
def test_a_flipped_bit_is_never_read_as_data(tmp_path, capsys, kind):
    store = small_run(tmp_path, 4)
    rng = random.Random(7)
    for trial in range(5):  # a bit anywhere in the file: the size is the same, the checksum is not
        victim = store.path / kind / f"part-{trial % 4:06d}.parquet"
        data = bytearray(victim.read_bytes())
        where = rng.randrange(len(data))
        data[where] ^= 1 << rng.randrange(8)
        original = victim.read_bytes()
        victim.write_bytes(bytes(data))
        reopened = TrajectoryStore(store.path)  # sizes match: opening is fine
        with pytest.raises(TrajectoryError, match=f"{victim}: checksum differs"):
            list(reopened.iter_episode_steps())
        assert cli("verify", str(store.path)) == 2
        assert f"{victim}: checksum differs" in capsys.readouterr().err
        victim.write_bytes(original)
    assert cli("verify", str(store.path)) == 0
    assert "4 parts, 4 episodes" in capsys.readouterr().out


def test_a_part_written_but_never_committed_is_ignored_and_cleared(tmp_path):
    store = small_run(tmp_path, 3)
    # A writer killed after renaming its part files into place but before the manifest named them.
    for kind in ("episodes", "steps"):
        (store.path / kind / "part-000003.parquet").write_bytes((store.path / kind / "part-000000.parquet").read_bytes())
    reopened = TrajectoryStore(store.path)
    assert sorted(episodes_of(reopened)) == [0, 1, 2] and reopened.verify() == []
    rollout("FrozenLake-v1", "random", seeds=range(1), out=store.path)
    after = TrajectoryStore(store.path)
    assert sorted(episodes_of(after)) == [0, 1, 2, 3] and after.verify() == []


@pytest.mark.parametrize("content", ["[1, 2]", '"run"', "42", "null"])
def test_run_json_that_is_not_an_object_is_a_clear_error(tmp_path, capsys, content):
    store = small_run(tmp_path, 1)
    (store.path / "run.json").write_text(content)
    with pytest.raises(TrajectoryError, match="not an object"):
        TrajectoryStore(store.path)
    assert cli("diagnose", str(store.path)) == 2
    assert "not an object" in capsys.readouterr().err


def test_a_damaged_manifest_is_a_clear_error(tmp_path):
    store = small_run(tmp_path, 2)
    (store.path / "manifest.json").write_text('{"parts": [{"name": 3}]')
    with pytest.raises(TrajectoryError, match="manifest.json: not valid JSON"):
        TrajectoryStore(store.path)


# -- kill -9 during collect ----------------------------------------------------------------------
def test_kill_9_at_seeded_moments_during_collect_loses_no_committed_episode(tmp_path):
    reference = rollout("FrozenLake-v1", "random", seeds=range(400), out=tmp_path / "reference")
    expected = episodes_of(reference)
    rng, partial = random.Random(13), 0
    for trial in range(4):
        out = tmp_path / f"killed-{trial}"
        process = collect_cli(out, "--episode-timeout", "0", "--flush-steps", "20")
        # The moment is the child's own: right after its k-th committed part, plus up to 20 ms, so the
        # kill lands somewhere in writing the next one (or between two).
        parts = rng.randint(1, 40)
        assert wait_for(lambda out=out, parts=parts, child=process: committed_parts(out) >= parts or child.poll() is not None, timeout=120)
        time.sleep(rng.random() * 0.02)
        process.kill()
        process.wait()
        store = TrajectoryStore(out)
        assert store.verify() == []
        got = episodes_of(store)
        assert got == {i: expected[i] for i in got}  # every committed episode whole and identical
        assert sorted(got) == list(range(len(got)))  # a prefix: nothing committed out of order
        partial += 0 < len(got) < 400
        if len(got) < 400:
            rollout("FrozenLake-v1", "random", seeds=range(len(got), 400), out=out)  # and appending resumes it
        assert episodes_of(TrajectoryStore(out)) == expected
    assert partial == 4, "a kill landed after the collection ended; the child should still have been writing"


# -- hanging and crashing envs ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["serial", "process", "ray"])
def test_a_hanging_episode_is_recorded_as_a_wall_timeout(tmp_path, backend, monkeypatch):
    if backend == "ray":
        pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'envharness[ray]'")
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
        )  # Ray's workers import faulty_envs
        rollout(
            "FrozenLake-v1", "random", episodes=2, backend="ray", workers=2, out=tmp_path / "warm-up"
        )  # Ray is up before the clock starts
    spec = HarnessSpec(env_id=CRASHY, env_kwargs={"hang_seeds": [1]})
    started = time.monotonic()
    store = rollout(spec, "random", seeds=range(4), backend=backend, workers=2, out=tmp_path / "run", allow_imports=["faulty_envs"],
                    episode_timeout=1.5)  # fmt: skip
    assert time.monotonic() - started < 30
    episodes = {e.seed: e for e in store.iter_episodes()}
    assert sorted(episodes) == [0, 1, 2, 3]
    assert episodes[1].reason == "timeout (wall)" and "more than 1.5 s" in episodes[1].error and not episodes[1].success
    assert all(episodes[s].error is None for s in (0, 2, 3))


def test_a_segfaulting_env_is_recorded_with_the_signal_name(tmp_path):
    spec = HarnessSpec(env_id=CRASHY, env_kwargs={"segv_seeds": [2]})
    store = rollout(spec, "random", seeds=range(4), backend="process", workers=2, out=tmp_path / "run", allow_imports=["faulty_envs"])
    episodes = {e.seed: e for e in store.iter_episodes()}
    assert "killed by SIGSEGV" in episodes[2].error and episodes[2].reason == "error"
    assert all(episodes[s].error is None for s in (0, 1, 3))


def test_ctrl_c_commits_the_episodes_that_finished_after_a_hung_one(tmp_path):
    out = tmp_path / "run"
    code = (
        CTRL_C_AS_A_SHELL_GIVES_IT
        + "import sys, faulty_envs; from envrigger.cli import main; sys.argv = ['envrigger', *sys.argv[1:]]; main()"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    spec = tmp_path / "spec.json"
    done = tmp_path / "done"
    done.mkdir()
    spec.write_text(HarnessSpec(env_id=CRASHY, env_kwargs={"hang_seeds": [0], "done_dir": str(done)}).to_json())
    process = subprocess.Popen(
        [sys.executable, "-c", code, "collect", str(spec), "-n", "6", "--backend", "process", "-w", "2", "-o", str(out),
         "--allow-import", "faulty_envs"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True, start_new_session=True,
    )  # fmt: skip
    # Seeds 1-5 finish on the second worker while seed 0 hangs on the first: each writes its marker as it ends.
    finished = [done / f"done-{seed}" for seed in range(1, 6)]
    assert wait_for(lambda: all(marker.is_file() for marker in finished), timeout=120), "seeds 1-5 never finished"
    time.sleep(0.5)  # the last result's way from the worker to the parent's writer (a pipe), not a wait for the work
    os.killpg(process.pid, signal.SIGINT)
    err = answer_after_ctrl_c(process)
    assert process.returncode == 130 and "interrupted" in err.strip().splitlines()[-1]
    store = TrajectoryStore(out)
    assert sorted(e.seed for e in store.iter_episodes()) == [1, 2, 3, 4, 5] and store.verify() == []


# -- a full disk --------------------------------------------------------------------------------------
def test_a_full_disk_is_one_line_exit_2_and_the_run_stays_readable(tmp_path, capsys):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)], check=True)
    try:
        code = cli("collect", "CartPole-v1", "-n", "3000", "--backend", "serial", "--flush-steps", "500", "-o", str(disk / "run"))
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "No space left on device" in err and "free some space" in err
        store = TrajectoryStore(disk / "run")
        assert store.verify() == []
        committed = episodes_of(store)
        assert sorted(committed) == list(range(len(committed)))
        assert not [p for p in (disk / "run").rglob(".*.tmp")]  # nothing half-written left behind
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


# -- a loop killed right after an admission ------------------------------------------------------------
def test_a_loop_resumed_after_a_crash_right_after_an_admission_reports_what_an_uninterrupted_one_does(tmp_path):
    import sqlite3

    from envharness import HarnessSpec as Spec
    from envrigger.loop import LoopConfig

    config = LoopConfig(
        spec=Spec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False}),
        learner="qlearning",
        rounds=2,
        budget_steps=4000,
        collect_episodes=30,
        eval_episodes=30,
        val_episodes=20,
        candidates_per_round=3,
        backend="serial",
        min_rollouts=20,
        max_rollouts=40,
        allow_seen_levels=True,
        band=(0.05, 0.95),
    )
    whole = run_loop(tmp_path / "whole", config)
    assert whole["rounds"][0]["admitted"], "the round must admit something for this test to mean anything"
    crashed = tmp_path / "crashed"
    run_loop(crashed, config)
    # The state a kill right after round 1's admissions leaves: the components are in, the round is not.
    db = sqlite3.connect(crashed / "library.db")
    db.execute("DELETE FROM rounds")
    db.commit()
    db.close()
    (crashed / "library.db.commit.json").unlink()  # it would (rightly) say that rounds were lost
    (crashed / "final.json").unlink(missing_ok=True)
    resumed = run_loop(crashed)

    def stable(result):
        return [{k: v for k, v in r.items() if k not in ("wall_time", "stage_seconds")} for r in result["rounds"]]

    assert stable(resumed) == stable(whole)
    assert resumed["final"] == whole["final"]


# -- the library ----------------------------------------------------------------------------------
def _library(tmp_path: Path, n: int = 5):
    from envrigger.loop.library import Library

    library = Library(tmp_path / "lib" / "library.db")
    for steps in range(n):
        spec = HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 10 + steps}}])
        library.admit(spec, finding="timeout", rationale="r", gates=[], seeds=[steps], agent_id="a", round=1)
    library.complete_round(1, {"round": 1, "admitted": list(range(1, n + 1))})
    return library


def test_a_component_altered_in_the_database_is_never_read_as_data(tmp_path, capsys):
    import sqlite3

    from envrigger.loop.library import Library

    library = _library(tmp_path)
    library.close()
    db = sqlite3.connect(tmp_path / "lib" / "library.db")
    db.execute("UPDATE components SET seeds_json='[99]' WHERE id=3")  # what a flipped bit in a row's text does
    db.commit()
    db.close()
    with pytest.raises(LibraryError, match="component 3 does not match its checksum"):
        Library(tmp_path / "lib" / "library.db").components()
    assert cli("library", "list", str(tmp_path / "lib")) == 2
    assert "component 3 does not match its checksum" in capsys.readouterr().err


def test_a_damaged_wal_that_drops_committed_rows_is_refused(tmp_path, capsys):
    import shutil

    from envrigger.loop.library import Library

    library = _library(tmp_path)  # still open: the newest transactions live in library.db-wal
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("library.db", "library.db-wal", "library.db.commit.json"):
        shutil.copy(tmp_path / "lib" / name, copy / name)
    library.close()
    wal = copy / "library.db-wal"
    wal.write_bytes(wal.read_bytes()[: len(wal.read_bytes()) // 3])  # torn: SQLite silently ignores the tail
    with pytest.raises(LibraryError, match="were committed .*-wal file was damaged or lost"):
        Library(copy / "library.db")
    assert cli("library", "list", str(copy)) == 2
    assert "-wal file was damaged or lost" in capsys.readouterr().err


def test_a_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path, capsys):
    import sqlite3

    from envrigger.loop.library import Library

    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(LibraryError, match="not a library"):
        Library(path)
    assert cli("library", "list", str(path)) == 2 and "not a library" in capsys.readouterr().err
    assert path.read_bytes() == before and not path.with_name("other.db.commit.json").exists()


def test_verify_checks_a_loop_directory_its_library_and_every_run_in_it(tmp_path, capsys):
    library = _library(tmp_path)
    library.close()
    store = rollout("FrozenLake-v1", "random", seeds=range(3), out=tmp_path / "lib" / "round-1" / "evidence", flush_steps=1)
    assert cli("verify", str(tmp_path / "lib")) == 0
    assert "library: 5 components, 1 rounds" in capsys.readouterr().out
    victim = store.path / "steps" / "part-000001.parquet"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 4
    victim.write_bytes(bytes(data))
    assert cli("verify", str(tmp_path / "lib")) == 2
    assert f"{victim}: checksum differs" in capsys.readouterr().err


def test_kill_9_at_seeded_moments_during_a_loop_then_resume_gives_the_uninterrupted_result(tmp_path):
    spec = tmp_path / "lake.json"
    spec.write_text(HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False}).to_json())
    options = ["--learner", "qlearning", "--arms", "original,rigger", "--rounds", "2", "--budget-steps", "4000", "--collect-episodes", "30",
               "--eval-episodes", "30", "--val-episodes", "20", "--candidates", "3", "--backend", "serial", "--allow-seen-levels"]  # fmt: skip
    code = "import sys; from envrigger.cli import main; sys.argv = ['envrigger', *sys.argv[1:]]; main()"

    def envrigger(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    whole = envrigger("run", str(spec), "-o", str(tmp_path / "whole"), *options)
    assert whole.wait(timeout=600) == 0, whole.stderr.read() if whole.stderr else ""
    expected = json.loads((tmp_path / "whole" / "final.json").read_text())
    # Moments the loop itself marks, in the order it reaches them: a kill lands up to 30 ms after one.
    milestones = ["levels.json", "round-1/evidence", "round-1/diagnosis.json", "round-1/validate", "original-round-1.json",
                  "levels-round-1.json", "round-2/select-original", "rigger-round-2.json", "heldout-original/manifest.json"]  # fmt: skip
    rng, cut = random.Random(29), 0
    for trial in range(4):
        out = tmp_path / f"killed-{trial}"
        process = envrigger("run", str(spec), "-o", str(out), *options)
        reached = out / rng.choice(milestones)
        assert wait_for(lambda reached=reached, child=process: reached.exists() or child.poll() is not None, timeout=300)
        time.sleep(rng.random() * 0.03)
        process.kill()
        process.wait()
        cut += not (out / "final.json").is_file()
        if (out / "loop.json").is_file():
            resumed = envrigger("run", "--resume", str(out))
            assert resumed.wait(timeout=600) == 0, resumed.stderr.read() if resumed.stderr else ""
            assert json.loads((out / "final.json").read_text()) == expected
    assert cut, "no kill landed before the run finished; the moments need retuning"
