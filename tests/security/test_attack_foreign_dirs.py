"""Attacks through a directory someone else wrote: a run, store, library or ledger from a shared disk or a download.

Written as the author of such a directory would, who cannot run anything on the user's
machine but can put anything in the directory before the user points envrigger at it:

- **Planted paths.** A symbolic link (to a file or folder outside, in ``tmp_path``) or a FIFO
  where envrigger will write: the call log, a store's lock, manifest and part folders, the
  HTML report, a library, a ledger's side files, a skill library, TensorBoard's folder, an
  export's folders. Each writer refuses in one line naming the planted path, and nothing
  lands outside the directory (the outside file's bytes, the outside folder's listing).
- **SQLite side files.** A ``-wal`` without its ``-shm``, a ``-shm`` without its ``-wal``, a hot
  ``-journal``, a read-only folder: opening a file to refuse it, or to read it only (``library
  list``, ``ledger list``, ``verify``), leaves the folder's listing, every file's bytes and
  every mtime as they were.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envharness import HarnessSpec
from envharness.cli import run_cli
from envharness.errors import EnvHarnessError
from envrigger.cli import app
from envrigger.errors import EnvriggerError
from envrigger.ledger import Ledger
from envrigger.live.calls import CallLog
from envrigger.loop.board import available
from envrigger.loop.library import Library

PRECIOUS = b"the user's own file, outside the run directory\n"
SPEC = HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 20}}])


def cli(*args: str) -> int:
    return run_cli(app, list(args), "envrigger")


def one_line(capsys: Any) -> str:
    """The one error line on stderr (a diagnosis may print its notes before it), and no traceback."""
    err = capsys.readouterr().err.strip()
    errors = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert len(errors) == 1 and errors[0].startswith("envrigger: error: "), err
    return errors[0]


def outside(tmp_path: Path) -> Path:
    """A file of the user's, outside every run directory: what a planted link points at."""
    folder = tmp_path / "home"
    folder.mkdir(exist_ok=True)
    path = folder / "precious.txt"
    path.write_bytes(PRECIOUS)
    return path


def listing(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every entry under ``folder`` (links not followed): its bytes (None for a non-file) and its mtime."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[str(path.relative_to(folder))] = (content, info.st_mtime_ns)
    return found


@contextlib.contextmanager
def fifo(path: Path) -> Iterator[Any]:
    """A FIFO at ``path`` with its read end held open (so a writer never blocks the test); yields what was written into it."""
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        yield lambda: _drain(reader)
    finally:
        os.close(reader)


def _drain(fd: int) -> bytes:
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    return data


def refused(error: BaseException, planted: Path) -> None:
    message = str(error)
    assert isinstance(error, EnvHarnessError), repr(error)
    assert len(message.splitlines()) == 1 and str(planted) in message, message


# ================================================================================================================
# Class 1: a planted link or FIFO where envrigger writes
# ================================================================================================================


# -- the call log (the proxy's chained log) ---------------------------------------------------------------------
def test_a_call_log_linked_to_a_file_outside_is_refused_and_the_file_is_unchanged(tmp_path):
    precious = outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "calls.jsonl").symlink_to(precious)
    with pytest.raises(Exception) as caught:
        CallLog(run).append({"gen_ai.conversation.id": "s1", "envrigger.time": 1.0})
    refused(caught.value, run / "calls.jsonl")
    assert precious.read_bytes() == PRECIOUS


def test_a_call_log_that_is_a_fifo_is_refused_and_nothing_is_written_into_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with fifo(run / "calls.jsonl") as written:
        with pytest.raises(Exception) as caught:
            CallLog(run).append({"gen_ai.conversation.id": "s1", "envrigger.time": 1.0})
        refused(caught.value, run / "calls.jsonl")
        assert written() == b""


