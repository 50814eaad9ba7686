"""Every envharness / envrigger command shown in README.md and docs/ names real sub-commands and options.

Commands are read from code blocks and inline code; each is checked against the CLI's own
parameter definitions (an unknown sub-command or option fails with the page and the line),
and every sub-command shown is run with ``--help``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from envharness.cli import app as harness_app
from envrigger.cli import app as rigger_app

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROGRAMS = {"envharness": typer.main.get_command(harness_app), "envrigger": typer.main.get_command(rigger_app)}
ENDS = re.compile(r"\s(?:&&|;|#|\|\s|>|2>|\|\|)")  # the command ends at a shell operator or a comment


def _shown(page: Path) -> list[tuple[int, str]]:
    """``(line number, command)`` for every command line in the page's code blocks and inline code."""
    text = page.read_text()
    found: list[tuple[int, str]] = []
    in_block = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        pieces = [line] if in_block else re.findall(r"`([^`]+)`", line)
        for piece in pieces:
            piece = re.split(r"(?:^|\s)#", piece.replace("\\|", "|"))[0]  # a shell comment is prose
            for part in re.split(r"&&|;", piece):
                words = part.strip().removeprefix("$ ").split()
                while words and words[0] in ("pip", "uv") or (words and "=" in words[0] and not words[0].startswith("-")):
                    words = words[1:] if "=" in words[0] else []  # FOO=bar envrigger ...: the env var is not the command
                if words and words[0].rsplit("/", 1)[-1] in PROGRAMS and len(words) > 1:
                    found.append((number, " ".join([words[0].rsplit("/", 1)[-1], *words[1:]])))
    return found


def _resolve(command: str) -> tuple[Any, list[str], list[str]]:
    """The click command a shown line runs, the sub-command path, and the option names it uses."""
    words = ENDS.split(" " + command)[0].split()
    current = PROGRAMS[words[0]]
    path = [words[0]]
    options: list[str] = []
    for word in words[1:]:
        token = word.strip("[](){}.,'\"")
        if token.startswith("-"):
            for alternative in token.split("|"):
                if alternative.startswith("-"):
                    options.append(alternative.split("=", 1)[0])
        elif hasattr(current, "commands") and not options:  # a group (typer's own click may not be the click we import)
            sub = current.commands.get(token)
            if sub is None:
                if token.isupper() or not token.isidentifier() or token in ("...",):
                    continue
                raise AssertionError(f"{' '.join(path)}: no sub-command {token!r} (has {', '.join(sorted(current.commands))})")
            current, path = sub, [*path, token]
    return current, path, options


def _known(command: Any) -> set[str]:
    names = {"--help", "--import"}  # --import is read before the command line is parsed, by both programs
    for param in command.params:
        names.update(getattr(param, "opts", []))
        names.update(getattr(param, "secondary_opts", []))
    return names


SHOWN = [(page, number, command) for page in PAGES for number, command in _shown(page)]


def test_the_docs_show_commands_of_both_programs():
    programs = {command.split()[0] for _, _, command in SHOWN}
    assert programs == {"envharness", "envrigger"} and len(SHOWN) >= 60


@pytest.mark.parametrize("page, number, command", SHOWN, ids=[f"{p.name}:{n}" for p, n, _ in SHOWN])
def test_every_shown_command_names_real_options(page, number, command):
    target, path, options = _resolve(command)
    unknown = sorted(set(options) - _known(target))
    assert not unknown, f"{page.name}:{number}: `{' '.join(path)}` has no option {', '.join(unknown)}: {command}"


def _paths() -> list[tuple[str, ...]]:
    paths = set()
    for _, _, command in SHOWN:
        try:
            paths.add(tuple(_resolve(command)[1]))
        except AssertionError:  # an unknown sub-command: the test above names it
            continue
    return sorted(paths)


@pytest.mark.parametrize("path", _paths(), ids=" ".join)
def test_every_shown_sub_command_answers_help(path):
    app = harness_app if path[0] == "envharness" else rigger_app
    result = CliRunner().invoke(app, [*path[1:], "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
