"""Rule transforms: reshape what actions are allowed, what they do, and when episodes end.

Contains :class:`BlockAction`, :class:`ActionSlip`, :class:`StepBudget`,
:class:`ActionCost`, :class:`TerminateOn` and :class:`RemapActions`; for tool calls
:class:`BlockTool` and :class:`ToolCost`, and for text games :class:`BlockVerb`. None of them can
change the verdict: it is computed from the base env before they see the transition.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from envharness.errors import IncompatibleTransformError
from envharness.toolcall import tool_name
from envharness.transforms.base import ActionValue, Blocked, RuleTransform, ShortName, Step, register_transform


def _require_discrete(name: str, action_space: Any, actions: list[int]) -> None:
    n = getattr(action_space, "n", None)
    if n is None:
        raise IncompatibleTransformError(f"{name}: needs a Discrete action space, got {action_space}; use it on a discrete env")
    start = int(getattr(action_space, "start", 0))
    bad = [a for a in actions if not start <= a < start + int(n)]
    if bad:
        raise IncompatibleTransformError(
            f"{name}: action {bad[0]} is outside the action space {action_space}; use actions in [{start}, {start + int(n) - 1}]"
        )


@register_transform
class BlockAction(RuleTransform):
    """Refuse the listed actions: the base env does not step and ``info["blocked"]`` says why.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", BlockAction(actions=[0], reason="no going left"))
        >>> _ = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(0)
        >>> obs, info["blocked"]
        (0, 'no going left')
    """

    works_on: ClassVar[str] = "Discrete actions"
    targets: ClassVar[tuple[str, ...]] = ("repeated_action", "noop_action", "loop")

    actions: list[ActionValue] = Field(min_length=1, max_length=64, description="actions to refuse")
    reason: str = Field("action blocked", max_length=200, description="feedback shown in info['blocked']")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        _require_discrete("BlockAction", action_space, self.actions)

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        if int(action) in self.actions:
            return Blocked(self.reason)
        return action

    def mutate(self, rng: np.random.Generator) -> Any:
        if len(self.actions) < 2:
            return self
        keep = [a for a in self.actions if rng.random() < 0.8] or self.actions[:1]
        return type(self)(actions=keep, reason=self.reason)


@register_transform
class ActionSlip(RuleTransform):
    """With probability ``p`` the action taken is a uniformly random one instead.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("CliffWalking-v1", ActionSlip(p=1.0))
        >>> _ = env.reset(seed=0)
        >>> [env.step(1)[4]["slipped_to"] for _ in range(3)]
        [3, 1, 3]
    """

    works_on: ClassVar[str] = "Discrete actions"
    targets: ClassVar[tuple[str, ...]] = ("high_variance",)

    p: float = Field(0.1, ge=0.0, le=1.0, description="probability that an action slips")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        _require_discrete("ActionSlip", action_space, [])

    def bind(self, memo: dict, action_space: Any) -> None:
        memo["start"], memo["n"] = int(getattr(action_space, "start", 0)), int(action_space.n)

    def on_reset(self, memo: dict, obs: Any, rng: np.random.Generator) -> None:
        memo["slipped_to"] = None

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        if rng.random() < self.p:
            action = memo["start"] + int(rng.integers(memo["n"]))
            memo["slipped_to"] = action
        else:
            memo["slipped_to"] = None
        return action

    def on_transition(self, step: Step, memo: dict) -> None:
        if memo["slipped_to"] is not None:
            step.info["slipped_to"] = memo["slipped_to"]


@register_transform
class StepBudget(RuleTransform):
    """Truncate the episode after ``max_steps`` agent steps (a tighter time limit).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("CartPole-v1", StepBudget(max_steps=3))
        >>> _ = env.reset(seed=0)
        >>> [env.step(i % 2)[3] for i in range(3)]
        [False, False, True]
    """

    targets: ClassVar[tuple[str, ...]] = ("timeout", "loop", "repeated_action")

    max_steps: int = Field(100, ge=1, le=100_000, description="agent steps before truncation")

    def proposable(self, adapter: Any) -> bool:
        # A budget at or above the env's own time limit changes nothing: not worth validating.
        limit = adapter.time_limit()
        return limit is None or self.max_steps < limit

    def on_reset(self, memo: dict, obs: Any, rng: np.random.Generator) -> None:
        memo["t"] = 0

    def on_transition(self, step: Step, memo: dict) -> None:
        memo["t"] += 1
        if memo["t"] >= self.max_steps and not step.terminated:
            step.truncated = True
            step.end_reason = "timeout"


@register_transform
class ActionCost(RuleTransform):
    """Subtract ``cost`` from the reward for each listed action (all actions if none listed).

    Reward shaping for training only: the verdict never sees it.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("CartPole-v1", ActionCost(cost=0.25))
        >>> _ = env.reset(seed=0)
        >>> env.step(0)[1]
        0.75
    """

    targets: ClassVar[tuple[str, ...]] = ("repeated_action", "noop_action", "reward_without_success", "costly_event")

    cost: float = Field(0.01, ge=0.0, le=100.0, description="reward subtracted per costly action")
    actions: list[ActionValue] = Field(default_factory=list, max_length=64, description="costly actions; empty means all")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        if self.actions:
            _require_discrete("ActionCost.actions", action_space, self.actions)

    def on_transition(self, step: Step, memo: dict) -> None:
        if not self.actions or (step.action is not None and int(step.action) in self.actions):
            step.reward = float(step.reward) - self.cost


def _digest(obs: Any) -> bytes:
    if isinstance(obs, dict):
        return hashlib.blake2b(b"".join(_digest(obs[k]) for k in sorted(obs)), digest_size=8).digest()
    return hashlib.blake2b(np.asarray(obs).tobytes() if not isinstance(obs, str) else obs.encode(), digest_size=8).digest()


@register_transform
class TerminateOn(RuleTransform):
    """End the episode (as a failure) once ``event`` has happened ``patience`` times.

    Events: ``blocked`` (a refused action), ``no_progress`` (the observation did not
    change), ``revisit`` (an observation seen before in this episode).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", TerminateOn(event="no_progress", patience=2), is_slippery=False)
        >>> _ = env.reset(seed=0)
        >>> first, second = env.step(0), env.step(0)
        >>> first[2], second[2], second[4]["verdict"].reason
        (False, True, 'ended: no_progress')
    """

    targets: ClassVar[tuple[str, ...]] = ("loop", "noop_action", "blocked_action", "repeated_action")

    event: Literal["blocked", "no_progress", "revisit"] = Field("no_progress", description="what counts")
    patience: int = Field(3, ge=1, le=10_000, description="how many events end the episode")

    def on_reset(self, memo: dict, obs: Any, rng: np.random.Generator) -> None:
        memo["count"] = 0
        memo["last"] = _digest(obs)
        memo["seen"] = {memo["last"]}

    def on_transition(self, step: Step, memo: dict) -> None:
        if self.event == "blocked":
            happened = step.blocked is not None
        else:
            digest = _digest(step.obs)
            if self.event == "no_progress":
                happened = digest == memo["last"]
                memo["last"] = digest
            else:
                happened = digest in memo["seen"]
                memo["seen"].add(digest)
        if happened:
            memo["count"] += 1
            if memo["count"] >= self.patience and not step.terminated:
                step.terminated = True
                step.end_reason = f"ended: {self.event}"


@register_transform
class RemapActions(RuleTransform):
    """Relabel actions: the agent's action ``a`` becomes ``mapping[a]`` (others unchanged).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("FrozenLake-v1", RemapActions(mapping={0: 2, 2: 0}), is_slippery=False)
        >>> _ = env.reset(seed=0)
        >>> env.step(0)[0]
        1
    """

    works_on: ClassVar[str] = "Discrete actions"
    targets: ClassVar[tuple[str, ...]] = ("repeated_action", "high_variance")

    mapping: dict[ActionValue, ActionValue] = Field(min_length=1, max_length=1024, description="agent action -> action the base env takes")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        _require_discrete("RemapActions", action_space, [*self.mapping, *self.mapping.values()])

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        return self.mapping.get(int(action), action)

    def mutate(self, rng: np.random.Generator) -> Any:
        keys = sorted(self.mapping)
        values = [self.mapping[k] for k in keys]
        return type(self)(mapping=dict(zip(keys, rng.permutation(values).tolist())))


def _require_tools(name: str, action_space: Any) -> None:
    from gymnasium import spaces

    if not isinstance(action_space, (spaces.Text, spaces.Dict)):
        raise IncompatibleTransformError(
            f"{name}: needs tool-call actions (a Text or Dict action space), got {action_space}; use BlockAction for discrete actions"
        )


@register_transform
class BlockTool(RuleTransform):
    """Refuse calls to the listed tools (JSON tool-call actions); the base env does not step.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", BlockTool(tools=["run_tests"]), task="add")
        >>> _ = env.reset(seed=0)
        >>> env.step('{"tool": "run_tests"}')[4]["blocked"]
        'tool run_tests is not available'
    """

    families: ClassVar[tuple[str, ...]] = ("code_repair",)
    works_on: ClassVar[str] = "CodeRepair (JSON tool calls)"
    targets: ClassVar[tuple[str, ...]] = ("tool_error", "retry", "repeated_action")

    tools: list[ShortName] = Field(min_length=1, max_length=32, description="tool names to refuse")
    reason: str = Field("", max_length=200, description="feedback; default names the tool")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        _require_tools("BlockTool", action_space)

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        tool = tool_name(action)  # as the env will read it: one parser for both
        if tool in self.tools:
            return Blocked(self.reason or f"tool {tool} is not available")
        return action


@register_transform
class ToolCost(RuleTransform):
    """Subtract ``cost`` from the reward each time ``tool`` is called (e.g. costlier test runs).

    Reward shaping for training only: the verdict never sees it.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", ToolCost(tool="list", cost=0.5), task="add")
        >>> _ = env.reset(seed=0)
        >>> env.step('{"tool": "list"}')[1]
        -0.5
    """

    families: ClassVar[tuple[str, ...]] = ("code_repair",)
    works_on: ClassVar[str] = "CodeRepair (JSON tool calls)"
    targets: ClassVar[tuple[str, ...]] = ("retry", "repeated_action", "timeout")

    tool: str = Field(min_length=1, max_length=100, description="the tool that costs")
    cost: float = Field(0.05, ge=0.0, le=100.0, description="reward subtracted per call")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        _require_tools("ToolCost", action_space)

    def on_transition(self, step: Step, memo: dict) -> None:
        if tool_name(step.action) == self.tool:
            step.reward = float(step.reward) - self.cost


@register_transform
class BlockVerb(RuleTransform):
    """Refuse listed commands that start with one of ``verbs`` (text games with command slots).

    For envs whose action is an index into the newline-separated commands of the
    observation's ``field`` (``envharness/TextWorld-v0``); the rule reads the list from the
    base env's own observation, so it blocks the command the base env would play. A refused
    command does not step the base env and ``info["blocked"]`` says why.

    Example:
        >>> import numpy as np
        >>> rule, memo, rng = BlockVerb(verbs=["look"]), {}, np.random.default_rng(0)
        >>> rule.on_reset(memo, {"text": "A room.", "commands": "go east\\nlook"}, rng)
        >>> rule.on_action(1, memo, rng), rule.on_action(0, memo, rng)
        (Blocked('look is not available'), 0)
    """

    families: ClassVar[tuple[str, ...]] = ("textworld",)
    works_on: ClassVar[str] = "TextWorld (commands listed in the observation)"
    targets: ClassVar[tuple[str, ...]] = ("noop_action", "repeated_action", "loop")

    verbs: list[ShortName] = Field(
        default_factory=lambda: ["examine", "inventory", "look"],
        min_length=1,
        max_length=32,
        description="first words of the commands to refuse",
    )
    field: str = Field("commands", min_length=1, max_length=100, description="the observation's field listing the commands")
    reason: str = Field("", max_length=200, description="feedback; default names the verb")

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        from gymnasium import spaces

        _require_discrete("BlockVerb", action_space, [])
        if not (isinstance(observation_space, spaces.Dict) and isinstance(observation_space.spaces.get(self.field), spaces.Text)):
            raise IncompatibleTransformError(
                f"BlockVerb.field: needs a Dict observation with a Text field {self.field!r} listing the commands, got "
                f"{observation_space}; use it on text games such as envharness/TextWorld-v0"
            )

    def _listed(self, obs: Any, memo: dict) -> None:
        memo["listed"] = str(obs[self.field]).split("\n")

    def on_reset(self, memo: dict, obs: Any, rng: np.random.Generator) -> None:
        self._listed(obs, memo)

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        listed, index = memo["listed"], int(action)
        verb = listed[index].split(" ", 1)[0].lower() if 0 <= index < len(listed) else None
        if verb is not None and verb in self.verbs:
            return Blocked(self.reason or f"{verb} is not available")
        return action

    def on_transition(self, step: Step, memo: dict) -> None:
        self._listed(step.obs, memo)

    def mutate(self, rng: np.random.Generator) -> Any:
        if len(self.verbs) < 2:
            return self
        keep = [v for v in self.verbs if rng.random() < 0.8] or self.verbs[:1]
        return type(self)(verbs=keep, field=self.field, reason=self.reason)
