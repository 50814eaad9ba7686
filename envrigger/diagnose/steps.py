"""One streaming, vectorized pass over a run's steps: per-episode behaviour counts.

Contains :class:`StepStats` (the per-episode counts the step detectors read),
:func:`complete_episodes` (re-chunks record batches so no episode is split) and
:func:`scan_steps`. Memory is bounded by the batch size, whatever the run's length.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from envrigger.data import TrajectoryStore

STEP_COLUMNS = ["episode_id", "t", "action", "reward", "blocked", "obs_digest", "obs", "position", "info"]
EXCERPT_STEPS = 12  # an excerpt longer than this keeps its first and last steps, so it shows both ends of its range
STATE_WINDOW = 8  # decision states sampled per episode for conditions: a failure's last ones, spread over a success
STATE_EPISODES = 2000  # per outcome, at most this many episodes contribute sampled states
MAX_STATE_FEATURES = 32


@dataclass
class StateSample:
    """Numeric features of sampled decision states: rows of ``x`` (one per sampled step), named by ``names``.

    A row is the state the agent acted on at step ``t`` of ``episode``: the position the
    adapter reported and the stored observation (when small and numeric) after step ``t - 1``.
    """

    names: list[str]
    x: np.ndarray
    episode: np.ndarray
    t: np.ndarray


def state_features(obs: Any, position: Any) -> dict[str, float] | None:
    """Flat numeric features of one stored step: ``obs[i]`` (or ``obs.field[i]``) and ``position[i]``; None if not numeric.

    Example:
        >>> state_features([0.1, -0.2], None)
        {'obs[0]': 0.1, 'obs[1]': -0.2}
        >>> state_features(5, [1, 2, 0])
        {'obs': 5.0, 'position[0]': 1.0, 'position[1]': 2.0, 'position[2]': 0.0}
    """
    out: dict[str, float] = {}

    def add(name: str, value: Any) -> bool:
        if isinstance(value, bool) or value is None:
            return False
        if isinstance(value, (int, float)):
            out[name] = float(value)
            return True
        if isinstance(value, list) and value and len(value) <= MAX_STATE_FEATURES and all(isinstance(v, (int, float)) for v in value):
            out.update({f"{name}[{i}]": float(v) for i, v in enumerate(value)})
            return True
        return False

    if isinstance(obs, dict):
        for key in sorted(obs):
            add(f"obs.{key}", obs[key])
    else:
        add("obs", obs)
    add("position", position)
    return out or None


@dataclass
class StepStats:
    """Per-episode counts from the steps, aligned on ``episode_id`` (sorted).

    ``cycle``: steps returning to a state seen 2-4 steps before (oscillation, short loops);
    ``revisit``: steps returning to any earlier state; ``noop``: steps after which the state
    did not change; ``max_repeat``: the longest run of one identical action; ``blocked``,
    ``tool_error``, ``retry``: steps refused by a rule or reporting a tool error / retry;
    ``costly``: steps whose reward falls far below the episode's usual step reward (an
    illegal move's penalty, a fall off a cliff), and ``lost``, the reward those steps cost
    beyond the usual. ``ranges`` holds, per detector and flagged episode, the step range
    that shows it best; ``excerpts`` the steps of each ``(episode, start, end)`` range, for
    reports; ``states`` the numeric state features of sampled steps (see :class:`StateSample`).
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
    costly: np.ndarray
    lost: np.ndarray
    transitions: int = 0
    distinct_states: int = 0  # distinct positions (or observation digests) seen, counted up to 2: 1 means the steps carry no state
    ranges: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    excerpts: dict[tuple[int, int, int], list[dict]] = field(default_factory=dict)
    states: StateSample | None = None

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


