"""The skill memory: lessons with provenance, versioned per env release, in one SQLite file.

Contains :class:`Skill`, :class:`SkillLibrary` and :func:`render_skills` (the block a prompt
gets). A version is one call of :meth:`SkillLibrary.add` (one round's induction); a skill
lives from the version that added it, so ``skills(version=v)`` is the memory as it was.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict, Field

from envharness.validated import ValidatedModel
from envrigger.data.sqlite import schema_objects, statements
from envrigger.errors import SkillLibraryError
from envrigger.skills.retrieve import bm25_rank, tokens

MAX_SKILL_CHARS = 300
MAX_WHEN_CHARS = 160
MAX_EPISODES_KEPT = 50
_SCHEMA = """
CREATE TABLE versions (version INTEGER PRIMARY KEY, release TEXT NOT NULL, round INTEGER NOT NULL, created REAL NOT NULL,
                       added INTEGER NOT NULL, merged INTEGER NOT NULL);
CREATE TABLE skills (key TEXT NOT NULL, release TEXT NOT NULL, version INTEGER NOT NULL, skill TEXT NOT NULL,
                     PRIMARY KEY (release, key));
"""
_ALLOWED = schema_objects(statements(_SCHEMA))  # every schema object a skill library holds: anything else is not one


class Skill(ValidatedModel):
    """One lesson: what to do (``text``), in which kind of task (``when``), and where it came from.

    Example:
        >>> s = Skill(text="Take the coin as soon as it is listed.", when="tasks that ask for a coin",
        ...           source="extractor", release="tw-3f2a", round=1, episodes=[4, 7])
        >>> s.key == Skill(text="take the  coin as soon as it is listed", when="x", source="model").key
        True
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_SKILL_CHARS, description="the lesson, one or two sentences")
    when: str = Field("", max_length=MAX_WHEN_CHARS, description="the kind of task or situation it applies to")
    source: str = Field(max_length=32, description="'extractor' (deterministic) or 'model' (induced by an LLM)")
    model: str | None = Field(None, max_length=256, description="the model that induced it")
    release: str = Field("", max_length=128, description="the env release it was induced on (spec hash or library version)")
    round: int = Field(0, ge=0, le=1_000_000, description="the loop round whose trajectories it came from")
    episodes: list[Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]] = Field(
        default_factory=list, max_length=MAX_EPISODES_KEPT, description="episode ids it came from"
    )

    @property
    def key(self) -> str:
        """Its identity: a digest of its words (case, spacing and punctuation aside)."""
        return hashlib.blake2b(" ".join(tokens(self.text)).encode(), digest_size=8).hexdigest()


def same_lesson(a: Skill, b: Skill, threshold: float = 0.8) -> bool:
    """Whether two lessons are one: the same words, or ``threshold`` of their words shared (they merge their evidence)."""
    if a.key == b.key:
        return True
    x, y = set(tokens(a.text)), set(tokens(b.text))
    return bool(x | y) and len(x & y) / len(x | y) >= threshold


def render_skills(skills: Iterable[Skill], max_chars: int = 1200) -> str:
    """The block of lessons put into a prompt: one line each, best first, cut to ``max_chars``; empty when there are none.

    Example:
        >>> print(render_skills([Skill(text="Read the listed commands first.", source="extractor")]))
        Lessons from earlier episodes:
        - Read the listed commands first.
    """
    lines = ["Lessons from earlier episodes:"]
    used = len(lines[0])
    for skill in skills:
        line = f"- {skill.text}" + (f" (when: {skill.when})" if skill.when else "")
        if used + 1 + len(line) > max_chars:
            break
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines) if len(lines) > 1 else ""


