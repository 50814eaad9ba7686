"""The ``envharness`` command line: the transform catalog, spec checks, and spec writing.

Contains the typer app (``transforms``, ``check``, ``wrap``, ``serve``) and :func:`main`,
which turns every user error into one line on stderr and exit code 2. What the envrigger
command line shares with it (:func:`run_cli`, :func:`parse_transform`, :func:`print_table`,
:func:`write_atomically`, ...) is in :mod:`envharness.command_line`, and is importable from
here too, as is :class:`~envharness.errors.UserError`.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from envharness.command_line import (
    ALLOW_IMPORT_HELP,
    ClickException,
    console,
    import_user_module,
    parse_assignments,
    parse_transform,
    parse_value,
    print_table,
    run_cli,
    spec_argument,
    take_imports,
    write_atomically,
)
from envharness.errors import UserError
from envharness.polite_stop import say_kept
from envharness.transforms import TRANSFORMS, Transform
from envharness.values import MOST_BODY_BYTES, MOST_EPISODES, MOST_SECONDS, MOST_SEED

__all__ = [  # what envrigger, tests and users imported from here before envharness.command_line held it
    "ALLOW_IMPORT_HELP",
    "ClickException",
    "UserError",
    "app",
    "catalog",
    "console",
    "import_user_module",
    "main",
    "parse_assignments",
    "parse_transform",
    "parse_value",
    "print_table",
    "run_cli",
    "spec_argument",
    "take_imports",
    "works_on",
    "write_atomically",
]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Wrap Gymnasium envs with transforms while their original verifier stays enforced. Every command also takes --import MODULE (repeatable): your module is imported first, so the "
    "transforms, envs, policies and learners it registers can be named (MODULE: a dotted name or a .py file).",
)


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


def _read_spec(path: Path) -> Any:
    from envharness.spec import HarnessSpec

    if not path.exists():
        raise UserError(f"SPEC: {path} does not exist; write one with `envharness wrap ENV_ID ... -o {path}`")
    return HarnessSpec.from_file(path)


@app.command()
def check(
    spec_path: Path = typer.Argument(..., metavar="SPEC.json", help="A spec written by `envharness wrap`."),
    episodes: int = typer.Option(5, min=1, max=MOST_EPISODES, help="Random-policy episodes to roll out."),
    seed: int = typer.Option(0, min=0, max=MOST_SEED, help="Seed of the first episode (episode i uses seed + i)."),
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
    idle_timeout: float = typer.Option(
        600.0, "--idle-timeout", min=0.05, max=MOST_SECONDS, help="Seconds a session may sit idle before it is closed."
    ),
    max_body: int = typer.Option(
        1 << 20, "--max-body", min=256, max=MOST_BODY_BYTES, help="Largest request body in bytes; larger get 413."
    ),
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
    try:
        serve(service, host=host, port=port, token=token, max_body=max_body)
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP: each finished session's episode was recorded as it ended
        count = f"{service.recorded} finished episode{'s' if service.recorded != 1 else ''}"
        say_kept(stop, f"{count} kept in {record}" if record is not None else "nothing recorded (no --record RUN)")
        raise


def _recorder(run: Path) -> Any:
    """The recorder registered under the entry point group ``envharness.recorders`` (envrigger's run store)."""
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="envharness.recorders") if e.name == "store"]
    if not found:
        raise UserError(
            "--record needs envrigger's recorder (the envharness distribution installs it); reinstall with pip install envharness"
        )
    return found[0].load()(run)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``envharness``."""
    sys.exit(run_cli(app, argv, "envharness"))


if __name__ == "__main__":
    main()