def _costly(reward: np.ndarray, local: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step, whether its reward falls far below its episode's median step reward, and by how much.

    "Far" is more than the largest of 0.5, a tenth of the median's size and three robust
    standard deviations (1.4826 MAD) of the episode's rewards: a Taxi's -10 among its -1s,
    a cliff's -100, but not the ordinary spread of a shaped reward.
    """
    order = np.lexsort((reward, local))
    ranked = reward[order]
    median = ranked[starts + counts // 2][local]
    deviation = np.abs(reward - median)
    by_dev = deviation[np.lexsort((deviation, local))]
    mad = by_dev[starts + counts // 2][local]
    margin = np.maximum.reduce([np.full_like(reward, 0.5), 0.1 * np.abs(median), 3 * 1.4826 * mad])
    costly = reward < median - margin
    return costly, np.where(costly, median - reward, 0.0)


def _span_rows(t: np.ndarray, lo: int, hi: int, span: tuple[int, int]) -> list[int]:
    """Rows of one episode showing ``span`` (two steps of context each side); a long span keeps both ends."""
    rows = [j for j in range(lo, hi) if span[0] - 2 <= t[j] <= span[1] + 2]
    if len(rows) <= EXCERPT_STEPS:
        return rows
    head = EXCERPT_STEPS // 3
    return rows[:head] + rows[len(rows) - (EXCERPT_STEPS - head) :]


def _decode(text: str | None) -> Any:
    return json.loads(text) if text else None


def scan_steps(
    store: TrajectoryStore,
    flags: dict[str, tuple[str, int, float]],
    excerpt_for: dict[int, list[tuple[int, int]]],
    evidence_per_flag: int,
    batch_size: int = 262_144,
    failed: set[int] | None = None,
) -> StepStats:
    """Count behaviours per episode, streaming; note step ranges for flagged episodes; sample decision states.

    Args:
        flags: detector -> (count name, minimum count, minimum share of the episode's steps);
            the first ``evidence_per_flag`` episodes meeting it get a step range.
        excerpt_for: episode id -> step ranges whose steps to keep as excerpts.
        failed: ids of failed episodes; when given, decision states are sampled (the last
            :data:`STATE_WINDOW` of a failure, spread over a success) for conditions.
    """
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("episode_id", "steps", "cycle", "revisit", "noop", "max_repeat", "blocked", "tool_error", "retry", "costly", "lost")
    }
    ranges: dict[str, dict[int, tuple[int, int]]] = {name: {} for name in flags}
    excerpts: dict[tuple[int, int, int], list[dict]] = {}
    sampled: list[tuple[int, int, dict[str, float]]] = []
    taken = {True: 0, False: 0}
    transitions = 0
    seen: set[Any] = set()
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
        state_column = position if position.null_count < n else table.column("obs_digest")
        state = _codes(state_column)
        if len(seen) < 2:
            seen.update(pc.unique(state_column).to_pylist()[:2])
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
        reward = table.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)
        costly, lost = _costly(reward, local, starts, counts)
        per_step = {
            "cycle": cycle,
            "revisit": revisit,
            "noop": same_prev,
            "blocked": blocked,
            "tool_error": tool_error,
            "retry": retry,
            "costly": costly,
        }
        per_episode = {name: np.bincount(local, weights=mask, minlength=n_eps).astype(np.int64) for name, mask in per_step.items()}
        per_episode["max_repeat"] = max_repeat
        per_episode_lost = np.bincount(local, weights=lost, minlength=n_eps)
        ids = ep[starts]
        for key_name, values in (("episode_id", ids), ("steps", counts), *per_episode.items(), ("lost", per_episode_lost)):
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
        spans: dict[int, set[tuple[int, int]]] = {}
        for i in ids.tolist():
            wanted = set(excerpt_for.get(i, ())) | {r[i] for r in ranges.values() if i in r}
            if wanted:
                spans[i] = wanted
        rows_for_states: dict[int, list[int]] = {}
        if failed is not None:
            for i, episode_id in enumerate(ids.tolist()):
                lost_episode = episode_id in failed
                if taken[lost_episode] >= STATE_EPISODES or counts[i] < 2:
                    continue
                taken[lost_episode] += 1
                lo, hi = int(starts[i]), int(starts[i] + counts[i])
                if lost_episode:  # the states it acted on before its final step
                    rows_for_states[i] = list(range(max(lo, hi - 1 - STATE_WINDOW), hi - 1))
                else:
                    rows_for_states[i] = sorted(set(np.linspace(lo, hi - 2, STATE_WINDOW).astype(int).tolist()))
        if spans or rows_for_states:
            local_of = {int(e): k for k, e in enumerate(ids)}
            span_rows = {}
            for episode_id, wanted in spans.items():
                i = local_of[episode_id]
                lo, hi = int(starts[i]), int(starts[i] + counts[i])
                for span in wanted:
                    span_rows[(episode_id, span[0], span[1])] = _span_rows(t, lo, hi, span)
            needed = sorted({j for rows in span_rows.values() for j in rows} | {j for rows in rows_for_states.values() for j in rows})
            at = {j: k for k, j in enumerate(needed)}  # only the rows shown or sampled become Python objects
            picked = table.select(["t", "action", "reward", "blocked", "position", "obs_digest", "obs", "info"])
            col = picked.take(pa.array(needed, type=pa.int64())).to_pydict() if needed else {}
            for key, rows in span_rows.items():
                excerpts[key] = [
                    {
                        "t": col["t"][at[j]],
                        "action": json.loads(col["action"][at[j]]),
                        "reward": col["reward"][at[j]],
                        "blocked": col["blocked"][at[j]],
                        "state": _decode(col["position"][at[j]])
                        if col["position"][at[j]]
                        else (_decode(col["obs"][at[j]]) if col["obs"][at[j]] else col["obs_digest"][at[j]]),
                        "info": json.loads(col["info"][at[j]]),
                    }
                    for j in rows
                ]
            for i, rows in rows_for_states.items():
                for j in rows:
                    features = state_features(_decode(col["obs"][at[j]]), _decode(col["position"][at[j]]))
                    if features is not None:  # the state after step t is what the agent acts on at step t + 1
                        sampled.append((int(ids[i]), int(t[j]) + 1, features))
    joined = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in parts.items()}
    order = np.argsort(joined["episode_id"], kind="stable")
    states = None
    if sampled:
        names = list(sampled[0][2])
        kept = [row for row in sampled if list(row[2]) == names]  # one shape of state only
        states = StateSample(
            names=names,
            x=np.array([[row[2][k] for k in names] for row in kept], dtype=np.float64),
            episode=np.array([row[0] for row in kept], dtype=np.int64),
            t=np.array([row[1] for row in kept], dtype=np.int64),
        )
    return StepStats(
        **{k: v[order] for k, v in joined.items()}, transitions=transitions, distinct_states=min(len(seen), 2), ranges=ranges,
        excerpts=excerpts, states=states,
    )  # fmt: skip
