"""LLM agents: a chat agent on any OpenAI-compatible endpoint, under its own serializable harness.

Contains :class:`~envrigger.agents.harness.AgentHarness` (the agent's loop as data),
:class:`~envrigger.agents.chat.ChatAgent` and :class:`~envrigger.agents.chat.Endpoint`,
and :func:`~envrigger.agents.textview.text_view` (an env as a chat). The ``openai``
client is an optional extra (``pip install "envharness[llm]"``), imported when an agent
talks to an endpoint.
"""

from envrigger.agents.chat import AgentError, ChatAgent, ChatAgentFactory, Endpoint, check_endpoint, compress, decompress
from envrigger.agents.harness import AgentHarness, ContextPolicy, ParseRules, Sampling, default_harness, render
from envrigger.agents.textview import TextView, UnusableReply, text_view

__all__ = [
    "AgentError",
    "AgentHarness",
    "ChatAgent",
    "ChatAgentFactory",
    "ContextPolicy",
    "Endpoint",
    "ParseRules",
    "Sampling",
    "TextView",
    "UnusableReply",
    "check_endpoint",
    "compress",
    "decompress",
    "default_harness",
    "render",
    "text_view",
]
