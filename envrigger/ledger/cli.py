"""`envrigger ledger`: init, eval, list, show, compare and report (see docs/ledgers.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from envharness.command_line import print_table, spec_argument, write_atomically
from envharness.errors import UserError
from envharness.values import MOST_SEED, MOST_WORKERS

ledger_app = typer.Typer(
    help="Ledgers: every release (model, harness, environment) measured on one fixed held-out task set, and each change attributed.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
LEDGER_ARG = typer.Argument(..., metavar="LEDGER.db", help="The ledger file.")


def _spec(argument: str) -> Any:
    return spec_argument(argument, "--env")


@ledger_app.command("init")
def init(
    path: Path = LEDGER_ARG,
    env: str = typer.Option(..., "--env", metavar="ENV_ID|SPEC.json", help="The original env the releases are measured on."),
    tasks: int = typer.Option(50, "--tasks", min=1, max=100_000, help="Held-out tasks: distinct levels of the env, fixed now."),
    seed: int = typer.Option(0, "--seed", min=0, max=100, help="Which of the ledger seed ranges the tasks come from."),
    avoid: list[Path] = typer.Option(None, "--avoid", metavar="RUN", help="A loop run whose levels the tasks must avoid (repeatable)."),
) -> None:
    """Make a ledger: draw its held-out tasks (distinct levels, from seeds no loop uses) and store them.

    Example: envrigger ledger init ledger.db --env envharness/CodeRepair-v0 --tasks 20
    """
    from envrigger.ledger import Ledger, draw_tasks, loop_levels

    spec = _spec(env)
    if spec.transforms:
        raise UserError("--env: a ledger's tasks are levels of the original env; give the env id or a spec without transforms")
    if path.exists():
        raise UserError(f"{path} already exists; pick a new file (a ledger's tasks are fixed when it is made)")
    avoided: set[str] = set()
    for run in avoid or []:
        avoided |= loop_levels(run)
    drawn = draw_tasks(spec, tasks, seed, avoided)
    Ledger.create(path, spec, drawn, seed).close()
    print(f"{path}: {len(drawn)} held-out tasks of {spec.env_id} (seeds {drawn[0][0]}..{drawn[-1][0]}), avoiding {len(avoided)} levels")


def _factors(ledger: Any, base_url: str | None, model: str | None, policy: str | None, harness_path: Path | None, env: str | None,
             library_version: int | None, api_key_env: str, timeout: float, prices: dict[str, tuple[float, float]]) -> Any:  # fmt: skip
    """The release's cell, after every check that can fail (nothing is run or written before they pass)."""
    from envrigger.ledger import Cell, EnvFactor, HarnessFactor, ModelFactor, check_env

    if (base_url is None) == (policy is None):
        raise UserError("give the model as --base-url URL --model NAME (an endpoint) or as --policy POLICY, one of the two")
    spec = _spec(env) if env is not None else ledger.env
    check_env(ledger, spec)
    environment = EnvFactor(spec=json.loads(spec.to_json()), library_version=library_version, source=env or ledger.env.env_id)
    if policy is not None:
        if harness_path is not None:
            raise UserError("--harness is an LLM agent's; a Python policy acts itself (drop --harness)")
        return Cell(model=ModelFactor.of_policy(policy), harness=HarnessFactor(kind="direct"), environment=environment)
    if not model:
        raise UserError("--base-url needs --model NAME (the model the endpoint serves)")
    from envrigger.agents import AgentHarness, Endpoint, check_endpoint, default_harness

    if harness_path is not None:
        if not harness_path.exists():
            raise UserError(f"--harness: {harness_path} does not exist; write one with `envrigger agent init --env {spec.env_id} > FILE`")
        harness = AgentHarness.from_file(harness_path)
    else:
        harness = default_harness(spec.env_id)
    factor = ModelFactor(kind="endpoint", base_url=base_url.rstrip("/"), model=model, api_key_env=api_key_env)  # type: ignore[union-attr]
    secret = factor.secret_problem()
    if secret is not None:  # before anything names the URL or the variable: a key is never echoed, nor stored
        raise UserError(secret)
    check_endpoint(Endpoint(str(factor.base_url), model, api_key_env=api_key_env, timeout_s=timeout, prices=prices))
    return Cell(model=factor, harness=HarnessFactor(kind="agent", harness=json.loads(harness.to_json())), environment=environment)


