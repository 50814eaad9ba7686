"""Agent Lightning: train on envharness envs with its trainer, and diagnose what it recorded.

Contains :class:`EnvAgent`, a ``LitAgent`` that plays one episode of an envharness env per
rollout (built in the runner's process, or served by ``envharness serve``) with the LLM
resource Agent Lightning hands it, through our chat agent, and returns the verdict as the
rollout's reward (1.0 on the verifier's success, else 0.0); and :func:`convert`, which turns
an Agent Lightning store's rollouts into a run directory that ``envrigger diagnose`` reads.

Each rollout's episode travels in the store as one object span (``envharness.episode/1``:
the episode and its steps as ``envrigger collect`` stores them, model calls included). For
a served env, the server's own record is the one no code in the runner can change: give
``convert`` the run ``envharness serve --record RUN`` wrote, and every episode is checked
against it (same session, verdict, level and actions), whatever its payload says about
itself, and taken from it, or refused; a served session is stored at most once.

Needs the ``agentlightning`` extra (``pip install "envharness[agentlightning]"``).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envharness.errors import SpecError
from envrigger.agents.chat import ChatAgent, Endpoint, import_openai
from envrigger.agents.harness import AgentHarness, default_harness
from envrigger.data import EpisodeRecord, StepRecord, TrajectoryStore, episodes_table, steps_table
from envrigger.rollout.episode import run_episode

# agentlightning imports litellm, which otherwise fetches a model price table from the internet on import
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
try:
    import agentlightning as agl
    from agentlightning.emitter.object import get_object_value
    from agentlightning.semconv import AGL_OBJECT
except ImportError:  # pragma: no cover - the extra is installed in CI
    raise SpecError('the Agent Lightning integration needs the agentlightning package: pip install "envharness[agentlightning]"') from None

FORMAT = "envharness.episode/1"
FINISHED = ("succeeded", "failed", "cancelled")
CALL_FIELDS = ("model_calls", "input_tokens", "output_tokens", "parse_failures", "retries", "invalid_tool_calls", "cost_usd", "latency_s",
               "context_truncated", "calls")  # fmt: skip
EPISODE_CALL_FIELDS = ("tokens", "model_calls", "tool_errors", "retries", "input_tokens", "output_tokens", "parse_failures", "cost_usd",
                       "latency_s", "truncated_steps")  # fmt: skip


def seed_tasks(count: int, start: int = 0) -> list[dict[str, int]]:
    """A dataset of ``count`` tasks for :class:`EnvAgent`: one episode each, seeds ``start``, ``start + 1``, ...

    Example:
        >>> seed_tasks(2, start=100)
        [{'seed': 100}, {'seed': 101}]
    """
    return [{"seed": start + i} for i in range(count)]


class EnvAgent(agl.LitAgent[dict[str, Any]]):
    """An Agent Lightning agent that plays an envharness env: one episode per rollout, the verdict as its reward.

    Args:
        env: a spec (``HarnessSpec``, its JSON, or an env id) to build in the runner's process;
        url: or the address of ``envharness serve``, where the verdict is the server's.
        token_env: the variable holding the served env's bearer token, if it wants one.
        harness: the chat agent's loop (prompts, parsing, retries, sampling); by default the
            env's default harness. The LLM resource's ``sampling_parameters`` override its sampling.
        llm: the name of the LLM resource to use; with one LLM resource, any name finds it.
        allow_imports: modules a spec's ``module:Env`` id may import (as for ``envrigger collect``).

    A task is ``{"seed": S}`` (or the seed itself); :func:`seed_tasks` makes a dataset.
    Every rollout emits its episode as an object span, so :func:`convert` can store it.

    Example:
        >>> agent = EnvAgent("envharness/CodeRepair-v0")
        >>> agent.describe()
        'envharness/CodeRepair-v0 (in the runner)'
    """

    def __init__(self, env: Any = None, *, url: str | None = None, token_env: str | None = None, harness: AgentHarness | None = None,
                 llm: str = "main_llm", allow_imports: tuple[str, ...] = ()) -> None:  # fmt: skip
        super().__init__()
        from envharness.spec import HarnessSpec

        if (env is None) == (url is None):
            raise SpecError("EnvAgent: give either env (a spec or env id, built in the runner) or url (an envharness serve address)")
        if isinstance(env, str) and not env.lstrip().startswith("{"):
            env = HarnessSpec(env_id=env)
        self.spec = HarnessSpec.coerce(env) if env is not None else None
        self.url, self.token_env, self.llm, self.allow_imports = url, token_env, llm, tuple(allow_imports)
        if token_env is not None and token_env not in os.environ:
            raise SpecError(f"EnvAgent: the token variable {token_env} is not set; export it, or leave token_env out")
        self.harness = harness
        self._local = threading.local()  # one env per runner thread

    def describe(self) -> str:
        return f"{self.spec.env_id} (in the runner)" if self.spec is not None else f"the env served at {self.url}"

    def _env(self) -> tuple[Any, str, str]:
        built = getattr(self._local, "env", None)
        if built is None:
            if self.spec is not None:
                env, spec = self.spec.build(allow_imports=self.allow_imports), self.spec
            else:
                from envharness.remote import RemoteEnv
                from envharness.spec import HarnessSpec

                token = os.environ[self.token_env] if self.token_env is not None else None
                env = RemoteEnv(str(self.url), token=token)
                spec = HarnessSpec.coerce(env.served_spec)
            built = self._local.env = (env, spec.hash(), spec.to_json(indent=None))
        return built  # type: ignore[no-any-return]

    def _resource(self, resources: Any) -> Any:
        found = resources.get(self.llm) if hasattr(resources, "get") else None
        if found is None:
            llms = [r for r in dict(resources or {}).values() if isinstance(r, agl.LLM)]
            if len(llms) != 1:
                names = ", ".join(sorted(dict(resources or {}))) or "none"
                raise SpecError(
                    f"EnvAgent: no LLM resource named {self.llm!r} (resources: {names}); pass llm=NAME or give one LLM resource"
                )
            found = llms[0]
        if not isinstance(found, agl.LLM):
            raise SpecError(f"EnvAgent: resource {self.llm!r} is a {type(found).__name__}, not an LLM")
        return found

    def _harness(self, env_id: str, sampling: dict[str, Any]) -> AgentHarness:
        harness = self.harness if self.harness is not None else default_harness(env_id)
        known = {k: v for k, v in sampling.items() if k in type(harness.sampling).model_fields}
        if known:
            merged = type(harness.sampling).model_validate({**harness.sampling.model_dump(), **known})
            harness = harness.model_copy(update={"sampling": merged})
        return harness

    def rollout(self, task: Any, resources: Any, rollout: Any) -> float:
        """Play one episode of the task's seed; emit it as an object span; return 1.0 on the verdict's success, else 0.0."""
        seed = task.get("seed") if isinstance(task, dict) else task
        if seed is not None and (type(seed) is not int or seed < 0):
            raise SpecError(f"EnvAgent: a task is {{'seed': S}} with S a non-negative integer, got {task!r}")
        llm = self._resource(resources)
        attempt = getattr(rollout, "attempt", None)
        if isinstance(llm, agl.ProxyLLM) and attempt is not None:
            base_url = llm.get_base_url(rollout.rollout_id, attempt.attempt_id)
        else:
            base_url = llm.get_base_url()
        env, spec_hash, spec_json = self._env()
        env_id = json.loads(spec_json)["env_id"]
        endpoint = Endpoint(base_url, llm.model)
        client = import_openai().OpenAI(base_url=base_url, api_key=llm.api_key or "none", timeout=endpoint.timeout_s, max_retries=0)
        agent = ChatAgent(env, self._harness(env_id, dict(llm.sampling_parameters)), endpoint, client=client)
        record, steps = run_episode(env, agent, 0, seed, spec_hash, spec_json)
        served = self.url is not None
        record.session_id = getattr(env, "session_id", None) if served else rollout.rollout_id
        payload = {
            "format": FORMAT,
            "rollout_id": rollout.rollout_id,
            "mode": getattr(rollout, "mode", None),
            "served": str(self.url) if served else None,
            "episode": record.to_row(),
            "steps": [s.to_row() for s in steps],
        }
        agl.emit_object(payload)
        return 1.0 if record.success else 0.0


@dataclass
class Conversion:
    """What :func:`convert` did: episodes stored, rollouts skipped (by reason) and refused (rollout id, reason), malformed spans."""

    run: Path
    episodes: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    refused: list[tuple[str, str]] = field(default_factory=list)
    verified: int = 0  # served episodes checked against the server's record
    unverified: int = 0  # served episodes stored as the runner reported them (no server record given)
    malformed: int = 0  # object spans that could not be decoded: skipped, counted

    def summary(self) -> str:
        parts = [f"{self.episodes} episodes into {self.run}"]
        if self.verified:
            parts.append(f"{self.verified} checked against the server's record")
        if self.unverified:
            parts.append(f"{self.unverified} served ones as the runner reported them (give the server's --record run to check them)")
        parts += [f"{n} skipped: {why}" for why, n in sorted(self.skipped.items())]
        if self.malformed:
            parts.append(f"{self.malformed} malformed object spans skipped")
        if self.refused:
            parts.append(f"{len(self.refused)} refused (first: {self.refused[0][0]}: {self.refused[0][1]})")
        return "; ".join(parts)


def _payloads(spans: list[Any]) -> tuple[list[Any], int]:
    """The envharness episodes among a rollout's object spans, and how many object spans could not be decoded at all."""
    found, malformed = [], 0
    for span in spans:
        if getattr(span, "name", None) != AGL_OBJECT:
            continue
        try:
            value = get_object_value(span)
        except Exception:  # noqa: BLE001 - whatever a hostile span makes Agent Lightning's decoder raise: skipped and counted
            malformed += 1
            continue
        if isinstance(value, dict) and value.get("format") == FORMAT:
            found.append(value)
    return found, malformed


