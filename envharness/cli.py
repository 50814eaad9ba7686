"""The ``envharness`` command line: the transform catalog, spec checks, and spec writing.

Contains the typer app (``transforms``, ``check``, ``wrap``), :func:`parse_transform`
(the ``Name:k=v,...`` syntax) and :func:`main`, which turns every user error into one
line on stderr and exit code 2.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envharness.errors import EnvHarnessError, SpecError
from envharness.transforms import TRANSFORMS, Transform, get_transform
from envharness.transforms.base import load_file_module, remember_import

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Wrap Gymnasium envs with transforms while their original verifier stays enforced. Every command also takes --import MODULE (repeatable): your module is imported first, so the "
    "transforms, envs, policies and learners it registers can be named (MODULE: a dotted name or a .py file).",
)
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


class UserError(EnvHarnessError):
    """A bad command-line argument or file."""


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


def _bounds_text(field: Any) -> str:
    lo = next((getattr(m, "ge", getattr(m, "gt", None)) for m in field.metadata if hasattr(m, "ge") or hasattr(m, "gt")), None)
    hi = next((getattr(m, "le", getattr(m, "lt", None)) for m in field.metadata if hasattr(m, "le") or hasattr(m, "lt")), None)
    if lo is None and hi is None:
        return ""
    return f" in [{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"


def works_on(cls: type[Transform]) -> str:
    """The envs a transform applies to: the adapters offering its capability, else what it declares.

    Example:
        >>> from envharness.transforms import AddLava, MoveAgent, StepBudget
        >>> works_on(AddLava), works_on(MoveAgent), works_on(StepBudget)
        ('MiniGrid', 'MiniGrid, FrozenLake, Taxi, CliffWalking', 'any env')
    """
    if cls.capability is None:
        return cls.works_on
    from envharness.adapters import ADAPTERS

    # A subclass adapter (generated FrozenLake maps, CartPole with physics levels) is named by its parent.
    offering = [a for a in ADAPTERS if cls.capability in a.capabilities]
    return ", ".join(a.__name__.removesuffix("Adapter") for a in offering if not any(p in offering for p in a.__mro__[1:]))


def catalog() -> list[dict[str, Any]]:
    """The registered transforms as plain data: name, kind, summary, parameters, targets."""
    rows = []
    for name, cls in sorted(TRANSFORMS.items(), key=lambda kv: (kv[1].kind, kv[0])):
        params = []
        for pname, field in cls.model_fields.items():
            default = " (required)" if field.is_required() else f"={field.get_default(call_default_factory=True)!r}"
            params.append(f"{pname}{default}{_bounds_text(field)}")
        rows.append(
            {
                "name": name,
                "kind": cls.kind,
                "summary": (cls.__doc__ or "").strip().splitlines()[0].replace("``", ""),
                "parameters": params,
                "targets": list(cls.targets),
                "works_on": works_on(cls),
                "requires_state_access": cls.requires_state_access,
            }
        )
    return rows


@app.command()
def transforms(
    kind: str = typer.Option(None, help="Only this kind: state, rule, observation or link."),
    as_json: bool = typer.Option(False, "--json", help="Print the catalog as JSON."),
) -> None:
    """List the transform catalog.

    Example: envharness transforms --kind rule
    """
    rows = catalog()
    if kind is not None:
        kinds = sorted({r["kind"] for r in rows})
        if kind not in kinds:
            raise UserError(f"--kind: got {kind!r}; use one of {', '.join(kinds)}")
        rows = [r for r in rows if r["kind"] == kind]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"envharness transforms ({len(rows)})")
    for column in ("name", "kind", "what it does", "parameters", "works on", "targets"):
        table.add_column(column, overflow="fold")
    for r in rows:
        cells = (r["name"], r["kind"], r["summary"], "\n".join(r["parameters"]), r["works_on"], ", ".join(r["targets"]))
        table.add_row(*(escape(c) for c in cells))
    print_table(table)


ALLOW_IMPORT_HELP = "Let a module:Env-v0 env id import MODULE (a spec is data: no module is imported without this); repeatable."


def spec_argument(argument: str, what: str = "SPEC") -> Any:
    """A ``SPEC.json|ENV_ID`` argument: the spec file it names, or a spec of the unreshaped env with that id."""
    from envharness.spec import HarnessSpec

    path = Path(argument)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise UserError(f"{what}: {path} does not exist; write one with `envharness wrap ENV_ID ... -o {path}`")
        return HarnessSpec.from_json(path.read_text())
    return HarnessSpec(env_id=argument)


def _read_spec(path: Path) -> Any:
    from envharness.spec import HarnessSpec

    if not path.is_file():
        raise UserError(f"SPEC: {path} does not exist; write one with `envharness wrap ENV_ID ... -o {path}`")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"SPEC: {path} cannot be read as UTF-8 text ({type(error).__name__}); give a JSON spec file") from None
    return HarnessSpec.from_json(text)


@app.command()
def check(
    spec_path: Path = typer.Argument(..., metavar="SPEC.json", help="A spec written by `envharness wrap`."),
    episodes: int = typer.Option(5, min=1, help="Random-policy episodes to roll out."),
    seed: int = typer.Option(0, min=0, help="Seed of the first episode (episode i uses seed + i)."),
    allow_import: list[str] = typer.Option(None, "--allow-import", metavar="MODULE", help=ALLOW_IMPORT_HELP),
) -> None:
    """Build a spec, run Gymnasium's env checker and a short random rollout, print verdict stats.

    Example: envharness check spec.json --episodes 20
    """
    from gymnasium.utils.env_checker import check_env

    spec = _read_spec(spec_path)
    env = spec.build(allow_imports=allow_import or ())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            check_env(env, skip_render_check=True)
        except AssertionError as error:
            raise UserError(
                f"check_env: {spec_path} is not a valid Gymnasium env ({str(error).splitlines()[0] if str(error) else 'assertion failed'})"
            ) from None
    env.action_space.seed(seed)
    lengths: list[int] = []
    successes, reasons = 0, Counter[str]()
    for i in range(episodes):
        env.reset(seed=seed + i)
        done, length = False, 0
        while not done:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            done, length = terminated or truncated, length + 1
        verdict = info["verdict"]
        successes += verdict.success
        reasons[verdict.reason] += 1
        lengths.append(length)
    env.close()
    table = Table(title=f"{spec_path.name}: {spec.env_id} + {len(spec.transforms)} transforms (hash {spec.hash()})")
    for column in ("check_env", "episodes", "success rate", "mean length", "verdict reasons"):
        table.add_column(column)
    table.add_row(
        "passed",
        str(episodes),
        f"{successes / episodes:.2f}",
        f"{sum(lengths) / episodes:.1f}",
        ", ".join(f"{r}: {n}" for r, n in reasons.most_common()),
    )
    print_table(table)


def write_atomically(path: Path, text: str, make_parents: bool = False) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half.

    A path that exists and is not a regular file (``/dev/null``, ``/dev/stdout``, a FIFO) is
    written into, never replaced: replacing a device node with a file would break it for
    the whole machine. A missing parent directory is refused (a mistyped path is not
    created silently) unless ``make_parents``. The file gets the mode a plain ``open``
    would give it under the process's umask.
    """
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
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise UserError(f"-o: cannot write {path} ({error.strerror or type(error).__name__}); pick a writable path") from None
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # what a plain open() would give; mkstemp's 0600 hid reports from their readers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@app.command("wrap")
def wrap_command(
    env_id: str = typer.Argument(..., help="Gymnasium id of the base env, e.g. MiniGrid-DoorKey-8x8-v0."),
    transform: list[str] = typer.Argument(None, metavar="TRANSFORM[:k=v,...]...", help="Transforms in order."),
    output: Path = typer.Option(None, "-o", "--output", help="Write the spec here (default: print it)."),
    kwarg: list[str] = typer.Option(None, "-k", "--kwarg", help="Base env keyword argument key=value; repeatable."),
    allow_import: list[str] = typer.Option(None, "--allow-import", metavar="MODULE", help=ALLOW_IMPORT_HELP),
) -> None:
    """Write a spec: a base env plus transforms, checked by building it once.

    Example: envharness wrap MiniGrid-DoorKey-8x8-v0 MoveGoal:max_dist=3 ActionSlip:p=0.1 -o spec.json
    """
    from envharness.spec import HarnessSpec

    built = [parse_transform(t) for t in (transform or [])]
    spec = HarnessSpec(
        env_id=env_id,
        env_kwargs=parse_assignments(kwarg or [], "--kwarg"),
        transforms=[t.to_spec() for t in built],
    )
    spec.build(allow_imports=allow_import or ()).close()
    text = spec.to_json() + "\n"
    if output is None:
        print(text, end="")
    else:
        write_atomically(output, text)
        console.print(f"wrote {output} (spec hash {spec.hash()})")


