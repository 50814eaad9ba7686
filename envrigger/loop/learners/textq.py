"""A learner for text games with listed commands: linear Q-learning over hashed words.

Contains :data:`TEXTQ_DEFAULTS`, :class:`CommandFeatures` (an (observation, command) pair
as hashed feature indices), :class:`TextQPolicy` (the frozen, picklable policy) and
:class:`TextQLearner` (the :class:`~envrigger.loop.learners.LoopLearner`, kind ``textq``).

Why it generalizes to games it has never seen: it scores each listed command by the
*words* in it and around it, never by the identity of a state. Its features are the
command's words (``take``, ``coin``, ``go``, ``north``), pairs of a word of the text with
a word of the command (``coin`` in the text, ``take`` in the command), pairs of a word of
the previous command with a word of this one (``south`` then ``north``: going back), whether
the command names something the text mentions, and whether it was already played from this
same text in this episode. A new game has new rooms, new names and new maps, but the same
words keep their meaning — taking the coin wins, walking back the way you came does not
help, looking and inventory change nothing — so what was learned on some games scores the
commands of an unseen one. A tabular learner keyed by the exact observation has nothing to
say about an observation it has never seen.

Learning is episodic: each finished episode is replayed backwards with Q-learning targets
(``lam`` > 0 mixes in the episode's own later return), so a win propagates along the whole
path at once, and then a few earlier episodes are replayed too. While training, a step
that reaches text not yet seen in the episode earns a small bonus (count-based
exploration), which is what teaches it that walking back or looking again leads nowhere.
Exploration is epsilon-greedy over the listed commands only (never an empty slot), with
epsilon decaying over training steps. All randomness comes from numpy Generators seeded by
the learner's seed and each call's seed.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envharness.files import write_file_atomically

TEXTQ_DEFAULTS: dict[str, Any] = {
    "bits": 18,  # 2**bits weights
    "learning_rate": 0.2,  # spread over the features of each pair
    "gamma": 0.9,
    "lam": 0.0,  # 0: one-step Q-learning targets; up to 1: more of the episode's own later return
    "epsilon_start": 1.0,
    "epsilon_end": 0.05,
    "explore_steps": 3000,  # training steps over which epsilon decays
    "eval_epsilon": 0.05,  # exploration left in the frozen policy (breaks rare loops)
    "novelty": 0.1,  # training-only bonus for a step whose text is new in the episode (count-based exploration)
    "replay": 4,  # earlier episodes replayed after each episode
    "buffer": 200,  # episodes kept for replay
    "text_field": "text",
    "commands_field": "commands",
}
# Words too common to tell commands apart.
STOPWORDS = frozenset(
    "a an and are as at be but by for from has have i if in into is it its of on or so that the then there this to "  # noqa: SIM905
    "was with you your".split()
)
_WORD = re.compile(r"[a-z]+")
# One episode as the learner replays it: the chosen command's features per step, the rewards, the
# features of every command listed after each step, and whether the episode ended in the game.
Episode = tuple[list[np.ndarray], list[float], list[list[np.ndarray]], bool]


def words(text: str) -> list[str]:
    """The words that carry meaning: lower case, letters only, no stopwords, unique, in order.

    Example:
        >>> words("There is a coin on the floor. Take the coin!")
        ['coin', 'floor', 'take']
    """
    return list(dict.fromkeys(w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS))


def _hash(token: str) -> int:
    return zlib.crc32(token.encode())


class CommandFeatures:
    """Hashed feature indices of (text, previous command, command) triples, ``2**bits`` of them.

    Example:
        >>> f = CommandFeatures(bits=10)
        >>> rows = f.rows("There is a coin here.", "go east", ["take coin", "go west"], set())
        >>> len(rows), all(0 <= i < 1024 for row in rows for i in row)
        (2, True)
    """

    def __init__(self, bits: int) -> None:
        self.size = 2**bits
        self._cache: dict[str, int] = {}

    def _h(self, token: str) -> int:
        value = self._cache.get(token)
        if value is None:
            value = self._cache[token] = _hash(token)
        return value

    def rows(self, text: str, previous: str, commands: list[str], played: set[str]) -> list[np.ndarray]:
        """One array of feature indices per command; ``played`` holds the commands already played from this text."""
        seen = words(text)
        seen_set = set(seen)
        text_h = np.array([self._h("t:" + w) for w in seen], dtype=np.int64)
        prev_h = np.array([self._h("p:" + w) for w in words(previous)], dtype=np.int64)
        out = []
        for command in commands:
            parts = command.lower().split()
            verb = parts[0] if parts else ""
            cw = words(command) or [verb]
            cw_h = np.array([self._h("c:" + w) for w in cw], dtype=np.int64)
            named = [w for w in cw if w != verb]
            tokens = [
                "bias",
                "cmd:" + command.lower(),
                *("w:" + w for w in cw),
                ("mentioned:" if any(w in seen_set for w in named) else "unmentioned:") + verb,
            ]
            if command in played:
                tokens += ["again", "again:" + verb]
            base = np.array([self._h(t) for t in tokens], dtype=np.int64)
            pairs = [base]
            if len(text_h):
                pairs.append((text_h[:, None] * 1_000_003 + cw_h[None, :] * 7 + 1).ravel())
            if len(prev_h):
                pairs.append((prev_h[:, None] * 1_000_003 + cw_h[None, :] * 7 + 2).ravel())
            out.append(np.unique(np.concatenate(pairs) % self.size))
        return out


class TextQPolicy:
    """Scores every listed command with the learned weights and plays the best (epsilon-greedy).

    Keeps, per episode, the previous command and the commands played from each text (its
    memory for the ``previous`` and ``again`` features); a reset's info (it carries
    ``level_id``) or :meth:`reset` starts a new episode. Picklable, and independent of the
    learner it came from.

    Example:
        >>> import numpy as np
        >>> policy = TextQPolicy(np.zeros(2**10), dict(TEXTQ_DEFAULTS, bits=10), seed=0, epsilon=0.0)
        >>> policy.reset(1)
        >>> policy.act({"text": "A coin.", "commands": "go east\\ntake coin"}, {"level_id": "x"}) in (0, 1)
        True
    """

    name = "textq"

    def __init__(
        self,
        weights: np.ndarray,
        params: dict[str, Any],
        seed: int = 0,
        epsilon: float | None = None,
        policy_id: str = "textq",
    ) -> None:
        self.weights, self.params = weights, params
        self.seed, self.policy_id = seed, policy_id
        self.epsilon = float(params["eval_epsilon"] if epsilon is None else epsilon)
        self.features = CommandFeatures(int(params["bits"]))
        self.rng = np.random.default_rng(seed)
        self._new_episode()

    def _new_episode(self) -> None:
        self.previous = ""
        self.played: dict[str, set[str]] = {}

    def reset(self, seed: int | None) -> None:
        self.rng = np.random.default_rng([self.seed, 0 if seed is None else int(seed)])
        self._new_episode()

    def candidates(self, obs: Any) -> tuple[str, list[str], list[np.ndarray]]:
        """The text, the listed commands and their feature rows."""
        text = str(obs[self.params["text_field"]])
        listed = str(obs[self.params["commands_field"]]).split("\n")
        listed = listed if any(listed) else []
        played = self.played.get(text, set())
        return text, listed, self.features.rows(text, self.previous, listed, played)

    def values(self, rows: list[np.ndarray]) -> np.ndarray:
        return np.array([self.weights[row].sum() for row in rows])

    def choose(self, values: np.ndarray, epsilon: float) -> int:
        if self.rng.random() < epsilon:
            return int(self.rng.integers(len(values)))
        best = np.flatnonzero(values >= values.max() - 1e-9)  # ties broken at random
        return int(best[self.rng.integers(len(best))]) if len(best) > 1 else int(best[0])

    def remember(self, text: str, command: str) -> None:
        self.played.setdefault(text, set()).add(command)
        self.previous = command

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        if "level_id" in info:  # a reset's info: a new episode
            self._new_episode()
        text, listed, rows = self.candidates(obs)
        if not listed:
            return 0
        index = self.choose(self.values(rows), self.epsilon)
        self.remember(text, listed[index])
        return index


class TextQLearner:
    """Linear Q-learning over hashed words of (text, command) pairs, for Discrete command slots (kind ``textq``).

    Parameters (:data:`TEXTQ_DEFAULTS`, each overridable): ``bits`` (2**bits weights),
    ``learning_rate``, ``gamma``, ``lam``, the epsilon schedule (``epsilon_start`` to
    ``epsilon_end`` over ``explore_steps``), ``eval_epsilon`` (kept by :meth:`policy`),
    ``replay`` and ``buffer`` (episodes replayed and kept), and the observation's
    ``text_field`` and ``commands_field``. The observation must be a Dict holding both as
    text (commands one per line) and the action an index into the commands.

    Example:
        >>> import gymnasium as gym
        >>> space = gym.spaces.Dict({"text": gym.spaces.Text(100), "commands": gym.spaces.Text(100)})
        >>> learner = TextQLearner.for_spaces(space, gym.spaces.Discrete(4), seed=0, bits=12)
        >>> learner.kind, learner.policy_id, learner.weights.shape
        ('textq', 'textq[0 steps]', (4096,))
    """

    kind = "textq"
    suffix = ".npz"

    def __init__(self, env: gym.Env, seed: int = 0, **params: Any) -> None:
        self._setup(env.observation_space, env.action_space, seed, params)

    @classmethod
    def for_spaces(
        cls,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        seed: int = 0,
        **params: Any,
    ) -> TextQLearner:
        """A learner for these spaces, without an env."""
        learner = cls.__new__(cls)
        learner._setup(observation_space, action_space, seed, params)
        return learner

    def _setup(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        seed: int,
        params: dict[str, Any],
    ) -> None:
        unknown = set(params) - set(TEXTQ_DEFAULTS)
        if unknown:
            raise ValueError(f"textq: unknown parameter(s) {', '.join(sorted(unknown))}; use {', '.join(TEXTQ_DEFAULTS)}")
        self.params = {**TEXTQ_DEFAULTS, **params}
        fields = (self.params["text_field"], self.params["commands_field"])
        if not (
            isinstance(action_space, gym.spaces.Discrete)
            and isinstance(observation_space, gym.spaces.Dict)
            and all(isinstance(observation_space.spaces.get(f), gym.spaces.Text) for f in fields)
        ):
            raise ValueError(
                f"--learner textq needs command slots: a Discrete action space and a Dict observation with Text fields "
                f"{fields[0]!r} and {fields[1]!r} (e.g. envharness/TextWorld-v0); got {observation_space} and {action_space}"
            )
        self.seed = int(seed)
        self.weights = np.zeros(2 ** int(self.params["bits"]))
        self.steps = 0
        self.episodes = 0
        self._buffer: deque[Episode] = deque(maxlen=int(self.params["buffer"]))

    @property
    def policy_id(self) -> str:
        return f"textq[{self.steps} steps]"

    def epsilon(self) -> float:
        p = self.params
        share = min(self.steps / max(float(p["explore_steps"]), 1.0), 1.0)
        return float(p["epsilon_start"] + share * (p["epsilon_end"] - p["epsilon_start"]))

    def _learn(
        self,
        chosen: list[np.ndarray],
        rewards: list[float],
        following: list[list[np.ndarray]],
        terminated: bool,
    ) -> None:
        """Backward Q(lambda) pass over one episode: ``following[t]`` holds the rows of the commands after step t."""
        p, w = self.params, self.weights
        gamma, lam, lr = float(p["gamma"]), float(p["lam"]), float(p["learning_rate"])
        later = 0.0  # the lambda-return of the step after t
        for t in range(len(chosen) - 1, -1, -1):
            rows = following[t]
            last = t == len(chosen) - 1
            best = max((w[row].sum() for row in rows), default=0.0) if rows and not (last and terminated) else 0.0
            bootstrap = best if last else (1 - lam) * best + lam * later
            target = rewards[t] + gamma * bootstrap
            row = chosen[t]
            w[row] += lr / len(row) * (target - w[row].sum())
            later = target

    def _episode(self, env: gym.Env, policy: TextQPolicy) -> int:
        obs, _ = env.reset()
        policy._new_episode()
        chosen: list[np.ndarray] = []
        rewards: list[float] = []
        following: list[list[np.ndarray]] = []
        terminated = done = False
        text, listed, rows = policy.candidates(obs)
        texts = {text}
        while not done:
            if listed:
                index = policy.choose(policy.values(rows), self.epsilon())
                policy.remember(text, listed[index])
            else:
                index = 0
            obs, reward, terminated, truncated, _ = env.step(index)
            done = terminated or truncated
            self.steps += 1
            next_text, next_listed, next_rows = policy.candidates(obs)
            if listed:  # a step with nothing listed taught nothing
                chosen.append(rows[index])
                rewards.append(float(reward) + (float(self.params["novelty"]) if next_text not in texts else 0.0))
                following.append(next_rows)
            texts.add(next_text)
            text, listed, rows = next_text, next_listed, next_rows
        if chosen:
            episode = (chosen, rewards, following, bool(terminated))
            self._learn(*episode)
            if self._buffer:  # a few earlier episodes again, with what was just learned
                size = min(int(self.params["replay"]), len(self._buffer))
                for i in policy.rng.choice(len(self._buffer), size=size, replace=False):
                    self._learn(*self._buffer[int(i)])
            self._buffer.append(episode)
        self.episodes += 1
        return len(chosen)

    def train(self, make_env: Callable[[], gym.Env], steps: int, seed: int) -> int:
        """Train for at least ``steps`` env steps on envs from ``make_env`` (which picks each level); return the steps taken."""
        env = make_env()
        # Acting uses the live weights; its generator is reseeded from each call's seed.
        policy = TextQPolicy(self.weights, self.params, seed=self.seed)
        policy.rng = np.random.default_rng([self.seed, int(seed)])
        before = self.steps
        try:
            while self.steps - before < steps:
                self._episode(env, policy)
        finally:
            env.close()
        return self.steps - before

    def policy(self) -> TextQPolicy:
        return TextQPolicy(
            self.weights.copy(),
            dict(self.params),
            seed=self.seed,
            policy_id=self.policy_id,
        )

    def save(self, path: Path) -> Path:
        target = Path(path).with_suffix(self.suffix)
        meta = {
            "kind": self.kind,
            "seed": self.seed,
            "steps": self.steps,
            "episodes": self.episodes,
            "params": self.params,
        }
        arrays: dict[str, Any] = {
            "weights": self.weights,
            "meta": np.array(json.dumps(meta)),
            **_pack(self._buffer),
        }

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as handle:  # a file, not a path: numpy would add .npz to the temporary name
                np.savez(handle, **arrays)

        write_file_atomically(target, write)
        return target

    @classmethod
    def load(cls, path: Path, env: gym.Env) -> TextQLearner:
        with np.load(Path(path).with_suffix(cls.suffix)) as saved:
            meta = json.loads(str(saved["meta"]))
            learner = cls(env, seed=meta["seed"], **meta["params"])
            learner.weights[:] = saved["weights"]
            learner._buffer.extend(_unpack(saved))
        learner.steps, learner.episodes = int(meta["steps"]), int(meta["episodes"])
        return learner


def _pack(buffer: Any) -> dict[str, np.ndarray]:
    """The replay buffer as flat arrays (no pickle), so a resumed run replays what an uninterrupted one would."""
    steps = [len(chosen) for chosen, _, _, _ in buffer]
    rows = [row for chosen, _, following, _ in buffer for t, row in enumerate(chosen) for row in (row, *following[t])]
    return {
        "buffer_steps": np.array(steps, dtype=np.int64),
        "buffer_terminated": np.array([ended for *_, ended in buffer], dtype=bool),
        "buffer_rewards": np.array([r for _, rewards, _, _ in buffer for r in rewards], dtype=np.float64),
        "buffer_following": np.array([len(f) for _, _, following, _ in buffer for f in following], dtype=np.int64),
        "buffer_lengths": np.array([len(row) for row in rows], dtype=np.int64),
        "buffer_rows": np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64),
    }


def _unpack(saved: Any) -> list[Episode]:
    if "buffer_steps" not in saved:
        return []
    rows = np.split(saved["buffer_rows"], np.cumsum(saved["buffer_lengths"])[:-1]) if len(saved["buffer_lengths"]) else []
    rewards, following = (
        saved["buffer_rewards"].tolist(),
        saved["buffer_following"].tolist(),
    )
    episodes, r, s = [], 0, 0  # next row, next step
    for steps, ended in zip(saved["buffer_steps"].tolist(), saved["buffer_terminated"].tolist()):
        chosen, after = [], []
        for t in range(steps):
            chosen.append(rows[r])
            after.append(list(rows[r + 1 : r + 1 + following[s + t]]))
            r += 1 + following[s + t]
        episodes.append((chosen, rewards[s : s + steps], after, bool(ended)))
        s += steps
    return episodes
