"""Attacks on what envrigger keeps (issue 43): its logs, run stores, ledgers and libraries, and the Agent Lightning conversion.

Written as a hostile file author, store author or converter input would, grouped by the
root cause each closes:

- **5, integrity promises kept literally.** An altered line of a checksummed log
  (``calls.jsonl``, a run's manifest) is refused and reported, never counted as "torn" and
  skipped; a damaged log never stops later recording; an SQLite file is a ledger or a library
  only if every schema object in it (tables, views, triggers, indexes) is one we make, and a
  file refused as not ours is left byte-identical, with no ``-wal``/``-shm`` beside it.
- **9, identity by content.** A policy given as ``file.py:Class`` (or ``ALGO:model.zip``,
  or ``module:Class``) is identified in a ledger, and in the name of its evaluation's run
  directory, by what it is, not where it lies.
- **10, one claim per session, checks regardless of flags.** In the Agent Lightning
  conversion, a served session is claimed by at most one episode; with the server's record,
  every payload is checked against it whatever it says about itself; a malformed span is
  skipped and counted, and never aborts the conversion.
- **4, secrets.** The caller's key never lands in a ledger, a store, a log or an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from envharness import HarnessSpec
from envharness.cli import run_cli
from envrigger.cli import app
from envrigger.data import TrajectoryError, TrajectoryStore
from envrigger.errors import EnvriggerError, LedgerError
from envrigger.ledger import Cell, EnvFactor, HarnessFactor, Ledger, ModelFactor
from envrigger.live.calls import CallLog
from envrigger.loop.library import Library

SECRET = "sk-live-4f9a1c77e2b04d0d9a3e5b6c7d8e9f00"


def cli(*args: str) -> int:
    return run_cli(app, list(args), "envrigger")


def one_line(capsys: Any) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# ================================================================================================================
# 5. Integrity promises kept literally
# ================================================================================================================


# -- calls.jsonl ------------------------------------------------------------------------------------------------
def calls_log(folder: Path, n: int = 4, secret: str = "") -> tuple[CallLog, Path]:
    log = CallLog(folder)
    for i in range(n):
        log.append({"gen_ai.conversation.id": f"s{i}", "envrigger.time": float(i), "gen_ai.usage.input_tokens": 10 + i,
                    "gen_ai.input.messages": [{"role": "user", "content": f"hello {secret}"}]})  # fmt: skip
    return log, folder / "calls.jsonl"


def rewrite(path: Path, edit: Any) -> None:
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    path.write_bytes(b"\n".join(edit(lines[:-1])) + b"\n")


def test_calls_log_a_line_cut_short_mid_file_is_refused_not_counted_torn(tmp_path):
    log, path = calls_log(tmp_path)
    rewrite(path, lambda lines: [lines[0], lines[1][: len(lines[1]) // 2], *lines[2:]])  # looks like a kill's leftover, but mid-file
    with pytest.raises(TrajectoryError, match="line 2"):
        log.read()


def test_calls_log_a_line_stripped_of_its_checksum_is_refused(tmp_path):
    log, path = calls_log(tmp_path)
    rewrite(path, lambda lines: [lines[0], json.dumps({"call": json.loads(lines[1])["call"]}).encode(), *lines[2:]])
    with pytest.raises(TrajectoryError, match="line 2"):
        log.read()


def test_calls_log_a_line_that_is_json_but_no_record_is_refused(tmp_path):
    log, path = calls_log(tmp_path)
    rewrite(path, lambda lines: [lines[0], b"[1, 2, 3]", *lines[2:]])
    with pytest.raises(TrajectoryError, match="line 2"):
        log.read()


def test_calls_log_a_removed_line_is_refused(tmp_path):
    log, path = calls_log(tmp_path)
    rewrite(path, lambda lines: [lines[0], *lines[2:]])  # every remaining line's own checksum is right
    with pytest.raises(TrajectoryError, match="line 2"):
        log.read()


def test_calls_log_swapped_lines_are_refused(tmp_path):
    log, path = calls_log(tmp_path)
    rewrite(path, lambda lines: [lines[0], lines[2], lines[1], *lines[3:]])
    with pytest.raises(TrajectoryError, match="line 2"):
        log.read()


def test_calls_log_a_garbled_last_line_that_ends_in_a_newline_is_refused(tmp_path):
    log, path = calls_log(tmp_path)
    rewrite(path, lambda lines: [*lines[:-1], lines[-1][: len(lines[-1]) // 2]])  # a kill never leaves the newline
    with pytest.raises(TrajectoryError, match="line 4"):
        log.read()


def test_calls_log_a_torn_tail_is_left_out_and_counted_and_the_next_append_goes_on(tmp_path):
    log, path = calls_log(tmp_path)
    with open(path, "ab") as handle:
        handle.write(b'{"prev": "ab12", "call": {"gen_ai.conversation.id": "to')  # what a kill mid-write leaves
    assert [c["gen_ai.conversation.id"] for c in log.read()] == ["s0", "s1", "s2", "s3"] and log.torn == 1
    log.append({"gen_ai.conversation.id": "s4", "envrigger.time": 4.0})
    again = CallLog(tmp_path)
    assert [c["gen_ai.conversation.id"] for c in again.read()] == ["s0", "s1", "s2", "s3", "s4"] and again.torn == 1
    rewrite(path, lambda lines: [*lines[:4], lines[4][:-3] + b"XYZ", lines[5]])  # the torn line, altered after the fact
    with pytest.raises(TrajectoryError, match="line 5"):
        CallLog(tmp_path).read()


def test_calls_log_refusal_names_the_line_and_never_echoes_its_content(tmp_path):
    log, path = calls_log(tmp_path, secret=SECRET)
    path.write_bytes(path.read_bytes().replace(b'"gen_ai.usage.input_tokens":11', b'"gen_ai.usage.input_tokens":99', 1))
    with pytest.raises(TrajectoryError) as refused:
        log.read()
    assert "line 2" in str(refused.value) and SECRET not in str(refused.value) and len(str(refused.value).splitlines()) == 1


def test_a_damaged_calls_log_never_stops_later_recording(tmp_path, capsys):
    from envharness.serve import EnvService
    from envrigger.live import StoreRecorder

    run = tmp_path / "run"
    recorder = StoreRecorder(run)
    service = EnvService(HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}), recorder=recorder)
    log, path = calls_log(run)
    path.write_bytes(path.read_bytes().replace(b'"gen_ai.usage.input_tokens":11', b'"gen_ai.usage.input_tokens":99', 1))
    session = service.open({"seed": 0})["session_id"]
    log.append({"gen_ai.conversation.id": session, "envrigger.time": 1e12, "gen_ai.usage.input_tokens": 7})  # the proxy goes on
    for action in (1, 1, 2, 2, 1, 2):  # down, down, right, right, down, right: the goal of the 4x4 lake
        if service.step(session, {"action": action})["terminated"]:
            break
    recorder.close()
    (episode,) = TrajectoryStore(run).iter_episodes()
    assert episode.session_id == session and episode.success
    assert "calls.jsonl" in capsys.readouterr().err  # the damage is reported where the server logs
    with pytest.raises(TrajectoryError, match="line 2"):  # and still refused when read: nothing repaired it silently
        CallLog(run).read()


def test_verify_reports_a_damaged_calls_log(tmp_path, capsys):
    TrajectoryStore.create(tmp_path / "run")
    log, path = calls_log(tmp_path / "run")
    assert cli("verify", str(tmp_path / "run")) == 0
    capsys.readouterr()
    rewrite(path, lambda lines: [lines[0], *lines[2:]])
    assert cli("verify", str(tmp_path / "run")) == 2
    err = one_line(capsys)
    assert "calls.jsonl" in err and "line 2" in err


# -- a run store's manifest: the checksummed log of its parts ------------------------------------------------------
def small_run(path: Path, episodes: int = 3) -> TrajectoryStore:
    from envrigger.rollout import rollout

    return rollout("FrozenLake-v1", "random", seeds=range(episodes), out=path, backend="serial", flush_steps=1)


def edit_manifest(run: Path, edit: Any) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    edit(manifest["parts"])
    (run / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "damage",
    ["checksum removed", "size not a number", "name outside the run", "name not a part", "count not a number"],
)
def test_a_manifest_entry_out_of_shape_is_refused_in_one_line(tmp_path, capsys, damage):
    store = small_run(tmp_path / "run")
    (tmp_path / "elsewhere.parquet").write_bytes((store.path / "episodes" / "part-000000.parquet").read_bytes())

    def edit(parts: list[dict[str, Any]]) -> None:
        if damage == "checksum removed":
            del parts[0]["steps_sha256"]
        elif damage == "size not a number":
            parts[0]["steps_bytes"] = "big"
        elif damage == "name outside the run":
            parts[0]["name"] = "../../elsewhere.parquet"
        elif damage == "name not a part":
            parts[0]["name"] = "notes.txt"
        else:
            parts[0]["episodes"] = "many"

    edit_manifest(store.path, edit)
    with pytest.raises(TrajectoryError, match="manifest.json"):
        list(TrajectoryStore(store.path).iter_episodes())
    assert cli("diagnose", str(store.path)) == 2
    assert "manifest.json" in one_line(capsys)


def test_a_damaged_part_never_stops_later_recording(tmp_path):
    from envrigger.data import EpisodeRecord, StepRecord

    store = small_run(tmp_path / "run")
    victim = store.path / "episodes" / "part-000001.parquet"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    again = TrajectoryStore(store.path)
    new_id = again.next_episode_id()
    assert new_id >= 3
    episode = EpisodeRecord(episode_id=new_id, spec_hash="ab", seed=9, policy_id="p", length=1, return_=0.0, success=False, score=0.0,
                            reason="timeout")  # fmt: skip
    step = StepRecord(episode_id=new_id, t=0, action="1", reward=0.0, terminated=False, truncated=True, obs_digest="00")
    again.append([episode], [step])
    problems = TrajectoryStore(store.path).verify()
    assert len(problems) == 1 and str(victim) in problems[0]  # still reported, never repaired silently
    with pytest.raises(TrajectoryError, match="already stored"):  # ids of the damaged part are still never reused
        TrajectoryStore(store.path).append([EpisodeRecord(**{**episode.__dict__, "episode_id": 1})], [])


# -- "is this file ours": ledgers and libraries ----------------------------------------------------------------
FOREIGN = {
    "trigger": "CREATE TRIGGER flip AFTER INSERT ON {table} BEGIN DELETE FROM {table}; END",
    "view": "CREATE VIEW everything AS SELECT * FROM {table}",
    "index": "CREATE INDEX quick ON {table} (checksum)",
    "table": "CREATE TABLE notes (text TEXT)",
}


def make_ledger(path: Path) -> Path:
    Ledger.create(path, HarnessSpec(env_id="FrozenLake-v1"), [(8, "a"), (9, "b")], seed=0).close()
    return path


def make_library(path: Path) -> Path:
    library = Library(path)
    spec = HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 20}}])
    library.admit(spec, finding="timeout", rationale="tighter budget", gates=[], seeds=[1, 2], agent_id="q")
    library.close()
    return path


SURFACES = {
    "ledger": (make_ledger, "results", lambda path: Ledger(path), ["ledger", "list"], "not a ledger"),
    "library": (make_library, "components", lambda path: Library(path), ["library", "list"], "not a library"),
}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("surface", sorted(SURFACES))
@pytest.mark.parametrize("foreign", sorted(FOREIGN))
def test_a_copy_of_ours_with_a_foreign_schema_object_is_refused_and_left_byte_identical(tmp_path, capsys, surface, foreign):
    make, table, open_it, command, expected = SURFACES[surface]
    path = make(tmp_path / f"{surface}.db")
    db = sqlite3.connect(path)
    db.execute(FOREIGN[foreign].format(table=table))
    db.commit()
    db.close()
    before = snapshot(tmp_path)
    with pytest.raises(EnvriggerError, match=expected):
        open_it(path)
    assert cli(*command, str(path)) == 2 and expected in one_line(capsys)
    assert snapshot(tmp_path) == before  # byte-identical, and no -wal, -shm or commit record appeared


def foreign_sqlite(path: Path, statements: list[str]) -> None:
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


NOT_OURS = {
    "plain text": lambda path: path.write_text("hello, I am a to-do list\n" * 40),
    "random bytes": lambda path: path.write_bytes(hashlib.sha512(b"x").digest() * 64),
    "a cut SQLite header": lambda path: path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 20),
    "a database with only a view": lambda path: foreign_sqlite(path, ["CREATE VIEW answer AS SELECT 42 AS value"]),
    "our table names, other columns": lambda path: foreign_sqlite(
        path,
        [
            "CREATE TABLE meta (k TEXT)",
            "CREATE TABLE components (x INTEGER)",
            "CREATE TABLE tasks (x INTEGER)",
            "CREATE TABLE releases (x INTEGER)",
        ],  # fmt: skip
    ),
    "a WAL-mode database of another app": lambda path: foreign_sqlite(path, ["PRAGMA journal_mode=WAL", "CREATE TABLE users (name TEXT)"]),
}


@pytest.mark.parametrize("surface", sorted(SURFACES))
@pytest.mark.parametrize("content", sorted(NOT_OURS))
def test_a_file_that_is_not_ours_is_refused_and_left_byte_identical(tmp_path, capsys, surface, content):
    _, _, open_it, command, expected = SURFACES[surface]
    path = tmp_path / f"{surface}.db"
    NOT_OURS[content](path)
    before = snapshot(tmp_path)
    with pytest.raises(EnvriggerError, match=expected):
        open_it(path)
    assert cli(*command, str(path)) == 2 and expected in one_line(capsys)
    assert snapshot(tmp_path) == before


def test_an_empty_file_is_not_a_ledger_and_is_left_empty(tmp_path, capsys):
    path = tmp_path / "ledger.db"
    path.touch()
    with pytest.raises(LedgerError, match="not a ledger"):
        Ledger(path)
    assert cli("ledger", "list", str(path)) == 2 and "not a ledger" in one_line(capsys)
    assert snapshot(tmp_path) == {"ledger.db": b""}


def test_our_own_ledgers_and_libraries_still_open_and_the_committed_libraries_pass_the_check(tmp_path):
    from envrigger.data.sqlite import schema_problem
    from envrigger.loop.library import ALLOWED

    assert Ledger(make_ledger(tmp_path / "ledger.db")).tasks() == [(8, "a"), (9, "b")]
    assert [c.finding for c in Library(make_library(tmp_path / "library.db")).components()] == ["timeout"]
    root = Path(__file__).resolve().parents[2]
    committed = sorted((root / "benchmarks" / "results").rglob("library.db"))
    for path in committed[:40]:
        before = path.read_bytes()
        assert schema_problem(path, ALLOWED) is None, path
        assert path.read_bytes() == before and not Path(str(path) + "-wal").exists()


def test_a_library_written_before_row_checksums_still_opens(tmp_path):
    from envrigger.loop import library as module

    path = tmp_path / "old.db"
    foreign_sqlite(path, [s for s in module.SCHEMA.replace(",\n    checksum TEXT", "").split(";") if s.strip()])
    db = sqlite3.connect(path)
    db.execute("INSERT INTO meta VALUES ('version', '0')")
    db.commit()
    db.close()
    assert Library(path).version == 0


# -- run directories: a directory that is not ours is left as it is -------------------------------------------------
@pytest.mark.parametrize("meta", ['["a list"]', '{"schema_version": 7}', "not json"])
def test_a_directory_that_is_not_a_run_is_refused_and_left_as_it_is(tmp_path, meta):
    from envrigger.live import StoreRecorder

    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "run.json").write_text(meta)
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder), sorted(p.name for p in folder.iterdir())
    with pytest.raises(TrajectoryError):
        TrajectoryStore.create(folder, exist_ok=True)
    with pytest.raises(TrajectoryError):
        StoreRecorder(folder)
    assert (snapshot(folder), sorted(p.name for p in folder.iterdir())) == before


# ================================================================================================================
# 9. Identity by content
# ================================================================================================================
POLICY = """
class Walker:
    def __init__(self, env):
        self.env = env

    def act(self, obs, info):
        return {action}


