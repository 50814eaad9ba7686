"""``--learner none``: an agent the loop does not train (an LLM agent under its own harness).

Contains :class:`AgentLearner`. Its ``train`` takes no steps, and its policy is the chat
agent itself, so a loop with it collects the agent's episodes, diagnoses them, proposes
and validates reshapings against the agent's own success band, admits them and evaluates
the agent on held-out levels of the original env: it builds a reshaped suite for that agent,
to train on elsewhere. What it saves is the agent's description (endpoint, model, harness,
the name of the key's variable), never the key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from envharness.files import write_text_atomically
from envharness.reading import read_json


def agent_endpoint(agent: dict[str, Any]) -> Any:
    """The :class:`~envrigger.agents.Endpoint` a loop learner's agent description names (the key's variable, never the key)."""
    from envrigger.agents import Endpoint

    return Endpoint(
        str(agent["base_url"]), str(agent["model"]), api_key_env=str(agent.get("api_key_env", "OPENAI_API_KEY")),
        timeout_s=float(agent.get("timeout_s", 60.0)),
    )  # fmt: skip


class AgentLearner:
    """The loop's view of an agent it does not train.

    Args:
        env: the env (its spaces are checked by the agent's text view).
        seed: unused (the agent's sampling seed is its harness's).
        agent: ``{"base_url", "model", "harness" (an AgentHarness as JSON data), "api_key_env", "timeout_s"}``.

    Example:
        >>> import envharness
        >>> from envrigger.agents import default_harness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", task="add")
        >>> agent = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "harness": default_harness().model_dump(), "api_key_env": "PATH"}
        >>> learner = AgentLearner(env, agent=agent)
        >>> learner.train(lambda: env, 1000, seed=0), learner.policy_id.startswith("chat:m:")
        (0, True)
    """

    kind = "none"

    def __init__(self, env: gym.Env, seed: int = 0, agent: dict[str, Any] | None = None) -> None:
        from envrigger.agents import AgentHarness, ChatAgentFactory, text_view

        if not agent or not agent.get("base_url") or not agent.get("model"):
            raise ValueError("--learner none plays an agent it does not train: give --agent chat --base-url URL --model NAME")
        text_view(env)  # an env the agent can read, or a one-line refusal
        self.agent = dict(agent)
        harness = AgentHarness.model_validate(agent.get("harness") or {})
        self._factory = ChatAgentFactory(harness, agent_endpoint(agent))
        self.policy_id = self._factory.policy_id

    def train(self, make_env: Callable[[], gym.Env], steps: int, seed: int) -> int:
        return 0  # not trained: the loop reshapes the envs it plays, for training elsewhere

    def policy(self) -> Any:
        return self._factory

    def save(self, path: Path) -> Path:
        target = Path(str(path) + ".agent.json")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(target, json.dumps(self.agent, indent=2, sort_keys=True))
        return target

    @classmethod
    def load(cls, path: Path, env: gym.Env) -> AgentLearner:
        return cls(env, agent=read_json(Path(str(path) + ".agent.json"), dict, fix="restore it from a copy, or start a new run"))


__all__ = ["AgentLearner", "agent_endpoint"]
