"""A scripted code-repair agent whose releases differ in known ways: the model, the harness, the environment.

Two models serve from one Chat Completions server: ``strong`` knows the fix of every task,
``weak`` only of every other task (by its place in the task list) and gives up (submits at
once) on the rest. Both have one quirk: the first reply of every turn is prose, so a
harness with no retries wastes every turn and one with a retry does not. Where the env
offers ``ask_human`` (a reviewer), a model that does not know a fix asks, and applies the
reviewer's answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from envharness.envs.code_tasks import TASKS
from envrigger.agents import default_harness
from envrigger.agents.scripted import Reply

BY_PATH = {task.path: (index, task) for index, task in enumerate(TASKS)}
RETRY = "That reply could not be used"


def knows(model: str, index: int) -> bool:
    return model == "strong" or index % 2 == 0


def plan(model: str, first: str, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    index, task = BY_PATH[re.search(r'"path": "([^"]+)"', first).group(1)]
    fix = [{"tool": "replace", "path": task.path, "start": a, "end": b, "text": text} for a, b, text in sorted(task.fix, reverse=True)]
    if knows(model, index):
        return [{"tool": "view", "path": task.path}, *fix, {"tool": "submit"}]
    if "ask_human" in first:
        return [{"tool": "ask_human", "question": "Which lines are wrong, and what should they say?"}, *fix, {"tool": "submit"}]
    return [{"tool": "submit"}]


def model(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    if not str(messages[-1].get("content", "")).startswith(RETRY):
        return Reply(content="Let me think about what the bug could be before I act.")  # the quirk
    done = 0
    for message in messages:
        if message["role"] == "assistant":
            try:
                json.loads(message["content"])
                done += 1
            except (ValueError, TypeError):
                pass
    steps = plan(request["model"], messages[1]["content"], messages)
    return Reply(content=json.dumps(steps[min(done, len(steps) - 1)]))


def harness_file(tmp_path: Any, retries: int, temperature: float = 0.0) -> Any:
    harness = default_harness("envharness/CodeRepair-v0")
    harness = harness.model_copy(update={"retries": retries, "sampling": harness.sampling.model_copy(update={"temperature": temperature})})
    path = tmp_path / f"harness-r{retries}-t{temperature}.json"
    path.write_text(harness.to_json())
    return path