@ledger_app.command("eval")
def eval_command(
    path: Path = LEDGER_ARG,
    release: str = typer.Option(..., "--release", metavar="NAME", help="The release's name (each name is evaluated once)."),
    base_url: str = typer.Option(None, "--base-url", metavar="URL", help="The model's OpenAI-compatible endpoint."),
    model: str = typer.Option(None, "--model", help="The model name the endpoint serves."),
    policy: str = typer.Option(None, "--policy", help="Instead of an endpoint: random, reference, or a saved learner file."),
    harness_path: Path = typer.Option(None, "--harness", metavar="FILE", help="The agent harness JSON (default: the env's default)."),
    env: str = typer.Option(None, "--env", metavar="SPEC.json|ENV_ID", help="The env it faces (default: the ledger's original env)."),
    library_version: int = typer.Option(
        None, "--library-version", min=0, max=2**63 - 1, help="The library version the env came from, for the record."
    ),
    trained_in: list[Path] = typer.Option(
        None, "--trained-in", metavar="RUN", help="A loop run the release was trained in: refused if it played a held-out task."
    ),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", metavar="NAME", help="The variable holding the API key."),
    request_timeout: float = typer.Option(60.0, "--request-timeout", min=0.1, max=3600, help="Seconds a model call may take."),
    concurrency: int = typer.Option(1, "--concurrency", min=1, max=MOST_WORKERS, help="Tasks in flight at once (for an endpoint)."),
    prices: Path = typer.Option(None, "--prices", metavar="FILE", help='JSON {"MODEL": [USD per 1M input, per 1M output tokens]}.'),
) -> None:
    """Evaluate a release on every held-out task and record it in the three ledgers.

    Example: envrigger ledger eval ledger.db --release v1 --base-url http://127.0.0.1:8000/v1 --model qwen
    Example: envrigger ledger eval ledger.db --release ref --policy reference --env reshaped.json
    """
    from envharness.adapters.base import is_reserved
    from envrigger.agents.chat import read_prices
    from envrigger.ledger import Ledger, evaluate_cell, loop_levels

    ledger = Ledger(path)
    if any(r["name"] == release for r in ledger.releases()):
        raise UserError(f"release {release!r} is already in {path}; a release is evaluated once: give the new one another name")
    for run in trained_in or []:
        played = loop_levels(run)
        shared = sorted(level for _, level in ledger.tasks() if is_reserved(level, played))
        if shared:
            raise UserError(
                f"{run} played {len(shared)} of this ledger's held-out tasks ({', '.join(shared[:3])}); a release trained on them "
                "would not be measured on unseen tasks: make the ledger with --avoid RUN"
            )
    table = read_prices(prices) if prices is not None else {}
    cell = _factors(ledger, base_url, model, policy, harness_path, env, library_version, api_key_env, request_timeout, table)
    started = time.perf_counter()
    if ledger.cell(cell.key()) is not None:
        ledger.name_release(release, cell.key())  # this model, harness and env were played already (by a compare): reuse
        print(f"{release}: the same cell as one evaluated before ({cell.key()}); recorded without playing it again")
    else:
        results, where = evaluate_cell(ledger, cell, concurrency=concurrency, prices=table, timeout=request_timeout, progress=True)
        ledger.add_cell(cell, results, where, release=release)
    _show(ledger, release, f"{release} ({time.perf_counter() - started:.1f}s)")


def _show(ledger: Any, name: str, title: str) -> None:
    from envrigger.ledger import METRICS, summarize
    from envrigger.ledger.factors import FACTORS

    record = ledger.release(name)
    cell, run = ledger.stored_cell(record["cell"])
    summary = summarize(ledger.results(record["cell"]))
    table = Table(title=title)
    table.add_column("ledger")
    table.add_column("value")
    for factor in FACTORS:
        table.add_row(factor, getattr(cell, factor).describe())
    lo, hi = summary["accepted_ci"]
    table.add_row("accepted-task rate", f"{summary['accepted']:.1f}% [{lo:.1f}, {hi:.1f}] ({summary['solved']}/{summary['tasks']} tasks)")
    for metric, (label, unit, _, _) in METRICS.items():
        if metric != "accepted":
            value = summary[metric]
            table.add_row(label, "-" if value is None else f"{value:.3g}{' ' + unit if unit else ''}")
    table.add_row("episodes", f"{run} (diagnose it with `envrigger diagnose`)")
    print_table(table)