def _malformed(error: BaseException) -> ValueError:
    return ValueError(
        f"its envharness episode is malformed ({type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''})"
    )


def _records(payload: dict[str, Any]) -> tuple[EpisodeRecord, list[StepRecord]]:
    try:
        episode = EpisodeRecord.from_row(payload["episode"])
        steps = [StepRecord.from_row(row) for row in payload["steps"]]
    except Exception as error:  # noqa: BLE001 - any shape a payload takes: refused with its reason, never the conversion aborted
        raise _malformed(error) from None
    if type(episode.length) is not int or len(steps) != episode.length or [s.t for s in steps] != list(range(len(steps))):
        raise ValueError(f"its envharness episode is malformed ({len(steps)} steps for length {episode.length!r})")
    if not isinstance(episode.session_id, str) or not episode.session_id:
        raise ValueError("its envharness episode names no session")
    return episode, steps


def _storable(episode: EpisodeRecord, steps: list[StepRecord]) -> None:
    """Refuse (ValueError) an episode whose fields would not go into the run's tables: checked before anything is written."""
    try:
        episodes_table([episode])
        steps_table(steps)
    except Exception as error:  # noqa: BLE001 - Arrow's errors for a field of the wrong type
        raise _malformed(error) from None


def _checked(episode: EpisodeRecord, steps: list[StepRecord], server: dict[str, tuple[EpisodeRecord, list[StepRecord]]]) -> tuple[EpisodeRecord, list[StepRecord]]:  # fmt: skip
    """The server's record of a served episode, with the runner's model calls on it; ValueError if the two disagree."""
    mine = server.get(str(episode.session_id))
    if mine is None:
        raise ValueError(f"session {episode.session_id!r} is not in the server's record")
    truth, truth_steps = mine
    for name in ("success", "reason", "level_id", "length", "seed"):
        if getattr(truth, name) != getattr(episode, name):
            raise ValueError(f"its {name} ({getattr(episode, name)!r}) is not the server's ({getattr(truth, name)!r})")
    if [s.action for s in truth_steps] != [s.action for s in steps]:
        raise ValueError("its actions are not the ones the server played")
    kept = EpisodeRecord.from_row(truth.to_row())
    for name in EPISODE_CALL_FIELDS:
        setattr(kept, name, getattr(episode, name))
    kept.policy_id = episode.policy_id
    joined = []
    for ours, theirs in zip(truth_steps, steps):
        step = StepRecord.from_row(ours.to_row())
        for name in CALL_FIELDS:
            setattr(step, name, getattr(theirs, name))
        joined.append(step)
    return kept, joined


