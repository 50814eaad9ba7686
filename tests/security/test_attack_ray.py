"""Attacks on the Ray path: an address that is not a Ray cluster, and a node whose answer lies.

``--ray-address`` is typed by a user or read from ``RAY_ADDRESS``; a port that answers but is
not Ray (a web server, a port that accepts and says nothing) held ``ray.init`` for over five
minutes. A master seed's result comes back from whichever node ran it as a tar of its
directory; a node can be someone else's, or lie: another config than the one sent, a seed it
did not finish, an altered round, links and paths that reach out of the seed's directory, an
archive that unpacks to more than a disk holds. Each is refused in one line and the seed's
directory is left as it was (a rerun sends it again). What no check can catch is named in
docs/security.md: a node that runs the loop and then consistently forges its numbers.
"""

from __future__ import annotations

import io
import json
import socket
import sqlite3
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from envharness import HarnessSpec
from envrigger.errors import RolloutError, TrajectoryError
from envrigger.loop import LoopConfig, ray_seeds, run_loop
from envrigger.loop.ray_seeds import pack, unpack
from envrigger.rollout import rollout

pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'envharness[ray]'")

CONFIG = LoopConfig(
    spec=HarnessSpec(env_id="FrozenLake-v1"), learner="qlearning", rounds=1, budget_steps=1000, collect_episodes=10,
    eval_episodes=10, val_episodes=10, candidates_per_round=1, backend="serial", min_rollouts=10, max_rollouts=20,
    allow_seen_levels=True,
)  # fmt: skip


def listening(answer: bytes | None) -> tuple[socket.socket, int]:
    """A TCP server on 127.0.0.1 that answers every connection with ``answer`` (None: accepts and says nothing)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            held.append(client)
            if answer is not None:
                try:
                    client.sendall(answer)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.parametrize("answer", [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", None], ids=["web-server", "silent"])
def test_an_address_that_answers_but_is_not_ray_is_refused_in_seconds(answer, tmp_path, monkeypatch):
    from envrigger.rollout.ray_backend import RAY_POOL

    RAY_POOL.close()
    server, port = listening(answer)
    try:
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        started = time.perf_counter()
        with pytest.raises(RolloutError, match=f"127.0.0.1:{port} answers, but not as a Ray cluster"):
            rollout("FrozenLake-v1", "random", episodes=2, backend="ray", out=tmp_path / "run")
        assert time.perf_counter() - started < 20  # was: over 300 s in ray.init
        assert not (tmp_path / "run").exists()
    finally:
        server.close()


def test_the_cli_names_a_hostile_address_in_one_line_and_exits_2(tmp_path):
    server, port = listening(b"SSH-2.0-OpenSSH_9.0\r\n")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "envrigger.cli", "collect", "FrozenLake-v1", "--policy", "random", "--episodes", "2",
             "--backend", "ray", "--ray-address", f"127.0.0.1:{port}", "-o", str(tmp_path / "run")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.close()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "not as a Ray cluster" in lines[0] and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[bytes, LoopConfig]:
    """A real finished master seed, packed as a node returns it, and the config it was sent."""
    where = tmp_path_factory.mktemp("node") / "seed"
    run_loop(where, CONFIG)
    packed = pack(where)
    assert packed is not None
    return packed, CONFIG


def repacked(packed: bytes, change) -> bytes:
    """The archive with ``change(folder)`` applied to its unpacked files, packed again (a node that lies)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "seed"
        folder.mkdir()
        with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
            archive.extractall(folder, filter="data")
        change(folder)
        again = pack(folder)
    assert again is not None
    return again


def with_member(packed: bytes, info: tarfile.TarInfo, data: bytes = b"") -> bytes:
    """The archive with one more member, as a hostile tar writer makes it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as old, tarfile.open(fileobj=out, mode="w:gz") as new:
        for member in old.getmembers():
            new.addfile(member, old.extractfile(member) if member.isfile() else None)
        new.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


def other_seed(folder: Path) -> None:
    saved = json.loads((folder / "loop.json").read_text())
    (folder / "loop.json").write_text(json.dumps({**saved, "seed": saved["seed"] + 1}))


def altered_round(folder: Path) -> None:
    db = sqlite3.connect(folder / "library.db")
    text = db.execute("SELECT summary_json FROM rounds WHERE round=1").fetchone()[0]
    db.execute("UPDATE rounds SET summary_json=? WHERE round=1", (text.replace('"round": 1', '"round": 1 ', 1) + " ",))
    db.commit()
    db.close()


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def fifo(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.FIFOTYPE
    return info


LIES = {
    "another-config": lambda p: repacked(p, other_seed),
    "unfinished": lambda p: repacked(p, lambda f: (f / "final.json").unlink()),
    "altered-round": lambda p: repacked(p, altered_round),
    "forged-final": lambda p: repacked(p, lambda f: (f / "final.json").write_text("[]")),
    "symlink-out": lambda p: with_member(p, link("notes.txt", "/etc/passwd")),
    "hardlink": lambda p: with_member(p, link("copy.json", "loop.json", tarfile.LNKTYPE)),
    "fifo": lambda p: with_member(p, fifo("pipe")),
    "not-an-archive": lambda p: b"\x1f\x8b" + b"garbage" * 100,
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_lying_nodes_answer_is_refused_and_the_seed_left_as_it_was(lie, finished, tmp_path):
    packed, sent = finished
    seed = tmp_path / "runs" / "seed-0"
    seed.mkdir(parents=True)
    (seed / "progress.txt").write_text("what the seed held before it was sent")
    with pytest.raises(TrajectoryError) as refused:
        unpack(LIES[lie](packed), seed, sent)
    message = str(refused.value)
    assert "\n" not in message and "the cluster's result was refused" in message, message
    assert sorted(p.name for p in seed.iterdir()) == ["progress.txt"]
    assert sorted(p.name for p in seed.parent.iterdir()) == ["seed-0"]  # nothing beside it either


def test_a_traversing_member_lands_nowhere_outside(finished, tmp_path):
    packed, sent = finished
    info = tarfile.TarInfo("../../escaped.txt")
    info.size = 5
    seed = tmp_path / "runs" / "seed-0"
    seed.mkdir(parents=True)
    with pytest.raises(TrajectoryError, match="refused"):
        unpack(with_member(packed, info, b"owned"), seed, sent)
    assert not list(tmp_path.rglob("escaped.txt"))


def test_an_archive_larger_than_the_bound_is_refused_before_it_is_written(finished, tmp_path, monkeypatch):
    packed, sent = finished
    monkeypatch.setattr(ray_seeds, "MAX_RESULT_BYTES", 10_000)  # the real bound is 2 GiB; a smaller one, the same check
    seed = tmp_path / "seed-0"
    seed.mkdir()
    with pytest.raises(TrajectoryError, match="more than 10,000 bytes"):
        unpack(packed, seed, sent)
    assert list(seed.iterdir()) == []


def test_an_honest_answer_is_unpacked_in_place_of_the_seed(finished, tmp_path):
    packed, sent = finished
    seed = tmp_path / "seed-0"
    seed.mkdir()
    (seed / "progress.txt").write_text("before")
    unpack(packed, seed, sent)
    assert (seed / "final.json").is_file() and not (seed / "progress.txt").exists()
