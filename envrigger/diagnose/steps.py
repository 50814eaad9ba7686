"""One streaming, vectorized pass over a run's steps: per-episode behaviour counts.

Contains :class:`StepStats` (the per-episode counts the step detectors read),
:func:`complete_episodes` (re-chunks record batches so no episode is split) and
:func:`scan_steps`. Memory is bounded by the batch size, whatever the run's length.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from envrigger.trajectory import TrajectoryStore

STEP_COLUMNS = ["episode_id", "t", "action", "reward", "blocked", "obs_digest", "position", "info"]
EXCERPT_STEPS = 12


@dataclass
class StepStats:
    """Per-episode counts from the steps, aligned on ``episode_id`` (sorted).

    ``cycle``: steps returning to a state seen 2-4 steps before (oscillation, short loops);
    ``revisit``: steps returning to any earlier state; ``noop``: steps after which the state
    did not change; ``max_repeat``: the longest run of one identical action; ``blocked``,
    ``tool_error``, ``retry``: steps refused by a rule or reporting a tool error / retry.
    ``ranges`` holds, per detector and flagged episode, the step range that shows it best;
    ``excerpts`` a few steps around each range, for reports.
    """

    episode_id: np.ndarray
    steps: np.ndarray
    cycle: np.ndarray
    revisit: np.ndarray
    noop: np.ndarray
    max_repeat: np.ndarray
    blocked: np.ndarray
    tool_error: np.ndarray
    retry: np.ndarray
    transitions: int = 0
    ranges: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    excerpts: dict[int, list[dict]] = field(default_factory=dict)

    def column(self, name: str, episode_ids: np.ndarray) -> np.ndarray:
        """Counts of ``name`` for ``episode_ids`` (0 for episodes without steps)."""
        values = getattr(self, name)
        out = np.zeros(len(episode_ids), dtype=values.dtype)
        if len(self.episode_id):
            where = np.clip(np.searchsorted(self.episode_id, episode_ids), 0, len(self.episode_id) - 1)
            hit = self.episode_id[where] == episode_ids
            out[hit] = values[where[hit]]
        return out


def complete_episodes(store: TrajectoryStore, batch_size: int) -> Iterator[pa.Table]:
    """Step tables holding whole episodes only: each batch's trailing episode waits for the next batch.

    Steps of one episode are contiguous in a run (a part holds whole episodes), so holding
    back the rows of the last episode id of a batch is enough.
    """
    held: pa.Table | None = None
    for batch in store.iter_step_batches(columns=STEP_COLUMNS, batch_size=batch_size):
        table = pa.Table.from_batches([batch])
        if held is not None:
            table = pa.concat_tables([held, table])
        ids = table.column("episode_id").to_numpy()
        trailing = ids != ids[-1]
        cut = len(ids) - int(np.argmax(trailing[::-1])) if trailing.any() else 0
        held = table.slice(cut)
        if cut:
            yield table.slice(0, cut)
    if held is not None and held.num_rows:
        yield held


def _codes(column: pa.ChunkedArray) -> np.ndarray:
    encoded = pc.dictionary_encode(column.combine_chunks())
    return pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _longest_streak(mask: np.ndarray) -> tuple[int, int] | None:
    """Start and end index (inclusive) of the longest run of True in ``mask``."""
    if not mask.any():
        return None
    padded = np.r_[False, mask, False].astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[::2], edges[1::2]
    best = int(np.argmax(ends - starts))
    return int(starts[best]), int(ends[best] - 1)


def scan_steps(
    store: TrajectoryStore,
    flags: dict[str, tuple[str, int, float]],
    excerpt_for: dict[int, tuple[int, int]],
    evidence_per_flag: int,
    batch_size: int = 262_144,
) -> StepStats:
    """Count behaviours per episode, streaming; note step ranges for flagged episodes.

    Args:
        flags: detector -> (count name, minimum count, minimum share of the episode's steps);
            the first ``evidence_per_flag`` episodes meeting it get a step range.
        excerpt_for: episode id -> step range whose steps to keep as an excerpt.
    """
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("episode_id", "steps", "cycle", "revisit", "noop", "max_repeat", "blocked", "tool_error", "retry")
    }
    ranges: dict[str, dict[int, tuple[int, int]]] = {name: {} for name in flags}
    excerpts: dict[int, list[dict]] = {}
    transitions = 0
    for table in complete_episodes(store, batch_size):
        n = table.num_rows
        transitions += n
        ep = table.column("episode_id").to_numpy()
        new = np.ones(n, dtype=bool)
        new[1:] = ep[1:] != ep[:-1]
        local = np.cumsum(new) - 1
        n_eps = int(local[-1]) + 1
        starts = np.flatnonzero(new)
        counts = np.bincount(local, minlength=n_eps)
        position = table.column("position")
        state = _codes(position) if position.null_count < n else _codes(table.column("obs_digest"))
        same_prev = np.zeros(n, dtype=bool)
        same_prev[1:] = (state[1:] == state[:-1]) & ~new[1:]
        cycle = np.zeros(n, dtype=bool)
        for lag in (2, 3, 4):
            cycle[lag:] |= (state[lag:] == state[:-lag]) & (ep[lag:] == ep[:-lag])
        cycle &= ~same_prev
        key = local * (int(state.max()) + 2) + (state + 1)
        _, first = np.unique(key, return_index=True)
        revisit = np.ones(n, dtype=bool)
        revisit[first] = False
        action = _codes(table.column("action"))
        change = new.copy()
        change[1:] |= action[1:] != action[:-1]
        run_id = np.cumsum(change) - 1
        run_len = np.bincount(run_id)
        max_repeat = np.zeros(n_eps, dtype=np.int64)
        np.maximum.at(max_repeat, local[change], run_len)
        blocked = table.column("blocked").is_valid().to_numpy(zero_copy_only=False)
        info = table.column("info")
        tool_error = pc.match_substring(info, '"tool_error"').to_numpy(zero_copy_only=False)
        retry = pc.match_substring(info, '"retry').to_numpy(zero_copy_only=False)
        per_step = {"cycle": cycle, "revisit": revisit, "noop": same_prev, "blocked": blocked, "tool_error": tool_error, "retry": retry}
        per_episode = {name: np.bincount(local, weights=mask, minlength=n_eps).astype(np.int64) for name, mask in per_step.items()}
        per_episode["max_repeat"] = max_repeat
        ids = ep[starts]
        for key_name, values in (("episode_id", ids), ("steps", counts), *per_episode.items()):
            parts[key_name].append(values)

        t = table.column("t").to_numpy()
        masks = per_step
        for flag, (count_name, minimum, share) in flags.items():
            found = ranges[flag]
            if len(found) >= evidence_per_flag:
                continue
            hits = np.flatnonzero((per_episode[count_name] >= minimum) & (per_episode[count_name] >= share * counts))
            for i in hits[: evidence_per_flag - len(found)]:
                lo, hi = starts[i], starts[i] + counts[i]
                if count_name == "max_repeat":  # the longest run of one action, not of any repeats
                    same = np.r_[False, action[lo + 1 : hi] == action[lo : hi - 1]]
                    streak = _longest_streak(same)
                    streak = streak and (streak[0] - 1, streak[1])
                else:
                    streak = _longest_streak(masks[count_name][lo:hi])
                if streak is not None:
                    found[int(ids[i])] = (int(t[lo + streak[0]]), int(t[lo + streak[1]]))
        wanted = {int(i): local_i for local_i, i in enumerate(ids) if int(i) in excerpt_for or any(int(i) in r for r in ranges.values())}
        if wanted:
            columns = table.select(["t", "action", "reward", "blocked", "position", "obs_digest", "info"]).to_pydict()
            for episode_id, i in wanted.items():
                lo, hi = starts[i], starts[i] + counts[i]
                span = excerpt_for.get(episode_id) or next(r[episode_id] for r in ranges.values() if episode_id in r)
                rows = [j for j in range(lo, hi) if span[0] - 2 <= columns["t"][j] <= span[1] + 2][:EXCERPT_STEPS]
                excerpts[episode_id] = [
                    {
                        "t": columns["t"][j],
                        "action": json.loads(columns["action"][j]),
                        "reward": columns["reward"][j],
                        "blocked": columns["blocked"][j],
                        "state": json.loads(columns["position"][j]) if columns["position"][j] else columns["obs_digest"][j],
                        "info": json.loads(columns["info"][j]),
                    }
                    for j in rows
                ]
    joined = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in parts.items()}
    order = np.argsort(joined["episode_id"], kind="stable")
    return StepStats(**{k: v[order] for k, v in joined.items()}, transitions=transitions, ranges=ranges, excerpts=excerpts)
