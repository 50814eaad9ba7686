"""The adapter interface: how envharness reads, edits and judges one benchmark family.

Contains :class:`Adapter` (the interface and the generic fallback used for any Gymnasium
env), the capability names state transforms ask for, and :func:`grid_distances`, the
breadth-first search the grid families share for goal distances and solvability.

What success *means* is fixed when the adapter is made, from the env's registration:
the time limit the verifier counts against is the registered one (``env_kwargs`` may
tighten it, never loosen it), and each family names the constructor arguments that
would redefine success (:attr:`Adapter.verifier_kwargs`), which are judged at their
registered values. What the *level* is (map, start, physics) is read at reset, after
state transforms; every non-registered keyword argument is part of the level id.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import pickle
import sys
from collections import deque
from collections.abc import Callable, Collection
from typing import Any

import gymnasium as gym
import numpy as np

from envharness.errors import IncompatibleTransformError, SpecError, StateAccessError
from envharness.verifier import RUNNING, TIMEOUT, Verdict

CAPABILITIES = {
    "goal": "move the goal",
    "agent": "move the agent's start",
    "walls": "add or remove walls",
    "lava": "add lava",
    "map": "edit the hole map",
    "physics": "change physical constants",
    "initial_state": "perturb the initial state",
    "walkthrough": "play part of the game's own walkthrough",
    "state": "edit its state",
}


class Adapter:
    """Reads and edits one base env's state, judges success, and lists level features.

    This base class is the generic adapter: it serves any Gymnasium env, judges with the
    env's own success signal (``info["success"]`` or ``info["is_success"]`` at the end of
    an episode, else terminated with positive reward) and has no state access.

    Args:
        env: the base environment as made (wrappers such as ``TimeLimit`` included).

    Example:
        >>> import gymnasium as gym
        >>> adapter = Adapter(gym.make("Pendulum-v1"))
        >>> adapter.family, sorted(adapter.capabilities)
        ('generic', [])
        >>> adapter.judge(None, 1.0, True, False, {"is_success": True})
        Verdict(success=True, score=1.0, reason='success signal')
    """

    family = "generic"
    capabilities: frozenset[str] = frozenset()
    # Names in the env's own terms, for reports and diagnosed conditions: each action of a
    # Discrete space, and the stored state features (``obs[i]``, ``position[i]``) that have one.
    action_names: tuple[str, ...] = ()
    state_names: dict[str, str] = {}
    physics_names: frozenset[str] = frozenset()
    # Attributes of the unwrapped env that make up its state; empty means no state access.
    state_attrs: tuple[str, ...] = ()
    # Whether the observation shows where the goal is (FrozenLake's position index does not).
    observes_goal: bool = True
    # Constructor arguments that would redefine success; the verifier uses their registered values.
    verifier_kwargs: tuple[str, ...] = ()
    # The step limit of a family whose registration has none (an episode must end to be judged).
    fallback_limit: int | None = None
    # Constructor arguments that change neither the level nor success (left out of the level id).
    neutral_kwargs: tuple[str, ...] = ("render_mode",)
    # Whether level_id() itself already names how setup reached the start (TextWorld's replayed commands).
    names_setup: bool = False
    # Verdict reasons of endings that cannot be undone (lava, a hole, the pole falling, a failed submit):
    # an episode ended by one is an irreversible failure.
    irreversible_endings: frozenset[str] = frozenset()
    # Verdict reasons of endings the agent chose (a submit): one with step budget left and no success is giving up.
    agent_endings: frozenset[str] = frozenset()
    # What a step of this episode destroyed for good though the episode went on (code repair: a file
    # left empty), noted by judge(); an episode with one that fails is an irreversible failure too.
    destroyed: str | None = None

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.raw: Any = env.unwrapped  # the family's own env class: adapters read its attributes
        self._features: dict[str, float] = {}
        self._layers = _layers(env)
        self._clocks: list[Any] = [layer for layer in self._layers if isinstance(layer, gym.wrappers.TimeLimit)]
        if self.family != "generic":
            _check_registration(env, self.family)
        made, registered = _time_limits(env)
        if registered is None:
            registered = self.fallback_limit
        if made is not None and registered is not None and made > registered:
            raise looser_limit_error("max_episode_steps", made, registered, env_name_of(env), self.fallback_limit is not None)
        known = [limit for limit in (made, registered) if limit is not None]
        # Episodes end at the tighter limit; a verifier that counts survival counts to the registered one.
        self._limit = min(known) if known else None
        self._registered_limit = registered if registered is not None else made
        extra = {k: v for k, v in _unregistered_kwargs(env).items() if k not in self.neutral_kwargs}
        self.kwargs_key = digest(sorted(extra.items())) if extra else ""
        self._setup: list[tuple[Any, ...]] = []  # how this episode's start was reached, beyond the base env's reset
        # By position in (*layers, adapter), so that a pickled copy of the harness keeps working.
        self._class_callables = [_callable_names(type(layer)) for layer in (*self._layers, self)]
        self._unpicklable: set[tuple[int, str]] = set()

    @classmethod
    def matches(cls, env_type: type) -> bool:
        """Whether this adapter serves envs of the unwrapped class ``env_type``."""
        return True

    def require(self, capability: str, transform: str) -> None:
        """Raise a clear error unless this adapter offers ``capability``."""
        if capability in self.capabilities:
            return
        env_name = type(self.raw).__name__
        what = CAPABILITIES.get(capability, capability)
        if not self.capabilities:
            raise StateAccessError(
                f"{transform}: envharness has no state access to {env_name} (generic adapter), so it "
                f"cannot {what}; use a rule or observation transform, or ReplayPrefix, instead"
            )
        offered = ", ".join(sorted(self.capabilities))
        raise IncompatibleTransformError(
            f"{transform}: {env_name} ({self.family} adapter) cannot {what}; it supports state transforms needing: {offered}"
        )

    # -- episode life cycle ------------------------------------------------------------
    def on_base_reset(self) -> None:
        """Called right after the base env resets, before state transforms (undo edits that persist)."""

    def begin_setup(self) -> None:
        """Called after :meth:`on_base_reset`: the start is the base env's own until setup changes it."""
        self._setup = []

    def note_setup(self, *what: Any) -> None:
        """Record a change to how the episode starts that :meth:`level_id` does not read from the state.

        Setup steps (a replayed prefix) are recorded by :meth:`setup_step`; a family whose
        level id is not the whole start (classic control's is its physics) records the
        distribution a state edit draws from (``InitialStateNoise``'s scale).
        """
        self._setup.append(what)

    def setup_key(self) -> str:
        """A digest of the setup that reached this episode's start ("" when it is the base env's own reset)."""
        return digest(self._setup) if self._setup and not self.names_setup else ""

    def begin_episode(self) -> None:
        """Snapshot what the verifier judges against, after state transforms have run."""

    def restart_clock(self) -> None:
        """Start the agent's time at zero after state transforms (a replayed prefix is setup, not play)."""
        for layer in self._clocks:
            layer._elapsed_steps = 0

    def solved(self) -> str | None:
        """Why the verifier would already call the current state a success (None if it would not)."""
        return None

    def refuse_setup(self, action: Any) -> str | None:
        """Why ``action`` may not be taken as setup, before the agent acts (None if it may)."""
        return None

    def setup_step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        """Step the base env as setup (a replayed prefix), before the agent acts."""
        self.note_setup("step", np.asarray(action).tolist())
        return self.env.step(action)

    def time_limit(self) -> int | None:
        """The most agent steps an episode may take: the registered limit, or a tighter made one."""
        return self._limit

    def enforced_limit(self) -> int | None:
        """The step limit the base env enforces by itself (its ``TimeLimit``), if any."""
        limits = [layer._max_episode_steps for layer in self._clocks]
        return min(limits) if limits else None

    def pristine(self) -> Any:
        """An unwrapped env made with this one's arguments, except :attr:`verifier_kwargs` at their registered values.

        It is this env itself when no such argument was changed.
        """
        spec = self.env.spec
        kwargs = dict(spec.kwargs) if spec is not None else {}
        registered = gym.registry[spec.id].kwargs if spec is not None and spec.id in gym.registry else {}
        changed = [k for k in self.verifier_kwargs if k in kwargs and (k not in registered or not _same(registered[k], kwargs[k]))]
        if not changed:
            return self.raw
        for k in changed:
            if k in registered:
                kwargs[k] = registered[k]
            else:
                del kwargs[k]
        kwargs.pop("render_mode", None)
        return type(self.raw)(**kwargs)

    def checkpoint(self) -> list[Any]:
        """A value that changes whenever anything the verifier could depend on changes.

        It covers every attribute of the unwrapped env and of each wrapper under the
        harness (``TimeLimit`` counters included), the env's random generators, methods
        replaced on an instance, the classes themselves, and this adapter's own snapshot;
        not the observation and action spaces, whose generators advance when a policy
        samples an action. The harness compares checkpoints around code that must not edit
        the base env.
        """
        out: list[Any] = []
        for index, obj in enumerate((*self._layers, self)):
            self._watch(out, index, obj, _ADAPTER_UNTRACKED if obj is self else _UNTRACKED)
        return out

    def _watch(self, out: list[Any], index: int, obj: Any, skip: frozenset[str]) -> None:
        cls: Any = type(obj)
        # The class and everything defined on it, and the globals of the modules defining it: a method
        # patched on the class or a module function replaced shows here (compared by identity first,
        # so an untouched class compares equal at once).
        out.append((cls, tuple(tuple(vars(klass).values()) for klass in cls.__mro__ if klass not in _SEALED)))
        out.append(tuple(tuple(vars(module).values()) for module in _modules_of(cls)))
        if isinstance(obj, gym.Wrapper):
            out.append(("wraps", id(obj.env)))  # a wrapper spliced into the chain
        callables = self._class_callables[index]
        human = getattr(obj, "render_mode", None) == "human"  # then step() itself renders
        names, values = [], []
        for name, value in vars(obj).items():
            if name in skip:
                continue
            if name in callables:
                out.append(("replaced method", name, id(value)))
            elif isinstance(value, gym.spaces.Space):
                # Sampling an action advances a space's generator between steps; the space itself is watched.
                out.append((name, type(value), id(value)))
            elif name in _RENDERING:
                # Made lazily by render() between steps; only a human-mode step calls into them.
                if human:
                    out.append((name, type(value), id(value)))
            elif (index, name) in self._unpicklable:
                out.append((name, type(value), id(value)))  # sandboxes, closures: their identity is what we can watch
            else:
                names.append(name)
                values.append(value)
        # The real types too: an object can pickle like another one.
        out.append((tuple(names), tuple(map(type, values))))
        try:
            out.append(_pickled(values))
        except Exception:
            for name, value in zip(names, values):
                try:
                    out.append((name, _pickled(value)))
                except Exception:
                    self._unpicklable.add((index, name))
                    out.append((name, id(value)))

    def observe(self) -> Any:
        """Re-read the base env's observation after its state was edited."""
        raise StateAccessError(f"{type(self.raw).__name__}: envharness cannot re-read this env's observation; it has no state access")

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        """The original verifier on one raw base transition."""
        if not (terminated or truncated):
            return RUNNING
        signal = info.get("success", info.get("is_success"))
        if signal is not None:
            success = bool(signal)
            return Verdict(success, 1.0 if success else 0.0, "success signal" if success else "no success signal")
        if terminated and float(reward) > 0:
            return Verdict(True, 1.0, "terminated with positive reward")
        return Verdict(False, 0.0, TIMEOUT if truncated and not terminated else "terminated without success")

    def level_id(self) -> str | None:
        """A short digest of what defines the current level (map, start, physics), or None if unknown.

        Episodes with the same level id played from different seeds differ only in the
        env's or policy's randomness, which is what variance-across-seeds compares.
        """
        return None

    def position(self) -> Any:
        """Where the agent is, as small JSON-able data (for loop detection), or None if unknown."""
        return None

    def level_features(self) -> dict[str, float]:
        """Numeric descriptors of the current level (goal distance, map size, pole length...)."""
        return dict(self._features)

    # -- state access ------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """A copy of everything that determines the env's future, for :meth:`set_state`."""
        if not self.state_attrs:
            raise StateAccessError(f"{type(self.raw).__name__}: no state access through the generic adapter")
        raw = self.raw
        return {name: copy.deepcopy(getattr(raw, name)) for name in self.state_attrs if hasattr(raw, name)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state taken with :meth:`get_state`."""
        if not self.state_attrs:
            raise StateAccessError(f"{type(self.raw).__name__}: no state access through the generic adapter")
        for name, value in state.items():
            setattr(self.raw, name, copy.deepcopy(value))


# Attributes no verifier reads: the wrapper link (watched by identity instead), and the env
# checker's copy of the last (obs, info), which transforms are handed.
_UNTRACKED = frozenset({"env", "_previous_data"})
_ADAPTER_UNTRACKED = frozenset({"env", "raw", "_layers", "_clocks", "_class_callables", "_unpicklable"})
# What rendering creates or updates outside step(), watched only where step() renders.
_RENDERING = frozenset({"screen", "clock", "window", "isopen", "surf", "viewer"})
# Classes whose attributes Python itself refuses to change, and modules that are not the env's.
_SEALED = frozenset({object})
_FOREIGN_MODULES = frozenset({"builtins", "typing", "abc", "gymnasium.core", "gymnasium.utils.record_constructor"})


def _pickled(value: Any) -> bytes:
    """Pickle bytes from a pickler of our own: copyreg registrations elsewhere do not change them."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {}
    pickler.dump(value)
    return buffer.getvalue()


@functools.lru_cache(maxsize=256)
def _modules_of(cls: type) -> tuple[Any, ...]:
    """The modules defining ``cls`` and its bases (where the functions its methods call live)."""
    names = {klass.__module__ for klass in cls.__mro__} - _FOREIGN_MODULES
    return tuple(sys.modules[name] for name in sorted(names) if name in sys.modules)


def _layers(env: gym.Env) -> tuple[gym.Env, ...]:
    """``env`` and every env it wraps, down to the unwrapped one."""
    out = [env]
    while isinstance(out[-1], gym.Wrapper):
        out.append(out[-1].env)
    return tuple(out)


def _callable_names(cls: type) -> frozenset[str]:
    return frozenset(
        name
        for klass in cls.__mro__
        for name, value in vars(klass).items()
        if callable(value) or isinstance(value, (staticmethod, classmethod, property))
    )


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays compare elementwise
        return repr(a) == repr(b)


def _time_limits(env: gym.Env) -> tuple[int | None, int | None]:
    """The made env's ``max_episode_steps`` and its registration's (None where unknown)."""
    spec = env.spec
    if spec is None:
        return None, None
    registered = gym.registry[spec.id].max_episode_steps if spec.id in gym.registry else None
    return spec.max_episode_steps, registered


def env_name_of(env: gym.Env) -> str:
    """The env's registered id, or its class name when it was made without a registration."""
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


def looser_limit_error(name: str, asked: int, limit: int, env_name: str, given: bool = False) -> SpecError:
    """The one-line refusal of a step limit above the one success is judged within."""
    whose = (
        f"the {limit} steps envharness gives {env_name} (its registration has no limit)"
        if given
        else f"{env_name}'s registered {limit} steps"
    )
    return SpecError(
        f"env_kwargs.{name}: {asked} is above {whose}, within which success is judged; give at most {limit} "
        "(a tighter limit is kept, and names another level), or register an env id of your own with a longer limit"
    )


def _check_registration(env: gym.Env, family: str) -> None:
    """Refuse a family env whose spec is not its id's registration: success is defined there."""
    spec = env.spec
    if spec is None:
        return  # made from its class: the caller's own env, judged by what it was constructed with
    registered = gym.registry.get(spec.id)
    if registered is None:
        raise SpecError(
            f"env spec {spec.id!r} is not registered, and a {family} env's success (its time limit, its arguments) is "
            "judged at its registration; make it from a registered id (gymnasium.make(id, **kwargs)), or gym.register it first"
        )
    if registered.entry_point != spec.entry_point:
        raise SpecError(
            f"env spec {spec.id!r}: its entry point {spec.entry_point!r} is not its registration's "
            f"({registered.entry_point!r}), and success is judged at the registration; make it from the registered id"
        )


def _unregistered_kwargs(env: gym.Env) -> dict[str, Any]:
    """The made env's arguments that its registration does not give (``max_episode_steps`` included)."""
    spec = env.spec
    if spec is None or spec.id not in gym.registry:
        return {}
    registered = gym.registry[spec.id]
    extra = {k: v for k, v in spec.kwargs.items() if k not in registered.kwargs or not _same(registered.kwargs[k], v)}
    if spec.max_episode_steps != registered.max_episode_steps:
        extra["max_episode_steps"] = spec.max_episode_steps
    return extra


GROUP_MARK = "::"  # a level id "group::variant" belongs to its group (HumanEvalFix: problem::mutation)


def level_group(level_id: str) -> str:
    """The group a level belongs to, which held-out sets keep whole: the id up to ``::``, else the id itself.

    Example:
        >>> level_group("HumanEval/12::comparison@14:15"), level_group("minigrid-3f2a")
        ('HumanEval/12', 'minigrid-3f2a')
    """
    return level_id.split(GROUP_MARK, 1)[0]


def is_reserved(level: str, reserved: Collection[str]) -> bool:
    """Whether ``level`` is reserved: it, or its group, is in ``reserved``.

    Example:
        >>> is_reserved("HumanEval/3::boolean@9:4", {"HumanEval/3::comparison@12:8"})
        True
    """
    if level in reserved:
        return True
    if GROUP_MARK not in level:
        return False
    group = level_group(level)
    return any(r == group or r.startswith(group + GROUP_MARK) for r in reserved)


def digest(*parts: Any) -> str:
    """16 hex digits identifying ``parts`` (arrays by their bytes, anything else by repr)."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(np.ascontiguousarray(part).tobytes() if isinstance(part, np.ndarray) else repr(part).encode())
    return h.hexdigest()


def grid_distances(width: int, height: int, start: tuple[int, int], passable: Callable[[int, int], bool]) -> np.ndarray:
    """Shortest 4-neighbour path lengths from ``start``; -1 where unreachable.

    Example:
        >>> d = grid_distances(3, 2, (0, 0), lambda x, y: (x, y) != (1, 0))
        >>> d.T.tolist()
        [[0, -1, 4], [1, 2, 3]]
    """
    dist = np.full((width, height), -1, dtype=np.int64)
    dist[start] = 0
    queue = deque([start])
    while queue:
        x, y = queue.popleft()
        for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if 0 <= nx < width and 0 <= ny < height and dist[nx, ny] < 0 and passable(nx, ny):
                dist[nx, ny] = dist[x, y] + 1
                queue.append((nx, ny))
    return dist


def pick_by_distance(cells: list[tuple[int, int]], dist: np.ndarray, lo: int, hi: int, rng: np.random.Generator) -> tuple[int, int] | None:
    """A random cell among ``cells`` whose ``dist`` lies in ``[lo, hi]``, or None."""
    eligible = [c for c in cells if lo <= dist[c] <= hi]
    if not eligible:
        return None
    return eligible[int(rng.integers(len(eligible)))]