async def convert_async(store: Any, run: str | Path, *, served: str | Path | None = None) -> Conversion:
    """:func:`convert` for a caller already inside an event loop."""
    server: dict[str, tuple[EpisodeRecord, list[StepRecord]]] = {}
    if served is not None:
        for episode, steps in TrajectoryStore(served).iter_episode_steps():
            if episode.session_id is not None:
                server[episode.session_id] = (episode, steps)
    done = Conversion(Path(run))
    rollouts = sorted(await store.query_rollouts(), key=lambda r: (r.start_time or 0.0, r.rollout_id))
    kept: list[tuple[Any, EpisodeRecord, list[StepRecord], str]] = []  # rollout, episode, steps, how it was checked
    for rollout in rollouts:
        if rollout.status not in FINISHED:
            done.skipped[f"not finished ({rollout.status})"] += 1
            continue
        payloads, malformed = _payloads(list(await store.query_spans(rollout.rollout_id, attempt_id="latest")))
        done.malformed += malformed
        if not payloads:
            done.skipped[f"{rollout.status}, with no envharness episode (not played by EnvAgent)"] += 1
            continue
        try:
            if len(payloads) > 1:
                raise ValueError(f"it carries {len(payloads)} envharness episodes where a rollout plays one")
            if payloads[0].get("rollout_id") != rollout.rollout_id:
                raise ValueError("its envharness episode names another rollout")
            episode, steps = _records(payloads[0])
            if served is not None:  # every payload, whatever it says about itself: the server's record is the truth
                episode, steps = _checked(episode, steps, server)
                how = "verified"
            elif payloads[0].get("served"):
                how = "unverified"
            elif episode.session_id != rollout.rollout_id:  # an env built in the runner: its session is its rollout
                raise ValueError(
                    f"it says its env was built in the runner, but its session id {episode.session_id!r} is not its rollout id"
                )
            else:
                how = "local"
            _storable(episode, steps)
        except ValueError as refused:
            done.refused.append((rollout.rollout_id, str(refused)))
            continue
        kept.append((rollout, episode, steps, how))
    # One claim per session: an episode played once is stored at most once. Which of several claimants played it
    # cannot be told from the store, so none of them is stored.
    claims: dict[str, list[str]] = {}
    for rollout, episode, _, _ in kept:
        claims.setdefault(str(episode.session_id), []).append(rollout.rollout_id)
    episodes: list[EpisodeRecord] = []
    all_steps: list[StepRecord] = []
    origin: dict[str, Any] = {}
    for rollout, episode, steps, how in kept:
        claimants = claims[str(episode.session_id)]
        if len(claimants) > 1:
            named = ", ".join(claimants[:3]) + (", ..." if len(claimants) > 3 else "")
            done.refused.append((rollout.rollout_id, f"its session {episode.session_id!r} is claimed by {len(claimants)} rollouts ({named}); "
                                 "which one played it cannot be told, so none is stored"))  # fmt: skip
            continue
        done.verified += how == "verified"
        done.unverified += how == "unverified"
        episode_id = len(episodes)
        episode.episode_id = episode_id
        for step in steps:
            step.episode_id = episode_id
        episodes.append(episode)
        all_steps.extend(steps)
        origin[rollout.rollout_id] = {"episode_id": episode_id, "mode": rollout.mode}
    meta = {"recorded_by": "agentlightning", "served_record": str(served) if served is not None else None, "rollouts": origin}
    out = TrajectoryStore.create(Path(run), meta=meta)
    if episodes:
        with out.writing():
            out.append(episodes, all_steps)
    done.episodes = len(episodes)
    return done


def convert(store: Any, run: str | Path, *, served: str | Path | None = None) -> Conversion:
    """Store an Agent Lightning store's rollouts (played by :class:`EnvAgent`) as a new run directory.

    ``store`` is any ``LightningStore`` (in memory, or a ``LightningStoreClient`` of a
    running ``agl store``). Each finished rollout that carries an envharness episode becomes
    one episode (its session id: the served session, or the rollout id); others are skipped
    and counted. With ``served`` (the run of ``envharness serve --record``), every episode,
    whatever its payload says about itself, must match the server's record, and is stored
    from it; one that does not is refused. A session is stored at most once: when several
    rollouts claim one, none of them is. A span that cannot be decoded, or an episode of the
    wrong shape, is skipped and counted (``malformed``, ``refused``); it never aborts the rest.

    Example:
        >>> import tempfile
        >>> done = convert(agl.InMemoryLightningStore(), tempfile.mkdtemp() + "/run")
        >>> done.episodes, done.summary().startswith("0 episodes")
        (0, True)
    """
    return asyncio.run(convert_async(store, run, served=served))


__all__ = ["Conversion", "EnvAgent", "convert", "convert_async", "seed_tasks"]
