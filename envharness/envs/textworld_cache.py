"""TextWorld games made on demand: generated once per game, deterministically, into a cache on disk.

Contains :data:`CHALLENGES` (the supported generators, their level ranges and default
levels), :data:`COOKING_LEVELS`, :func:`game_settings`, :func:`default_cache_dir`,
:func:`game_digest`, :func:`generate_game` / :func:`locate_game`, :func:`warm_cache`, and
:func:`require_textworld` (the one place ``textworld`` is imported).

A game is fixed by the challenge, its generator level (``tw-make``'s ``--level``) and a
game index; game ``g`` uses the first TextWorld seed among ``8 g .. 8 g + 7`` that the
generator accepts (some treasure-hunter maps admit no quest of the asked length).
Generation is deterministic given those (the compiled ``.z8`` is byte-identical across
processes, hash seeds and days: the Inform compiler stamps the compile date into the story
file's header as its serial number, and :func:`game_digest`, the game's identity, reads past
it, while a fresh game is written with :data:`SERIAL` instead), takes about a second, and happens once per game: a game is
compiled into a temporary folder inside the cache and renamed into place, so two processes
generating the same game at once both end with one complete copy. A game takes about
0.4 MB on disk.

``textworld`` is an optional dependency (``pip install "envharness[textworld]"``); it is
imported only when a game is generated or played.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym

CACHE_ENV = "ENVHARNESS_TEXTWORLD_CACHE"
# TextWorld seeds tried per game: some treasure-hunter maps admit no quest of the asked length.
ATTEMPTS = 8
# The serial number a generated game carries (header bytes 0x12-0x17; Inform writes the compile date, YYMMDD).
SERIAL = b"000000"
_SERIAL_AT = slice(0x12, 0x18)
INSTALL = 'TextWorldEnv needs the textworld package: pip install "envharness[textworld]"'

# tw-cooking skills per level (the generator's own settings, see `tw-make tw-cooking --help`).
COOKING_LEVELS: dict[int, dict[str, Any]] = {
    1: {"recipe": 1, "take": 1, "go": 1},
    2: {"recipe": 1, "take": 1, "go": 6},
    3: {"recipe": 2, "take": 2, "go": 6, "open": True},
    4: {"recipe": 2, "take": 2, "go": 6, "open": True, "cut": True},
    5: {"recipe": 3, "take": 3, "go": 9, "open": True, "cook": True, "cut": True},
    6: {
        "recipe": 3,
        "take": 3,
        "go": 12,
        "open": True,
        "cook": True,
        "cut": True,
        "drop": True,
    },
}
# challenge -> (lowest level, highest level, the levels drawn by default)
CHALLENGES: dict[str, tuple[int, int, tuple[int, ...]]] = {
    "tw-coin_collector": (1, 300, tuple(range(1, 11))),
    "tw-treasure_hunter": (1, 30, tuple(range(1, 11))),
    "tw-cooking": (1, len(COOKING_LEVELS), (1, 2, 3)),
}


def default_cache_dir() -> Path:
    """Where games are cached: ``$ENVHARNESS_TEXTWORLD_CACHE``, else ``~/.cache/envharness/textworld``.

    Example:
        >>> import os
        >>> os.environ["ENVHARNESS_TEXTWORLD_CACHE"] = "/tmp/tw-games"
        >>> str(default_cache_dir())
        '/tmp/tw-games'
        >>> del os.environ["ENVHARNESS_TEXTWORLD_CACHE"]
    """
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "envharness" / "textworld"


def game_settings(challenge: str, level: int, tw_seed: int) -> dict[str, Any]:
    """The generator settings of ``level`` of ``challenge`` (what ``tw-make`` takes as options).

    Example:
        >>> game_settings("tw-coin_collector", 5, 40)
        {'level': 5}
        >>> game_settings("tw-cooking", 2, 40)["go"]
        6
    """
    if challenge == "tw-cooking":
        base = {
            "recipe": 1,
            "take": 0,
            "go": 1,
            "open": False,
            "cook": False,
            "cut": False,
            "drop": False,
            "split": None,
        }
        return {**base, **COOKING_LEVELS[level], "recipe_seed": tw_seed}
    return {"level": level}


def game_digest(path: str | Path) -> str:
    """A compiled game's identity: the digest of its story file, whatever day it was compiled.

    Example:
        >>> import tempfile
        >>> story = bytearray(64)
        >>> folder = Path(tempfile.mkdtemp())
        >>> story[0x12:0x18] = b"261201"; _ = (folder / "a.z8").write_bytes(bytes(story))
        >>> story[0x12:0x18] = b"270315"; _ = (folder / "b.z8").write_bytes(bytes(story))
        >>> game_digest(folder / "a.z8") == game_digest(folder / "b.z8")
        True
    """
    story = bytearray(Path(path).read_bytes())
    story[_SERIAL_AT] = SERIAL  # not a checksummed region: the Z-machine's checksum starts at 0x40
    return hashlib.sha256(story).hexdigest()[:16]


def _restamp(path: Path) -> None:
    """Give a freshly compiled story file the fixed :data:`SERIAL`, so that the file itself does not depend on the day."""
    story = bytearray(path.read_bytes())
    story[_SERIAL_AT] = SERIAL
    path.write_bytes(bytes(story))


# TextWorld is not thread-safe: its logic parser (a module-global TatSu parser, used when a
# game's knowledge base loads) and its generator keep process-wide state, so two threads that
# build or start games at once fail (`FailedParse`, `IndexError: pop from empty list`).
# Every call into TextWorld in this process holds this lock; a game's own step takes
# milliseconds, so an LLM agent's concurrency (waiting on its model) is not held back.
TEXTWORLD_LOCK = threading.RLock()


def require_textworld() -> Any:
    """The ``textworld`` package (its challenges registered), or a clear error naming the extra to install."""
    try:
        import textworld
        import textworld.challenges  # registers the challenges
    except ImportError:
        raise gym.error.DependencyNotInstalled(INSTALL) from None
    return textworld


@contextmanager
def quiet() -> Iterator[None]:
    """Silence Jericho's notice that a TextWorld game is not in its list of known games (it plays fine)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not fully supported")
        yield