# -- a store (collect appends to a run directory) ---------------------------------------------------------------
def collected(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    assert cli("collect", "FrozenLake-v1", "-n", "2", "--backend", "serial", "-o", str(run)) == 0
    return run


def collect_again(run: Path) -> int:
    return cli("collect", "FrozenLake-v1", "-n", "2", "--seed", "5", "--backend", "serial", "-o", str(run))


def test_a_store_lock_linked_to_a_file_outside_is_refused_and_the_file_is_unchanged(tmp_path, capsys):
    run, precious = collected(tmp_path), outside(tmp_path)
    (run / ".writer.lock").unlink()
    (run / ".writer.lock").symlink_to(precious)
    capsys.readouterr()
    assert collect_again(run) == 2
    assert str(run / ".writer.lock") in one_line(capsys)
    assert precious.read_bytes() == PRECIOUS  # a lock opened through the link truncates it and writes the holder's pid


def test_a_store_lock_that_is_a_fifo_is_refused_in_one_line(tmp_path, capsys):
    run = collected(tmp_path)
    (run / ".writer.lock").unlink()
    with fifo(run / ".writer.lock") as written:
        capsys.readouterr()
        assert collect_again(run) == 2
        assert str(run / ".writer.lock") in one_line(capsys)
        assert written() == b""


def test_a_part_folder_linked_outside_gets_no_part_and_loses_no_file(tmp_path, capsys):
    run = collected(tmp_path)
    theirs = tmp_path / "home" / "parquet"
    theirs.mkdir(parents=True)
    (theirs / "part-000007.parquet").write_bytes(PRECIOUS)  # named as a part the manifest never committed: an "orphan"
    (theirs / ".keep.tmp").write_bytes(PRECIOUS)
    shutil.copytree(run / "steps", theirs, dirs_exist_ok=True)
    before = listing(theirs)
    shutil.rmtree(run / "steps")
    (run / "steps").symlink_to(theirs)
    capsys.readouterr()
    assert collect_again(run) == 2
    assert str(run / "steps") in one_line(capsys)
    assert listing(theirs) == before  # no new part written there, no "orphan" or temp file of theirs deleted


def test_a_manifest_linked_to_a_file_outside_is_refused_and_the_file_is_unchanged(tmp_path, capsys):
    run = collected(tmp_path)
    theirs = outside(tmp_path).with_name("manifest.json")
    theirs.write_bytes((run / "manifest.json").read_bytes())
    before = theirs.read_bytes()
    (run / "manifest.json").unlink()
    (run / "manifest.json").symlink_to(theirs)
    capsys.readouterr()
    assert collect_again(run) == 2
    assert str(run / "manifest.json") in one_line(capsys)
    assert theirs.read_bytes() == before and (run / "manifest.json").is_symlink()


# -- the HTML report (diagnose writes RUN/report.html) ----------------------------------------------------------
def test_a_report_linked_to_a_file_outside_is_refused_and_the_file_is_unchanged(tmp_path, capsys):
    run, precious = collected(tmp_path), outside(tmp_path)
    (run / "report.html").symlink_to(precious)
    capsys.readouterr()
    assert cli("diagnose", str(run), "--format", "html") == 2
    assert str(run / "report.html") in one_line(capsys)
    assert precious.read_bytes() == PRECIOUS and (run / "report.html").is_symlink()


def test_a_report_that_is_a_fifo_is_refused_and_nothing_is_written_into_it(tmp_path, capsys):
    run = collected(tmp_path)
    with fifo(run / "report.html") as written:
        capsys.readouterr()
        assert cli("diagnose", str(run), "--format", "html") == 2
        assert str(run / "report.html") in one_line(capsys)
        assert written() == b""


def test_a_seed_folder_of_a_multi_seed_run_linked_outside_gets_no_report(tmp_path):
    from envrigger.report.run import write_run_report

    run, theirs = tmp_path / "run", tmp_path / "home" / "elsewhere"
    run.mkdir()
    theirs.mkdir(parents=True)
    (run / "seeds.json").write_text("{}")
    (theirs / "loop.json").write_text("{}")
    before = listing(theirs)
    (run / "seed-0").symlink_to(theirs)
    with pytest.raises(Exception) as caught:
        write_run_report(run)
    refused(caught.value, run / "seed-0")
    assert listing(theirs) == before


# -- libraries --------------------------------------------------------------------------------------------------
def make_library(path: Path) -> Path:
    library = Library(path)
    library.admit(SPEC, finding="timeout", rationale="tighter budget", gates=[], seeds=[1, 2], agent_id="q")
    library.close()
    return path


def test_a_library_linked_to_one_outside_is_refused_and_left_unchanged(tmp_path, capsys):
    theirs = make_library(tmp_path / "home" / "library.db")
    before = listing(theirs.parent)
    run = tmp_path / "run"
    run.mkdir()
    (run / "library.db").symlink_to(theirs)
    capsys.readouterr()
    assert cli("library", "remove", str(run), "1") == 2
    assert str(run / "library.db") in one_line(capsys)
    assert listing(theirs.parent) == before  # the component is still there; no -wal or -shm appeared beside it


def test_a_library_side_file_linked_outside_is_refused_in_one_line_naming_it(tmp_path, capsys):
    precious = outside(tmp_path)
    path = make_library(tmp_path / "run" / "library.db")
    Path(f"{path}-wal").symlink_to(precious)
    capsys.readouterr()
    assert cli("library", "remove", str(path), "1") == 2
    assert f"{path}-wal" in one_line(capsys)
    assert precious.read_bytes() == PRECIOUS


def test_a_library_commit_record_linked_outside_is_refused_and_the_file_is_unchanged(tmp_path):
    precious = outside(tmp_path)
    path = make_library(tmp_path / "run" / "library.db")
    record = path.with_name("library.db.commit.json")
    precious.write_bytes(record.read_bytes())
    before = precious.read_bytes()
    record.unlink()
    record.symlink_to(precious)
    with pytest.raises(Exception) as caught:
        Library(path).admit(SPEC.model_copy(update={"env_kwargs": {"map_name": "8x8"}}), "timeout", "bigger map", [], [1], "q")
    refused(caught.value, record)
    assert precious.read_bytes() == before


# -- ledgers ----------------------------------------------------------------------------------------------------
def make_ledger(path: Path) -> Path:
    Ledger.create(path, HarnessSpec(env_id="FrozenLake-v1"), [(8, "a"), (9, "b")], seed=0).close()
    return path


@pytest.mark.parametrize("side", ["-wal", "-shm", "-journal"])
def test_a_ledger_side_file_linked_outside_is_refused_in_one_line_naming_it(tmp_path, side):
    precious = outside(tmp_path)
    path = make_ledger(tmp_path / "shared" / "ledger.db")
    Path(f"{path}{side}").symlink_to(precious)
    before = listing(path.parent)
    with pytest.raises(Exception) as caught:
        Ledger(path)
    refused(caught.value, Path(f"{path}{side}"))
    assert precious.read_bytes() == PRECIOUS and listing(path.parent) == before


def test_a_ledger_commit_record_that_is_a_fifo_is_refused_and_nothing_is_written_into_it(tmp_path):
    path = make_ledger(tmp_path / "shared" / "ledger.db")
    record = path.with_name("ledger.db.commit.json")
    record.unlink()
    with fifo(record) as written:
        with pytest.raises(Exception) as caught:
            Ledger(path)
        refused(caught.value, record)
        assert written() == b""


# -- the skill memory -------------------------------------------------------------------------------------------
def test_a_skill_library_linked_to_one_outside_is_refused_and_left_unchanged(tmp_path):
    from envrigger.skills import Skill, SkillLibrary

    theirs = tmp_path / "home" / "skills.db"
    theirs.parent.mkdir()
    SkillLibrary(theirs).close()
    before = listing(theirs.parent)
    run = tmp_path / "run"
    run.mkdir()
    (run / "skills.db").symlink_to(theirs)
    with pytest.raises(Exception) as caught:
        SkillLibrary(run / "skills.db").add([Skill(text="Take the coin.", when="coins", source="extractor", episodes=[1])], "tw")
    refused(caught.value, run / "skills.db")
    assert listing(theirs.parent) == before


# -- TensorBoard ------------------------------------------------------------------------------------------------
BOARD = pytest.mark.skipif(not available(), reason='needs the tensorboard extra: pip install "envharness[tensorboard]"')


@BOARD
@pytest.mark.parametrize("planted", ["tensorboard", "tensorboard/loop"])
def test_a_tensorboard_folder_linked_outside_gets_no_event_file(tmp_path, planted):
    from envrigger.loop.board import LoopBoard

    run, theirs = tmp_path / "run", tmp_path / "home" / "logs"
    theirs.mkdir(parents=True)
    (run / planted).parent.mkdir(parents=True)
    (run / planted).symlink_to(theirs)
    with pytest.raises(Exception) as caught:
        LoopBoard(run).close()
    refused(caught.value, run / planted)
    assert listing(theirs) == {}


@BOARD
def test_a_tensorboard_arm_folder_linked_outside_is_refused(tmp_path):
    from envrigger.loop.board import LoopBoard

    run, theirs = tmp_path / "run", tmp_path / "home" / "logs"
    theirs.mkdir(parents=True)
    (run / "tensorboard").mkdir(parents=True)
    (run / "tensorboard" / "rigger").symlink_to(theirs)
    board = LoopBoard(run)
    with pytest.raises(Exception) as caught:
        board.arm_directory("rigger")
    board.close()
    refused(caught.value, run / "tensorboard" / "rigger")


# -- exports ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("planted", ["envrigger_envs", "registry.json", "envrigger_envs/envrigger_envs"])
def test_an_export_into_a_folder_with_a_planted_link_writes_nothing_outside(tmp_path, capsys, planted):
    library = make_library(tmp_path / "run" / "library.db")
    to, theirs = tmp_path / "dist", tmp_path / "home" / "theirs"
    theirs.mkdir(parents=True)
    (theirs / "registry.json").write_bytes(PRECIOUS)
    (theirs / "pyproject.toml").write_bytes(PRECIOUS)
    (to / planted).parent.mkdir(parents=True, exist_ok=True)
    (to / planted).symlink_to(theirs / "registry.json" if planted.endswith(".json") else theirs)
    before = listing(theirs)
    capsys.readouterr()
    assert cli("export", str(library), "--to", str(to), "--no-wheel") == 2
    assert str(to / planted) in one_line(capsys)
    assert listing(theirs) == before


# ================================================================================================================
# Class 2: SQLite files opened to refuse them, or only to read them, leave every file beside them as it was
# ================================================================================================================


def copied_live(folder: Path, name: str, make: Any, change: Any) -> Path:
    """``make`` a database, ``change`` it while another connection holds it open (the change stays in its ``-wal``), then
    copy the file, its ``-wal`` and any commit record to ``folder``, but not its ``-shm``: a copy of a live file."""
    live = folder.parent / f"live-{folder.name}"
    live.mkdir(parents=True)
    path = make(live / name)
    keeper = sqlite3.connect(path)
    keeper.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
    change(path)
    assert Path(f"{path}-wal").stat().st_size > 0
    folder.mkdir(parents=True, exist_ok=True)
    for file in live.iterdir():
        if not file.name.endswith("-shm"):
            shutil.copyfile(file, folder / file.name)
    keeper.close()
    return folder / name


def foreign(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    return path


def run_sql(statement: str) -> Any:
    def change(path: Path) -> None:
        db = sqlite3.connect(path)
        db.execute(statement)
        db.commit()
        db.close()

    return change


def admit_another(path: Path) -> None:
    library = Library(path)
    library.admit(SPEC.model_copy(update={"env_kwargs": {"map_name": "8x8"}}), "seen-only-in-wal", "bigger map", [], [1], "q")
    library.close()


def with_hot_journal(folder: Path, name: str) -> Path:
    """A rollback-mode database copied mid-transaction: the file half-changed and its hot ``-journal`` beside it."""
    live = folder.parent / f"live-{folder.name}"
    live.mkdir(parents=True)
    path = live / name
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA cache_size=1")  # pages spill into the file before the commit
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO users VALUES (?)", [("x" * 500,) for _ in range(400)])
    assert Path(f"{path}-journal").stat().st_size > 0
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, folder / name)
    shutil.copyfile(f"{path}-journal", folder / f"{name}-journal")
    db.execute("ROLLBACK")
    db.close()
    return folder / name


@pytest.mark.parametrize("surface", ["library", "ledger"])
def test_refusing_a_foreign_file_whose_wal_has_no_shm_leaves_the_folder_as_it_was(tmp_path, capsys, surface):
    path = copied_live(tmp_path / "theirs", f"{surface}.db", foreign, run_sql("INSERT INTO users VALUES ('ann')"))
    assert {p.name for p in path.parent.iterdir()} == {path.name, f"{path.name}-wal"}
    before = listing(path.parent)
    capsys.readouterr()
    assert cli(surface, "list", str(path)) == 2
    assert f"not a {surface}" in one_line(capsys)
    assert listing(path.parent) == before  # no -shm made, no byte or mtime changed


@pytest.mark.parametrize("surface", ["library", "ledger"])
def test_refusing_a_foreign_file_with_a_shm_and_no_wal_leaves_the_folder_as_it_was(tmp_path, capsys, surface):
    path = foreign(tmp_path / f"{surface}.db")
    Path(f"{path}-shm").write_bytes(b"\x00" * 32768)
    before = listing(tmp_path)
    capsys.readouterr()
    assert cli(surface, "list", str(path)) == 2
    assert f"not a {surface}" in one_line(capsys)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("surface", ["library", "ledger"])
def test_refusing_a_foreign_file_with_a_hot_journal_leaves_the_folder_as_it_was(tmp_path, capsys, surface):
    path = with_hot_journal(tmp_path / "theirs", f"{surface}.db")
    before = listing(path.parent)
    capsys.readouterr()
    assert cli(surface, "list", str(path)) == 2
    assert f"not a {surface}" in one_line(capsys)
    assert listing(path.parent) == before  # the journal is not rolled back into their file


def test_listing_a_library_whose_newest_admission_is_only_in_its_wal_shows_it_and_changes_nothing(tmp_path, capsys):
    path = copied_live(tmp_path / "theirs", "library.db", make_library, admit_another)
    before = listing(path.parent)
    capsys.readouterr()
    assert cli("library", "list", str(path)) == 0
    assert "seen-only-in-wal" in capsys.readouterr().out
    assert listing(path.parent) == before


@pytest.mark.parametrize("planted", ["a -shm without -wal", "a -wal without -shm", "nothing"])
def test_listing_a_ledger_changes_nothing_beside_it(tmp_path, capsys, planted):
    if planted == "a -wal without -shm":
        path = copied_live(tmp_path / "shared", "ledger.db", make_ledger, run_sql("PRAGMA user_version = 7"))
    else:
        path = make_ledger(tmp_path / "shared" / "ledger.db")
    if planted == "a -shm without -wal":
        Path(f"{path}-shm").write_bytes(b"\x00" * 32768)
    before = listing(path.parent)
    capsys.readouterr()
    assert cli("ledger", "list", str(path)) == 0, capsys.readouterr().err
    assert listing(path.parent) == before


def test_verifying_and_listing_a_library_in_a_read_only_folder_succeed_and_change_nothing(tmp_path, capsys):
    path = copied_live(tmp_path / "theirs", "library.db", make_library, admit_another)
    before = listing(path.parent)
    path.parent.chmod(0o555)  # (as root the folder stays writable: then what is checked is that nothing is made)
    try:
        capsys.readouterr()
        assert cli("verify", str(path)) == 0, capsys.readouterr().err
        assert cli("library", "list", str(path)) == 0, capsys.readouterr().err
    finally:
        path.parent.chmod(0o755)
    assert listing(path.parent) == before


def test_refusing_a_foreign_file_in_a_read_only_folder_says_not_ours_and_changes_nothing(tmp_path):
    path = copied_live(tmp_path / "theirs", "library.db", foreign, run_sql("INSERT INTO users VALUES ('ann')"))
    before = listing(path.parent)
    path.parent.chmod(0o555)
    try:
        with pytest.raises(EnvriggerError, match="not a library: an SQLite database with a table 'users'"):
            Library(path, create=False)
    finally:
        path.parent.chmod(0o755)
    assert listing(path.parent) == before
