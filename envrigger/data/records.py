"""Trajectory records: one episode, one step, and how observations are stored in them.

Contains :class:`EpisodeRecord`, :class:`StepRecord`, the Arrow schemas
:data:`EPISODE_SCHEMA` and :data:`STEP_SCHEMA` (with :func:`episodes_table` and
:func:`steps_table`), :func:`observation_digest`, :func:`inline_observation` and the
JSON encoding of observations and actions (:func:`to_jsonable`, :func:`dumps`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

OBS_INLINE_LIMIT = 512  # observations whose JSON is at most this long are stored whole
OBS_INLINE_NUMBERS = 64  # ... and, by default, that hold at most this many numbers (an image's JSON costs more than its step)
TEXT_INLINE_LIMIT = 1 << 20  # ... except observations that hold text (a game's room, an LLM agent's context): kept up to 1 MiB
STORE_OBS = ("small", "fit", "none")
COST_FIELDS = ("tokens", "model_calls", "tool_errors", "retries", "human_interventions")
# What an LLM agent's model calls cost, per step and summed per episode (None for agents that make none).
LLM_INT_FIELDS = ("input_tokens", "output_tokens", "parse_failures")
LLM_EPISODE_INT_FIELDS = ("truncated_steps",)  # steps whose model calls left older turns out
LLM_FLOAT_FIELDS = ("cost_usd", "latency_s")


EPISODE_SCHEMA = pa.schema(
    [
        ("episode_id", pa.int64()),
        ("spec_hash", pa.string()),
        ("spec_json", pa.string()),
        ("seed", pa.int64()),
        ("policy_id", pa.string()),
        ("length", pa.int64()),
        ("return", pa.float64()),
        ("success", pa.bool_()),
        ("score", pa.float64()),
        ("reason", pa.string()),
        ("terminal_cause", pa.string()),
        ("level_features", pa.map_(pa.string(), pa.float64())),
        ("level_id", pa.string()),
        ("error", pa.string()),
        ("wall_time", pa.float64()),
        *((name, pa.int64()) for name in COST_FIELDS),
        *((name, pa.int64()) for name in LLM_INT_FIELDS),
        *((name, pa.float64()) for name in LLM_FLOAT_FIELDS),
        *((name, pa.int64()) for name in LLM_EPISODE_INT_FIELDS),
        # How it ended, in the adapter's terms: the step limit, whether the agent chose the ending (a
        # submit), and what made a failure irreversible (an ending such as lava, or a destructive step).
        ("step_limit", pa.int64()),
        ("agent_ended", pa.bool_()),
        ("irreversible", pa.string()),
        ("session_id", pa.string()),  # an episode played through `envharness serve`: its session
        # Env steps the env's own searches took in this episode (a start along a level's solution):
        # interaction the run is charged beside the agent's steps. Null in a part written before it.
        ("search_steps", pa.int64()),
    ]
)

STEP_SCHEMA = pa.schema(
    [
        ("episode_id", pa.int64()),
        ("t", pa.int64()),
        ("action", pa.string()),
        ("reward", pa.float64()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("blocked", pa.string()),
        ("obs_digest", pa.string()),
        ("obs", pa.string()),
        ("position", pa.string()),
        ("info", pa.string()),
        # LLM agents: the step's model calls (OpenTelemetry GenAI keys, messages compressed) and their sums.
        ("model_calls", pa.int64()),
        *((name, pa.int64()) for name in LLM_INT_FIELDS),
        ("retries", pa.int64()),
        ("invalid_tool_calls", pa.int64()),
        *((name, pa.float64()) for name in LLM_FLOAT_FIELDS),
        ("context_truncated", pa.bool_()),
        ("calls", pa.string()),
    ]
)


def to_jsonable(value: Any) -> Any:
    """Plain JSON data for observations, actions and info values (arrays become lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON of :func:`to_jsonable` data.

    Recording calls this for every step's observation, action and position, so the common
    cases (ints, finite floats, strings, numeric arrays, dicts and lists of them) take a fast
    path that gives exactly the text ``json.dumps`` would.

    Example:
        >>> import numpy as np
        >>> dumps({"b": np.arange(3, dtype=np.uint8), "a": (1, 2.5, "x")})
        '{"a":[1,2.5,"x"],"b":[0,1,2]}'
    """
    fast = _fast_json(value)
    return fast if fast is not None else json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"))


def inline_observation(obs: Any, store: str = "small") -> str | None:
    """The observation's JSON where the ``store`` policy keeps it whole, else None (its digest is always kept).

    ``small`` (the default): at most :data:`OBS_INLINE_NUMBERS` numbers and
    :data:`OBS_INLINE_LIMIT` characters of JSON, so CartPole's state and FrozenLake's tile
    are kept, a MiniGrid image is not; ``fit``: any observation whose JSON fits the
    character limit; ``none``: digests only. Under ``small`` and ``fit`` an observation
    that holds text and at most as many numbers is kept whole up to :data:`TEXT_INLINE_LIMIT` characters (the store's
    zstd columns compress it): an LLM agent's context cannot be recovered by a replay
    that needs the model. Whatever else is not kept is recovered exactly by replaying the
    episode from its spec, seed and actions (as ``envrigger export`` does).

    Example:
        >>> import numpy as np
        >>> inline_observation(np.array([0.5, -1.0])), inline_observation(np.zeros((7, 7, 3), dtype=np.uint8)) is None
        ('[0.5,-1.0]', True)
        >>> len(inline_observation({"text": "You are in a kitchen. " * 100, "turn": 3}))
        2220
    """
    if store == "none" or (store == "small" and _numbers(obs, OBS_INLINE_NUMBERS) > OBS_INLINE_NUMBERS):
        return None
    text = dumps(obs)
    if len(text) <= OBS_INLINE_LIMIT:
        return text
    mostly_text = _holds_text(obs) and _numbers(obs, OBS_INLINE_NUMBERS) <= OBS_INLINE_NUMBERS  # not an image with a caption
    return text if len(text) <= TEXT_INLINE_LIMIT and mostly_text else None


def _holds_text(obs: Any) -> bool:
    """Whether a string is among the observation's values (not its keys)."""
    if isinstance(obs, str):
        return True
    if isinstance(obs, dict):
        return any(_holds_text(item) for item in obs.values())
    if isinstance(obs, (list, tuple)):
        return any(_holds_text(item) for item in obs)
    return False


def _numbers(obs: Any, budget: int) -> int:
    """How many scalars ``obs`` holds, counted until more than ``budget``."""
    if isinstance(obs, np.ndarray):
        return int(obs.size)
    if isinstance(obs, (dict, list, tuple)):
        total = 0
        for item in obs.values() if isinstance(obs, dict) else obs:
            total += _numbers(item, budget - total)
            if total > budget:
                break
        return total
    return 1


_ARRAY_TEMPLATES: dict[tuple[int, ...], str] = {}


def _array_template(shape: tuple[int, ...]) -> str:
    """``%s`` placeholders in JSON nesting for an array of ``shape``: ``(2, 2)`` -> ``[[%s,%s],[%s,%s]]``."""
    template = _ARRAY_TEMPLATES.get(shape)
    if template is None:
        template = "%s"
        for size in reversed(shape):
            template = "[" + ",".join([template] * size) + "]"
        if len(_ARRAY_TEMPLATES) < 256:
            _ARRAY_TEMPLATES[shape] = template
    return template


def _fast_json(value: Any) -> str | None:
    """JSON text identical to the general path's, or None where only the general path is sure to be right."""
    kind = type(value)
    if kind is int or kind is str:
        return str(value) if kind is int else json.dumps(value)
    if kind is float or isinstance(value, np.floating):
        number = float(value)
        return repr(number) if number - number == 0.0 else None  # NaN and infinities are spelled NaN, Infinity
    if isinstance(value, np.integer):
        return str(int(value))
    if kind is np.ndarray:
        if value.dtype.kind not in "iuf" or 0 in value.shape or value.size > 4096:
            return None
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return None
        if not value.ndim:
            return _fast_json(value.item())
        flat = value.ravel().tolist()  # Python ints and floats: %s spells them as JSON does
        return _array_template(value.shape) % tuple(flat)
    if kind is dict:
        if not all(type(key) is str for key in value):
            return None
        parts = []
        for key in sorted(value):
            text = _fast_json(value[key])
            if text is None:
                return None
            parts.append(json.dumps(key) + ":" + text)
        return "{" + ",".join(parts) + "}"
    if kind is list or kind is tuple:
        parts = []
        for item in value:
            text = _fast_json(item)
            if text is None:
                return None
            parts.append(text)
        return "[" + ",".join(parts) + "]"
    return None


def observation_digest(obs: Any) -> str:
    """A 16-hex-digit digest of an observation: equal observations, equal digests.

    Example:
        >>> import numpy as np
        >>> observation_digest(np.zeros(3)) == observation_digest(np.zeros(3))
        True
        >>> observation_digest({"a": 1, "b": "x"}) == observation_digest({"b": "x", "a": 1})
        True
    """
    h = hashlib.blake2b(digest_size=8)
    _feed(h, obs)
    return h.hexdigest()


_DTYPE_TEXT: dict[Any, bytes] = {}


def _feed(h: Any, obs: Any) -> None:
    if isinstance(obs, np.ndarray):
        name = _DTYPE_TEXT.get(obs.dtype)
        if name is None:
            name = _DTYPE_TEXT.setdefault(obs.dtype, str(obs.dtype).encode())  # str(dtype) is slow, and per step
        h.update(name + str(obs.shape).encode())
        h.update(np.ascontiguousarray(obs).data)
    elif isinstance(obs, dict):
        for key in sorted(obs):
            h.update(str(key).encode() + b"=")
            _feed(h, obs[key])
    elif isinstance(obs, (list, tuple)):
        for item in obs:
            _feed(h, item)
            h.update(b",")
    else:
        h.update(repr(to_jsonable(obs)).encode())


@dataclass
class EpisodeRecord:
    """One episode's summary. ``reason`` is the final verdict's; ``error`` is set when it crashed.

    Example:
        >>> record = EpisodeRecord(episode_id=0, spec_hash="ab", seed=3, policy_id="random", length=2,
        ...                        return_=1.0, success=True, score=1.0, reason="reached goal")
        >>> record.to_row()["return"], record.failed
        (1.0, False)
    """

    episode_id: int
    spec_hash: str
    seed: int | None
    policy_id: str
    length: int
    return_: float
    success: bool
    score: float
    reason: str
    spec_json: str = ""
    terminal_cause: str | None = None
    level_features: dict[str, float] = field(default_factory=dict)
    level_id: str | None = None
    error: str | None = None
    wall_time: float = 0.0
    tokens: int | None = None
    model_calls: int | None = None
    tool_errors: int | None = None
    retries: int | None = None
    human_interventions: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    parse_failures: int | None = None
    cost_usd: float | None = None
    latency_s: float | None = None
    truncated_steps: int | None = None
    step_limit: int | None = None
    agent_ended: bool | None = None
    irreversible: str | None = None
    session_id: str | None = None
    search_steps: int | None = None

    @property
    def failed(self) -> bool:
        """Whether the episode ended without the verifier's success (errors included)."""
        return not self.success

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["return"] = row.pop("return_")
        row["level_features"] = list(row["level_features"].items())
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EpisodeRecord:
        row = dict(row)
        row["return_"] = row.pop("return")
        row["level_features"] = dict(row["level_features"] or [])
        return cls(**row)


@dataclass
class StepRecord:
    """One step: action, reward, ends, a digest of what the agent saw (and the observation if small)."""

    episode_id: int
    t: int
    action: str
    reward: float
    terminated: bool
    truncated: bool
    obs_digest: str
    blocked: str | None = None
    obs: str | None = None
    position: str | None = None
    info: str = "{}"
    model_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    parse_failures: int | None = None
    retries: int | None = None
    invalid_tool_calls: int | None = None
    cost_usd: float | None = None
    latency_s: float | None = None
    context_truncated: bool | None = None
    calls: str | None = None  # JSON: one object per model call (see envrigger.agents.chat)

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StepRecord:
        return cls(**row)


def episodes_table(episodes: list[EpisodeRecord]) -> pa.Table:
    """Episodes as an Arrow table in :data:`EPISODE_SCHEMA`."""
    return pa.Table.from_pylist([e.to_row() for e in episodes], schema=EPISODE_SCHEMA)


def steps_table(steps: list[StepRecord]) -> pa.Table:
    """Steps as an Arrow table in :data:`STEP_SCHEMA`, built column by column (no per-step dict)."""
    return pa.Table.from_arrays(
        [pa.array([getattr(s, name) for s in steps], type=STEP_SCHEMA.field(name).type) for name in STEP_SCHEMA.names],
        schema=STEP_SCHEMA,
    )


def add_calls(step: StepRecord, calls: list[dict[str, Any]]) -> None:
    """Put an LLM agent's model calls for one step on its record, with their sums (OpenTelemetry GenAI keys).

    Example:
        >>> step = StepRecord(episode_id=0, t=0, action='"look"', reward=0.0, terminated=False, truncated=False, obs_digest="")
        >>> add_calls(step, [{"gen_ai.usage.input_tokens": 90, "gen_ai.usage.output_tokens": 3, "envrigger.reply.error": "not a command"},
        ...                  {"gen_ai.usage.input_tokens": 99, "gen_ai.usage.output_tokens": 2}])
        >>> step.model_calls, step.input_tokens, step.parse_failures, step.retries
        (2, 189, 1, 1)
    """
    step.model_calls = len(calls)
    step.input_tokens = sum(int(c.get("gen_ai.usage.input_tokens", 0)) for c in calls)
    step.output_tokens = sum(int(c.get("gen_ai.usage.output_tokens", 0)) for c in calls)
    step.parse_failures = sum(1 for c in calls if c.get("envrigger.reply.error"))
    step.invalid_tool_calls = sum(1 for c in calls if c.get("envrigger.tool_call.invalid"))
    step.retries = max(len(calls) - 1, 0)
    step.cost_usd = float(sum(float(c.get("envrigger.cost_usd", 0.0)) for c in calls))
    step.latency_s = float(sum(float(c.get("envrigger.latency_s", 0.0)) for c in calls))
    step.context_truncated = any(bool(c.get("envrigger.context.truncated")) for c in calls)
    step.calls = dumps(calls)


def sum_calls(episode: EpisodeRecord, steps: list[StepRecord], unfinished: list[dict[str, Any]]) -> None:
    """An LLM agent's episode totals: the sums of its steps' model calls (and of a step it could not finish)."""
    extra = StepRecord(
        episode_id=episode.episode_id, t=len(steps), action="null", reward=0.0, terminated=False, truncated=False, obs_digest=""
    )
    add_calls(extra, unfinished)
    counted = [s for s in steps if s.model_calls is not None] + ([extra] if unfinished else [])
    episode.model_calls = sum(s.model_calls or 0 for s in counted)
    episode.input_tokens = sum(s.input_tokens or 0 for s in counted)
    episode.output_tokens = sum(s.output_tokens or 0 for s in counted)
    episode.tokens = episode.input_tokens + episode.output_tokens
    episode.parse_failures = sum(s.parse_failures or 0 for s in counted)
    episode.tool_errors = sum(s.invalid_tool_calls or 0 for s in counted)
    episode.retries = sum(s.retries or 0 for s in counted)
    episode.cost_usd = float(sum(s.cost_usd or 0.0 for s in counted))
    episode.latency_s = float(sum(s.latency_s or 0.0 for s in counted))
    episode.truncated_steps = sum(1 for s in counted if s.context_truncated)
