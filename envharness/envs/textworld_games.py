"""TextWorld text games as a Gymnasium env: one generated game per level, read and played as text.

Contains :class:`TextWorldEnv` (registered as ``envharness/TextWorld-v0``) and
:class:`GameInfo` (what identifies and describes one generated game). Games come from
:mod:`envharness.envs.textworld_cache`: a level is one generated game, drawn from the reset
seed, generated once and then reused from the cache.

``textworld`` is an optional dependency (``pip install "envharness[textworld]"``). It is
imported only when a game is generated or played, so importing this module needs only
Gymnasium.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import string
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
from gymnasium import spaces

from envharness.envs.textworld_cache import (
    CHALLENGES,
    INSTALL,
    TEXTWORLD_LOCK,
    default_cache_dir,
    game_digest,
    locate_game,
    quiet,
    require_textworld,
)

TEXT_LIMIT = 4000
COMMAND_LIMIT = 100
CHARSET = "".join(sorted(set(string.printable) - set("\x0b\x0c")))
_PRINTABLE = frozenset(CHARSET)
_TITLE_ART = frozenset(" $|\\_/<>")
# Commands that only show information: listed after the others, so a cap on the list drops them first.
INFO_VERBS = frozenset({"examine", "inventory", "look"})


class GameInfo(NamedTuple):
    """One generated game: its identity (challenge, level, game index, TextWorld seed, file digest) and size."""

    challenge: str
    level: int
    game: int
    tw_seed: int
    digest: str  # of the compiled .z8 file
    rooms: int
    objects: int
    quest_length: int  # commands of the game's own walkthrough
    max_score: int
    path: str


def _clean(text: str, limit: int) -> str:
    """Game text as the agent sees it: no padding, prompt or restart question; printable; at most ``limit`` characters."""
    text = re.sub(r"(^|\n)>[^\n]*\s*$", "", text.replace("\r", ""))  # the prompt and the status line (room, score/moves)
    lines = [line.strip() for line in text.split("\n") if not line.strip().startswith("Would you like to RESTART")]
    out = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return "".join(c if c in _PRINTABLE else "?" for c in out)[:limit]


def _opening(feedback: str, objective: str) -> str:
    """The game's first output without its title art: the objective, then the first room."""
    start = feedback.find(objective) if objective else -1
    if start >= 0:
        return feedback[start:]
    return "\n".join(line for line in feedback.split("\n") if not set(line) <= _TITLE_ART)


class _Engine:
    """A running TextWorld game (Jericho's Z-machine plus TextWorld's state tracking).

    It cannot be copied; it pickles as a fingerprint of the interpreter's memory and the
    tracked game facts, which is what the harness's audit compares between steps. The env
    rebuilds engines from its command history instead (see ``TextWorldEnv.__setstate__``).
    """

    def __init__(self, path: Path) -> None:
        textworld = require_textworld()
        self.path = path
        self.digest = game_digest(path)  # the game's identity
        infos = textworld.EnvInfos(
            feedback=True,
            objective=True,
            admissible_commands=True,
            won=True,
            lost=True,
            score=True,
            max_score=True,
            policy_commands=True,
        )
        with quiet(), TEXTWORLD_LOCK:
            self.env = textworld.start(str(path), request_infos=infos)

    def fingerprint(self) -> str:
        with TEXTWORLD_LOCK:
            return self._fingerprint()

    def _fingerprint(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for part in self.env.unwrapped._jericho.get_state():
            h.update(part.tobytes() if hasattr(part, "tobytes") else repr(part).encode())
        progression = getattr(self.env._wrapped_env, "_game_progression", None)
        if progression is not None:
            h.update(repr(sorted(map(str, progression.state.facts))).encode())
        return h.hexdigest()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Fingerprint, (str(self.path), self.fingerprint()))

    def close(self) -> None:
        with TEXTWORLD_LOCK:
            self.env.close()


class _Fingerprint(NamedTuple):
    """What an engine pickles as: the game file and a digest of the running game's state."""

    path: str
    state: str


