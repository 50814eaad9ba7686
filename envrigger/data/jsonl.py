"""JSONL trajectories: the format any external agent harness can write for envrigger to read.

Contains :class:`JsonlEpisode` and :class:`JsonlStep` (the line schema),
:func:`import_jsonl` and :func:`export_jsonl`. One line is one episode; see
``docs/trajectories.md`` for the format with an example.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envharness.files import write_file_atomically
from envharness.reading import read_text
from envrigger.data.records import (
    COST_FIELDS,
    EpisodeRecord,
    StepRecord,
    add_calls,
    dumps,
    inline_observation,
    observation_digest,
    sum_calls,
)
from envrigger.data.store import TrajectoryStore
from envrigger.errors import TrajectoryError


class JsonlVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    success: bool = Field(description="the task's own success check")
    score: float | None = Field(None, description="score in [0, 1]; defaults to 1.0 on success, else 0.0")
    reason: str = Field("", description="why, in a few words")


class JsonlStep(BaseModel):
    """One step of an external episode."""

    model_config = ConfigDict(extra="forbid")

    action: Any = Field(description="the action, any JSON value (a tool call, an index...)")
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    blocked: str | None = Field(None, description="why the action was refused, if it was")
    observation: Any = Field(None, description="what the agent saw after the action")
    obs_digest: str | None = Field(None, description="a digest, if the observation is left out")
    position: Any = None
    info: dict[str, Any] = Field(default_factory=dict, description="tool_error, retry... as the harness reports them")
    calls: list[dict[str, Any]] | None = Field(
        None, description="an LLM agent's model calls for this step, keyed after OpenTelemetry's GenAI conventions (see docs/agents.md)"
    )


class JsonlCosts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: int | None = None
    model_calls: int | None = None
    tool_errors: int | None = None
    retries: int | None = None
    human_interventions: int | None = None


class JsonlEpisode(BaseModel):
    """One line of a JSONL trajectory file.

    Example:
        >>> line = '{"verdict": {"success": true}, "steps": [{"action": "submit", "reward": 1.0}]}'
        >>> episode = JsonlEpisode.model_validate_json(line)
        >>> episode.verdict.success, episode.steps[0].action
        (True, 'submit')
    """

    model_config = ConfigDict(extra="forbid")

    episode_id: int | None = Field(None, description="unique per file; defaults to the line number")
    env_id: str = Field("external", description="what the agent ran in")
    spec: dict[str, Any] | None = Field(None, description="a HarnessSpec, if the episode came from one")
    seed: int | None = None
    policy_id: str = Field("external", description="which agent")
    verdict: JsonlVerdict
    terminal_cause: str | None = None
    level_features: dict[str, float] = Field(default_factory=dict)
    level_id: str | None = Field(None, description="identifies the level (task instance), for variance across seeds")
    error: str | None = None
    wall_time: float = 0.0
    costs: JsonlCosts = Field(default_factory=JsonlCosts)
    step_limit: int | None = Field(None, description="the most steps the episode could take")
    agent_ended: bool | None = Field(None, description="whether the agent chose the ending (a submit)")
    irreversible: str | None = Field(None, description="on a failure that cannot be undone, what made it so")
    search_steps: int | None = Field(
        None, ge=0, description="env steps taken off the agent's clock in the episode: searches behind its start and setup played at reset"
    )
    steps: list[JsonlStep] = Field(default_factory=list)


def _spec_fields(episode: JsonlEpisode) -> tuple[str, str]:
    from envharness.spec import HarnessSpec

    if episode.spec is not None:
        spec = HarnessSpec.coerce(episode.spec)
        return spec.hash(), spec.to_json(indent=None)
    data = {"env_id": episode.env_id}
    return HarnessSpec(env_id=episode.env_id).hash(), json.dumps(data)


def _records(episode: JsonlEpisode, episode_id: int) -> tuple[EpisodeRecord, list[StepRecord]]:
    spec_hash, spec_json = _spec_fields(episode)
    steps = []
    for t, step in enumerate(episode.steps):
        inline = inline_observation(step.observation, "fit") if step.observation is not None else None  # text whole, as collect does
        steps.append(
            StepRecord(
                episode_id=episode_id,
                t=t,
                action=dumps(step.action),
                reward=step.reward,
                terminated=step.terminated,
                truncated=step.truncated,
                blocked=step.blocked,
                obs_digest=step.obs_digest or observation_digest(step.observation),
                obs=inline,
                position=dumps(step.position) if step.position is not None else None,
                info=dumps(step.info) if step.info else "{}",
            )
        )
        if step.calls is not None:
            add_calls(steps[-1], step.calls)
    verdict = episode.verdict
    score = verdict.score if verdict.score is not None else float(verdict.success)
    reason = verdict.reason or ("success" if verdict.success else "failure")
    record = EpisodeRecord(
        episode_id=episode_id,
        spec_hash=spec_hash,
        spec_json=spec_json,
        seed=episode.seed,
        policy_id=episode.policy_id,
        length=len(steps),
        return_=sum(s.reward for s in steps),
        success=verdict.success and episode.error is None,
        score=score,
        reason=reason,
        terminal_cause=episode.terminal_cause or (None if verdict.success else reason),
        level_features=dict(episode.level_features),
        level_id=episode.level_id,
        error=episode.error,
        wall_time=episode.wall_time,
        step_limit=episode.step_limit,
        agent_ended=episode.agent_ended,
        irreversible=episode.irreversible,
        search_steps=episode.search_steps,
        **episode.costs.model_dump(),
    )
    if any(s.model_calls is not None for s in steps):  # an LLM agent's calls: the episode sums them, as a recorded run does
        costs = episode.costs
        sum_calls(record, steps, [])
        record.human_interventions = costs.human_interventions
    return record, steps


def _field_of(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(line)"
    return f"field {where}: {first['msg'][0].lower()}{first['msg'][1:]}"


def import_jsonl(path: str | Path, out: str | Path, batch_episodes: int = 1000) -> TrajectoryStore:
    """Read a JSONL file (one episode per line) into a run directory.

    The whole file is validated before anything is written, so a bad line leaves ``out``
    as it was. Errors name the file, the line and the field.
    """
    path = Path(path)
    if not path.exists():
        raise TrajectoryError(f"{path}: no such file; give the JSONL file your harness wrote")
    parsed: list[tuple[int, JsonlEpisode]] = []
    text = read_text(path, fix="give the JSONL file your harness wrote, one JSON object per line", error=TrajectoryError)
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: a JSON string may hold U+2028
        if not line.strip():
            continue
        try:
            parsed.append((number, JsonlEpisode.model_validate_json(line)))
        except ValidationError as error:
            if error.errors()[0]["type"] == "json_invalid":
                raise TrajectoryError(f"{path}:{number}: not valid JSON; write one JSON object per line") from None
            raise TrajectoryError(f"{path}:{number}: {_field_of(error)}; see docs/trajectories.md") from None
    if not parsed:
        raise TrajectoryError(f"{path}: no episodes in the file; write one JSON object per line")
    ids = [e.episode_id if e.episode_id is not None else number for number, e in parsed]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise TrajectoryError(f"{path}: episode_id {dup} appears twice; make episode ids unique")
    store = TrajectoryStore.create(out, meta={"source": str(path), "format": "jsonl"}, exist_ok=True)
    clash = set(ids) & store.episode_ids()
    if clash:
        raise TrajectoryError(f"{path}: episode_id {min(clash)} is already in {out}; import into a new run directory")
    for start in range(0, len(parsed), batch_episodes):
        chunk = [_records(e, i) for (_, e), i in zip(parsed[start : start + batch_episodes], ids[start : start + batch_episodes])]
        store.append([e for e, _ in chunk], [s for _, steps in chunk for s in steps])
    return store


def export_jsonl(store: TrajectoryStore, path: str | Path) -> int:
    """Write every episode of ``store`` as JSONL (atomically); returns the number written."""
    path = Path(path)
    if path.exists() and not path.is_file():  # renaming over a device or FIFO would replace it with a file
        raise TrajectoryError(f"{path}: not a regular file; give a .jsonl file path to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        with open(tmp, "w") as handle:
            for episode, steps in store.iter_episode_steps():
                spec = json.loads(episode.spec_json) if episode.spec_json else None
                line = {
                    "episode_id": episode.episode_id,
                    "env_id": (spec or {}).get("env_id", "external"),
                    "spec": spec if spec and "transforms" in spec else None,
                    "seed": episode.seed,
                    "policy_id": episode.policy_id,
                    "verdict": {"success": episode.success, "score": episode.score, "reason": episode.reason},
                    "terminal_cause": episode.terminal_cause,
                    "level_features": episode.level_features,
                    "level_id": episode.level_id,
                    "error": episode.error,
                    "wall_time": episode.wall_time,
                    "costs": {k: getattr(episode, k) for k in COST_FIELDS},
                    **{k: getattr(episode, k) for k in ("step_limit", "agent_ended", "irreversible", "search_steps")},
                    "steps": [
                        {
                            "action": json.loads(s.action),
                            "reward": s.reward,
                            "terminated": s.terminated,
                            "truncated": s.truncated,
                            "blocked": s.blocked,
                            "observation": json.loads(s.obs) if s.obs is not None else None,
                            "obs_digest": s.obs_digest,
                            "position": json.loads(s.position) if s.position is not None else None,
                            "info": json.loads(s.info),
                            **({"calls": json.loads(s.calls)} if s.calls is not None else {}),
                        }
                        for s in steps
                    ],
                }
                handle.write(json.dumps(line, separators=(",", ":")) + "\n")
                count += 1

    write_file_atomically(path, write)
    return count
