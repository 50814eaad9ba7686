"""The harness: a Gymnasium wrapper that runs the transform pipeline and publishes the verdict.

Contains :class:`Harness` and :func:`wrap`. The pipeline (see ``docs/concepts.md``):

- ``reset``: base reset with the seed -> state transforms through the adapter -> the
  adapter snapshots what the verifier judges against -> rule and observation resets.
- ``step``: rule ``on_action`` in order (a :class:`~envharness.transforms.Blocked` action
  does not step the base env) -> base step -> verdict from the base env -> rule
  ``on_transition`` -> observation transforms -> ``info["verdict"]`` written last.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from envharness.adapters import adapter_for
from envharness.errors import EnvNotFoundError, IncompatibleTransformError, SpecError
from envharness.transforms.base import Blocked, RuleTransform, Step, Transform, transform_from_spec
from envharness.verifier import IN_PROGRESS, RUNNING, TIMEOUT, Verdict

# Separates the harness's random stream from the base env's, which Gymnasium seeds with the same seed.
_STREAM = 0x5EED_E4A1


def _overrides(transform: Transform, hook: str, base: type) -> bool:
    return getattr(type(transform), hook) is not getattr(base, hook)


class Harness(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Wraps a base env, reshapes it with transforms, and publishes the original verdict.

    Every step's ``info["verdict"]`` is a frozen :class:`~envharness.verifier.Verdict`
    computed from the base env before any transform ran; reset's ``info["level"]`` holds
    the adapter's level features. ``env.spec`` records the transforms as JSON, so
    ``gymnasium.make(env.spec)`` rebuilds the same harness.

    Args:
        env: the base environment.
        transforms: transforms, or ``{"name", "params"}`` dicts, applied in order per kind.

    Example:
        >>> import gymnasium as gym
        >>> from envharness.transforms import StepBudget
        >>> env = Harness(gym.make("FrozenLake-v1", is_slippery=False), [StepBudget(max_steps=2)])
        >>> obs, info = env.reset(seed=0)
        >>> for action in (1, 1):
        ...     obs, reward, terminated, truncated, info = env.step(action)
        >>> truncated, info["verdict"]
        (True, Verdict(success=False, score=0.0, reason='timeout'))
        >>> gym.make(env.spec).transforms == env.transforms
        True
    """

    def __init__(self, env: gym.Env, transforms: Any = ()) -> None:
        built = [transform_from_spec(t) for t in transforms]
        gym.utils.RecordConstructorArgs.__init__(self, transforms=[t.to_spec() for t in built])
        gym.Wrapper.__init__(self, env)
        self.transforms: tuple[Transform, ...] = tuple(built)
        self.adapter = adapter_for(env)
        for t in built:
            t.check(self.adapter, env.observation_space, env.action_space)

        self._state = [t for t in built if t.kind == "state"]
        rules = [(t, {}) for t in built if t.kind == "rule"]
        for t, memo in rules:
            t.bind(memo, env.action_space)
        self._rules = rules
        self._on_action = [(t.on_action, m) for t, m in rules if _overrides(t, "on_action", RuleTransform)]
        self._on_transition = [(t.on_transition, m) for t, m in rules if _overrides(t, "on_transition", RuleTransform)]

        space = env.observation_space
        self._observers = []
        for t in (t for t in built if t.kind == "observation"):
            memo: dict = {}
            out = t.observation_space(space)
            t.bind(memo, space)
            self._observers.append((t, memo))
            space = out
        self._observation_space = space
        self._observe = [(t.observe, m) for t, m in self._observers]

        self._links = [self._build_link(t, space) for t in built if t.kind == "link"]
        # Blocked steps never reach the base env's own time limit, so the harness keeps one too.
        self._max_steps: int | None = self.adapter.time_limit()
        self._rng: np.random.Generator | None = None
        self._raw_obs: Any = None
        self._verdict: Verdict = RUNNING
        self._t = 0
        self._segment: int | None = None
        self._segment_verdicts: list[Verdict] = []

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng([seed, _STREAM])
        elif self._rng is None:
            self._rng = np.random.default_rng()
        rng = self._rng
        obs, info = self.env.reset(seed=seed, options=options)
        adapter = self.adapter
        adapter.on_base_reset()
        for t in self._state:
            obs = t.apply(adapter, obs, rng)
        adapter.begin_episode()
        self._raw_obs = obs
        self._t = 0
        self._verdict = RUNNING
        self._segment = None
        for t, memo in self._rules:
            t.on_reset(memo, obs, rng)
        for t, memo in self._observers:
            t.on_reset(memo, rng)
            obs = t.observe(obs, memo, rng)
        info = dict(info)
        info["level"] = adapter.level_features()
        info["level_id"] = adapter.level_id()
        info["verdict"] = RUNNING
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._segment is not None:
            return self._step_linked(action)
        rng = self._rng
        for hook, memo in self._on_action:
            action = hook(action, memo, rng)
            if action.__class__ is Blocked:
                break
        if action.__class__ is Blocked:
            blocked = action.reason
            action, obs, reward, base_term, base_trunc = None, self._raw_obs, 0.0, False, False
            info: dict[str, Any] = {"blocked": blocked}
            verdict = self._verdict
        else:
            blocked = None
            obs, reward, base_term, base_trunc, info = self.env.step(action)
            verdict = self.adapter.judge(obs, reward, base_term, base_trunc, info)
            self._raw_obs = obs
        self._t += 1
        terminated, truncated, end_reason = base_term, base_trunc, None
        if self._on_transition:
            step = Step(action, obs, reward, base_term, base_trunc, info, blocked)
            for hook, memo in self._on_transition:
                hook(step, memo)
            # Rules may add an ending, never remove the base env's own.
            reward, info, end_reason = step.reward, step.info, step.end_reason
            terminated = step.terminated or base_term
            truncated = step.truncated or base_trunc
        if verdict.success:
            # Success ends the episode even if a transform moved the base env's own goal test.
            terminated = terminated or not truncated
        elif self._max_steps is not None and self._t >= self._max_steps and not terminated:
            truncated = True
        for hook, memo in self._observe:
            obs = hook(obs, memo, rng)
        if (terminated or truncated) and not verdict.success and verdict.reason == IN_PROGRESS:
            verdict = Verdict(False, 0.0, end_reason or (TIMEOUT if truncated else "ended by a rule"))
        self._verdict = verdict
        if verdict.success and self._links and (terminated or truncated):
            return self._enter_segment(0, verdict, reward, info)
        info["verdict"] = verdict
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        for linked in self._links:
            linked.close()
        super().close()

    # -- links -------------------------------------------------------------------------
    def _build_link(self, link: Any, space: Any) -> Harness:
        linked = link.build()
        for what, theirs, ours in (
            ("observes", linked.observation_space, space),
            ("acts in", linked.action_space, self.action_space),
        ):
            if theirs != ours:
                linked.close()
                raise IncompatibleTransformError(
                    f"{link.name}.env_id: {link.env_id} {what} {theirs}, not {ours}; chain envs with equal spaces "
                    "(reshape one with observation transforms)"
                )
        return linked

    def _enter_segment(self, index: int, finished: Verdict, reward: Any, info: dict) -> tuple:
        if index == 0:
            self._segment_verdicts = []
        self._segment_verdicts.append(finished)
        self._segment = index
        obs, _ = self._links[index].reset(seed=int(self._rng.integers(2**31 - 1)))
        info["segment"] = index + 1
        info["verdict"] = RUNNING
        return obs, reward, False, False, info

    def _step_linked(self, action: Any) -> tuple:
        index = self._segment
        obs, reward, terminated, truncated, info = self._links[index].step(action)
        verdict = info["verdict"]
        if (terminated or truncated) and verdict.success and index + 1 < len(self._links):
            return self._enter_segment(index + 1, verdict, reward, info)
        if terminated or truncated:
            verdicts = [*self._segment_verdicts, verdict]
            score = float(np.mean([v.score for v in verdicts]))
            reason = "all linked segments succeeded" if verdict.success else f"segment {index + 2}: {verdict.reason}"
            verdict = Verdict(verdict.success, score if verdict.success else 0.0, reason)
            self._segment = None
        self._verdict = verdict
        info["segment"] = index + 1
        info["verdict"] = verdict
        return obs, reward, terminated, truncated, info

    @property
    def harness_spec(self) -> Any:
        """The :class:`~envharness.spec.HarnessSpec` that rebuilds this harness (needs a base env id)."""
        from envharness.spec import HarnessSpec

        base = self.env.spec
        if base is None:
            raise SpecError("harness_spec: the base env was not made from a Gymnasium id; wrap an env id to get a spec")
        return HarnessSpec(env_id=base.id, env_kwargs=dict(base.kwargs), transforms=[t.to_spec() for t in self.transforms])