def _generate(challenge: str, level: int, tw_seed: int, folder: Path) -> None:
    """Compile one game into ``folder`` atomically (or mark the seed unplayable there)."""
    textworld = require_textworld()
    from textworld.generator import compile_game
    from textworld.generator.chaining import QuestGenerationError

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        options = textworld.GameOptions()
        options.seeds = tw_seed
        options.path = str(tmp / "game.z8")
        options.force_recompile = True
        make = textworld.challenges.CHALLENGES[challenge][1]
        try:
            with quiet():
                compile_game(make(game_settings(challenge, level, tw_seed), options), options)
        except QuestGenerationError as error:
            # Remembered, so that the next attempt is not paid for again.
            (tmp / "unplayable").write_text(str(error))
        if (tmp / "game.z8").is_file():
            _restamp(tmp / "game.z8")
        for source in tmp.glob("*.ni"):  # the Inform 7 source: not needed to play
            source.unlink()
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished first; its copy is the same game
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def locate_game(challenge: str, level: int, game: int, cache_dir: str | Path) -> tuple[Path, int]:
    """The ``.z8`` file of a game and its TextWorld seed, generating the game if it is not cached."""
    version = require_textworld().__version__
    for attempt in range(ATTEMPTS):
        tw_seed = game * ATTEMPTS + attempt
        folder = Path(cache_dir) / f"{challenge}-L{level}-s{tw_seed}-tw{version}"
        if not folder.is_dir():
            with TEXTWORLD_LOCK:
                if not folder.is_dir():  # another thread of this process may have made it meanwhile
                    _generate(challenge, level, tw_seed, folder)
        if (folder / "game.z8").is_file():
            return folder / "game.z8", tw_seed
    raise RuntimeError(f"{challenge} level {level}: game {game} could not be generated from {ATTEMPTS} seeds; use another level")


def generate_game(challenge: str, level: int, game: int, cache_dir: str | Path) -> Path:
    """The ``.z8`` file of game ``game`` of ``level``: generated on first use, then reused from ``cache_dir``.

    Game ``g`` uses the first TextWorld seed among ``8 g .. 8 g + 7`` that the generator accepts.
    """
    return locate_game(challenge, level, game, cache_dir)[0]


def _warm_one(args: tuple[str, int, int, str]) -> str:
    return str(generate_game(*args))


def warm_cache(
    challenge: str,
    levels: list[int],
    games: int,
    cache_dir: str | Path | None = None,
    workers: int = 1,
) -> int:
    """Generate games ``0 .. games-1`` of every level ahead of time (``workers`` processes); returns how many exist."""
    jobs = [(challenge, level, game, str(cache_dir or default_cache_dir())) for level in levels for game in range(games)]
    if workers <= 1:
        return len([_warm_one(job) for job in jobs])
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:
        return len(list(pool.map(_warm_one, jobs)))


__all__ = [
    "CHALLENGES",
    "COOKING_LEVELS",
    "default_cache_dir",
    "game_digest",
    "game_settings",
    "generate_game",
    "locate_game",
    "require_textworld",
    "warm_cache",
]
