"""Adapter for generated TextWorld games (:class:`envharness.envs.textworld_games.TextWorldEnv`).

Contains :class:`TextWorldAdapter`. Its verifier reads the game's own end from the base
env after the raw step: won or lost as the game's interpreter reported it (TextWorld's
``won`` / ``lost``, from the Z-machine's ending), recorded by the env in plain attributes
that the harness's audit watches, together with a fingerprint of the interpreter's memory.
It never reads ``info`` or the reward, and it judges only the game it saw at reset.
"""

from __future__ import annotations

from typing import Any

from envharness.adapters.base import Adapter, digest
from envharness.adapters.registry import register_adapter
from envharness.verifier import RUNNING, TIMEOUT, Verdict


@register_adapter
class TextWorldAdapter(Adapter):
    """Judges by the game's own won/lost; a level is one generated game, identified by its compiled file.

    Level features: ``generator_level`` (the challenge's difficulty), ``quest_length`` (the
    game's walkthrough), ``commands_to_win`` (what is left of it when the agent starts: less
    after a replayed prefix), ``rooms``, ``objects`` and ``max_score``. Loop detection sees
    the room and a digest of the game's facts. The one edit is playing part of the game's own
    walkthrough (:class:`~envharness.transforms.WalkthroughStart`); :class:`~envharness.transforms.ReplayPrefix`
    sets a game up by playing given commands.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/TextWorld-v0", levels=[3], games_per_level=2)
        >>> obs, info = env.reset(seed=0)
        >>> info["level"]["generator_level"], info["level"]["rooms"], info["level"]["commands_to_win"]
        (3.0, 3.0, 3.0)
        >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.commands.index("look"))
        >>> info["verdict"]
        Verdict(success=False, score=0.0, reason='in progress')
    """

    irreversible_endings = frozenset({"lost the game"})

    family = "textworld"
    # Where the games are cached changes neither the game nor what success means.
    neutral_kwargs = ("render_mode", "cache_dir")
    names_setup = True  # the level id names the commands replayed before the agent acts
    capabilities = frozenset({"walkthrough"})

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._game: Any = None
        self._prefix: tuple[str, ...] = ()

    @classmethod
    def matches(cls, env_type: type) -> bool:
        from envharness.envs.textworld_games import TextWorldEnv

        return issubclass(env_type, TextWorldEnv)

    def begin_episode(self) -> None:
        raw = self.raw
        # An immutable record of the game the episode plays: the verifier judges only this game.
        game = self._game = raw.game
        self._prefix = tuple(raw.history)  # commands replayed as setup (ReplayPrefix)
        self._features = {
            "generator_level": float(game.level),
            "quest_length": float(game.quest_length),
            "commands_to_win": float(len(raw.policy)),
            "rooms": float(game.rooms),
            "objects": float(game.objects),
            "max_score": float(game.max_score),
        }

    def play_walkthrough(self, share: float) -> int:
        """Play the first ``share`` of the walkthrough, rounded down and never its last command; returns how many."""
        raw = self.raw
        count = min(int(share * len(raw.policy)), max(len(raw.policy) - 1, 0))
        for _ in range(count):
            raw._play(raw.policy[0])  # the walkthrough is re-read after every command
        return count

    def level_id(self) -> str | None:
        game = self._game
        if game is None:
            return None
        # The compiled file is the game; challenge, level and seed say how it was made.
        level = digest(game.challenge, game.level, game.tw_seed, game.digest)
        # A replayed prefix starts the same game elsewhere: another level.
        return f"{level}@{digest(self._prefix)}" if self._prefix else level

    def solved(self) -> str | None:
        return "the game is already won" if self.raw.won else None

    def observe(self) -> Any:
        return self.raw.observation()

    def position(self) -> Any:
        return f"{self.raw.room}|{self.raw.facts}"

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        raw = self.raw
        game = self._game
        if raw.game != game:
            return Verdict(False, 0.0, "the game changed during the episode")
        if raw.won:
            return Verdict(True, 1.0, "won the game")
        progress = min(max(raw.score / game.max_score, 0.0), 1.0) if game.max_score else 0.0
        if raw.lost:
            return Verdict(False, progress, "lost the game")
        if terminated or truncated:
            return Verdict(False, progress, TIMEOUT if truncated else "terminated without winning")
        return RUNNING