_LAZY_NAMESPACES = {"MiniGrid-": "minigrid", "BabyAI-": "minigrid", "envharness/": "envharness.envs"}


def make_base(env_id: str, **make_kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with clear errors, importing MiniGrid on demand for its ids."""
    if env_id not in gym.registry:
        for prefix, module in _LAZY_NAMESPACES.items():
            if env_id.startswith(prefix):
                __import__(module)
    try:
        return gym.make(env_id, **make_kwargs)
    except gym.error.DependencyNotInstalled as error:
        raise EnvNotFoundError(f"env id {env_id!r} needs a package that is not installed: {str(error).splitlines()[0]}") from None
    except gym.error.Error as error:
        raise EnvNotFoundError(
            f"env id {env_id!r} is not registered with Gymnasium ({error}); check the spelling, "
            "or import the package that registers it"
        ) from None
    except TypeError as error:
        raise SpecError(f"env_kwargs: {env_id} rejected them ({error}); pass only arguments its constructor takes") from None


def wrap(env_or_id: gym.Env | str, *transforms: Any, **make_kwargs: Any) -> Harness:
    """Wrap an env (or make one from its id with ``make_kwargs``) and reshape it with ``transforms``.

    Example:
        >>> import envharness
        >>> from envharness.transforms import MoveGoal, ActionSlip
        >>> env = envharness.wrap("MiniGrid-DoorKey-8x8-v0", MoveGoal(max_dist=3), ActionSlip(p=0.1))
        >>> obs, info = env.reset(seed=0)
        >>> info["verdict"]
        Verdict(success=False, score=0.0, reason='in progress')
    """
    if isinstance(env_or_id, str):
        env = make_base(env_or_id, **make_kwargs)
    elif isinstance(env_or_id, gym.Env):
        if make_kwargs:
            raise SpecError(f"wrap: keyword arguments {sorted(make_kwargs)} only apply to an env id; pass them to your env instead")
        env = env_or_id
    else:
        raise SpecError(f"wrap: got {type(env_or_id).__name__}; pass a gymnasium.Env or a registered env id")
    return Harness(env, transforms)
