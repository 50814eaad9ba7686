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
