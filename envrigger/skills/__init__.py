"""A skill memory for LLM agents: short lessons induced from trajectories, kept per env release, retrieved per task.

Contains :class:`Skill` and :class:`SkillLibrary` (the versioned store, SQLite),
:func:`bm25_rank` (retrieval by the task's words), :class:`Trace` and :func:`traces`
(an episode as induction reads it), and :func:`extract_skills` (a deterministic
extractor, for tests and as a floor). An LLM agent learns through the memory, not its
weights: what it did on one round's envs becomes lessons in its prompt on the next.
"""

from envrigger.skills.induce import Trace, extract_skills, traces
from envrigger.skills.memory import MAX_SKILL_CHARS, Skill, SkillLibrary, render_skills
from envrigger.skills.retrieve import bm25_rank, tokens

__all__ = [
    "MAX_SKILL_CHARS",
    "Skill",
    "SkillLibrary",
    "Trace",
    "bm25_rank",
    "extract_skills",
    "render_skills",
    "tokens",
    "traces",
]
