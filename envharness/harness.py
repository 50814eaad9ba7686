"""The harness: a Gymnasium wrapper that runs the transform pipeline and publishes the verdict.

Contains :class:`Harness` and :func:`wrap`. The pipeline (see ``docs/concepts.md``):

- ``reset``: base reset with the seed -> state transforms through the adapter -> the
  adapter snapshots what the verifier judges against -> rule and observation resets.
- ``step``: rule ``on_action`` in order (a :class:`~envharness.transforms.Blocked` action
  does not step the base env) -> base step -> verdict from the base env -> rule
  ``on_transition`` -> observation transforms -> ``info["verdict"]`` written last.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from envharness.adapters import adapter_for
from envharness.adapters.base import digest
from envharness.adapters.nested import NestedAdapter
from envharness.errors import (
    ActionError,
    EpisodeEndedError,
    IncompatibleTransformError,
    SpecError,
    TransformError,
    VerifierTamperError,
)
from envharness.make import allowing_imports, make_base
from envharness.offclock import steps_taken
from envharness.surfaces import AdapterView, StateHandle
from envharness.transforms import CATALOG
from envharness.transforms.base import Blocked, RuleTransform, Step, Transform, transform_from_spec
from envharness.verifier import IN_PROGRESS, RUNNING, TIMEOUT, Verdict

# Separates the harness's random stream from the base env's, which Gymnasium seeds with the same seed.
_STREAM = 0x5EED_E4A1
# An episode's mode: running with nothing between the agent and the base env, running through the
# pipeline, running in a linked env, or over (no step until reset). Compared by identity.
_PLAIN, _RESHAPED, _LINKED, _OVER = "plain", "reshaped", "linked", "over"
_NO_LIMIT = -1  # a countdown that never reaches zero


def _overrides(transform: Transform, hook: str, base: type) -> bool:
    return getattr(type(transform), hook) is not getattr(base, hook)


class _Audited:
    """A transform hook followed by a check that it left the base env's state as it found it."""

    __slots__ = ("harness", "hook", "where")

    def __init__(self, harness: Harness, transform: Transform, hook: str) -> None:
        self.harness, self.hook, self.where = harness, getattr(transform, hook), f"{transform.name}.{hook}"

    def __call__(self, *args: Any) -> Any:
        out = self.hook(*args)
        self.harness._expect_unchanged(self.where)
        return out