class SkillLibrary:
    """Skills per env release, versioned: each :meth:`add` is a version; duplicates merge; the count is bounded.

    Example:
        >>> import tempfile, pathlib
        >>> lib = SkillLibrary(pathlib.Path(tempfile.mkdtemp()) / "skills.db")
        >>> lesson = Skill(text="Take the coin when it is listed.", when="coin tasks", source="extractor", episodes=[1])
        >>> lib.add([lesson, lesson.model_copy(update={"episodes": [2]})], release="tw", round=1)
        1
        >>> [(s.text, s.episodes) for s in lib.skills("tw")]
        [('Take the coin when it is listed.', [1, 2])]
        >>> [s.text for s in lib.retrieve("retrieve the coin from the floor", release="tw", k=3)]
        ['Take the coin when it is listed.']
    """

    def __init__(self, path: str | Path, max_skills: int = 200) -> None:
        from envrigger.data.sqlite import open_ours

        self.path, self.max_skills = Path(path), max_skills
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # the project's one check of "is this SQLite file ours", made before anything is written
        hint = "give a new path or a skills.db written by envrigger"
        self._db = open_ours(self.path, _ALLOWED, "skill library", hint, empty_ok=True, error=SkillLibraryError)
        if not self._db.execute("SELECT name FROM sqlite_master WHERE name = 'skills'").fetchone():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for statement in statements(_SCHEMA):
                    self._db.execute(statement)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self._db.close()

    def version(self) -> int:
        """The latest version (0: empty)."""
        return int(self._db.execute("SELECT COALESCE(MAX(version), 0) FROM versions").fetchone()[0])

    def add(self, skills: Iterable[Skill], release: str, round: int = 0) -> int:
        """Add one round's skills for ``release`` as a new version (duplicates merged, the count bounded); the version."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            version = self.version() + 1
            kept = {
                row[0]: Skill.model_validate_json(row[1])
                for row in self._db.execute("SELECT key, skill FROM skills WHERE release = ?", (release,))
            }
            added = merged = 0
            for skill in skills:
                skill = skill.model_copy(update={"release": release, "round": round})
                twin = skill.key if skill.key in kept else next((k for k, s in kept.items() if same_lesson(s, skill)), None)
                if twin is not None:
                    old = kept[twin]
                    episodes = list(dict.fromkeys(old.episodes + skill.episodes))[:MAX_EPISODES_KEPT]
                    kept[twin] = old.model_copy(update={"episodes": episodes})
                    self._db.execute(
                        "UPDATE skills SET skill = ? WHERE release = ? AND key = ?", (kept[twin].model_dump_json(), release, twin)
                    )
                    merged += 1
                    continue
                if len(kept) >= self.max_skills:
                    continue  # bounded: the memory keeps what it learned first, merged evidence grows it
                kept[skill.key] = skill
                self._db.execute("INSERT INTO skills VALUES (?, ?, ?, ?)", (skill.key, release, version, skill.model_dump_json()))
                added += 1
            self._db.execute("INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?)", (version, release, round, time.time(), added, merged))
        return version

    def skills(self, release: str, version: int | None = None) -> list[Skill]:
        """The skills of ``release`` as of ``version`` (default: the latest), in the order they were added."""
        rows = self._db.execute(
            "SELECT skill FROM skills WHERE release = ? AND version <= ? ORDER BY version, rowid",
            (release, self.version() if version is None else version),
        )
        return [Skill.model_validate_json(row[0]) for row in rows]

    def retrieve(self, task: str, release: str, k: int = 3, version: int | None = None) -> list[Skill]:
        """The ``k`` skills of ``release`` whose words best match ``task`` (BM25 over ``when`` and ``text``), best first."""
        found = self.skills(release, version)
        return [found[i] for i in bm25_rank(task, [f"{s.when} {s.text}" for s in found], k)]

    def history(self) -> list[dict[str, object]]:
        """One entry per version: its release, round, time, and how many skills it added and merged."""
        rows = self._db.execute("SELECT version, release, round, created, added, merged FROM versions ORDER BY version")
        return [dict(zip(("version", "release", "round", "created", "added", "merged"), row, strict=True)) for row in rows]

    def export(self) -> str:
        """Every skill of every release, as JSON lines (what a user reads or diffs)."""
        rows = self._db.execute("SELECT skill FROM skills ORDER BY version, rowid")
        return "".join(json.dumps(json.loads(row[0]), sort_keys=True) + "\n" for row in rows)
