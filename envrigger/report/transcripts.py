"""LLM agents' evidence in the model's own words: a finding's episodes as chat transcripts.

Contains :func:`finding_transcripts`. For each evidence episode of a finding whose steps
carry model calls (an LLM agent's run), the conversation is rebuilt from the calls the
recorder kept: every model reply of the episode up to the evidence's last step, what it
was answered with (the observation, or the harness's "that reply could not be used"), the
tool calls it made, and which replies the harness could not use, with the reason; the
steps of the evidence range are marked. Old runs, and runs of other policies, have none.
"""

from __future__ import annotations

import json
from typing import Any

from envrigger.data import TrajectoryStore
from envrigger.diagnose.model import Diagnosis

MAX_MESSAGES = 40  # the latest messages of a transcript that the page shows
MAX_CHARS = 1500  # of one message


def _text(message: dict[str, Any]) -> str:
    text = str(message.get("content") or "")
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + f" … ({len(text) - MAX_CHARS} more characters)"


def _calls_of(message: dict[str, Any]) -> list[str]:
    return [f"{c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls") or []]


def transcript(steps: list[tuple[int, str | None]], start: int, end: int) -> list[dict[str, Any]]:
    """The conversation up to step ``end``: ``{role, text, tool_calls, step, marked, error}`` per message.

    Example:
        >>> from envrigger.agents import compress
        >>> call = {"gen_ai.input.messages": compress([{"role": "system", "content": "play"}, {"role": "user", "content": "a room"}]),
        ...         "gen_ai.output.messages": compress([{"role": "assistant", "content": "dance"}]), "envrigger.reply.error": "not a command"}
        >>> [(m["role"], m["text"], m["error"]) for m in transcript([(0, json.dumps([call]))], 0, 0)]
        [('system', 'play', None), ('user', 'a room', None), ('assistant', 'dance', 'not a command')]
    """
    from envrigger.agents import decompress

    out: list[dict[str, Any]] = []
    for t, calls_json in steps:
        if t > end or not calls_json:
            continue
        for call in json.loads(calls_json):
            sent = decompress(call["gen_ai.input.messages"])
            if not out:  # the first call shows everything before it: the system message and the task
                out += [
                    {"role": m["role"], "text": _text(m), "tool_calls": _calls_of(m), "step": t, "marked": False, "error": None}
                    for m in sent
                ]
            else:  # later calls add what answered the previous reply
                answered = [m for m in sent if m.get("role") in ("user", "tool")][-1:]
                out += [
                    {"role": m["role"], "text": _text(m), "tool_calls": [], "step": t, "marked": start <= t <= end, "error": None}
                    for m in answered
                ]
            for m in decompress(call["gen_ai.output.messages"]):
                out.append(
                    {"role": m.get("role", "assistant"), "text": _text(m), "tool_calls": _calls_of(m), "step": t,
                     "marked": start <= t <= end, "error": call.get("envrigger.reply.error")}
                )  # fmt: skip
    if len(out) > MAX_MESSAGES:  # the system message and the task, then the latest messages
        left = len(out) - MAX_MESSAGES + 1
        gap = {
            "role": "system",
            "text": f"… {left} messages left out …",
            "tool_calls": [],
            "step": out[2]["step"],
            "marked": False,
            "error": None,
        }
        out = [*out[:2], gap, *out[len(out) - (MAX_MESSAGES - 3) :]]
    return out


def finding_transcripts(diagnosis: Diagnosis, store: TrajectoryStore, per_finding: int = 2) -> dict[str, list[dict[str, Any]]]:
    """Per finding name, the transcripts of its first ``per_finding`` evidence episodes: ``{episode_id, start, end, messages}``."""
    wanted = {(f.name, e.episode_id, e.start, e.end) for f in diagnosis.findings for e in f.evidence[:per_finding]}
    ids = {w[1] for w in wanted}
    if not ids:
        return {}
    steps: dict[int, list[tuple[int, str | None]]] = {i: [] for i in ids}
    try:
        batches = list(store.iter_step_batches(columns=["episode_id", "t", "calls"]))
    except Exception:  # a run recorded before model calls were: no transcripts
        return {}
    for batch in batches:
        for episode_id, t, calls in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), batch.column(2).to_pylist()):
            if episode_id in steps:
                steps[episode_id].append((t, calls))
    out: dict[str, list[dict[str, Any]]] = {}
    for name, episode_id, start, end in sorted(wanted):
        messages = transcript(sorted(steps[episode_id]), start, end)
        if messages:
            out.setdefault(name, []).append({"episode_id": episode_id, "start": start, "end": end, "messages": messages})
    return out


__all__ = ["finding_transcripts", "transcript"]