IMPORT_HELP = (
    "--import MODULE (repeatable, before or after the command) imports your module first, so the transforms, envs, "
    "policies and learners it registers can be named in specs and options; MODULE may be a dotted name or a path/to/file.py."
)


@app.command("serve")
def serve_command(
    spec_arg: str = typer.Argument(..., metavar="SPEC.json|ENV_ID", help="A spec file, or a Gymnasium id for the unreshaped env."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback needs --token-env."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to bind."),
    record: Path = typer.Option(None, "--record", metavar="RUN", help="Store every session's episode in this run directory."),
    token_env: str = typer.Option(None, "--token-env", metavar="NAME", help="The variable holding the bearer token clients must send."),
    max_sessions: int = typer.Option(64, "--max-sessions", min=1, max=100_000, help="Sessions open at once; more get 429."),
    idle_timeout: float = typer.Option(600.0, "--idle-timeout", min=0.05, help="Seconds a session may sit idle before it is closed."),
    max_body: int = typer.Option(1 << 20, "--max-body", min=256, help="Largest request body in bytes; larger get 413."),
    allow_import: list[str] = typer.Option(None, "--allow-import", metavar="MODULE", help=ALLOW_IMPORT_HELP),
) -> None:
    """Serve a wrapped env over HTTP: any agent, in any language, plays it with reset/step and cannot forge its verdict.

    Example: envharness serve MiniGrid-DoorKey-6x6-v0 --port 8000 --record runs/served
    Example: OUR_TOKEN=s3cret envharness serve spec.json --host 0.0.0.0 --token-env OUR_TOKEN
    """
    import os

    from envharness.serve import EnvService, is_loopback, serve
    from envharness.spec import HarnessSpec

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UserError('serving needs the serve extra: pip install "envharness[serve]"') from None
    path = Path(spec_arg)
    spec = _read_spec(path) if path.suffix == ".json" or path.exists() else HarnessSpec(env_id=spec_arg)
    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise UserError(f"--token-env: the variable {token_env} is not set (or empty); export the token there")
    elif not is_loopback(host):
        raise UserError(f"--host {host} is not loopback: clients must authenticate; give --token-env NAME (the variable holding the token)")
    recorder = _recorder(record) if record is not None else None
    service = EnvService(
        spec, max_sessions=max_sessions, idle_timeout=idle_timeout, recorder=recorder, allow_imports=tuple(allow_import or ())
    )
    print(
        f"serving {spec.env_id} (spec {spec.hash()}) at http://{host}:{port}/v1 ({'bearer token required' if token else 'no token'})",
        flush=True,
    )
    serve(service, host=host, port=port, token=token, max_body=max_body)