@ledger_app.command("list")
def list_command(path: Path = LEDGER_ARG) -> None:
    """List the releases with their three ledgers and accepted-task rate."""
    from envrigger.ledger import Ledger, summarize

    ledger = Ledger(path, read_only=True)
    table = Table(title=f"{path}: {ledger.env.env_id}, {len(ledger.tasks())} held-out tasks")
    for column in ("#", "release", "model", "harness", "environment", "accepted (95% CI)", "recorded"):
        table.add_column(column)
    for r in ledger.releases():
        cell, _ = ledger.stored_cell(r["cell"])
        s = summarize(ledger.results(r["cell"]))
        ci = s["accepted_ci"]
        row = (str(r["seq"]), r["name"], cell.model.describe(), cell.harness.describe(), cell.environment.describe())
        table.add_row(*row, f"{s['accepted']:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]", r["created"])
    print_table(table)


@ledger_app.command("show")
def show(path: Path = LEDGER_ARG, release: str = typer.Argument(..., metavar="RELEASE")) -> None:
    """Show one release: its model, harness and environment, and every metric on the held-out tasks."""
    from envrigger.ledger import Ledger

    _show(Ledger(path, read_only=True), release, release)


@ledger_app.command("compare")
def compare_command(
    path: Path = LEDGER_ARG,
    a: str = typer.Argument(..., metavar="A", help="The earlier release."),
    b: str = typer.Argument(..., metavar="B", help="The later release."),
    output_format: str = typer.Option("table", "--format", help="table or json."),
    no_eval: bool = typer.Option(False, "--no-eval", help="Use only cells already evaluated; refuse if one is missing."),
    resamples: int = typer.Option(2000, "--resamples", min=100, max=100_000, help="Bootstrap resamples over tasks."),
    seed: int = typer.Option(0, "--seed", min=0, max=MOST_SEED, help="The bootstrap's seed."),
    concurrency: int = typer.Option(
        1, "--concurrency", min=1, max=MOST_WORKERS, help="Tasks in flight at once while playing a missing cell."
    ),
) -> None:
    """Name which ledgers changed from A to B and attribute the change in every metric to each (Shapley, with intervals).

    Where more than one ledger changed, the missing cross combinations are played on the same
    tasks with the same seeds (cells already evaluated are reused). The last line is the one a
    release note can quote.

    Example: envrigger ledger compare ledger.db v1 v2
    """
    from envrigger.ledger import METRICS, Ledger, compare

    if output_format not in ("table", "json"):
        raise UserError(f"--format: got {output_format!r}; use table or json")
    ledger = Ledger(path)
    result = compare(ledger, a, b, evaluate=not no_eval, concurrency=concurrency, resamples=resamples, seed=seed, log=print)
    if output_format == "json":
        print(json.dumps(result.dump(), indent=2))
        return
    print(f"{a} -> {b}: changed {', '.join(result.changed) or 'nothing'}; {len(result.cells)} cells on {result.tasks} tasks")
    if result.changed:
        table = Table(title="attribution (Shapley values, 95% paired bootstrap intervals over tasks)")
        for column in ("metric", a, b, "change", *result.changed):
            table.add_column(column)
        for name, entry in result.attribution.items():

            def cell(value: float | None, ci: list[float] | None) -> str:
                if value is None:
                    return "-"
                return f"{value:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")

            plain = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            shares = [cell(entry["factors"][f]["value"], entry["factors"][f]["ci"]) for f in result.changed]
            table.add_row(METRICS[name][0], plain(entry["a"]), plain(entry["b"]), cell(entry["change"], entry["ci"]), *shares)
        print_table(table)
    for finding in result.findings:
        print(f"finding {finding['name']}: {finding['title']}")
    print(result.headline)


@ledger_app.command("report")
def report_command(path: Path = LEDGER_ARG, output: Path = typer.Option(..., "-o", "--output", help="The HTML file to write.")) -> None:
    """Write the ledger as one self-contained HTML page: releases over time, the three ledgers, attribution, diversity.

    Example: envrigger ledger report ledger.db -o ledger.html
    """
    from envrigger.ledger import Ledger, render_report

    write_atomically(output, render_report(Ledger(path, read_only=True)))
    print(f"wrote {output}")
