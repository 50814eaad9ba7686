"""The ``envrigger`` command line.

Contains the typer app and :func:`main`. ``envrigger demo`` is the end-to-end job on a
built-in default: wrap a benchmark, roll out a random and a reference policy on the
original and the reshaped env, and print the verdicts side by side.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

import envharness
from envharness.command_line import ALLOW_IMPORT_HELP, parse_transform, print_table, run_cli, spec_argument, write_atomically
from envharness.command_line import console as harness_console
from envharness.errors import UserError
from envharness.values import MOST_BODY_BYTES, MOST_EPISODES, MOST_SECONDS, MOST_SEED, MOST_WORKERS
from envrigger.data import TrajectoryStore
from envrigger.loop.arms import registered
from envrigger.loop.config import LoopConfig
from envrigger.loop.results import AcrossSeeds, FinalResults, LoopResult, RoundSummary
from envrigger.options import Flag, model_options
from envrigger.policies import RandomPolicy, reference_policy

RAY_ADDRESS_HELP = (
    "With --backend ray: the Ray cluster to join (auto, HOST:PORT or ray://HOST:PORT; default $RAY_ADDRESS; "
    "with neither, a local Ray is started)."
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Record agents, diagnose their weaknesses, and reshape environments to target them. Every command also takes --import MODULE (repeatable): your module is imported first, so the "
    "transforms, envs, policies and learners it registers can be named (MODULE: a dotted name or a .py file).",
)
console = harness_console

DEFAULT_ENV = "MiniGrid-DoorKey-8x8-v0"
DEFAULT_TRANSFORMS = ["MoveGoal:min_dist=6,max_dist=12", "ActionSlip:p=0.1", "AddLava:count=3"]


def run_episodes(env: Any, policy: Any, seeds: list[int]) -> dict[str, Any]:
    """Roll ``policy`` out once per seed (reseeding it per episode, as rollouts do); summarize the verdicts."""
    successes, lengths, reasons = 0, [], Counter[str]()
    for seed in seeds:
        if hasattr(policy, "reset"):
            policy.reset(seed)
        obs, info = env.reset(seed=seed)
        done, length = False, 0
        while not done:
            obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
            done, length = terminated or truncated, length + 1
        verdict = info["verdict"]
        successes += verdict.success
        reasons[verdict.reason] += 1
        lengths.append(length)
    return {
        "success_rate": successes / len(seeds),
        "mean_length": sum(lengths) / len(lengths),
        "reasons": dict(reasons.most_common()),
    }


@app.command()
def demo(
    env_id: str = typer.Option(DEFAULT_ENV, "--env", help="Gymnasium id of the base env."),
    transform: list[str] = typer.Option(None, "-t", "--transform", help="Transform Name:k=v,...; repeatable."),
    episodes: int = typer.Option(20, min=1, max=MOST_EPISODES, help="Episodes per policy and env."),
    seed: int = typer.Option(0, min=0, max=MOST_SEED, help="First level seed; episode i uses seed + i."),
    output: Path = typer.Option(
        None, "-o", "--output", help="Keep the random policy's run in this directory (default: a temporary one, removed at the end)."
    ),
) -> None:
    """Wrap a benchmark, roll out random and reference policies, print the verdicts.

    Example: envrigger demo --env FrozenLake-v1 -t FrozenLakeMap:add_holes=3 --episodes 50
    """
    specs = transform if transform else (DEFAULT_TRANSFORMS if env_id == DEFAULT_ENV else [])
    transforms = [parse_transform(t) for t in specs]
    seeds = list(range(seed, seed + episodes))
    started = time.perf_counter()
    table = Table(title=f"{env_id}: original vs reshaped, {episodes} episodes each (seeds {seeds[0]}..{seeds[-1]})")
    for column in ("env", "policy", "success rate", "mean length", "verdict reasons"):
        table.add_column(column)
    for label, stack in (("original", []), ("reshaped", transforms)):
        env = envharness.wrap(env_id, *stack)
        policies: list[Any] = [RandomPolicy(env.action_space, seed=seed)]
        try:
            policies.append(reference_policy(env))
        except ValueError as missing:
            console.print(f"[yellow]{missing}[/yellow]")
        for policy in policies:
            stats = run_episodes(env, policy, seeds)
            reasons = ", ".join(f"{r}: {n}" for r, n in stats["reasons"].items())
            table.add_row(label, policy.name, f"{stats['success_rate']:.2f}", f"{stats['mean_length']:.1f}", reasons)
        env.close()
    described = [f"{t.name}({', '.join(f'{k}={v!r}' for k, v in t.model_dump(exclude_none=True).items())})" for t in transforms]
    console.print(f"reshaped with: {', '.join(described) or '(nothing)'}")
    print_table(table)
    from envharness.spec import HarnessSpec
    from envrigger.diagnose import diagnose
    from envrigger.report import findings_table
    from envrigger.rollout import rollout

    spec = HarnessSpec(env_id=env_id, transforms=[t.to_spec() for t in transforms])
    with tempfile.TemporaryDirectory(prefix="envrigger-demo-") as scratch:
        store = rollout(spec, "random", seeds=seeds, policy_seed=seed, backend="serial", out=output or Path(scratch) / "run")
        console.print("What goes wrong for the random policy on the reshaped env (envrigger diagnose):")
        print_table(findings_table(diagnose(store)))
        kept = f"run stored in {store.path}" if output else "pass -o DIR to keep the run"
    console.print(f"done in {time.perf_counter() - started:.1f}s; verdicts come from the original verifier; {kept}")


@app.command()
def collect(
    spec_path: str = typer.Argument(..., metavar="SPEC.json|ENV_ID", help="A spec file, or a Gymnasium id for the unreshaped env."),
    policy: str = typer.Option(
        "random",
        "--policy",
        help="random, reference, a saved learner (Q-table .json, SB3 .zip, ALGO:model.zip such as PPO:ppo.zip), "
        "or your own policy class as module:Class or file.py:Class (called with the env, if it takes an argument).",
    ),  # fmt: skip
    episodes: int = typer.Option(
        100, "--episodes", "-n", min=1, max=MOST_EPISODES, help="Episodes to run; level seeds are --seed .. --seed+N-1."
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=MOST_SEED, help="First level seed."),
    policy_seed: int = typer.Option(0, "--policy-seed", min=0, max=MOST_SEED, help="Seeds the policy's own randomness."),
    backend: str = typer.Option("process", "--backend", help="serial, process or ray."),
    workers: int = typer.Option(None, "--workers", "-w", min=1, max=MOST_WORKERS, help="Worker processes (default: all cores)."),
    ray_address: str = typer.Option(None, "--ray-address", metavar="ADDRESS", help=RAY_ADDRESS_HELP),
    batch: int = typer.Option(
        1, "--batch", min=1, max=4096, help="With --backend serial: play N episodes in lockstep, the policy acting for all in one call."
    ),
    store_obs: str = typer.Option(
        "small",
        "--store-obs",
        help="Observations stored whole beside their digests: small (<= 64 numbers), fit (JSON <= 512 chars), none; "
        "text observations (<= 64 numbers) are kept whole up to 1 MiB under small and fit.",
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Run directory to create or append to."),
    allow_import: list[str] = typer.Option(None, "--allow-import", metavar="MODULE", help=ALLOW_IMPORT_HELP),
    episode_timeout: float = typer.Option(
        600.0,
        "--episode-timeout",
        min=0,
        max=MOST_SECONDS,
        help="Wall seconds an episode may take before it is killed and recorded as 'timeout (wall)', nothing of it kept (0: none); "
        "an LLM agent's episode is cut before that, its steps kept, at the harness's episode_seconds or at this less the request timeout.",
    ),
    flush_steps: int = typer.Option(
        50_000, "--flush-steps", min=1, max=10**9, help="Commit a part every this many steps (smaller: less to redo after a crash)."
    ),
    flush_seconds: float = typer.Option(
        10.0,
        "--flush-seconds",
        min=0,
        max=MOST_SECONDS,
        help="Also commit once a finished episode has waited this many seconds, whatever the step count (0: no time bound).",
    ),
    agent: str = typer.Option(None, "--agent", help="chat: an LLM agent on an OpenAI-compatible endpoint (instead of --policy)."),
    base_url: str = typer.Option(None, "--base-url", metavar="URL", help="With --agent chat: the endpoint, e.g. http://127.0.0.1:8000/v1."),
    model: str = typer.Option(None, "--model", help="With --agent chat: the model name the endpoint serves."),
    harness_path: Path = typer.Option(
        None, "--harness", metavar="FILE", help="With --agent chat: an agent harness JSON (default: `envrigger agent init --env ID`)."
    ),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", metavar="NAME", help="With --agent chat: the variable holding the API key (never stored)."
    ),
    request_timeout: float = typer.Option(
        60.0,
        "--request-timeout",
        min=0.1,
        max=3600,
        help="With --agent chat: seconds a whole model call may take (each attempt: connect, the answer and every byte of its stream).",
    ),
    concurrency: int = typer.Option(
        1,
        "--concurrency",
        min=1,
        max=MOST_WORKERS,
        help="Episodes in flight at once in threads of one process (for agents that wait on an endpoint; serial backend).",
    ),
    prices: Path = typer.Option(
        None,
        "--prices",
        metavar="FILE",
        help='With --agent chat: JSON {"MODEL": [USD per 1M input tokens, per 1M output tokens]} for cost_usd.',
    ),
) -> None:
    """Roll a policy (or an LLM agent) out on a spec and store the trajectories as Parquet.

    One collection writes to a run directory at a time (a second is refused). A finished
    episode is committed within --flush-seconds; Ctrl-C, SIGTERM and SIGHUP commit every
    finished episode, then stop (exit 130, 143, 129). With --agent chat, every model call is
    recorded with its step (tokens, latency, retries, the messages), under the harness's hash.

    Example: envrigger collect spec.json --policy reference --episodes 200 --workers 2 -o runs/doorkey
    Example: envrigger collect envharness/TextWorld-v0 --agent chat --base-url http://127.0.0.1:8000/v1 --model qwen -n 20 -o runs/tw
    """
    from envrigger.rollout import rollout

    spec = spec_argument(spec_path)
    chosen: Any = policy
    if agent is not None:
        chosen = _chat_agent(spec, agent, base_url, model, harness_path, api_key_env, request_timeout, allow_import or (), prices)
        chosen, episode_timeout = _wall_limits(chosen, episode_timeout, request_timeout)
        if backend == "ray":
            raise UserError("--agent chat runs on the serial or process backend; drop --backend ray")
        if concurrency > 1 and backend == "process":
            backend = "serial"  # episodes in flight in threads: the endpoint, not the CPU, is what they wait on
    started = time.perf_counter()
    store = rollout(
        spec,
        chosen,
        seeds=range(seed, seed + episodes),
        backend=backend,
        workers=workers,
        policy_seed=policy_seed,
        out=output,
        progress=True,
        allow_imports=allow_import or (),
        episode_timeout=episode_timeout or None,
        flush_steps=flush_steps,
        flush_seconds=flush_seconds or None,
        ray_address=ray_address,
        batch=batch,
        store_obs=store_obs,
        concurrency=concurrency,
    )
    summarize_run(store, f"{output} ({time.perf_counter() - started:.1f}s)")
    errors = [e for e in store.episodes_table(["error"]).column("error").to_pylist()]
    if errors and all(e is not None for e in errors):
        raise UserError(f"every episode failed with an error (first: {errors[0]}); fix the env or the policy and collect again")


def _chat_agent(
    spec: Any, agent: str, base_url: str | None, model: str | None, harness_path: Path | None, api_key_env: str, timeout: float,
    allow_imports: Any, prices: Path | None = None,
) -> Any:  # fmt: skip
    """The chat agent's factory, after every check that can fail (nothing is written before they pass)."""
    from envrigger.agents import AgentHarness, ChatAgentFactory, Endpoint, check_endpoint, default_harness, text_view
    from envrigger.agents.chat import read_prices

    if agent != "chat":
        raise UserError(f"--agent: got {agent!r}; the agent envrigger drives is chat")
    if not base_url or not model:
        raise UserError("--agent chat needs --base-url URL and --model NAME (the endpoint and the model it serves)")
    if harness_path is not None:
        if not harness_path.exists():
            raise UserError(f"--harness: {harness_path} does not exist; write one with `envrigger agent init --env {spec.env_id} > FILE`")
        harness = AgentHarness.from_file(harness_path)
    else:
        harness = default_harness(spec.env_id)
    env = spec.build(allow_imports=list(allow_imports))
    try:
        text_view(env)
    finally:
        env.close()
    table = read_prices(prices) if prices is not None else {}
    endpoint = Endpoint(base_url.rstrip("/"), model, api_key_env=api_key_env, timeout_s=timeout, prices=table)
    check_endpoint(endpoint)
    return ChatAgentFactory(harness, endpoint)


