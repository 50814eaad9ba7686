"""What every command line of envharness and envrigger shares: errors as one line, tables, arguments.

Contains :func:`run_cli` (runs a typer app; a user error becomes one line on stderr and
exit code 2; ``--import MODULE`` is read first; a stop by Ctrl-C, SIGTERM or SIGHUP keeps
what had finished, then one line and exit code 128 + the signal), :func:`print_table` and
``console``, :func:`parse_transform` (the ``Name:k=v,...`` syntax), :func:`spec_argument` (a
``SPEC.json|ENV_ID`` argument), :func:`write_atomically` (an ``-o`` file) and
``ALLOW_IMPORT_HELP``. :class:`~envharness.errors.UserError` lives in
:mod:`envharness.errors`. The ``envharness`` commands themselves are in :mod:`envharness.cli`.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from envharness.errors import EnvHarnessError, SpecError, UserError
from envharness.files import check_inside, write_text_atomically
from envharness.polite_stop import polite_stops
from envharness.transforms import Transform, get_transform
from envharness.transforms.base import load_file_module, remember_import

# Tables stay readable when piped (rich would otherwise assume 80 columns).
console = Console(width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", 160)))


def print_table(table: Table) -> None:
    """Print ``table``, or, where the terminal is too narrow for it without breaking words, one block per row.

    A row's block is its first cell as a heading, then ``column: value`` lines whose values
    wrap at word boundaries, so an 80-column terminal shows every word whole.
    """
    from rich.text import Text

    def plain(cell: Any) -> str:
        return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain

    # Each column needs its longest word, its padding and a border; rich would fold words beyond that.
    needed = 1 + sum(3 + max((len(w) for cell in [c.header, *c.cells] for w in plain(cell).split()), default=0) for c in table.columns)
    if needed <= console.width:
        console.print(table)
        return
    if table.title:
        console.print(Text(str(table.title), style="bold"))
    columns = list(table.columns)
    for r in range(table.row_count):
        cells = [list(c.cells)[r] for c in columns]
        console.print(Text(plain(cells[0]), style="bold"))
        block = Table.grid(padding=(0, 1))
        block.add_column(style="dim", no_wrap=True)
        block.add_column(overflow="fold")
        for column, cell in zip(columns[1:], cells[1:]):
            value = cell if isinstance(cell, Text) else Text.from_markup(str(cell))
            if value.plain.strip():
                block.add_row(f"  {plain(column.header)}:", value)
        console.print(block)


# Typer vendors click in recent releases; find its exception bases without importing it by name.
ClickException: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets, braces and quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p for p in (p.strip() for p in parts) if p]


def parse_value(text: str) -> Any:
    """A JSON value if ``text`` parses as one (``3``, ``0.5``, ``true``, ``[0,1]``), else the string."""
    lowered = {"true": True, "false": False, "none": None, "null": None}
    if text.lower() in lowered:
        return lowered[text.lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except (ValueError, RecursionError):  # e.g. an integer of more digits than Python converts
        raise UserError(f"value {text[:40]!r}...: too long or too deep to read; give a shorter value") from None


def parse_assignments(items: list[str], what: str) -> dict[str, Any]:
    """``["k=v", ...]`` to a dict, with a clear error for a missing ``=``."""
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UserError(f"{what}: {item!r} is not key=value; write it as e.g. max_dist=3")
        out[key.strip()] = parse_value(value.strip())
    return out


def parse_transform(text: str) -> Transform:
    """Build a transform from ``Name`` or ``Name:k=v,k2=v2`` (values are JSON or plain strings).

    Example:
        >>> parse_transform("MoveGoal:min_dist=2,max_dist=5")
        MoveGoal(min_dist=2, max_dist=5)
        >>> parse_transform("BlockAction:actions=[0,1],reason=no turning").actions
        [0, 1]
    """
    name, _, params = text.partition(":")
    cls = get_transform(name.strip())
    return cls(**parse_assignments(_split_top_level(params), f"{name.strip()} parameters"))


ALLOW_IMPORT_HELP = "Let a module:Env-v0 env id import MODULE (a spec is data: no module is imported without this); repeatable."


def spec_argument(argument: str, what: str = "SPEC") -> Any:
    """A ``SPEC.json|ENV_ID`` argument: the spec file it names, or a spec of the unreshaped env with that id."""
    from envharness.spec import HarnessSpec

    path = Path(argument)
    if path.suffix == ".json" or path.exists():
        if not path.exists():
            raise UserError(f"{what}: {path} does not exist; write one with `envharness wrap ENV_ID ... -o {path}`")
        return HarnessSpec.from_file(path)
    return HarnessSpec(env_id=argument)


def write_atomically(path: Path, text: str, make_parents: bool = False, within: Path | None = None) -> None:
    """Write an ``-o`` file so that readers see the old file or the new one, never half (:mod:`envharness.files`).

    A path the user named (``within`` None) that exists and is not a regular file
    (``/dev/null``, ``/dev/stdout``, a FIFO) is written into, never replaced: replacing a
    device node with a file would break it for the whole machine; a link there is followed.
    A path inside a directory the user named (``within``: a run's ``report.html``, an
    export's files) is never written through a link or into a special file: each is refused
    (:func:`envharness.files.check_inside`). A missing parent directory is refused (a
    mistyped path is not created silently) unless ``make_parents``. The file gets the mode a
    plain ``open`` would give it under the process's umask.
    """
    if within is not None:
        check_inside(path, within)
    elif path.is_symlink():
        path = Path(os.path.realpath(path))  # the user named it: written where it points, as a shell's > would
    if path.is_dir():
        raise UserError(f"-o: {path} is a directory; give a file path such as {path / 'spec.json'}")
    if path.exists() and not path.is_file():
        try:
            with open(path, "w") as handle:
                handle.write(text)
        except OSError as error:
            raise UserError(f"-o: cannot write {path} ({error.strerror or type(error).__name__}); pick a writable path") from None
        return
    if not path.parent.is_dir():
        if not make_parents:
            raise UserError(
                f"-o: the directory {path.parent} does not exist; create it first (mkdir -p {path.parent}) or pick another path"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"-o: cannot create {path.parent} ({error.strerror or type(error).__name__}); pick a writable path") from None
    try:
        write_text_atomically(path, text, within=within)
    except OSError as error:
        # Only the temporary file's creation names it alone (a rename names both paths): the folder is not writable.
        made = error.filename2 is None and str(error.filename or "").startswith(str(path.parent / f".{path.name}."))
        if not made:
            raise
        raise UserError(f"-o: cannot write {path} ({error.strerror or type(error).__name__}); pick a writable path") from None


def take_imports(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``--import MODULE`` / ``--import=MODULE`` out of ``argv``: (the rest, the modules)."""
    rest, modules, it = [], [], iter(argv)
    for arg in it:
        if arg == "--import":
            module = next(it, None)
            if module is None or module.startswith("-"):
                raise SpecError("--import: needs a module name or a .py file after it, e.g. --import mypkg.transforms")
            modules.append(module)
        elif arg.startswith("--import="):
            modules.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return rest, modules


def import_user_module(name: str) -> None:
    """Import a user's module (dotted name or ``.py`` path) so what it registers is available."""
    import importlib

    try:
        if name.endswith(".py"):
            path = Path(name).resolve()
            if not path.is_file():
                raise SpecError(f"--import {name}: no such file; give an existing .py file or a module name")
            if str(path.parent) not in sys.path:
                sys.path.append(str(path.parent))  # so spawned workers can import it by name from its directory
            load_file_module(path.stem, path)
            remember_import(path.stem, str(path))
        else:
            if os.getcwd() not in sys.path:
                sys.path.append(os.getcwd())  # a module next to where the user runs the command
            module = importlib.import_module(name)
            remember_import(name, getattr(module, "__file__", None))
    except SpecError:
        raise
    except Exception as error:
        text = str(error).strip().splitlines()
        raise SpecError(f"--import {name}: {type(error).__name__}{': ' + text[0] if text else ''}; check the module name or file") from None


IMPORT_EPILOG = (
    "Every command also takes --import MODULE (repeatable, a dotted name or a .py file): the module is imported first, "
    "so the transforms, envs, policies and learners it registers can be named."
)


def _say_import(app: typer.Typer) -> None:
    """Put ``--import`` in every subcommand's --help (it is read before the command line is parsed, so no command declares it)."""
    for command in app.registered_commands:
        if command.epilog is None:
            command.epilog = IMPORT_EPILOG
    for group in app.registered_groups:
        if group.typer_instance is not None:
            _say_import(group.typer_instance)


def run_cli(
    app: typer.Typer,
    argv: list[str] | None,
    prog: str,
    known: tuple[type[BaseException], ...] = (),
    imported: Callable[[], None] | None = None,
) -> int:
    """Run a typer app; user errors become one line on stderr and exit code 2. ``--import MODULE`` is read first.

    ``imported`` runs after the user's modules are imported and before the command line is
    parsed: what a module registers (an arm, a transform) can still reach the ``--help`` text.
    Every command runs inside :class:`~envharness.polite_stop.polite_stops`: Ctrl-C, SIGTERM
    and SIGHUP take one path, on which a long command keeps what had finished; then one line
    (``PROG: interrupted by SIGTERM: 4 finished episodes kept in RUN``) and exit code 128 +
    the signal (130, 143, 129).
    """
    _say_import(app)
    with polite_stops(prog) as stops:
        try:
            code = _run_app(app, argv, prog, known, imported)
        except KeyboardInterrupt:  # a stop that landed outside the command (typer turns one inside it into 130)
            code = 130
        if stops.stop is None and code != 130:
            return code
        stop = stops.stop
        kept = stop.kept if stop is not None and stop.kept else "what had finished is stored"
        print(f"{prog}: interrupted by {stop.name if stop is not None else 'SIGINT'}: {kept}", file=sys.stderr, flush=True)
        return stop.exit_code if stop is not None else 130


def _run_app(
    app: typer.Typer, argv: list[str] | None, prog: str, known: tuple[type[BaseException], ...], imported: Callable[[], None] | None
) -> int:
    try:
        argv, modules = take_imports(list(sys.argv[1:] if argv is None else argv))
        for module in modules:
            import_user_module(module)
        if imported is not None:
            imported()
        result = app(args=argv, prog_name=prog, standalone_mode=False)
    except typer.Exit as done:
        return done.exit_code
    except (typer.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
        return 130
    except ClickException as error:
        message = error.format_message()
        if type(error).__name__ == "NoArgsIsHelpError":
            print(message)
        else:
            print(f"{prog}: error: {message.splitlines()[0]}", file=sys.stderr)
        return 2
    except OSError as error:  # disk full, permissions, a vanished file: one line, and nothing half-written is left
        if error.strerror is None and str(error):  # raised with a message of its own (it names the file)
            print(f"{prog}: error: {str(error).splitlines()[0]}", file=sys.stderr)
            return 2
        where = f" ({error.filename})" if getattr(error, "filename", None) else ""
        fix = "free some space or write elsewhere" if error.errno == errno.ENOSPC else "check the path and its permissions"
        print(f"{prog}: error: {error.strerror or type(error).__name__}{where}; {fix}", file=sys.stderr)
        return 2
    except (EnvHarnessError, SpecError, *known) as error:  # type: ignore[misc]  # mypy cannot see a starred tuple of exception types
        print(f"{prog}: error: {str(error).splitlines()[0] if str(error) else type(error).__name__}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0  # 130: Ctrl-C, which typer turns into this exit code
