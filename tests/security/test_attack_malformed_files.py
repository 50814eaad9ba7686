"""Attacks on the files the commands read: every malformed one is one line naming it, exit code 2.

Root cause (outside review, class 4): each command read its files its own way (``json.loads``
of ``read_text``, ``model_validate_json``, ``.get`` on whatever came back), so a file of the
wrong JSON shape (a list where an object belongs) reached code that assumed an object and
failed with a traceback and exit 1, and binary data or an integer too long to read surfaced
as a raw ``UnicodeDecodeError`` or ``ValueError`` that named no file. The rule now: a file a
command reads goes through :func:`envharness.reading.read_json` (or ``read_text``), which
turns every problem of the file itself (missing, a directory, not UTF-8, empty, not JSON,
nested too deeply, an integer too long, the wrong top-level shape) into one line naming the
file, and what it holds is validated where it is used, naming the file again.

Written as a hostile (or unlucky) file author would: each file every command reads is fed a
list where an object belongs, a string, a number, null, truncated JSON, binary garbage, a huge
number, an empty file and a directory. Each must give exit code 2, exactly one non-empty
line on stderr that names the file, no traceback, and leave every other stored file as it was.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envharness import HarnessSpec

HUGE = "1" + "0" * 5000  # past the 4300 digits Python turns into a number from text
PAYLOADS: dict[str, bytes | None] = {
    "a list": b'[{"env_id": "CartPole-v1"}, 2]',
    "a string": b'"FrozenLake-v1"',
    "a number": b"7",
    "null": b"null",
    "truncated JSON": None,  # the file's own first half
    "binary garbage": b"\x89PNG\r\n\x1a\n\x00\xff\xfe\xfa\xc3\x28",
    "a huge number": HUGE.encode(),
    "an empty file": b"",
    "a directory": None,
}
TEXT_ENV = "envharness/CodeRepair-v0"  # an env a chat agent can read: its harness and prices are read before any endpoint
UNREACHABLE = "http://127.0.0.1:9/v1"


def command(prog: str, argv: list[str], capsys: Any) -> tuple[int | str, str]:
    """Run a console script as its entry point does: (exit code, stderr)."""
    if prog == "envrigger":
        from envrigger.cli import main
    else:
        from envharness.cli import main
    capsys.readouterr()
    try:
        main(argv)
    except SystemExit as done:
        return (done.code if isinstance(done.code, int) else 1), capsys.readouterr().err
    except BaseException as error:  # noqa: BLE001 - what the user would see as a traceback
        return "traceback", f"Traceback: {type(error).__name__}: {error}"
    return 0, capsys.readouterr().err


@pytest.fixture(scope="module")
def stored(tmp_path_factory: Any) -> Path:
    """Valid files of every kind the commands read: a spec, an agent harness, prices, a run, a loop run, a multi-seed run, a ledger."""
    from envrigger.agents import default_harness
    from envrigger.cli import main

    base = tmp_path_factory.mktemp("stored")

    def ok(*argv: str) -> None:
        try:
            main(list(argv))
        except SystemExit as done:
            assert done.code == 0, argv

    (base / "spec.json").write_text(
        HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 20}}]).to_json()
    )
    (base / "harness.json").write_text(default_harness(TEXT_ENV).to_json())
    (base / "prices.json").write_text(json.dumps({"scripted": [1.0, 2.0]}))
    ok("collect", "FrozenLake-v1", "-n", "2", "--backend", "serial", "-o", str(base / "run"))
    ok("convert", str(base / "run"), str(base / "episodes.jsonl"))
    tiny = ["--learner", "qlearning", "--allow-seen-levels", "--rounds", "1", "--budget-steps", "1000", "--collect-episodes", "10"]
    tiny += ["--eval-episodes", "10", "--val-episodes", "10", "--candidates", "1", "--backend", "serial"]
    ok("run", "FrozenLake-v1", *tiny, "-o", str(base / "loop"))
    shutil.copytree(base / "loop", base / "unfinished")  # a run cut short after its last round: resumed, it plays held-out levels
    (base / "unfinished" / "final.json").unlink()
    (base / "seeds").mkdir()  # a multi-seed run of one master seed, finished
    shutil.copytree(base / "loop", base / "seeds" / "seed-0")
    saved = json.loads((base / "loop" / "loop.json").read_text())
    (base / "seeds" / "seeds.json").write_text(json.dumps({"config": saved, "seeds": 1}))
    ok("run", "--resume", str(base / "seeds"))  # writes its result.json
    ok("ledger", "init", str(base / "ledger.db"), "--env", "FrozenLake-v1", "--tasks", "1")
    (base / "policy.json").write_bytes((base / "loop" / "rigger-round-1.json").read_bytes())  # a saved Q-table
    return base


@dataclass(frozen=True)
class Surface:
    """A file a command reads (``target``, relative to the stored files) and the command line that reads it (``{}``: the copy)."""

    prog: str
    target: str
    argv: tuple[str, ...]

    def args(self, root: Path) -> list[str]:
        return [a.replace("{}", str(root)) for a in self.argv]


SURFACES: dict[str, Surface] = {
    # spec files
    "envharness check: the spec": Surface("envharness", "spec.json", ("check", "{}/spec.json", "--episodes", "1")),
    "envrigger collect: the spec": Surface("envrigger", "spec.json", ("collect", "{}/spec.json", "-n", "1", "-o", "{}/new")),
    "envrigger run: the spec": Surface("envrigger", "spec.json", ("run", "{}/spec.json", "--learner", "qlearning", "-o", "{}/new")),
    "envrigger ledger eval: the --env spec": Surface(
        "envrigger", "spec.json", ("ledger", "eval", "{}/ledger.db", "--release", "r", "--policy", "random", "--env", "{}/spec.json")
    ),
    # what an agent is given
    "envrigger collect: the agent harness": Surface(
        "envrigger",
        "harness.json",
        ("collect", TEXT_ENV, "--agent", "chat", "--base-url", UNREACHABLE, "--model", "m", "--harness", "{}/harness.json", "-o", "{}/new"),
    ),
    "envrigger collect: the prices": Surface(
        "envrigger",
        "prices.json",
        ("collect", TEXT_ENV, "--agent", "chat", "--base-url", UNREACHABLE, "--model", "m", "--prices", "{}/prices.json", "-o", "{}/new"),
    ),
    "envrigger collect: a saved policy": Surface(
        "envrigger", "policy.json", ("collect", "FrozenLake-v1", "--policy", "{}/policy.json", "-n", "1", "-o", "{}/new")
    ),
    # a run's own files
    "envrigger diagnose: run.json": Surface("envrigger", "run/run.json", ("diagnose", "{}/run")),
    "envrigger diagnose: manifest.json": Surface("envrigger", "run/manifest.json", ("diagnose", "{}/run")),
    "envrigger verify: manifest.json": Surface("envrigger", "run/manifest.json", ("verify", "{}/run")),
    "envrigger convert: run.json": Surface("envrigger", "run/run.json", ("convert", "{}/run", "{}/out.jsonl")),
    "envrigger collect -o: run.json": Surface("envrigger", "run/run.json", ("collect", "FrozenLake-v1", "-n", "1", "-o", "{}/run")),
    "envrigger convert: a JSONL file": Surface("envrigger", "episodes.jsonl", ("convert", "{}/episodes.jsonl", "{}/new")),
    "envharness serve --record: run.json": Surface("envharness", "run/run.json", ("serve", "FrozenLake-v1", "--record", "{}/run")),
    # a loop run's files
    "envrigger run --resume: loop.json": Surface("envrigger", "loop/loop.json", ("run", "--resume", "{}/loop")),
    "envrigger run --resume: final.json": Surface("envrigger", "loop/final.json", ("run", "--resume", "{}/loop")),
    "envrigger run --resume: levels.json": Surface("envrigger", "unfinished/levels.json", ("run", "--resume", "{}/unfinished")),
    "envrigger run --resume: a round's levels": Surface(
        "envrigger", "unfinished/levels-round-1.json", ("run", "--resume", "{}/unfinished")
    ),
    "envrigger run --resume: a saved learner": Surface("envrigger", "unfinished/rigger-round-1.json", ("run", "--resume", "{}/unfinished")),
    "envrigger run --resume: seeds.json": Surface("envrigger", "seeds/seeds.json", ("run", "--resume", "{}/seeds")),
    "envrigger report: loop.json": Surface("envrigger", "loop/loop.json", ("report", "{}/loop")),
    "envrigger report: final.json": Surface("envrigger", "loop/final.json", ("report", "{}/loop")),
    "envrigger report: result.json": Surface("envrigger", "seeds/result.json", ("report", "{}/seeds")),
    "envrigger export: final.json": Surface("envrigger", "loop/final.json", ("export", "{}/loop", "--to", "{}/dist", "--no-wheel")),
    "envrigger library list: the commit record": Surface("envrigger", "loop/library.db.commit.json", ("library", "list", "{}/loop")),
    "envrigger library list: library.db": Surface("envrigger", "loop/library.db", ("library", "list", "{}/loop/library.db")),
    "envrigger verify: library.db": Surface("envrigger", "loop/library.db", ("verify", "{}/loop")),
    "envrigger ledger init --avoid: levels.json": Surface(
        "envrigger", "loop/levels.json", ("ledger", "init", "{}/new.db", "--env", "FrozenLake-v1", "--tasks", "1", "--avoid", "{}/loop")
    ),
    "envrigger ledger init --avoid: a round's levels": Surface(
        "envrigger",
        "loop/levels-round-1.json",
        ("ledger", "init", "{}/new.db", "--env", "FrozenLake-v1", "--tasks", "1", "--avoid", "{}/loop"),
    ),
    "envrigger ledger eval --trained-in: levels.json": Surface(
        "envrigger",
        "loop/levels.json",
        ("ledger", "eval", "{}/ledger.db", "--release", "r", "--policy", "random", "--trained-in", "{}/loop"),
    ),
    "envrigger ledger eval: the prices": Surface(
        "envrigger", "prices.json", ("ledger", "eval", "{}/ledger.db", "--release", "r", "--policy", "random", "--prices", "{}/prices.json")
    ),
    # a ledger's files
    "envrigger ledger list: the commit record": Surface("envrigger", "ledger.db.commit.json", ("ledger", "list", "{}/ledger.db")),
    "envrigger ledger list: ledger.db": Surface("envrigger", "ledger.db", ("ledger", "list", "{}/ledger.db")),
}
# library.db and ledger.db are SQLite, not JSON: every payload above is also no SQLite database, so each applies to them too.


def malform(target: Path, payload: str) -> None:
    original = target.read_bytes()
    target.unlink()
    if payload == "a directory":
        target.mkdir()
        (target / "inside").write_text("{}")
        return
    data = PAYLOADS[payload]
    target.write_bytes(original[: max(len(original) // 2, 1)] if data is None else data)


def snapshot(root: Path, skip: Path) -> dict[str, bytes]:
    """Every stored file's bytes (the lock a writer holds while it runs aside)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and skip not in (p, *p.parents) and not p.name.endswith(".lock")
    }