class Harness(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Wraps a base env, reshapes it with transforms, and publishes the original verdict.

    Every step's ``info["verdict"]`` is an immutable :class:`~envharness.verifier.Verdict`
    computed from the base env before any transform ran; reset's ``info["level"]`` holds
    the adapter's level features. ``env.spec`` records the transforms as JSON, so
    ``gymnasium.make(env.spec)`` rebuilds the same harness. Once a step ends the episode,
    its verdict is final: the next ``step`` raises :class:`~envharness.errors.EpisodeEndedError`
    until ``reset``.

    Transforms reach the base env only through narrow surfaces (see
    :mod:`envharness.surfaces`). When any transform is not from the catalog, the harness
    also *audits*: it checkpoints the base env's state around every hook of every
    transform and raises :class:`~envharness.errors.VerifierTamperError`, ending the
    episode as a failure, if anything but the base env's own step changed it.

    Args:
        env: the base environment (it may itself contain a harness: the inner verdict is kept).
        transforms: transforms, or ``{"name", "params"}`` dicts, applied in order per kind.
        audit: ``True`` audits catalog transforms too; by default the audit runs when a
            transform is not from the catalog, and it cannot be switched off for those.

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

    def __init__(self, env: gym.Env, transforms: Any = (), *, audit: bool | None = None) -> None:
        built = [transform_from_spec(t) for t in transforms]
        try:
            recorded: dict[str, Any] = {"transforms": [t.to_spec() for t in built]}
        except (ValueError, RecursionError) as error:  # pydantic's "Maximum serialization depth exceeded"
            raise SpecError(
                f"transforms: the stack nests too deeply to be recorded ({str(error).splitlines()[0][:80]}); chain fewer envs inside each other"
            ) from None
        if audit is not None:
            recorded["audit"] = audit
        reshaping = _reshaping_wrapper(env)
        if reshaping is not None:
            name = type(reshaping).__name__
            raise SpecError(
                f"wrap: the env is inside {name}, which changes its observations; a harness must sit under it (state "
                f"transforms re-observe the base env, and a spec cannot record {name}). Wrap the env id and put yours "
                f"outside: {name}(envharness.wrap(ENV_ID, ...)), or use the catalog's ImageOnly or Flatten transform"
            )
        gym.utils.RecordConstructorArgs.__init__(self, **recorded)
        gym.Wrapper.__init__(self, env)
        self.transforms: tuple[Transform, ...] = tuple(built)
        inner = _inner_harness(env)
        adapter = NestedAdapter(env, inner) if inner is not None else adapter_for(env)
        self._adapter = adapter
        # Bound from the class once: replacing ``judge`` on the adapter instance changes nothing.
        self._judge = type(adapter).judge.__get__(adapter)
        self.adapter = AdapterView(adapter)
        custom = any(type(t) not in CATALOG for t in built)
        if audit is False and custom:
            raise SpecError("audit: custom transforms are always audited; drop audit=False (the default audits them)")
        self._audit = custom or bool(audit)
        self._verdict: Verdict = RUNNING
        self._mode = _OVER  # no step before a reset has completed
        self._busy = False  # inside transform hooks, which may not call step() or reset()
        self._mark: Any = adapter.checkpoint() if self._audit else None

        for t in built:
            if t.kind == "state" and t.requires_state_access and not adapter.capabilities:
                self.adapter.require("state", t.name)  # a custom edit the adapter cannot watch: refused
            self._at_wrap(t, "check", t.check, self.adapter, env.observation_space, env.action_space)
        # Typed by kind above: each list holds transforms of one kind (state, rule, observation).
        self._state: list[Any] = [t for t in built if t.kind == "state"]
        self._level_seed: int | None = None  # the seed the base env was last reset with (StateTransform.level_seed)
        rules: list[tuple[Any, dict]] = [(t, {}) for t in built if t.kind == "rule"]
        for t, memo in rules:
            self._at_wrap(t, "bind", t.bind, memo, env.action_space)
        self._rules = rules
        self._on_action = [(self._hook(t, "on_action"), m) for t, m in rules if _overrides(t, "on_action", RuleTransform)]
        self._on_transition = [(self._hook(t, "on_transition"), m) for t, m in rules if _overrides(t, "on_transition", RuleTransform)]

        space = env.observation_space
        self._observers: list[tuple[Any, dict]] = []
        observers: list[Any] = [t for t in built if t.kind == "observation"]
        for t in observers:
            memo = {}
            out = self._at_wrap(t, "observation_space", t.observation_space, space)
            self._at_wrap(t, "bind", t.bind, memo, space)
            self._observers.append((t, memo))
            space = out
        self._observation_space = space
        self._observe = [(self._hook(t, "observe"), m) for t, m in self._observers]

        self._links = [self._build_link(t, space) for t in built if t.kind == "link"]
        # Blocked steps never reach the base env's own time limit, so the harness keeps one too.
        self._max_steps: int | None = adapter.time_limit()
        # Which step path a running episode takes: nothing between the agent and the base env (which
        # then enforces the time limit itself), or the pipeline.
        direct = not (self._on_action or self._on_transition or self._observe or self._links or self._audit)
        self._running = _PLAIN if direct and self._max_steps in (None, adapter.enforced_limit()) else _RESHAPED
        self._left = _NO_LIMIT  # agent steps left before the harness truncates
        self._rng: np.random.Generator | None = None
        self._raw_obs: Any = None
        self._plain_action = _action_coercer(env.action_space)
        # An action outside a Discrete space is a one-line error; a plain int in range costs only the comparison.
        self._check_action: Any = _action_check(env.action_space)
        acts: Any = env.action_space
        self._actions_in = (int(acts.start), int(acts.start) + int(acts.n)) if self._check_action is not None else None
        # gym.make's own wrappers (time limit, order and API checks) as a route the plain path can take in one call.
        self._route = _checked_route(env)
        self._direct: tuple[Any, Any] | None = None
        self._segment: int | None = None
        self._segment_verdicts: list[Verdict] = []

    # -- audit ---------------------------------------------------------------------------
    # A checkpoint refers to live classes and objects: a copy takes a fresh one of its own env.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_mark": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._audit:
            self._mark = self._adapter.checkpoint()

    def _at_wrap(self, transform: Transform, name: str, call: Any, *args: Any) -> Any:
        """Run a wrap-time method of a transform; audited like the hooks when the transform is custom."""
        out = call(*args)
        if self._audit and type(transform) not in CATALOG:
            self._expect_unchanged(f"{transform.name}.{name}")
        return out

    def _apply_state(self, transform: Any, obs: Any, rng: np.random.Generator) -> Any:
        """One state transform, through a handle revoked when it returns.

        A custom one may edit the level through the handle's edits, nothing else: the handle
        watches the env between its edits and after ``apply`` returns.
        """
        watch = self._adapter.checkpoint if self._audit and type(transform) not in CATALOG else None
        handle = StateHandle(self._adapter, transform.name, watch, seed=self._level_seed)
        try:
            obs = transform.apply(handle, obs, rng)
            handle.settle()
        finally:
            handle.revoke()
        return obs

    def _hook(self, transform: Transform, name: str) -> Any:
        if self._audit:
            return _Audited(self, transform, name)
        return getattr(transform, name)

    def _expect_unchanged(self, where: str) -> None:
        try:
            changed = self.env is not self._adapter.env or self._adapter.checkpoint() != self._mark
        except Exception:  # a replaced value that cannot even be compared (an array on a class) is a change
            changed = True
        if changed:
            self._mode = _OVER
            self._verdict = Verdict(False, 0.0, f"tampered: {where}")
            raise VerifierTamperError(
                f"{where} changed the base env's state (or replaced one of its methods); transforms may "
                "change the action, the reward, the ends and the observation, never the world: edit state "
                "in a state transform through its StateHandle"
            )

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self._busy:
            raise self._refusal("reset")
        self._mode, self._verdict, self._segment = _OVER, RUNNING, None
        self._busy = True
        try:
            obs, info = self._reset(seed, options)
        finally:
            self._busy = False
        # Some envs (BabyAI) set their step limit per level.
        self._max_steps = self._adapter.time_limit()
        self._left = self._max_steps or _NO_LIMIT
        self._mode = self._running
        return obs, info

    def _reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        if not self.transforms:
            pass  # nothing draws from the harness's stream: seeding it would only cost time
        elif seed is not None:
            self._rng = np.random.default_rng([seed, _STREAM])
        elif self._rng is None:
            self._rng = np.random.default_rng()
        rng: Any = self._rng  # None only when there are no transforms to draw from it
        self._level_seed = seed
        for t in self._state:  # a start from recorded play is reset on its recording's level
            mapped = t.level_seed(self._level_seed)
            if mapped is not None and (type(mapped) is not int or mapped < 0):
                raise TransformError(f"{t.name}.level_seed returned {mapped!r}; return a seed (an int >= 0) or None")
            self._level_seed = mapped
        obs, info = self.env.reset(seed=self._level_seed, options=options)
        adapter = self._adapter
        adapter.on_base_reset()
        adapter.begin_setup()
        if self._state:  # setup is played only by state transforms: an original env's reset reads no counter
            setup = steps_taken(kind="setup")
            for t in self._state:
                obs = self._apply_state(t, obs, rng)
            setup = steps_taken(kind="setup") - setup
        adapter.restart_clock()
        adapter.begin_episode()
        # The start check is for reshaped levels: an original level is what its env makes it
        # (GoToDoor can draw one that `done` completes at once), and the peers' own tests reset it.
        solved = adapter.solved() if self._state else None
        if solved is not None:
            by = ", ".join(t.name for t in self._state)
            raise TransformError(
                f"{by}: the level is solved before the agent acts ({solved}); a level must leave the agent "
                "something to do: change the transform's parameters"
            )
        if self._audit:
            self._mark = adapter.checkpoint()
            for t, memo in self._rules:
                t.on_reset(memo, obs, rng)
                self._expect_unchanged(f"{t.name}.on_reset")
            for t, memo in self._observers:
                t.on_reset(memo, rng)
                self._expect_unchanged(f"{t.name}.on_reset")
        else:
            for t, memo in self._rules:
                t.on_reset(memo, obs, rng)
            for t, memo in self._observers:
                t.on_reset(memo, rng)
        self._raw_obs = obs
        for hook, memo in self._observe:
            obs = hook(obs, memo, rng)
        info = dict(info)
        info["level"] = adapter.level_features()
        level_id = self.adapter.level_id()
        if options and level_id is not None:
            # Reset options can set the start (MountainCar's low/high): the level is not the default one.
            level_id = f"{level_id}+{digest(sorted(options.items()))}"
        info["level_id"] = level_id
        info["verdict"] = RUNNING
        if self._state:
            info["setup_steps"] = setup  # base-env steps state transforms played before the agent's clock started
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        bounds = self._actions_in
        if bounds is not None and not (type(action) is int and bounds[0] <= action < bounds[1]) and self._mode is not _OVER:
            self._check_action(action)
        if self._mode is _PLAIN:
            # Over until this step completes: an exception, or a second thread stepping at the same
            # time, finds the episode ended instead of continuing from a half-done step.
            self._mode = _OVER
            obs, reward, terminated, truncated, info = self._base_step(action)
            verdict = self._judge(obs, reward, terminated, truncated, info)
            if verdict is RUNNING and not (terminated or truncated):
                self._mode = _PLAIN
                info["verdict"] = RUNNING
                return obs, reward, terminated, truncated, info
            return self._conclude(obs, reward, terminated, truncated, info, verdict)
        if self._mode is _OVER:
            raise self._refusal("step")
        # Until this step completes the episode counts as over, so an exception anywhere below ends it.
        mode, self._mode = self._mode, _OVER
        if mode is _LINKED:
            return self._step_linked(action)
        self._busy = True
        try:
            obs, reward, terminated, truncated, info, verdict = self._step_reshaped(action)
        finally:
            self._busy = False
        self._left -= 1
        return self._conclude(obs, reward, terminated, truncated, info, verdict)

    def _base_step(self, action: Any) -> tuple[Any, Any, bool, bool, Any]:
        """The base env's step, as ``self.env.step`` gives it."""
        direct = self._direct
        if direct is not None:
            # What TimeLimit(OrderEnforcing(PassiveEnvChecker(env))) does once its checks have run: the
            # harness enforces the order itself (no step before a reset), and keeps the time limit's count.
            obs, reward, terminated, truncated, info = direct[0].step(action)
            limiter = direct[1]
            if limiter is not None:
                limiter._elapsed_steps = elapsed = limiter._elapsed_steps + 1
                if elapsed >= limiter._max_episode_steps:
                    truncated = True
            return obs, reward, terminated, truncated, info
        out = self.env.step(action)
        route = self._route
        if route is not None and (route[2] is None or (route[2].checked_step and route[2].checked_data_reuse)):
            self._direct = (route[0], route[1])
        return out

    def _conclude(self, obs: Any, reward: Any, terminated: bool, truncated: bool, info: Any, verdict: Verdict) -> tuple:
        """Time limit, endings and the verdict of a step whose base transition (if any) is done."""
        if not terminated and not self._left:
            truncated = True
        if verdict.success:
            # Success ends the episode even if a transform moved the base env's own goal test.
            terminated = terminated or not truncated
        elif (terminated or truncated) and verdict.reason == IN_PROGRESS:
            verdict = Verdict(False, 0.0, TIMEOUT if truncated else "ended by a rule")
        if type(info) is not dict:  # a dict subclass could swallow the verdict below
            info = dict(info)
        self._verdict = verdict
        if terminated or truncated:
            self._mode = _OVER
            if verdict.success and self._links:
                return self._enter_segment(0, verdict, reward, info)
        else:
            self._mode = self._running
        info["verdict"] = verdict
        return obs, reward, terminated, truncated, info

    @property
    def ended(self) -> bool:
        """Whether the current episode is over (or no reset has completed): ``step()`` would raise."""
        return self._mode is _OVER

    def starts_solved(self) -> str | None:
        """Why the level just reset is already solved before the agent acts, or None.

        A reshaped level that starts solved is refused at ``reset()``; an original level is
        played as its env makes it, and this says whether it is one a first ``done`` wins
        (MiniGrid's GoToDoor-5x5 at seed 3), for callers that choose levels.

        Example:
            >>> import envharness
            >>> env = envharness.wrap("MiniGrid-GoToDoor-5x5-v0")
            >>> _ = env.reset(seed=3)
            >>> env.starts_solved()
            '`done`, which does nothing, already completes the mission'
            >>> _ = env.reset(seed=0)
            >>> env.starts_solved() is None
            True
        """
        return self._adapter.solved()

    def _refusal(self, call: str) -> Exception:
        if self._busy:
            return TransformError(
                f"{call}() was called from inside a transform hook; hooks may reshape the step they are given, "
                "never drive the env themselves"
            )
        return EpisodeEndedError(
            f"{call}(): the episode has ended (or its reset did not complete) and its verdict is final; call reset() first"
        )

    def _step_reshaped(self, action: Any) -> tuple[Any, Any, bool, bool, Any, Verdict]:
        """The pipeline between the agent's action and the verdict: rules, base step, observers."""
        rng = self._rng
        if self._audit:
            self._expect_unchanged("something outside the harness, between steps,")
        for hook, memo in self._on_action:
            action = hook(action, memo, rng)
            if action.__class__ is Blocked:
                break
        if self._audit and action.__class__ is not Blocked and self._plain_action is not None:
            # A custom rule's action object could run code inside the base step: pass on plain data.
            action = self._plain_action(action)
            self._expect_unchanged("the action a transform returned")
        reward: SupportsFloat
        if action.__class__ is Blocked:
            blocked = action.reason
            action, obs, reward, base_term, base_trunc = None, self._raw_obs, 0.0, False, False
            info: Any = {"blocked": blocked}
            verdict = self._verdict
        else:
            blocked = None
            obs, reward, base_term, base_trunc, info = self._base_step(action)
            verdict = self._judge(obs, reward, base_term, base_trunc, info)
            info = dict(info)  # rules edit a copy: the base env and its wrappers may keep theirs
            base_term, base_trunc = bool(base_term), bool(base_trunc)
            self._raw_obs = obs
            if self._audit:
                self._mark = self._adapter.checkpoint()
        terminated, truncated, end_reason = base_term, base_trunc, None
        if self._on_transition:
            step = Step(action, obs, reward, base_term, base_trunc, info, blocked)
            for hook, memo in self._on_transition:
                hook(step, memo)
            # Rules may add an ending, never remove the base env's own.
            # Plain bools and a fresh dict: what a rule handed over cannot change after the fact.
            reward, info, end_reason = step.reward, dict(step.info), step.end_reason
            terminated = bool(step.terminated) or base_term
            truncated = bool(step.truncated) or base_trunc
        for hook, memo in self._observe:
            obs = hook(obs, memo, rng)
        if (terminated or truncated) and not verdict.success and verdict.reason == IN_PROGRESS and end_reason:
            verdict = Verdict(False, 0.0, end_reason)
        return obs, reward, terminated, truncated, info, verdict

    def close(self) -> None:
        for linked in self._links:
            linked.close()
        super().close()

    # -- links -------------------------------------------------------------------------
    def _build_link(self, link: Any, space: Any) -> Harness:
        base, transforms = link.segment()
        linked = Harness(base, transforms)
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
        assert self._rng is not None  # a link is a transform: the harness's stream exists
        obs, _ = self._links[index].reset(seed=int(self._rng.integers(2**31 - 1)))
        # The episode goes on: a finished segment's success is not the episode's.
        self._verdict, self._mode = RUNNING, _LINKED
        info["segment"] = index + 1
        info["verdict"] = RUNNING
        return obs, reward, False, False, info

    def _step_linked(self, action: Any) -> tuple:
        index = self._segment
        assert index is not None  # only called while a linked segment runs
        linked = self._links[index]
        obs, reward, terminated, truncated, info = linked.step(action)
        info = dict(info)
        # The linked harness's own record, not whatever its info says.
        verdict = linked._verdict
        if (terminated or truncated) and verdict.success and index + 1 < len(self._links):
            return self._enter_segment(index + 1, verdict, reward, info)
        if terminated or truncated:
            verdicts = [*self._segment_verdicts, verdict]
            score = float(np.mean([v.score for v in verdicts]))
            reason = "all linked segments succeeded" if verdict.success else f"segment {index + 2}: {verdict.reason}"
            verdict = Verdict(verdict.success, score if verdict.success else 0.0, reason)
            self._segment = None
        else:
            self._mode = _LINKED
        self._verdict = verdict
        info["segment"] = index + 1
        info["verdict"] = verdict
        return obs, reward, terminated, truncated, info


def _plain_text(action: Any) -> Any:
    return str.__str__(action) if isinstance(action, str) else action


class _DiscreteCheck:
    """A check that an action lies in a ``Discrete`` space, raising :class:`~envharness.errors.ActionError`.

    A class, not a closure, so a harness that holds one still pickles (MiniGrid's own tests pickle stepped envs).
    """

    def __init__(self, space: gym.spaces.Discrete) -> None:
        self.space = space
        self.start, self.stop = int(space.start), int(space.start) + int(space.n)

    def __call__(self, action: Any) -> None:
        start, stop = self.start, self.stop
        if type(action) is int and start <= action < stop:
            return
        index: int | None
        try:
            index = operator.index(action)
        except TypeError:  # a one-element integer array (what some policies return) is still one action
            index = int(action.reshape(())) if isinstance(action, np.ndarray) and action.size == 1 and action.dtype.kind in "iu" else None
        if index is None or type(action) is bool or not start <= index < stop:
            shown = repr(action)[:60]
            raise ActionError(f"step(): action {shown} is not in the action space {self.space}; give an integer from {start} to {stop - 1}")


def _action_check(space: gym.Space) -> _DiscreteCheck | None:
    """A check that an action lies in a ``Discrete`` space (raising :class:`~envharness.errors.ActionError`), or None."""
    return _DiscreteCheck(space) if type(space) is gym.spaces.Discrete else None


def _action_coercer(space: gym.Space) -> Any:
    """A function turning an action into plain data of ``space``'s kind (None: leave actions as they are)."""
    if isinstance(space, gym.spaces.Discrete):
        return operator.index
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return functools.partial(np.asarray, dtype=space.dtype)
    if isinstance(space, gym.spaces.Text):
        return _plain_text
    return None


def _checked_route(env: gym.Env) -> tuple[Any, Any, Any] | None:
    """``(inner, TimeLimit or None, PassiveEnvChecker or None)`` when ``env`` is ``inner`` under gym.make's own wrappers only.

    Those wrappers change nothing once the checker has run and a reset has happened, apart from
    the time limit's truncation, so the plain path steps ``inner`` and applies the limit itself.
    """
    from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

    limiter = checker = None
    node: Any = env
    while type(node) in (TimeLimit, OrderEnforcing, PassiveEnvChecker):
        if type(node) is TimeLimit:
            if limiter is not None:
                return None
            limiter = node
        elif type(node) is PassiveEnvChecker:
            checker = node
        node = node.env
    return None if node is env else (node, limiter, checker)


def _reshaping_wrapper(env: gym.Env) -> gym.Wrapper | None:
    """The outermost wrapper above the base env (or an inner harness) that changes what the agent observes."""
    while isinstance(env, gym.Wrapper) and not isinstance(env, Harness):
        inner = env.env
        if isinstance(env, gym.ObservationWrapper) or env.observation_space != inner.observation_space:
            return env
        env = inner
    return None


def _inner_harness(env: gym.Env) -> Harness | None:
    """The harness inside ``env`` (under any wrappers), if there is one."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, Harness):
            return env
        env = env.env
    return None


def wrap(env_or_id: gym.Env | str, *transforms: Any, allow_imports: Iterable[str] = (), **make_kwargs: Any) -> Harness:
    """Wrap an env (or make one from its id with ``make_kwargs``) and reshape it with ``transforms``.

    ``allow_imports`` names the modules that ``module:Env`` ids (the base env's, or a
    :class:`~envharness.transforms.Chain`'s) may import; none by default.

    Example:
        >>> import envharness
        >>> from envharness.transforms import MoveGoal, ActionSlip
        >>> env = envharness.wrap("MiniGrid-DoorKey-8x8-v0", MoveGoal(max_dist=3), ActionSlip(p=0.1))
        >>> obs, info = env.reset(seed=0)
        >>> info["verdict"]
        Verdict(success=False, score=0.0, reason='in progress')
    """
    with allowing_imports(*allow_imports):
        if isinstance(env_or_id, str):
            env = make_base(env_or_id, **make_kwargs)
        elif isinstance(env_or_id, gym.Env):
            if make_kwargs:
                raise SpecError(f"wrap: keyword arguments {sorted(make_kwargs)} only apply to an env id; pass them to your env instead")
            env = env_or_id
        else:
            raise SpecError(f"wrap: got {type(env_or_id).__name__}; pass a gymnasium.Env or a registered env id")
        return Harness(env, transforms)
