"""The PPO learner (kind ``ppo``, the default): Stable-Baselines3 PPO over :class:`~envrigger.loop.learners.features.Features`.

Contains :class:`PPOLearner`, :data:`PPO_DEFAULTS` and :class:`TorchPolicy` (a trained PPO
network as a picklable, seeded policy for rollouts).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envharness.files import write_file_atomically, write_text_atomically
from envharness.reading import read_json
from envrigger.loop.learners.features import Features, Featurized


class TorchPolicy:
    """A trained actor-critic network as a policy: features in, an action out.

    Stochastic by default (it samples from the policy's action distribution with its own
    generator, seeded per episode from ``seed`` and the episode's seed), which is how a
    PPO agent is evaluated when its greedy action can loop forever in a partially observed
    grid; ``deterministic=True`` takes the most likely action. Picklable, so it runs on
    every rollout backend, and independent of the model it came from.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-Random-6x6-v0")
        >>> learner = PPOLearner(env, seed=0)
        >>> policy = learner.policy()
        >>> policy.reset(7)
        >>> obs, info = env.reset(seed=7)
        >>> policy.act(obs, info) in range(env.action_space.n)
        True
    """

    name = "ppo"

    def __init__(
        self, network: Any, features: Features, discrete: bool, seed: int = 0, deterministic: bool = False, policy_id: str = "ppo"
    ) -> None:
        self.network, self.features, self.discrete = network, features, discrete
        self.seed, self.deterministic, self.policy_id = seed, deterministic, policy_id
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None) -> None:
        self.rng = np.random.default_rng([self.seed, 0 if seed is None else int(seed)])

    def _forward(self, rows: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
        """The action distribution for each row of features, in float64: probabilities, or means and standard deviations.

        In float64 because a float32 matrix product rounds differently with the number of
        rows (a batch of 32 against one alone), which once in about 10^7 steps flipped a
        sampled action; in float64 that takes about 10^16, so an episode gets the same
        actions alone, in a batch and in a worker process. The layers are SB3's own
        (features, actor MLP, action head), without SB3's float32 preprocessing.
        """
        import torch

        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)  # small forward passes: threads only add overhead
        net = self.network
        with torch.no_grad():
            x = torch.as_tensor(np.stack([self.features(obs) for obs in rows]), dtype=torch.float64)
            extractor = getattr(net, "pi_features_extractor", None) or net.features_extractor
            out = net.action_net(net.mlp_extractor.forward_actor(extractor(x)))
            if self.discrete:
                return torch.softmax(out - out.logsumexp(-1, keepdim=True), -1).numpy(), None
            return out.numpy(), net.log_std.exp().expand_as(out).numpy()

    def _choose(self, first: np.ndarray, second: np.ndarray | None) -> Any:
        if second is None:  # action probabilities
            if self.deterministic:
                return int(np.argmax(first))
            return int(self.rng.choice(len(first), p=first / first.sum()))
        return first if self.deterministic else first + second * self.rng.standard_normal(first.shape)

    def act(self, obs: Any, info: dict[str, Any]) -> Any:
        first, second = self._forward([obs])
        return self._choose(first[0], None if second is None else second[0])

    @staticmethod
    def act_batch(policies: list[TorchPolicy], observations: list[Any], infos: list[dict[str, Any]]) -> list[Any]:
        """Actions for several episodes in one forward pass; ``policies`` are copies of one policy, one per episode.

        Each copy samples with its own generator, and the network computes in float64 (see
        :meth:`_forward`), so every episode gets the action :meth:`act` would have chosen for it.
        """
        first, second = policies[0]._forward(observations)
        return [policy._choose(first[k], None if second is None else second[k]) for k, policy in enumerate(policies)]


PPO_DEFAULTS: dict[str, Any] = {
    "n_envs": 8,
    "n_steps": 128,
    "batch_size": 256,
    "n_epochs": 4,
    "learning_rate": 2.5e-4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.01,
    "net_arch": [64, 64],
}


class PPOLearner:
    """Stable-Baselines3 PPO with an MLP over :class:`Features`, on ``n_envs`` mixture sub-envs.

    Parameters (``PPO_DEFAULTS``, each overridable): ``n_envs`` sub-envs that share the
    arm's level stream, PPO's ``n_steps``, ``batch_size``, ``n_epochs``, ``learning_rate``,
    ``gamma``, ``gae_lambda``, ``clip_range``, ``ent_coef``, and the MLP's ``net_arch``.
    Observations are not rescaled (``normalize_images=False``): MiniGrid's codes are small
    integers. Training runs on the CPU with one torch thread; each call reseeds SB3 from
    ``seed``, so a resumed run trains the same bits as an uninterrupted one. Rollouts use
    :meth:`policy`, a stochastic :class:`TorchPolicy`.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("MiniGrid-Empty-Random-6x6-v0")
        >>> learner = PPOLearner(env, seed=0, n_envs=2, n_steps=32, batch_size=64)
        >>> learner.train(lambda: envharness.wrap("MiniGrid-Empty-Random-6x6-v0"), 64, seed=0)
        64
    """

    kind = "ppo"
    suffix = ".zip"

    def __init__(self, env: gym.Env, seed: int = 0, **params: Any) -> None:
        unknown = set(params) - set(PPO_DEFAULTS)
        if unknown:
            raise ValueError(f"ppo: unknown parameter(s) {', '.join(sorted(unknown))}; use {', '.join(PPO_DEFAULTS)}")
        self.params = {**PPO_DEFAULTS, **params}
        self.seed = seed
        self.features = Features(env.observation_space)
        self.discrete = isinstance(env.action_space, gym.spaces.Discrete)
        self.model = self._build(env)
        self.board: Path | None = None

    def log_to(self, directory: Path | None) -> None:
        """Log training to TensorBoard under ``directory`` through SB3's own logger (None: stop); changes nothing trained."""
        self.board = None if directory is None else Path(directory)

    def _vec(self, factories: list[Callable[[], gym.Env]]) -> Any:
        from stable_baselines3.common.vec_env import DummyVecEnv

        logged = getattr(self, "board", None) is not None

        def featurized(make: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
            if logged:  # episode returns, lengths and the verdict's success for SB3's rollout/* scalars
                from stable_baselines3.common.monitor import Monitor

                return lambda: Monitor(Featurized(_Successes(make()), self.features), info_keywords=("is_success",))
            return lambda: Featurized(make(), self.features)

        return DummyVecEnv([featurized(make) for make in factories])

    def _build(self, env: gym.Env) -> Any:
        from stable_baselines3 import PPO

        p = self.params
        # A stand-in vectorized env with the right spaces; each train() call sets the real one.
        placeholder = self._vec([lambda: _Spaces(env.observation_space, env.action_space)] * int(p["n_envs"]))
        with _one_thread():
            return PPO(
                "MlpPolicy",
                placeholder,
                n_steps=int(p["n_steps"]),
                batch_size=int(p["batch_size"]),
                n_epochs=int(p["n_epochs"]),
                learning_rate=float(p["learning_rate"]),
                gamma=float(p["gamma"]),
                gae_lambda=float(p["gae_lambda"]),
                clip_range=float(p["clip_range"]),
                ent_coef=float(p["ent_coef"]),
                seed=self.seed,
                device="cpu",
                verbose=0,
                policy_kwargs={"net_arch": list(p["net_arch"]), "normalize_images": False},
            )

    @property
    def step_unit(self) -> int:
        """Steps of one PPO rollout: training takes whole rollouts, so any budget is rounded up to a multiple of this."""
        return int(self.params["n_envs"]) * int(self.params["n_steps"])

    @property
    def policy_id(self) -> str:
        return f"ppo[{self.model.num_timesteps} steps]"

    def train(self, make_env: Callable[[], gym.Env], steps: int, seed: int) -> int:
        vec = self._vec([make_env] * int(self.params["n_envs"]))
        before = self.model.num_timesteps
        try:
            with _one_thread():
                if getattr(self, "board", None) is not None:
                    from stable_baselines3.common.logger import configure

                    self.model.set_logger(configure(str(self.board), ["tensorboard"]))
                self.model.set_env(vec)
                self.model.set_random_seed(int(seed))
                scorer = getattr(vec.envs[0].unwrapped, "score_level", None)  # a mixture whose sampler may score by value loss
                callback = _ValueLoss(scorer) if scorer is not None else None
                self.model.learn(total_timesteps=int(steps), reset_num_timesteps=False, progress_bar=False, callback=callback)
        finally:
            vec.close()
        return int(self.model.num_timesteps - before)

    def policy(self) -> TorchPolicy:
        source = self.model.policy
        network = type(source)(**source._get_constructor_parameters())  # a fresh module: no optimizer, no graph
        network.load_state_dict(source.state_dict())
        # float64 for rollouts: an episode's actions do not depend on how many episodes share a forward pass (TorchPolicy._forward).
        return TorchPolicy(network.double().eval(), self.features, self.discrete, seed=self.seed, policy_id=self.policy_id)

    def save(self, path: Path) -> Path:
        target = Path(path).with_suffix(self.suffix)
        meta = {"kind": "ppo", "seed": self.seed, "params": self.params}
        write_text_atomically(target.with_suffix(".meta.json"), json.dumps(meta))
        write_file_atomically(target, lambda tmp: self.model.save(tmp))
        return target

    @classmethod
    def load(cls, path: Path, env: gym.Env) -> PPOLearner:
        from stable_baselines3 import PPO

        target = Path(path).with_suffix(cls.suffix)
        where = target.with_suffix(".meta.json")
        meta = read_json(where, dict, fix="restore it from a copy, or start a new run")
        learner = cls.__new__(cls)
        learner.params, learner.seed = meta.get("params"), meta.get("seed")
        if not isinstance(learner.params, dict) or type(learner.seed) is not int or not isinstance(learner.params.get("n_envs"), int):
            raise ValueError(
                f"{where}: not a PPO learner's record (its params, seed or n_envs); restore it from a copy, or start a new run"
            )
        learner.features = Features(env.observation_space)
        learner.discrete = isinstance(env.action_space, gym.spaces.Discrete)
        placeholder = learner._vec([lambda: _Spaces(env.observation_space, env.action_space)] * int(learner.params["n_envs"]))
        learner.model = PPO.load(str(target), env=placeholder, device="cpu")
        learner.board = None
        return learner


def positive_value_loss(advantages: np.ndarray, levels: list[list[tuple[int, int] | None]]) -> list[tuple[tuple[int, int], float]]:
    """Each level's mean ``max(GAE advantage, 0)`` over the steps one rollout played on it: PLR's score (Jiang et al., 2021).

    ``advantages`` is the rollout's ``(n_steps, n_envs)`` GAE advantages; ``levels[t][e]``
    the level sub-env ``e`` played step ``t`` on (None: unknown). A level played in several
    stretches of the rollout (an episode cut by its end, or a replay) is scored over all of
    them; in the order each level was last played.

    Example:
        >>> adv = np.array([[1.0, -1.0], [-1.0, 0.5], [3.0, 0.5]])
        >>> positive_value_loss(adv, [[(0, 7), (0, 8)], [(0, 7), (0, 8)], [(0, 9), (0, 8)]])
        [((0, 7), 0.5), ((0, 9), 3.0), ((0, 8), 0.3333333333333333)]
    """
    sums: dict[tuple[int, int], list[float]] = {}
    for t, row in enumerate(levels):
        for e, level in enumerate(row):
            if level is not None:
                total = sums.pop(level, [0.0, 0.0])
                sums[level] = [total[0] + max(float(advantages[t, e]), 0.0), total[1] + 1]
    return [(level, total / count) for level, (total, count) in sums.items()]


class _ValueLoss:
    """An SB3 callback that scores every level a rollout played by its positive value loss and reports it (``score_level``)."""

    def __new__(cls, report: Callable[[int, int, float], None]) -> Any:
        from stable_baselines3.common.callbacks import BaseCallback

        class ValueLoss(BaseCallback):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.levels: list[list[tuple[int, int] | None]] = []

            def _on_rollout_start(self) -> None:
                self.levels = []

            def _on_step(self) -> bool:
                self.levels.append([_level(info) for info in self.locals["infos"]])
                return True

            def _on_rollout_end(self) -> None:  # SB3 has just computed the rollout's advantages (GAE)
                advantages = self.model.rollout_buffer.advantages  # type: ignore[attr-defined]  # PPO's, an OnPolicyAlgorithm
                for (index, seed), loss in positive_value_loss(advantages, self.levels[: len(advantages)]):
                    report(index, seed, loss)

        return ValueLoss()


def _level(info: dict[str, Any]) -> tuple[int, int] | None:
    played = info.get("mixture")
    return (int(played["index"]), int(played["seed"])) if played else None


class _Successes(gym.Wrapper):
    """Adds ``info["is_success"]`` (the verdict's success) at an episode's end, which SB3 logs as ``rollout/success_rate``."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            verdict = info.get("verdict")
            info = {**info, "is_success": bool(getattr(verdict, "success", False))}
        return obs, reward, terminated, truncated, info


class _Spaces(gym.Env):
    """An env that only has spaces: what SB3 needs to build a model before training starts."""

    def __init__(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.observation_space.sample(), 0.0, True, False, {}


class _one_thread:
    """Run torch on one thread inside the block (small MLPs are slower on more), then restore."""

    def __enter__(self) -> None:
        import torch

        self.before = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_num_threads(self.before)