class Turner(Walker):
    def act(self, obs, info):
        return 0
"""


def test_a_policy_file_changed_in_place_gets_a_new_identity(tmp_path):
    path = tmp_path / "policy.py"
    path.write_text(POLICY.format(action=2))
    first = ModelFactor.of_policy(f"{path}:Walker")
    path.write_text(POLICY.format(action=1))
    second = ModelFactor.of_policy(f"{path}:Walker")
    assert first.key() != second.key()


def test_the_same_policy_content_at_two_paths_has_one_identity(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "policy.py").write_text(POLICY.format(action=2))
    assert (
        ModelFactor.of_policy(f"{tmp_path / 'a' / 'policy.py'}:Walker").key()
        == ModelFactor.of_policy(f"{tmp_path / 'b' / 'policy.py'}:Walker").key()
    )


def test_two_classes_of_one_file_are_two_identities(tmp_path):
    path = tmp_path / "policy.py"
    path.write_text(POLICY.format(action=2))
    assert ModelFactor.of_policy(f"{path}:Walker").key() != ModelFactor.of_policy(f"{path}:Turner").key()


def test_a_saved_learner_named_with_its_algorithm_is_identified_by_its_content(tmp_path):
    path = tmp_path / "model.zip"
    path.write_bytes(b"first weights")
    first = ModelFactor.of_policy(f"PPO:{path}")
    path.write_bytes(b"other weights")
    second = ModelFactor.of_policy(f"PPO:{path}")
    assert first.key() != second.key() and first.key() != ModelFactor.of_policy(f"A2C:{path}").key()


def test_an_imported_policy_module_is_identified_by_its_source(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "attack_policy_module.py"
    module.write_text(POLICY.format(action=2))
    first = ModelFactor.of_policy("attack_policy_module:Walker")
    module.write_text(POLICY.format(action=1))
    assert first.key() != ModelFactor.of_policy("attack_policy_module:Walker").key()


def test_a_ledger_plays_a_changed_policy_file_again_under_its_new_identity(tmp_path, capsys):
    ledger = tmp_path / "grid.db"
    policy = tmp_path / "policy.py"
    assert cli("ledger", "init", str(ledger), "--env", "MiniGrid-Empty-Random-6x6-v0", "--tasks", "2") == 0
    policy.write_text(POLICY.format(action=2))
    assert cli("ledger", "eval", str(ledger), "--release", "v1", "--policy", f"{policy}:Walker") == 0
    policy.write_text(POLICY.format(action=0))  # another policy, at the same path
    assert cli("ledger", "eval", str(ledger), "--release", "v2", "--policy", f"{policy}:Walker") == 0
    assert "recorded without playing it again" not in capsys.readouterr().out
    book = Ledger(ledger)
    one, two = (book.release(name)["cell"] for name in ("v1", "v2"))
    assert one != two and book.stored_cell(one)[1] != book.stored_cell(two)[1]  # and their runs are two directories


# ================================================================================================================
# 10. Agent Lightning: one claim per session, checks regardless of flags, malformed spans counted
# ================================================================================================================
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # agentlightning imports litellm, which would fetch prices online


@pytest.fixture(scope="module")
def agl() -> Any:
    return pytest.importorskip("agentlightning", reason='needs the agentlightning extra: pip install "envharness[agentlightning]"')


@pytest.fixture(scope="module")
def served_run(tmp_path_factory) -> Path:
    """Three FrozenLake sessions recorded by `envharness serve`'s recorder: the server's record."""
    from envharness.serve import EnvService
    from envrigger.live import StoreRecorder

    run = tmp_path_factory.mktemp("served") / "served"
    recorder = StoreRecorder(run)
    service = EnvService(HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}), recorder=recorder)
    for seed, actions in ((0, (1, 1, 2, 2, 1, 2)), (1, (0, 0, 1)), (2, (2, 1))):  # a win, a walk closed early, a hole
        session = service.open({"seed": seed})["session_id"]
        for action in actions:
            if service.step(session, {"action": action})["terminated"]:
                break
        else:
            service.close(session)
    recorder.close()
    return run


def truth(served_run: Path) -> list[tuple[Any, list[Any]]]:
    return sorted(TrajectoryStore(served_run).iter_episode_steps(), key=lambda pair: pair[0].seed)


def payload(
    episode: Any, steps: list[Any], rollout_id: str, served: str | None = "http://127.0.0.1:8000", **changes: Any
) -> dict[str, Any]:
    from envrigger.integrations.agentlightning import FORMAT

    return {
        "format": FORMAT,
        "rollout_id": rollout_id,
        "mode": "train",
        "served": served,
        "episode": {**episode.to_row(), "policy_id": "chat:scripted", **changes},
        "steps": [s.to_row() for s in steps],
    }


def build_store(agl: Any, rollouts: list[list[Any]]) -> Any:
    """An Agent Lightning in-memory store whose rollouts carry these spans: each a ``rollout_id -> attributes`` function."""
    from agentlightning.emitter.object import encode_object
    from agentlightning.semconv import AGL_OBJECT

    async def fill() -> Any:
        store = agl.InMemoryLightningStore()
        for spans in rollouts:
            started = await store.start_rollout(input={"seed": 0}, mode="train")
            rid, aid = started.rollout_id, started.attempt.attempt_id
            for number, make in enumerate(spans, start=1):
                attributes = make(rid)
                attributes = encode_object(attributes) if isinstance(attributes, dict) and "format" in attributes else attributes
                span = agl.Span.from_attributes(attributes=attributes, rollout_id=rid, attempt_id=aid, sequence_id=number, name=AGL_OBJECT)
                await store.add_span(span)
            await store.update_attempt(rid, aid, status="succeeded")
        return store

    return asyncio.run(fill())


@pytest.mark.parametrize("with_record", [True, False])
def test_one_served_session_claimed_by_three_rollouts_is_stored_at_most_once(agl, served_run, tmp_path, with_record):
    from envrigger.integrations.agentlightning import convert

    (won, won_steps), (other, other_steps), _ = truth(served_run)
    copy = lambda rid: payload(won, won_steps, rid)  # noqa: E731 - the same served episode, claimed by three rollouts
    store = build_store(agl, [[copy], [copy], [copy], [lambda rid: payload(other, other_steps, rid)]])
    done = convert(store, tmp_path / "al", served=served_run if with_record else None)
    stored = [e.session_id for e in TrajectoryStore(tmp_path / "al").iter_episodes()]
    assert stored.count(won.session_id) <= 1 and other.session_id in stored, done.summary()
    assert sum("claimed" in why for _, why in done.refused) >= 2


def test_a_payload_that_says_it_was_not_served_is_still_checked_against_the_servers_record(agl, served_run, tmp_path):
    from envrigger.integrations.agentlightning import convert

    _, (lost, lost_steps), _ = truth(served_run)
    assert not lost.success
    forged = lambda rid: payload(lost, lost_steps, rid, served=None, success=True, score=1.0, reason="reached the goal")  # noqa: E731
    done = convert(build_store(agl, [[forged]]), tmp_path / "al", served=served_run)
    assert done.episodes == 0 and len(done.refused) == 1 and "success" in done.refused[0][1], done.summary()
    assert not any(e.success for e in TrajectoryStore(tmp_path / "al").iter_episodes())


def test_with_the_servers_record_a_payload_of_no_served_session_is_refused(agl, served_run, tmp_path):
    from envrigger.integrations.agentlightning import convert

    (won, won_steps), _, _ = truth(served_run)
    local = lambda rid: payload(won, won_steps, rid, served=None, session_id=rid)  # noqa: E731 - "built in the runner", a win
    done = convert(build_store(agl, [[local]]), tmp_path / "al", served=served_run)
    assert done.episodes == 0 and "not in the server's record" in done.refused[0][1], done.summary()


def test_without_the_record_a_local_payload_cannot_take_a_served_session_id(agl, served_run, tmp_path):
    from envrigger.integrations.agentlightning import convert

    (won, won_steps), _, _ = truth(served_run)
    local = lambda rid: payload(won, won_steps, rid, served=None)  # noqa: E731 - says local, keeps the served session's id
    done = convert(build_store(agl, [[local]]), tmp_path / "al")
    assert done.episodes == 0 and "rollout id" in done.refused[0][1], done.summary()


def _object(kind: str, literal: str) -> Any:
    return lambda rid: {"agentlightning.object.type": kind, "agentlightning.object.literal": literal}


MALFORMED = {
    "an int literal that is no number": _object("int", "twelve"),
    "a bytes literal that is no base64": _object("bytes", "abc"),
    "a literal of an unknown type": _object("complex", "1+2j"),
    "JSON that does not parse": lambda rid: {"agentlightning.object.type": "dict", "agentlightning.object.json": "{not json"},
    "JSON nested too deeply": lambda rid: {"agentlightning.object.type": "list", "agentlightning.object.json": "[" * 100_000},
    "an episode field of the wrong type": "tokens",
    "a step field of the wrong type": "calls",
    "steps that are not a list": "steps",
    "an episode that is not an object": "episode",
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_span_is_skipped_and_counted_and_never_aborts_the_conversion(agl, served_run, tmp_path, kind):
    from envrigger.integrations.agentlightning import convert

    (won, won_steps), (other, other_steps), _ = truth(served_run)
    bad = MALFORMED[kind]
    if kind == "an episode field of the wrong type":
        bad = lambda rid: payload(other, other_steps, rid, tokens="lots")  # noqa: E731
    elif kind == "a step field of the wrong type":
        bad = lambda rid: {**payload(other, other_steps, rid), "steps": [{**s.to_row(), "calls": {"a": 1}} for s in other_steps]}  # noqa: E731
    elif kind == "steps that are not a list":
        bad = lambda rid: {**payload(other, other_steps, rid), "steps": 5}  # noqa: E731
    elif kind == "an episode that is not an object":
        bad = lambda rid: {**payload(other, other_steps, rid), "episode": ["x"]}  # noqa: E731
    store = build_store(agl, [[lambda rid: payload(won, won_steps, rid)], [bad]])
    for served in (served_run, None):
        out = tmp_path / f"al-{served is None}"
        done = convert(store, out, served=served)
        assert [e.session_id for e in TrajectoryStore(out).iter_episodes()] == [won.session_id], done.summary()
        assert getattr(done, "malformed", 0) + len(done.refused) == 1, done.summary()


# ================================================================================================================
# 4. Secrets: the caller's key never in a ledger, a store, a log or an error
# ================================================================================================================
def real_ledger(path: Path) -> Path:
    from envrigger.ledger import draw_tasks

    spec = HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0")
    Ledger.create(path, spec, draw_tasks(spec, 2, seed=0), seed=0).close()
    return path


def test_a_key_given_where_its_variable_name_belongs_is_refused_without_echoing_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    ledger = real_ledger(tmp_path / "ledger.db")
    code = cli("ledger", "eval", str(ledger), "--release", "v1", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
               "--api-key-env", SECRET)  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and SECRET not in err and "--api-key-env" in err, err
    assert Ledger(ledger).releases() == [] and SECRET.encode() not in b"".join(snapshot(tmp_path).values())


@pytest.mark.parametrize("where", ["userinfo", "query"])
def test_a_key_in_the_endpoint_url_is_refused_and_never_stored(tmp_path, capsys, monkeypatch, where):
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    ledger = real_ledger(tmp_path / "ledger.db")
    url = f"http://agent:{SECRET}@127.0.0.1:9/v1" if where == "userinfo" else f"http://127.0.0.1:9/v1?api-key={SECRET}"
    code = cli("ledger", "eval", str(ledger), "--release", "v1", "--base-url", url, "--model", "m")
    err = capsys.readouterr().err
    assert code == 2 and SECRET not in err and "--api-key-env" in err, err
    assert Ledger(ledger).releases() == [] and SECRET.encode() not in b"".join(snapshot(tmp_path).values())
    cell = Cell(
        model=ModelFactor(kind="endpoint", base_url=url, model="m"),
        harness=HarnessFactor(kind="direct"),
        environment=EnvFactor(spec=HarnessSpec(env_id="FrozenLake-v1").model_dump()),
    )
    from envrigger.ledger import TaskResult

    result = TaskResult(success=False, score=0.0, steps=1, input_tokens=0, output_tokens=0, cost_usd=0.0, wall_s=0.0, tool_errors=0,
                        retries=0, human_interventions=0, irreversible=False, error=None, actions="", visits={})  # fmt: skip
    with pytest.raises(LedgerError) as refused:  # the Python API refuses it where it would be written
        Ledger(ledger).add_cell(cell, [result, result], "run", release="v1")
    assert SECRET not in str(refused.value)
    assert SECRET.encode() not in b"".join(snapshot(tmp_path).values())