@pytest.fixture(autouse=True)
def _never_serve(monkeypatch: Any) -> None:
    """A serve command that got past its files would listen for ever: here it returns at once (exit 0, a failed attack)."""
    import envharness.serve

    monkeypatch.setattr(envharness.serve, "serve", lambda *args, **kwargs: None)


@pytest.mark.parametrize("payload", list(PAYLOADS))
@pytest.mark.parametrize("surface", list(SURFACES))
def test_a_malformed_file_is_one_line_naming_it_and_exit_2(surface, payload, stored, tmp_path, capsys):
    attack = SURFACES[surface]
    root = tmp_path / "files"
    shutil.copytree(stored, root, symlinks=True)
    target = root / attack.target
    malform(target, payload)
    before = snapshot(root, target)
    code, err = command(attack.prog, attack.args(root), capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, err[-1500:])
    line = lines[0]
    assert "Traceback" not in err and line.startswith(f"{attack.prog}: error: "), line
    assert str(target) in line, f"the line does not name {target}: {line}"
    after = snapshot(root, target)
    assert {k: v for k, v in after.items() if k in before} == before, "a stored file changed"


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("loop.json", '{"spec": []}', "spec"),
        ("loop.json", '{"spec": {"env_id": "FrozenLake-v1"}, "rounds": "many"}', "rounds"),
        ("final.json", '{"arms": [], "levels": {}}', "arms"),
        ("levels.json", '{"heldout_seeds": {"a": 1}}', "heldout_seeds"),
    ],
)
def test_a_wrong_shape_inside_a_loop_file_names_the_file_and_the_field(name, text, fragment, stored, tmp_path, capsys):
    root = tmp_path / "files"
    shutil.copytree(stored, root, symlinks=True)
    run = root / ("unfinished" if name == "levels.json" else "loop")
    (run / name).write_text(text)
    code, err = command("envrigger", ["run", "--resume", str(run)], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and str(run / name) in lines[0] and fragment in lines[0], err[-1500:]


def test_the_stored_fixture_is_what_the_commands_accept(stored, tmp_path, capsys):
    """The attacks above change one file each: unchanged, every command reads what they read."""
    root = tmp_path / "files"
    shutil.copytree(stored, root, symlinks=True)
    for argv in (
        ["report", f"{root}/loop"],
        ["report", f"{root}/seeds"],
        ["verify", f"{root}/loop"],
        ["ledger", "list", f"{root}/ledger.db"],
    ):
        code, err = command("envrigger", argv, capsys)
        assert code == 0, (argv, err)
    code, err = command("envharness", ["check", f"{root}/spec.json", "--episodes", "1"], capsys)
    assert code == 0, err
