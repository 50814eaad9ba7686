"""Retrieval of skills for a task: Okapi BM25 over the skills' words, deterministic, no dependency.

Contains :func:`tokens` and :func:`bm25_rank`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_WORD = re.compile(r"[a-z0-9]+")
# Words that say nothing about which lesson fits: left out of matching.
_STOP = frozenset("a an and are as at be by do for from if in is it of on or so that the then this to was with you your".split())


def tokens(text: str) -> list[str]:
    """The words of ``text`` that matching uses: lower case, letters and digits, common words left out.

    Example:
        >>> tokens("Take the coin from the floor of the Attic!")
        ['take', 'coin', 'floor', 'attic']
    """
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def bm25_rank(query: str, documents: Sequence[str], k: int, k1: float = 1.5, b: float = 0.75) -> list[int]:
    """The indices of the ``k`` documents that best match ``query`` by BM25, best first; ties by index; none that share no word.

    Example:
        >>> docs = ["take the coin when it is listed", "open the door with the key", "go east first"]
        >>> bm25_rank("retrieve the coin from the attic floor", docs, k=2)
        [0]
        >>> bm25_rank("go east, then unlock the door", docs, k=2)  # two words of the shorter one beat one
        [2, 1]
    """
    if k <= 0 or not documents:
        return []
    words = [tokens(d) for d in documents]
    n = len(words)
    average = sum(len(w) for w in words) / n or 1.0
    frequency: Counter[str] = Counter()
    for w in words:
        frequency.update(set(w))
    asked = set(tokens(query))
    scores = []
    for i, w in enumerate(words):
        counts = Counter(w)
        score = 0.0
        for term in asked & counts.keys():
            idf = math.log((n - frequency[term] + 0.5) / (frequency[term] + 0.5) + 1.0)
            tf = counts[term]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(w) / average))
        if score > 0:
            scores.append((-score, i))
    return [i for _, i in sorted(scores)[:k]]