def _recorder(run: Path) -> Any:
    """The recorder registered under the entry point group ``envharness.recorders`` (envrigger's run store)."""
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="envharness.recorders") if e.name == "store"]
    if not found:
        raise UserError(
            "--record needs envrigger's recorder (the envharness distribution installs it); reinstall with pip install envharness"
        )
    return found[0].load()(run)


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


def run_cli(app: typer.Typer, argv: list[str] | None, prog: str, known: tuple[type[BaseException], ...] = ()) -> int:
    """Run a typer app; user errors become one line on stderr and exit code 2. ``--import MODULE`` is read first."""
    _say_import(app)
    try:
        argv, modules = take_imports(list(sys.argv[1:] if argv is None else argv))
        for module in modules:
            import_user_module(module)
        result = app(args=argv, prog_name=prog, standalone_mode=False)
    except typer.Exit as done:
        return done.exit_code
    except (typer.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
        print(f"{prog}: interrupted; what had finished is stored", file=sys.stderr)
        return 130
    except ClickException as error:
        message = error.format_message()
        if type(error).__name__ == "NoArgsIsHelpError":
            print(message)
        else:
            print(f"{prog}: error: {message.splitlines()[0]}", file=sys.stderr)
        return 2
    except OSError as error:  # disk full, permissions, a vanished file: one line, and nothing half-written is left
        where = f" ({error.filename})" if getattr(error, "filename", None) else ""
        fix = "free some space or write elsewhere" if error.errno == errno.ENOSPC else "check the path and its permissions"
        print(f"{prog}: error: {error.strerror or type(error).__name__}{where}; {fix}", file=sys.stderr)
        return 2
    except (EnvHarnessError, SpecError, *known) as error:  # type: ignore[misc]  # mypy cannot see a starred tuple of exception types
        print(f"{prog}: error: {str(error).splitlines()[0] if str(error) else type(error).__name__}", file=sys.stderr)
        return 2
    if result == 130:  # Ctrl-C: typer turns it into this exit code
        print(f"{prog}: interrupted; what had finished is stored", file=sys.stderr)
    return result if isinstance(result, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``envharness``."""
    sys.exit(run_cli(app, argv, "envharness"))


if __name__ == "__main__":
    main()