class TextWorldEnv(gym.Env):
    """A generated TextWorld game per level: read the text, pick one of the listed commands.

    Each reset draws a generator level from ``levels`` and a game index below
    ``games_per_level`` from its seed, generates that game into the cache (once) and starts
    it. Observations are ``{"text": the game's last output (at reset: the objective and
    the room), "commands": the admissible commands, one per line}``; the action is an index
    into that list. Commands are sorted (information-only ones — look, inventory, examine —
    last) and capped at ``max_commands``; an index past the list is a wasted turn
    (``info["wasted"]``). The reward is the change in the game's score; an episode ends
    when the game is won or lost.

    Args:
        challenge: ``tw-coin_collector``, ``tw-treasure_hunter`` or ``tw-cooking``.
        levels: generator levels drawn from (default: the challenge's in :data:`CHALLENGES`).
        games_per_level: distinct games per level (game indices ``0 .. games_per_level - 1``).
        max_commands: command slots: the size of the action space.
        cache_dir: where games are kept (default: :func:`default_cache_dir`).
        render_mode: ``ansi`` renders the text and the numbered commands.

    Example:
        >>> env = TextWorldEnv(levels=[3], games_per_level=2)
        >>> obs, info = env.reset(seed=0)
        >>> env.action_space, sorted(obs), info["generator_level"], env.game.quest_length
        (Discrete(20), ['commands', 'text'], 3, 3)
        >>> for command in list(env.policy):  # the game's own walkthrough
        ...     obs, reward, terminated, truncated, info = env.step(env.commands.index(command))
        >>> reward, terminated, info["won"]
        (1.0, True, True)
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012  (gymnasium.Env declares it per instance)

    def __init__(
        self,
        challenge: str = "tw-coin_collector",
        levels: list[int] | None = None,
        games_per_level: int = 100,
        max_commands: int = 20,
        cache_dir: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        if challenge not in CHALLENGES:
            raise ValueError(f"challenge {challenge!r} is unknown; use one of {', '.join(CHALLENGES)}")
        if importlib.util.find_spec("textworld") is None:
            raise gym.error.DependencyNotInstalled(INSTALL)
        lo, hi, default = CHALLENGES[challenge]
        chosen = tuple(int(level) for level in (default if levels is None else levels))
        if not chosen or any(not lo <= level <= hi for level in chosen):
            raise ValueError(f"levels: got {list(chosen)}; give {challenge} levels between {lo} and {hi}")
        if challenge == "tw-coin_collector" and any(((level - 1) // 100 + 1) * ((level - 1) % 100 + 1) > 100 for level in chosen):
            raise ValueError(
                f"levels: got {list(chosen)}; coin_collector levels with more than 100 rooms (151-200, 234-300) do not compile"
            )
        if not 1 <= int(games_per_level) <= 2**20:
            raise ValueError(f"games_per_level: got {games_per_level}; use 1 to {2**20}")
        if not 2 <= int(max_commands) <= 256:
            raise ValueError(f"max_commands: got {max_commands}; use 2 to 256")
        self.challenge, self.levels = challenge, chosen
        self.games_per_level = int(games_per_level)
        self.max_commands = int(max_commands)
        self.cache_dir = str(cache_dir) if cache_dir else str(default_cache_dir())
        self.render_mode = render_mode
        self.observation_space = spaces.Dict(
            {
                "text": spaces.Text(TEXT_LIMIT, min_length=0, charset=CHARSET),
                "commands": spaces.Text(
                    self.max_commands * (COMMAND_LIMIT + 1),
                    min_length=0,
                    charset=CHARSET,
                ),
            }
        )
        self.action_space = spaces.Discrete(self.max_commands)
        self._engine: _Engine | None = None
        self.game: GameInfo | None = None
        self.history: list[str] = []  # commands played this episode
        self.commands: list[str] = []  # the listed commands, as the game takes them
        self.hidden_commands = 0  # admissible commands left out by the cap
        self.policy: list[str] = []  # the game's own winning commands from here
        self.text, self.room, self.facts = "", "", ""
        self.won = self.lost = False
        self.score = 0

    # -- the running game ----------------------------------------------------------------
    def _start(self, level: int, game: int, history: list[str]) -> None:
        with TEXTWORLD_LOCK:
            self._start_locked(level, game, history)

    def _start_locked(self, level: int, game: int, history: list[str]) -> None:
        path, tw_seed = locate_game(self.challenge, level, game, self.cache_dir)
        if self._engine is None or self._engine.path != path:
            self._close_engine()
            self._engine = _Engine(path)
        state = self._engine.env.reset()
        self.history = []
        infos = state["game"].infos.values()
        self.game = GameInfo(
            self.challenge,
            level,
            game,
            tw_seed,
            self._engine.digest,
            sum(e.type == "r" for e in infos),
            sum(e.type not in ("r", "d", "P", "I") for e in infos),
            len(state["policy_commands"] or []),
            int(state["max_score"] or 0),
            str(path),
        )
        self._read(state, reset=True)
        for command in history:
            self._play(command)

    def _read(self, state: Any, reset: bool = False) -> None:
        self.won = bool(state["won"])
        self.lost = bool(state["lost"])
        self.score = int(state["score"] or 0)
        listed = sorted(
            set(state["admissible_commands"] or []),
            key=lambda c: (c.split(" ", 1)[0] in INFO_VERBS, c),
        )
        self.commands = listed[: self.max_commands]
        self.hidden_commands = max(len(listed) - self.max_commands, 0)
        self.policy = list(state["policy_commands"] or [])
        self.text = _clean(
            _opening(state["feedback"], state["objective"]) if reset else state["feedback"],
            TEXT_LIMIT,
        )
        facts = state["_facts"]
        where = next(
            (f.arguments[1].name for f in facts if f.name == "at" and f.arguments[0].type == "P"),
            None,
        )
        self.room = state["game"].infos[where].name if where in state["game"].infos else ""
        self.facts = hashlib.blake2b(repr(sorted(map(str, facts))).encode(), digest_size=8).hexdigest()

    def _play(self, command: str) -> None:
        assert self._engine is not None
        with TEXTWORLD_LOCK:
            state, _, _ = self._engine.env.step(command)
            self.history.append(command)
            self._read(state)

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def observation(self) -> dict[str, str]:
        """The current observation (re-read after setup)."""
        commands = "\n".join(_clean(c, COMMAND_LIMIT).replace("\n", " ") for c in self.commands)
        return {"text": self.text, "commands": commands}

    def _info(self) -> dict[str, Any]:
        assert self.game is not None
        return {
            "won": self.won,
            "lost": self.lost,
            "score": self.score,
            "max_score": self.game.max_score,
            "moves": len(self.history),
            "generator_level": self.game.level,
            "game_index": self.game.game,
            "hidden_commands": self.hidden_commands,
        }

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, str], dict[str, Any]]:
        super().reset(seed=seed)
        level = self.levels[int(self.np_random.integers(len(self.levels)))]
        self._start(level, int(self.np_random.integers(self.games_per_level)), [])
        return self.observation(), self._info()

    def step(self, action: Any) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        if self._engine is None or self.game is None:
            raise gym.error.ResetNeeded("TextWorldEnv: call reset() before step()")
        index, before, info = int(action), self.score, {}
        if 0 <= index < len(self.commands):
            info["command"] = self.commands[index]
            self._play(self.commands[index])
        else:
            info["wasted"] = f"command slot {index} is empty ({len(self.commands)} commands are listed); nothing happened"
        return (
            self.observation(),
            float(self.score - before),
            self.won or self.lost,
            False,
            {**info, **self._info()},
        )

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self.text + "\n\n" + "\n".join(f"{i:2d}: {c}" for i, c in enumerate(self.commands))

    def close(self) -> None:
        self._close_engine()

    # A running game lives in the interpreter: a copy replays this episode's commands on the same game.
    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "_engine": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        if self.game is not None:
            self._start(self.game.level, self.game.game, list(self.history))


__all__ = ["GameInfo", "TextWorldEnv"]
