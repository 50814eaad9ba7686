"""What transforms (and users) may touch of a base env: a read-only view and a revocable write handle.

Contains :class:`AdapterView` and :class:`StateHandle`. Transforms never receive the raw
env or the adapter: ``check`` and ``proposable`` get an :class:`AdapterView` (what the
env offers, its level features, the agent's position), and a state transform's ``apply``
gets a :class:`StateHandle`, whose edits are the adapter's documented ones, each allowed
only if the adapter offers its capability, and which stops working when ``apply``
returns. ``Harness.adapter`` is an :class:`AdapterView` too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envharness.errors import TransformError, VerifierTamperError
from envharness.offclock import charge

# The capability each kind of cell edit needs.
_CELL_CAPABILITY = {"wall": "walls", "lava": "lava", "hole": "map"}


class AdapterView:
    """Read-only access to an adapter: what the env offers and where the episode stands.

    Args:
        adapter: the adapter to read.

    Example:
        >>> import envharness
        >>> view = envharness.wrap("MiniGrid-Empty-5x5-v0").adapter
        >>> view.family, sorted(view.capabilities)
        ('minigrid', ['agent', 'goal', 'lava', 'walkthrough', 'walls'])
        >>> hasattr(view, "raw") or hasattr(view, "set_state") or hasattr(view, "judge")
        False
    """

    __slots__ = ("_adapter",)

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter

    def _target(self) -> Any:
        return self._adapter

    @property
    def family(self) -> str:
        """The adapter family key (``minigrid``, ``toy_text``, ``classic_control``, ``code_repair``, ``textworld``, ``generic``...): a family's parts register under it."""
        return self._target().family

    @property
    def name(self) -> str:
        """The adapter's class name, e.g. ``CartPoleAdapter``."""
        return type(self._target()).__name__

    @property
    def env_name(self) -> str:
        """The unwrapped env's class name, e.g. ``CartPoleEnv``."""
        return type(self._target().raw).__name__

    @property
    def capabilities(self) -> frozenset[str]:
        """The state edits this env offers (``goal``, ``agent``, ``walls``, ``physics``...)."""
        return frozenset(self._target().capabilities)

    @property
    def physics_names(self) -> frozenset[str]:
        """The physical constants :class:`~envharness.transforms.PhysicsParams` may set."""
        return frozenset(self._target().physics_names)

    @property
    def observes_goal(self) -> bool:
        """Whether the observation shows where the goal is."""
        return bool(self._target().observes_goal)

    def require(self, capability: str, transform: str) -> None:
        """Raise a clear error unless the env offers ``capability``."""
        self._target().require(capability, transform)

    def level_features(self) -> dict[str, float]:
        """The current level's numeric descriptors (a copy)."""
        return dict(self._target().level_features())

    def level_id(self) -> str | None:
        """The current level's id, as published in ``info["level_id"]``."""
        adapter = self._target()
        level = adapter.level_id()
        if level is None:
            return None
        if adapter.kwargs_key:
            level = f"{level}+{adapter.kwargs_key}"
        start = adapter.setup_key()  # a start reached by setup, or drawn wider than the base env draws it
        return f"{level}@{start}" if start else level

    def position(self) -> Any:
        """Where the agent is, as small JSON-able data, or None if unknown."""
        return self._target().position()

    @property
    def setup_facts(self) -> frozenset[Any]:
        """The state predicates this episode's setup passed through (a start along the level's own solution; MiniGrid)."""
        return frozenset(getattr(self._target(), "setup_facts", ()))

    @property
    def irreversible_endings(self) -> frozenset[str]:
        """Verdict reasons of endings that cannot be undone (``lava``, ``hole``, ``pole fell``...)."""
        return self._target().irreversible_endings

    @property
    def agent_endings(self) -> frozenset[str]:
        """Verdict reasons of endings the agent chose (code repair's failed ``submit``)."""
        return self._target().agent_endings

    @property
    def destroyed(self) -> str | None:
        """What a step of this episode destroyed for good though the episode went on, if anything."""
        return self._target().destroyed

    def time_limit(self) -> int | None:
        """The most agent steps an episode may take."""
        return self._target().time_limit()

    @property
    def action_space(self) -> Any:
        """The base env's action space."""
        return self._target().env.action_space

    def get_state(self) -> dict[str, Any]:
        """A deep copy of the base env's state (reading it changes nothing)."""
        return self._target().get_state()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class StateHandle(AdapterView):
    """The write handle a state transform's ``apply`` gets: the adapter's edits, until ``apply`` returns.

    Each edit needs the adapter capability it uses, so a transform cannot reach an edit
    the env does not offer; after :meth:`revoke` every call raises
    :class:`~envharness.errors.TransformError`. With ``watch`` (the harness passes the
    adapter's checkpoint for custom transforms), the handle also checks that nothing but
    its own edits changed the env: before each edit, and in :meth:`settle` at the end.

    Args:
        adapter: the adapter to edit through.
        transform: the name of the transform holding the handle (for error messages).
        watch: a function returning a checkpoint of the base env, or None.

    Example:
        >>> import gymnasium as gym
        >>> from envharness.adapters import adapter_for
        >>> env = gym.make("FrozenLake-v1", is_slippery=False)
        >>> _ = env.reset(seed=0)
        >>> handle = StateHandle(adapter_for(env), "MyTransform")
        >>> handle.move_agent(np.random.default_rng(0), 1, 1), handle.observe()
        (True, 14)
        >>> handle.revoke()
        >>> handle.observe()
        Traceback (most recent call last):
        ...
        envharness.errors.TransformError: MyTransform: its state handle was used after apply() returned; edit the env only inside apply()
    """

    __slots__ = ("_mark", "_seed", "_steps", "_transform", "_watch")

    def __init__(self, adapter: Any, transform: str, watch: Any = None, seed: int | None = None) -> None:
        super().__init__(adapter)
        self._transform = transform
        self._steps = 0
        self._watch = watch
        self._mark = watch() if watch is not None else None
        self._seed = seed

    @property
    def seed(self) -> int | None:
        """The seed the base env was reset with for this episode (after :meth:`StateTransform.level_seed`), or None."""
        return self._seed

    # A copy would outlive revoke(): copies are the handle itself, and it does not pickle.
    def __copy__(self) -> StateHandle:
        return self

    def __deepcopy__(self, memo: dict) -> StateHandle:
        return self

    def __reduce__(self) -> Any:
        raise TransformError(f"{self._transform}: a state handle cannot be pickled; use it inside apply() only")

    def _target(self) -> Any:
        adapter = self._adapter
        if adapter is None:
            raise TransformError(f"{self._transform}: its state handle was used after apply() returned; edit the env only inside apply()")
        return adapter

    def _edit(self, capability: str | None, edit: str, *args: Any) -> Any:
        """Run one of the adapter's edits, checking first that nothing else changed the env since the last."""
        adapter = self._target()
        if capability is not None:
            adapter.require(capability, self._transform)
        self.settle()
        try:
            return getattr(adapter, edit)(*args)
        finally:
            if self._watch is not None:
                self._mark = self._watch()

    def settle(self) -> None:
        """Raise :class:`~envharness.errors.VerifierTamperError` if the env changed other than through this handle."""
        if self._watch is not None and self._watch() != self._mark:
            raise VerifierTamperError(
                f"{self._transform}.apply changed the base env outside its StateHandle; a state transform may "
                "edit the level only through the handle's edits"
            )

    def revoke(self) -> None:
        """End the handle: every later call raises."""
        self._adapter = None

    def move_goal(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        """Move the goal to a free cell at path distance ``[min_dist, max_dist]`` from the agent."""
        return self._edit("goal", "move_goal", rng, min_dist, max_dist)

    def move_agent(self, rng: np.random.Generator, min_dist: int, max_dist: int) -> bool:
        """Move the agent to a free cell at path distance ``[min_dist, max_dist]`` from the goal."""
        return self._edit("agent", "move_agent", rng, min_dist, max_dist)

    def edit_cells(self, kind: str, add: int, remove: int, rng: np.random.Generator, keep_solvable: bool) -> int:
        """Add or remove cells of ``kind`` (``wall``, ``lava``, ``hole``); returns how many changed."""
        capability = _CELL_CAPABILITY.get(kind)
        if capability is None:
            raise TransformError(f"{self._transform}: cell kind {kind!r} is unknown; use one of {', '.join(_CELL_CAPABILITY)}")
        return self._edit(capability, "edit_cells", kind, add, remove, rng, keep_solvable)

    def set_physics(self, values: dict[str, float]) -> None:
        """Set physical constants by their envharness names."""
        names = self._target().physics_names
        unknown = sorted(set(values) - names)
        if unknown and "physics" in self.capabilities:
            raise TransformError(
                f"{self._transform}: {self.env_name} has no constant {unknown[0]!r}; use one of {', '.join(sorted(names))}"
            )
        self._edit("physics", "set_physics", dict(values))

    def perturb_initial_state(self, rng: np.random.Generator, scale: float) -> None:
        """Add uniform noise in ``[-scale, scale]`` to every state variable."""
        self._edit("initial_state", "perturb_initial_state", rng, scale)

    def open_file(self, path: str) -> None:
        """Show ``path`` as if the agent had just viewed it (code-repair envs)."""
        self._edit("files", "open_file", path)

    def play_walkthrough(self, share: float) -> int:
        """Play the first ``share`` of the game's own winning commands (never the last); returns how many."""
        played = self._edit("walkthrough", "play_walkthrough", share)
        charge("setup", int(played))  # the walked part is setup: off the agent's clock, never off the budget's
        return played

    def observe(self) -> Any:
        """The base env's observation of its current (edited) state."""
        return self._target().observe()

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        """Step the base env, as the setup of the episode (:class:`~envharness.transforms.ReplayPrefix`).

        Setup must leave the agent an episode to play: a step that ends it raises
        :class:`~envharness.errors.TransformError`.
        """
        refused = self._target().refuse_setup(action)
        if refused is not None:
            raise TransformError(f"{self._transform}: setup step {self._steps}: {refused}")
        out = self._edit(None, "setup_step", action)
        self._steps += 1
        charge("setup", 1)
        if out[2] or out[3]:
            self.revoke()
            raise TransformError(
                f"{self._transform}: the episode ended at setup step {self._steps - 1}; "
                f"shorten the prefix below {self._steps} actions, so that the agent has an episode to play"
            )
        return out
