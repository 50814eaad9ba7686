"""envharness.files: the one atomic writer, on real files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from envharness.files import write_bytes_atomically, write_file_atomically, write_text_atomically


def test_text_and_bytes_replace_the_old_file_whole(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    write_text_atomically(target, "new text")
    assert target.read_text() == "new text"
    write_bytes_atomically(target, b"\x00\x01 bytes")
    assert target.read_bytes() == b"\x00\x01 bytes"
    assert os.listdir(tmp_path) == ["report.json"]


def test_a_writer_that_fails_mid_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text('{"parts": []}')

    def half_then_fail(tmp: Path) -> None:
        with open(tmp, "w") as handle:
            handle.write('{"parts": [{"name": "part-0000')
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_file_atomically(target, half_then_fail)
    assert target.read_text() == '{"parts": []}'
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_text_that_cannot_be_encoded_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "spec.json"
    target.write_text("kept")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomically(target, "ascii then \u00e9", encoding="ascii")
    assert target.read_text() == "kept" and os.listdir(tmp_path) == ["spec.json"]


def test_a_writer_killed_mid_write_leaves_the_old_file_whole(tmp_path):
    """kill -9 cannot clean up, but the target is never half-written: only a ``.NAME.*.tmp`` may stay behind."""
    target = tmp_path / "table.json"
    target.write_text("old and whole")
    child = (
        "import os, sys\n"
        "from envharness.files import write_file_atomically\n"
        "def write(tmp):\n"
        "    with open(tmp, 'w') as handle:\n"
        "        handle.write('half')\n"
        "        handle.flush()\n"
        "        os._exit(9)\n"
        "write_file_atomically(sys.argv[1], write)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(target)], env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}, check=False
    )
    assert done.returncode == 9
    assert target.read_text() == "old and whole"
    assert all(p.name == "table.json" or (p.name.startswith(".table.json.") and p.name.endswith(".tmp")) for p in tmp_path.iterdir())


def test_a_writer_given_the_temporary_path_can_use_any_library(tmp_path):
    target = tmp_path / "weights.npz"

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, weights=np.arange(3))

    write_file_atomically(target, save)
    with np.load(target) as saved:
        assert saved["weights"].tolist() == [0, 1, 2]
    assert os.listdir(tmp_path) == ["weights.npz"]


def test_files_get_the_mode_asked_for_or_what_a_plain_open_gives(tmp_path):
    old = os.umask(0o027)
    try:
        write_text_atomically(tmp_path / "plain", "x")
        write_text_atomically(tmp_path / "shared", "x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o644


def test_a_missing_folder_is_an_error_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_text_atomically(tmp_path / "missing" / "spec.json", "{}")
    assert not (tmp_path / "missing").exists()


# -- writing inside a directory someone else wrote --------------------------------------------------------------
def test_a_link_or_fifo_at_the_target_or_a_linked_folder_on_the_way_is_refused_naming_it(tmp_path):
    from envharness.errors import UnsafePathError
    from envharness.files import check_inside, make_directories_inside, open_file_inside

    run, theirs = tmp_path / "run", tmp_path / "theirs"
    run.mkdir()
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    (run / "linked.json").symlink_to(theirs / "notes.txt")
    (run / "parts").symlink_to(theirs)
    os.mkfifo(run / "pipe.log")
    refusals = {
        "an atomic write over a link": (lambda: write_text_atomically(run / "linked.json", "x"), run / "linked.json"),
        "an atomic write below a linked folder": (lambda: write_text_atomically(run / "parts" / "p.json", "x", within=run), run / "parts"),
        "an append through a link": (lambda: open_file_inside(run / "linked.json", "a"), run / "linked.json"),
        "an append into a FIFO (no reader: would block)": (lambda: open_file_inside(run / "pipe.log", "ab+"), run / "pipe.log"),
        "a folder made below a linked one": (lambda: make_directories_inside(run / "parts" / "deeper", run), run / "parts"),
    }
    for name, (write, planted) in refusals.items():
        with pytest.raises(UnsafePathError) as refused:
            write()
        assert str(refused.value).startswith(f"{planted}: is a ") and len(str(refused.value).splitlines()) == 1, name
    assert (theirs / "notes.txt").read_text() == "mine" and sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    check_inside(run / "new" / "file.json", run)  # what is missing is fine: the writer makes it


def test_an_output_path_the_user_names_is_followed_through_a_link(tmp_path):
    from envharness.command_line import write_atomically

    (tmp_path / "real.json").write_text("old")
    (tmp_path / "named.json").symlink_to(tmp_path / "real.json")
    write_atomically(tmp_path / "named.json", "new")
    assert (tmp_path / "named.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"