def _wall_limits(factory: Any, hard: float, request_timeout: float) -> tuple[Any, float]:
    """The agent's own wall limit per episode (soft: the episode is cut, its steps kept) and the hard one that kills it.

    A harness without ``episode_seconds`` gets one that leaves its last model call time to
    finish inside ``--episode-timeout`` (and within the harness's own bound on it); a harness
    with one keeps it, and the hard limit moves above it, so the kill (which keeps nothing) is
    only for an env or agent that hangs.
    """
    from envharness.transforms.base import field_bounds
    from envrigger.agents import AgentHarness, ChatAgentFactory

    soft = factory.harness.episode_seconds
    if soft is None:
        if not hard:
            return factory, hard
        longest = field_bounds(AgentHarness.model_fields["episode_seconds"])[1]
        soft = min(max(hard - request_timeout - 10.0, hard / 2), longest)
        factory = ChatAgentFactory(factory.harness.model_copy(update={"episode_seconds": soft}), factory.endpoint)
    elif hard:
        hard = max(hard, soft + request_timeout + 30.0)
    return factory, hard


agent_app = typer.Typer(help="LLM agents: their harness files.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(agent_app, name="agent")


@agent_app.command("init")
def agent_init(
    env_id: str = typer.Option(
        None, "--env", metavar="ENV_ID", help="The env the harness is for (TextWorld and code repair have their own)."
    ),
    output: str = typer.Option("text", "--output", help="text: the reply is the command; tools: OpenAI function calls."),
) -> None:
    """Print a good default agent harness (JSON) for an env: edit it, then pass it with --harness.

    Example: envrigger agent init --env envharness/TextWorld-v0 > harness.json
    """
    from envrigger.agents import default_harness

    print(default_harness(env_id, output).to_json())


@app.command()
def verify(
    path: Path = typer.Argument(..., metavar="RUN|LOOP|LIBRARY", help="A run directory, a loop directory, or a library.db."),
) -> None:
    """Check a run's parts against their checksums, or a loop directory's library and every run in it.

    Opening a run already checks that every part is there with its size, and reading a part
    checks its checksum; this reads them all. For a library it also runs SQLite's
    integrity_check and reads every row against its checksum. Exit 2 names each damaged file.

    Example: envrigger verify runs/doorkey
    """
    from envrigger.data import TrajectoryError, TrajectoryStore
    from envrigger.loop.library import Library

    if not path.exists():
        raise UserError(f"{path} does not exist; give a run directory, a loop directory or a library.db")
    library_path = path if path.is_file() else path / "library.db"
    runs = sorted(p.parent for p in path.rglob("run.json")) if path.is_dir() else []
    if not library_path.exists() and not runs:
        raise UserError(f"{path}: neither a run (no run.json) nor a loop directory (no library.db); point at one")
    problems: list[str] = []
    if library_path.exists():
        library = Library(library_path, create=False, check=True, read_only=True)
        components, rounds = library.components(), library.rounds()
        console.print(f"{library_path}: library: {len(components)} components, {len(rounds)} rounds; checksums match")
        library.close()
    for run in runs:
        try:
            store = TrajectoryStore(run)
            found = store.verify()
        except TrajectoryError as error:
            found = [str(error)]
        problems += found
        if not found:
            parts = store.manifest["parts"] if store.manifest is not None else []
            steps = sum(int(part["steps"]) for part in parts)
            checked = "checksums match" if store.manifest is not None else "no manifest (written before checksums): footers parse"
            console.print(f"{run}: {len(parts)} parts, {len(store)} episodes, {steps} steps; {checked}")
    if problems:
        for line in problems[1:]:
            print(f"envrigger: error: {line}", file=sys.stderr)
        raise UserError(problems[0] + (f" (and {len(problems) - 1} more above)" if len(problems) > 1 else ""))


def summarize_run(store: Any, title: str) -> None:
    """Print a run's success rate, lengths, verdict reasons and errors as a table."""
    table = store.episodes_table(["success", "length", "reason", "error"]).to_pydict()
    n = len(table["success"])
    reasons = Counter(table["reason"])
    errors = sum(e is not None for e in table["error"])
    out = Table(title=title)
    for column in ("episodes", "success rate", "mean length", "verdict reasons", "errors"):
        out.add_column(column)
    out.add_row(
        str(n),
        f"{sum(table['success']) / max(n, 1):.2f}",
        f"{sum(table['length']) / max(n, 1):.1f}",
        ", ".join(f"{r}: {c}" for r, c in reasons.most_common(6)),
        str(errors),
    )
    print_table(out)
    messages = Counter(e for e in table["error"] if e is not None)
    for message, count in messages.most_common(5):  # errors are loud: what went wrong, not only how often
        print(f"envrigger: {count} episode{'s' * (count > 1)} failed with: {message}", file=sys.stderr)
    if len(messages) > 5:
        print(f"envrigger: ... and {len(messages) - 5} other errors (the error column of the run has them all)", file=sys.stderr)


@app.command()
def convert(
    source: str = typer.Argument(..., help="A run directory or a .jsonl file (or minari:DATASET_ID, or agentlightning:STORE_URL)."),
    destination: str = typer.Argument(..., help="A .jsonl file, a new run directory, or minari:DATASET_ID."),
    served: Path = typer.Option(
        None,
        "--served",
        metavar="RUN",
        help="With agentlightning:URL: the run `envharness serve --record` wrote; each served episode must match it, or is refused.",
    ),  # fmt: skip
) -> None:
    """Convert trajectories between run directories, JSONL files, Minari datasets and Agent Lightning stores.

    Example: envrigger convert agent-log.jsonl runs/agent   (import an external harness's episodes)
    Example: envrigger convert agentlightning:http://127.0.0.1:4747 runs/al --served runs/served   (an `agl store`'s rollouts)
    """
    from envrigger.data.jsonl import export_jsonl, import_jsonl

    if source.startswith("agentlightning:"):
        _convert_agentlightning(source.removeprefix("agentlightning:"), destination, served)
        return
    if served is not None:
        raise UserError("--served: only for agentlightning:STORE_URL sources; leave it out")

    if source.startswith("minari:") or destination.startswith("minari:"):
        from envrigger.data.minari import export_minari, import_minari

        if source.startswith("minari:"):
            store = import_minari(source.removeprefix("minari:"), destination)
            summarize_run(store, f"{source} -> {destination}")
        else:
            count = export_minari(TrajectoryStore(source), destination.removeprefix("minari:"))
            console.print(f"wrote {count} episodes to Minari dataset {destination.removeprefix('minari:')}")
        return
    if source.endswith(".jsonl"):
        store = import_jsonl(source, destination)
        summarize_run(store, f"{source} -> {destination}")
    elif destination.endswith(".jsonl"):
        count = export_jsonl(TrajectoryStore(source), destination)
        console.print(f"wrote {count} episodes to {destination}")
    else:
        raise UserError(f"convert: one side must be a .jsonl file or minari:ID, got {source!r} -> {destination!r}")


def _convert_agentlightning(url: str, destination: str, served: Path | None) -> None:
    import asyncio
    import urllib.parse

    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UserError(
            f"agentlightning:{url}: not an http(s) URL; give the `agl store` address, e.g. agentlightning:http://127.0.0.1:4747"
        )
    if served is not None and not (served / "run.json").is_file():
        raise UserError(f"--served: {served} is not a run directory; give the run `envharness serve --record RUN` wrote")
    if Path(destination).exists():
        raise UserError(f"{destination} exists; convert into a new run directory")
    from envrigger.integrations.agentlightning import convert_async

    async def run() -> Any:
        import agentlightning as agl

        client = agl.LightningStoreClient(url, retry_delays=(), health_retry_delays=(), connection_timeout=5.0)
        try:
            return await convert_async(client, destination, served=served)
        finally:
            await client.close()

    try:
        done = asyncio.run(run())
    except OSError as error:
        raise UserError(
            f"agentlightning:{url}: no Agent Lightning store answered ({type(error).__name__}); start one with `agl store --port PORT`"
        ) from None
    console.print(f"converted {done.summary()}")
    for rollout_id, why in done.refused[:5]:
        print(f"envrigger: refused rollout {rollout_id}: {why}", file=sys.stderr)


NOTE_READINGS = {
    "inconclusive": "inconclusive with {n} episodes (more common in failures, but the lift's 95% interval still reaches 1; collect more episodes to tell)",
    "style": "style notes (about as common in successes as in failures, so they explain no failure)",
    "never_fails": "style notes (never in a failed episode)",
}


def remedy_lines(result: Any) -> list[str]:
    """One line per finding: the catalog transforms that target it, on this run's env."""
    lines = []
    for finding in result.findings:
        found = finding.what_to_try
        if found:
            more = f", and {len(found) - 5} more" if len(found) > 5 else ""
            lines.append(f"{finding.name}: {', '.join(found[:5])}{more}")
    return lines


def note_lines(result: Any) -> list[str]:
    """The behaviours that are not findings, grouped by why, each with its rate in failures and in successes."""

    def pct(value: Any) -> str:
        return "?" if value is None else f"{value:.0%}"

    lines = []
    for reading, text in NOTE_READINGS.items():
        mine = [f for f in result.style_notes if f.stats.get("reading", "style") == reading]
        if mine:
            rates = ", ".join(
                f"{f.name} ({pct(f.stats.get('contrast', {}).get('rate_in_failures'))} of failures, "
                f"{pct(f.stats.get('contrast', {}).get('rate_in_successes'))} of successes)"
                for f in mine
            )
            lines.append(f"{text.format(n=result.episodes)}: {rates}")
    return lines


@app.command("diagnose")
def diagnose_command(
    run: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory (from collect or convert)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or html."),
    output: Path = typer.Option(None, "-o", "--output", help="Write json/html here (html default: RUN_DIR/report.html)."),
) -> None:
    """Find recurring weaknesses in a run, ranked by severity, with evidence to replay.

    Example: envrigger diagnose runs/doorkey --format html -o doorkey.html
    """
    from envrigger.diagnose import diagnose
    from envrigger.report import findings_table, render_html

    formats = ("table", "json", "html")
    if fmt not in formats:
        raise UserError(f"--format: got {fmt!r}; use one of {', '.join(formats)}")
    if fmt == "table" and output is not None:
        raise UserError("--output: the table goes to the terminal; use --format json or html to write a file")
    if output is not None and not output.parent.is_dir():  # said before the diagnosis runs, not after
        raise UserError(
            f"-o: the directory {output.parent} does not exist; create it first (mkdir -p {output.parent}) or pick another path"
        )
    if run.is_file():
        raise UserError(
            f"RUN_DIR: {run} is a file; diagnose reads a run directory (envrigger collect -o DIR), "
            f"or convert a JSONL file first: envrigger convert {run} runs/NAME"
        )
    store = TrajectoryStore(run)
    result = diagnose(store)
    for note in result.notes:  # a sample too small to judge is said, not left to a silent "nothing found"
        print(f"note: {note}", file=sys.stderr)
    if fmt == "table":
        print_table(findings_table(result))
        for line in note_lines(result):
            console.print(f"[dim]{line}[/dim]")
        tries = remedy_lines(result)
        if tries:
            console.print("what to try: catalog transforms that target each finding (`envrigger run` proposes, validates and admits them)")
            for line in tries:
                console.print(f"  {line}")
    elif fmt == "json":
        text = result.model_dump_json(indent=2)
        if output is None:
            print(text)
        else:
            write_atomically(output, text + "\n")
            console.print(f"wrote {output}")
    else:
        target = output or run / "report.html"
        write_atomically(target, render_html(result, store), within=None if output else run)  # the run's own page: no planted link
        console.print(f"wrote {target} ({len(result.findings)} findings)")


AGENT_FLAGS = {
    "agent": "--agent",
    "base_url": "--base-url",
    "model": "--model",
    "harness_path": "--harness",
    "api_key_env": "--api-key-env",
}


def _typed_flag(name: str, value: Any) -> str:
    """The flag as the user typed it: ``--no-step-in`` for a switch on by default that was turned off."""
    flag = RUN_FLAGS[name].names[0] if RUN_FLAGS[name].names else "--" + name.replace("_", "-")
    if LoopConfig.model_fields[name].default is True and value is False:
        return "--no-" + flag[2:]
    return flag


DEFAULT_RUN_ENV = "MiniGrid-DoorKey-6x6-v0"
DEFAULT_RUN_KWARGS: dict[str, Any] = {}


def _spec_from(argument: str | None) -> Any:
    from envharness.spec import HarnessSpec

    if argument is None:
        return HarnessSpec(env_id=DEFAULT_RUN_ENV, env_kwargs=DEFAULT_RUN_KWARGS)
    return spec_argument(argument)


RUN_FLAGS: dict[str, Flag] = {
    "learner": Flag(),
    "arms": Flag(kind=str, help="Comma-separated arms trained side by side at equal training steps (the registered arms)."),
    "budget_steps": Flag(),
    "budget_counts": Flag(),
    "overhead_share": Flag(metavar="SHARE"),
    "reshape_when": Flag(),
    "rounds": Flag(),
    "collect_episodes": Flag(),
    "eval_episodes": Flag(),
    "val_episodes": Flag(),
    "candidates_per_round": Flag(("--candidates",)),
    "transfer_steps": Flag(),
    "credit_chunks": Flag(),
    "credit_retire": Flag(),
    "credit_baseline": Flag(),
    "credit_margin": Flag(metavar="Z"),
    "mutate": Flag(),
    "step_out": Flag(),
    "demo_start": Flag(),
    "step_in": Flag(),
    "retire_mastered": Flag(),
    "target_all": Flag(),
    "allow_seen_levels": Flag(),
    "seed": Flag(),
    "levels_per_seed": Flag(),
    "plr_score": Flag(),
    "workers": Flag(("--workers", "-w")),
    "backend": Flag(),
    "rollout_batch": Flag(),
    "candidate_max_steps": Flag(metavar="N"),
    "candidate_timeout_s": Flag(("--candidate-timeout",), metavar="SECONDS"),
    "confidence": Flag(metavar="P"),
    "min_rollouts": Flag(metavar="N"),
    "max_rollouts": Flag(metavar="N"),
    "reference_rollouts": Flag(metavar="N"),
    "solvable_min": Flag(metavar="SHARE"),
    "solvable_fraction": Flag(metavar="SHARE"),
    "region_min_share": Flag(metavar="SHARE"),
    "novelty_success_tol": Flag(metavar="GAP"),
    "novelty_length_tol": Flag(metavar="GAP"),
    "proposer": Flag(),
    "proposer_base_url": Flag(metavar="URL"),
    "proposer_model": Flag(),
    "proposer_api_key_env": Flag(metavar="NAME"),
    "proposer_max_tokens": Flag(metavar="N"),
    "proposer_timeout": Flag(metavar="SECONDS"),
    "proposer_format": Flag(),
}
"""The loop settings ``envrigger run`` takes, each a :class:`LoopConfig` field: default, bounds and help are the field's."""

NOT_RUN_FLAGS: dict[str, str] = {
    "spec": "the ENV_ID|SPEC.json argument",
    "heldout_spec": "a held-out env other than the base env: a spec file's matter (loop.json), not an option",
    "learner_params": "the learner's own settings: a spec file's matter (loop.json), not an option",
    "heldout": "the held-out evaluation is the run's point; benchmarks switch it off in code (variant_check.py)",
    "dr_pool": "the dr arm's pool size: a benchmark's setting (benchmarks/suite/*.json)",
    "band": "the learnability band, a pair: set in loop.json or code; the default is the one the results were measured with",
    "credit_episodes": "credit's scoring budget: a benchmark's setting",
    "transfer_episodes": "the transfer gate's scoring budget: a benchmark's setting",
}
"""Every other :class:`LoopConfig` field, and why it is not an option (a test checks that each field is one or the other)."""


def run_command(
    ctx: typer.Context,
    env: str = typer.Argument(None, metavar="[ENV_ID|SPEC.json]", help=f"Base env (default: {DEFAULT_RUN_ENV})."),
    output: Path = typer.Option(None, "-o", "--output", help="Run directory for every artefact."),
    resume: Path = typer.Option(None, "--resume", help="Continue the loop run in this directory."),
    seeds: int = typer.Option(
        1,
        "--seeds",
        min=1,
        max=100,
        help="Master seeds (seed .. seed+N-1), one loop each, for intervals across seeds; with --resume, a larger N adds seeds.",
    ),
    jobs: int = typer.Option(
        1,
        "--jobs",
        "-j",
        min=1,
        max=MOST_WORKERS,
        help="With --seeds: master seeds trained at once, each in its own process (results do not depend on it).",
    ),
    ray_address: str = typer.Option(
        None,
        "--ray-address",
        metavar="ADDRESS",
        help="A Ray cluster (auto, HOST:PORT or ray://HOST:PORT): with --seeds N every master seed is a task on it "
        "(declaring --workers CPUs, 1 by default; a finished seed is never redone, one on a node that dies runs again); "
        "with --backend ray the rollouts join it too.",
    ),
    agent: str = typer.Option(None, "--agent", help="With --learner none: chat, an LLM agent the loop plays but does not train."),
    base_url: str = typer.Option(None, "--base-url", metavar="URL", help="With --agent chat: the agent's endpoint."),
    model: str = typer.Option(None, "--model", help="With --agent chat: the agent's model."),
    harness_path: Path = typer.Option(None, "--harness", metavar="FILE", help="With --agent chat: the agent harness JSON."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", metavar="NAME", help="With --agent chat: the key's variable."),
    **settings: Any,
) -> None:
    """Train every arm; diagnose, propose, validate and admit for the rigger arm; pick each arm's round on validation levels; evaluate held-out.

    Held-out and validation levels are disjoint from every level trained on (checked by
    level id); an env with too few distinct levels is refused. With --seeds N the loop
    runs once per master seed (in RUN_DIR/seed-S) and the result is the mean held-out
    success per arm with a 95% interval across seeds and paired differences.

    Example: envrigger run MiniGrid-DoorKey-8x8-v0 --learner ppo --arms original,dr,plr,rigger --seeds 5 --jobs 2 -o runs/doorkey
    """
    from pydantic import ValidationError

    from envrigger.loop import run_loop, run_seeds

    if ray_address:
        os.environ["RAY_ADDRESS"] = ray_address  # every rollout of the run joins it (not stored: a resumed run may be elsewhere)
    if (output is None) == (resume is None):
        raise UserError("run: give -o RUN_DIR for a new run, or --resume RUN_DIR to continue one (not both)")
    if resume is not None:  # a resumed run keeps the settings it started with: a loop option here would be ignored

        def typed(name: str) -> bool:
            return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"

        given = [_typed_flag(name, settings[name]) for name in RUN_FLAGS if typed(name)]
        # The agent's options too: the run's agent is in its loop.json (learner_params), as every setting is.
        given += [flag for name, flag in AGENT_FLAGS.items() if typed(name)]
        if typed("seeds") and seeds > 1 and not (resume / "seeds.json").exists():
            given.append("--seeds (a single run; start a multi-seed run with -o and --seeds)")
        if given or env is not None:
            what = ", ".join(given + (["ENV_ID|SPEC.json"] if env is not None else []))
            raise UserError(
                f"--resume: {resume} keeps the settings it started with (its loop.json); drop {what}, or start a new run with -o"
            )
    config = None
    if output is not None:
        spec = _spec_from(env)
        spec.build().close()
        learner_params: dict[str, Any] = {}
        learner = settings["learner"]
        if (learner in ("none", "skills")) != (agent is not None):
            raise UserError("--learner none (an agent the loop does not train) or skills (its skill memory) and --agent chat go together")
        if agent is not None:
            factory = _chat_agent(spec, agent, base_url, model, harness_path, api_key_env, 60.0, ())
            learner_params = {
                "agent": {"base_url": factory.endpoint.base_url, "model": factory.endpoint.model, "api_key_env": api_key_env,
                          "harness": factory.harness.model_dump(mode="json")}
            }  # fmt: skip
        values = dict(settings)
        values["arms"] = [a.strip() for a in str(values["arms"]).split(",") if a.strip()]
        if values["proposer_base_url"]:
            values["proposer_base_url"] = values["proposer_base_url"].rstrip("/")
        try:
            config = LoopConfig(spec=spec, learner_params=learner_params, **values)
        except ValidationError as error:
            first = error.errors()[0]
            message = str(first["msg"]).removeprefix("Value error, ")
            field = str(first["loc"][0]) if first["loc"] else ""
            flag = RUN_FLAGS[field].names[0] if field in RUN_FLAGS and RUN_FLAGS[field].names else "--" + field.replace("_", "-")
            raise UserError(message if message.startswith("--") or not field else f"{flag}: {message}") from None
        if config.proposer != "catalog":
            from envrigger.agents import Endpoint, check_endpoint

            check_endpoint(Endpoint(str(config.proposer_base_url), str(config.proposer_model), api_key_env=config.proposer_api_key_env))
        if learner in ("ppo", "textq"):
            from envrigger.loop.learners import make_learner

            probe = spec.build()
            try:
                make_learner(learner, probe)  # a missing extra or an unusable observation space fails here, before the run
            finally:
                probe.close()
    target = output or resume
    log = lambda m: console.print(f"[dim]{m}[/dim]")  # noqa: E731
    if (seeds > 1 and output is not None) or (resume is not None and (resume / "seeds.json").exists()):
        # Seeds in processes of their own print their own round lines; the console's log closure stays here.
        with _say_rounds_kept(target):
            across = run_seeds(target, config, seeds, log=log, on_round=_show_round, jobs=jobs, ray_address=ray_address)
        _show_across_seeds(target, across)
        _write_report(target, log)
        return

    def shown(summary: RoundSummary) -> None:  # the round's line, then the run's page as it now stands
        _show_round(summary)
        _write_report(target, log)

    with _say_rounds_kept(target):
        result = run_loop(target, config, on_round=shown, log=log, stage=_progress_bar)
    _show_final(target, result)
    _write_report(target, log)


@contextlib.contextmanager
def _say_rounds_kept(run: Path) -> Iterator[None]:
    """On a stop, tell the stop line how many rounds the run committed (every seed's): a resumed run starts after them."""
    from envharness.polite_stop import say_kept
    from envrigger.loop.library import Library

    try:
        yield
    except KeyboardInterrupt as stop:
        count = 0
        for path in [run / "library.db", *sorted(run.glob("seed-*/library.db"))]:
            try:
                library = Library(path, create=False)
                count += len(library.rounds())
                library.close()
            except Exception:  # noqa: BLE001, S112 - a library not yet made (or damaged) has no round to count
                continue
        say_kept(stop, f"{count} finished round{'s' if count != 1 else ''} kept in {run}; continue with `envrigger run --resume {run}`")
        raise


run_command.__signature__ = inspect.signature(run_command).replace(  # type: ignore[attr-defined]
    parameters=[
        *(p for p in inspect.signature(run_command).parameters.values() if p.name in ("ctx", "env", "output", "resume")),
        *model_options(LoopConfig, RUN_FLAGS),
        *(p for p in inspect.signature(run_command).parameters.values() if p.name not in ("ctx", "env", "output", "resume", "settings")),
    ]
)
app.command("run")(run_command)


def _arms_help() -> None:
    """``--arms``'s help names every registered arm, one a module given to ``--import`` registered too."""
    option = inspect.signature(run_command).parameters["arms"].default
    option.help = (
        "Comma-separated arms trained side by side at equal training steps: "
        + ", ".join(f"{name} ({arm.help})" for name, arm in registered().items())
        + "."
    )


_arms_help()


def _write_report(run: Path, log: Callable[[str], None]) -> None:
    """Write ``run/report.html`` as the run stands; a page that cannot be drawn is said, never fails the run."""
    from envrigger.report.run import write_run_report

    try:
        write_run_report(run)
    except Exception as error:  # noqa: BLE001 - the report is a view of the run, never a reason to stop it
        first = str(error).splitlines()[0] if str(error) else ""
        log(f"report.html not written ({type(error).__name__}: {first}); rebuild it with `envrigger report {run}`")


@contextlib.contextmanager
def _progress_bar(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A transient bar for one long stage of the loop (training, drawing levels); gone when the stage ends."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    if not console.is_terminal:  # a log file gets the stage's line, not a bar's leftovers
        yield lambda n: None
        return
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.update(task, advance=n)


def _show_round(summary: RoundSummary) -> None:
    scored = ", ".join(f"{arm} {v.validation.success:.2f}" for arm, v in summary.arms.items())
    line = f"round {summary.round} done: validation-level success {scored}"
    if summary.validated:  # the rigger arm diagnosed and validated this round (not in the last one)
        line += f"; findings {', '.join((summary.findings or [])[:3]) or '-'}; {summary.candidates} candidates"
    console.print(line)
    if summary.validated:
        admitted = summary.admitted_labels or [f"component {c}" for c in summary.admitted]
        rejected = sum(summary.rejected_by.values())
        at = ", ".join(f"{n} at {gate}" for gate, n in summary.rejected_by.items())
        before = summary.library_size or 0
        console.print(
            f"  admitted {len(admitted)}{': ' + '; '.join(admitted) if admitted else ''}"
            f"{f'; rejected {rejected} ({at})' if rejected else ''}"
            f"; library {before} -> {before + len(admitted)} component{'s' * (before + len(admitted) != 1)} for the next round"
        )
    for arm, values in summary.arms.items():
        crashed = values.train.get("env_errors", 0)
        if crashed:  # each a failed episode whose level was dropped; the run went on
            console.print(f"  {arm}: the env raised in {crashed} training episode(s), e.g. {values.train['env_error_examples'][0]}")
    for arm, found in summary.arm_findings.items():
        for finding in found:
            console.print(f"  {arm}: {finding['title']}")


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _show_final(target: Path, result: LoopResult) -> None:
    final = result.final
    levels = final.levels
    title = (
        f"envrigger run {target}: held-out success on the original env, {levels.heldout} held-out levels "
        + ("never trained on" if levels.disjoint else "(seen levels allowed)")
        + " (95% Wilson interval over episodes)"
    )
    table = Table(title=title)
    for column in (
        "arm",
        "round (picked on validation)",
        "validation",
        "held-out success",
        "steps to success",
        "train steps",
        "env steps (all)",
    ):
        table.add_column(column, overflow="fold")
    for arm, r in final.arms.items():
        h, spent = r.heldout, r.interaction
        table.add_row(
            arm,
            str(r.round),
            f"{r.validation:.2f}",
            f"{h.success:.3f} [{h.ci[0]:.2f}, {h.ci[1]:.2f}]" if h is not None else "not played (heldout off)",
            _fmt(h.steps_to_success) if h is not None else "-",
            f"{spent['train']:,}",
            f"{spent['total']:,}",
        )
    print_table(table)
    rigger = final.arms.get("rigger")
    if rigger is not None:
        spent = rigger.interaction
        console.print(
            f"rigger env steps: train {spent['train']:,} + collect {spent['collect']:,} + validate {spent['validate']:,}"
            + "".join(f" + {k} {spent[k]:,}" for k in ("credit", "search", "setup", "transfer") if spent.get(k))
            + f" = {spent['total']:,}; every arm also spent {spent['select']:,} steps on validation levels to pick its round"
        )
    if not levels.disjoint and all(r.heldout is not None for r in final.arms.values()):
        seen = {arm: (r.heldout.seen_in_training or 0) if r.heldout is not None else 0 for arm, r in final.arms.items()}
        console.print(
            "held-out episodes on a level the arm trained on: "
            + ", ".join(f"{a} {v:.0%}" for a, v in seen.items())
            + " (--allow-seen-levels: this is not a result on unseen levels)"
        )
    console.print(
        f"one run of one master seed: for a claim, use --seeds 5 (intervals across training seeds); library: {target / 'library.db'}"
    )
    for warning in final.warnings:
        print(f"envrigger: warning: {warning}", file=sys.stderr)


def _show_across_seeds(target: Path, result: AcrossSeeds) -> None:
    seeds = result.seeds
    table = Table(
        title=f"envrigger run {target}: held-out success on the original env over {len(seeds)} master seeds "
        f"({seeds[0]}..{seeds[-1]}), mean and 95% t interval across seeds"
    )
    for column in ("arm", "mean held-out success", "95% interval", "steps to success", "train steps", "env steps (all)"):
        table.add_column(column)
    for arm, r in result.arms.items():
        s = r.success
        table.add_row(
            arm,
            f"{s.mean:.3f}",
            f"[{s.ci[0]:.3f}, {s.ci[1]:.3f}]",
            _fmt(r.steps_to_success),
            f"{r.env_steps.get('train', 0):,.0f}",
            f"{r.env_steps.get('total', 0):,.0f}",
        )
    for arm, d in result.difference.items():
        change = d.steps_to_success_change
        table.add_row(
            f"{result.focus} - {arm} (paired by seed)",
            f"{d.mean:+.3f}",
            f"[{d.ci[0]:+.3f}, {d.ci[1]:+.3f}]",
            "-" if change is None else f"{change:+.1%}",
            "",
            "",
        )
    print_table(table)
    console.print(f"per-seed runs in {target}/seed-*; the numbers above are in {target / 'result.json'}")


from envrigger.ledger.cli import ledger_app  # noqa: E402 - the sub-commands' module imports only what the CLI needs

app.add_typer(ledger_app, name="ledger")

library_app = typer.Typer(help="Inspect and edit an admitted-environment library.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(library_app, name="library")


@library_app.command("list")
def library_list(path: Path = typer.Argument(..., metavar="LIBRARY", help="library.db (or the run directory holding it).")) -> None:
    """List admitted components.

    Example: envrigger library list runs/demo
    """
    from envrigger.loop.library import Library

    library = Library(path / "library.db" if path.is_dir() else path, create=False, read_only=True)
    table = Table(title=f"{library.path} (version {library.version})")
    for column in ("id", "hash", "finding", "transforms", "learnability", "round", "origin"):
        table.add_column(column, overflow="fold")
    for c in library.components():
        learn = next((g for g in c.gates if g["gate"] == "learnability"), {}).get("statistic", {})
        added = ", ".join(t.name + json.dumps(t.params) for t in c.spec.transforms)
        table.add_row(
            str(c.id), c.hash, c.finding, added, f"{learn.get('rate', 0):.2f} (n={learn.get('rollouts', 0)})", str(c.round), c.origin
        )
    print_table(table)


@library_app.command("show")
def library_show(path: Path = typer.Argument(..., metavar="LIBRARY"), component: str = typer.Argument(..., help="id or hash")) -> None:
    """Print one component with its spec and every gate's statistic, as JSON."""
    from envrigger.loop.library import Library

    library = Library(path / "library.db" if path.is_dir() else path, create=False, read_only=True)
    print(library.get(component).model_dump_json(indent=2))


@library_app.command("remove")
def library_remove(
    path: Path = typer.Argument(..., metavar="LIBRARY"), component: int = typer.Argument(..., min=0, max=2**63 - 1, help="component id")
) -> None:
    """Remove a component (the library version moves on)."""
    from envrigger.loop.library import Library

    library = Library(path / "library.db" if path.is_dir() else path, create=False)
    library.remove(component)
    console.print(f"removed component {component}; library version {library.version}")


@app.command("export")
def export_command(
    path: Path = typer.Argument(..., metavar="LIBRARY", help="library.db (or the run directory holding it)."),
    to: Path = typer.Option(..., "--to", help="Output directory."),
    package: str = typer.Option("envrigger_envs", "--package", help="Python package name of the generated package."),
    wheel: bool = typer.Option(
        True,
        "--wheel/--no-wheel",
        help="Also write the envharness wheel into DIR/wheels (built from its source, or repacked from the installed copy).",
    ),
    force: bool = typer.Option(False, "--force", help="Export even though the loop's rigger arm ended below its baseline."),
) -> None:
    """Write a JSON registry of admitted specs and a pip-installable package registering them as Gymnasium ids.

    The package requires this exact envharness version, whose wheel is written to DIR/wheels,
    so it installs where the project's source is not: pip install --find-links DIR/wheels DIR/PACKAGE

    Example: envrigger export runs/demo --to dist --package lake_envs && pip install --find-links dist/wheels dist/lake_envs
    """
    from envrigger.export import export_library
    from envrigger.loop.library import Library

    library_path = path / "library.db" if path.is_dir() else path
    final = library_path.parent / "final.json"
    warnings = FinalResults.load(final).warnings if final.exists() else []
    if warnings and not force:
        raise UserError(f"{warnings[0].split(':')[0]}; export anyway with --force")
    written = export_library(Library(library_path, create=False, read_only=True), to, package, wheel=wheel)
    links = f"--find-links {written['wheel'].parent} " if "wheel" in written else ""
    console.print(f"wrote {written['registry']} and package {written['package']} (pip install {links}{written['package']})")


@app.command("report")
def report_command(
    run: Path = typer.Argument(..., metavar="RUN_DIR", help="A loop run directory (envrigger run -o DIR), finished or interrupted."),
) -> None:
    """Rebuild RUN_DIR/report.html: validation by round, what each arm trained on, candidates and gates, held-out table, spend.

    A directory of several master seeds (--seeds N) gets an index with the across-seed table
    and a page per seed. envrigger run writes the page itself after every round.

    Example: envrigger report runs/demo && xdg-open runs/demo/report.html
    """
    from envrigger.report.run import write_run_report

    if not run.is_dir():
        raise UserError(f"RUN_DIR: {run} is not a directory; give the directory of `envrigger run -o DIR`")
    console.print(f"wrote {write_run_report(run)}")


@app.command("proxy")
def proxy_command(
    upstream: str = typer.Option(
        ..., "--upstream", metavar="URL", help="The OpenAI-compatible endpoint to forward to, e.g. http://127.0.0.1:8000/v1."
    ),
    run: Path = typer.Option(
        ..., "--run", metavar="RUN", help="The run directory the calls are recorded in (the one `envharness serve --record` writes)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback unless --allow-remote)."),
    port: int = typer.Option(8100, "--port", min=0, max=65535, help="Port to bind."),
    token_ids: bool = typer.Option(
        False, "--token-ids", help="Ask the upstream for token ids and log-probabilities (vLLM) and record them."
    ),
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Bind beyond loopback (then give --token-env: without it the proxy has no auth of its own)."
    ),
    token_env: str = typer.Option(
        None, "--token-env", metavar="NAME", help="Require the token in this environment variable on every call (header X-Envrigger-Token)."
    ),
    request_timeout: float = typer.Option(
        600.0,
        "--request-timeout",
        min=0.001,
        max=MOST_SECONDS,
        help="Seconds a whole upstream call may take, streams included (504 past it).",
    ),
    max_body: int = typer.Option(32 << 20, "--max-body", min=1, max=MOST_BODY_BYTES, help="Largest request body in bytes (413 above it)."),
) -> None:
    """Record an external agent's model calls: an OpenAI-compatible proxy that forwards to the upstream and records each call.

    Point the agent's base URL at http://HOST:PORT/sessions/SESSION_ID/v1 (SESSION_ID: the one
    `envharness serve` gave the episode), or send the header X-Envharness-Session. The caller's
    Authorization goes upstream and is never stored.

    Example: envrigger proxy --upstream http://127.0.0.1:8000/v1 --run runs/live --port 8100
    """
    from envharness.serve import is_loopback
    from envrigger.live.proxy import Upstream, run_proxy

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UserError('the proxy needs the serve extra: pip install "envharness[serve]"') from None
    if not is_loopback(host) and not allow_remote:
        raise UserError(f"--host {host} is not loopback and the proxy has no auth of its own; bind to 127.0.0.1, or pass --allow-remote")
    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise UserError(f"--token-env: the variable {token_env} is not set or empty; export the token there first")
    try:
        Upstream(upstream, request_timeout)
    except ValueError as error:
        raise UserError(str(error)) from None
    if run.exists() and not run.is_dir():
        raise UserError(f"--run: {run} is a file; give a run directory")
    run.mkdir(parents=True, exist_ok=True)
    print(f"recording calls to {upstream} in {run / 'calls.jsonl'}; agents use http://{host}:{port}/sessions/SESSION_ID/v1", flush=True)
    try:
        run_proxy(upstream, run, host=host, port=port, token_ids=token_ids, token=token, timeout=request_timeout, max_body=max_body)
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP: every call answered was on disk before its answer
        from envharness.polite_stop import say_kept
        from envrigger.live.calls import CallLog

        log = CallLog(run)
        calls = len(log.scan_calls()[0])
        say_kept(stop, f"{calls} model call{'s' if calls != 1 else ''} kept in {log.path}")
        raise


@app.command()
def version() -> None:
    """Print the envrigger version."""
    from envrigger import __version__

    print(__version__)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``envrigger``."""
    sys.exit(run_cli(app, argv, "envrigger", known=(UserError, FileNotFoundError, ValueError, OSError), imported=_arms_help))


if __name__ == "__main__":
    main()
