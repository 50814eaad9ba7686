"""Random reshapings drawn without a diagnosis: what the dr, dr-any and plr-random arms train on.

Contains :func:`random_specs`: the ``dr`` arm's draw of levels (state transforms), the
``dr-any`` arm's draw over the whole catalog, and ``plr-random``'s random components.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envharness.errors import EnvHarnessError
from envharness.spec import HarnessSpec
from envharness.transforms import TRANSFORMS
from envharness.transforms.base import field_bounds


def _draw(cls: Any, rng: np.random.Generator) -> Any:
    """An instance of catalog class ``cls`` with every bounded numeric parameter drawn uniformly.

    Integers and floats are drawn within their declared bounds, capped at four times the
    default (or the lower bound plus four) so a draw stays on the scale of the env.
    """
    params: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        lo, hi = field_bounds(field)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            continue
        default = field.default if isinstance(field.default, (int, float)) else None
        if default is not None:
            hi = min(hi, max(4.0 * abs(default), lo + 4.0))
        if field.annotation is int:
            params[name] = int(rng.integers(math.ceil(lo), math.floor(hi) + 1))
        elif field.annotation is float or (default is None and "float" in str(field.annotation)):
            params[name] = float(rng.uniform(lo, hi))
    return cls(**params)


def random_specs(
    base: HarnessSpec, rng: np.random.Generator, n: int, tries: int = 200, kinds: tuple[str, ...] = ("state", "rule", "observation")
) -> list[HarnessSpec]:
    """Up to ``n`` domain-randomized specs: one catalog transform each, parameters drawn at random.

    Every transform of ``kinds`` in the catalog that builds on ``base`` with
    defaults-or-drawn parameters, is one an automatic proposer may offer there, keeps the
    base env's observation and action spaces, and survives one reset is a candidate; no
    diagnosis is involved. Draws that fail to build are skipped. ``kinds=("state",)``
    draws levels (where the agent starts, what the world holds) and leaves the rules
    alone: domain randomization as the curriculum literature means it.

    Example:
        >>> import numpy as np
        >>> from envharness import HarnessSpec
        >>> specs = random_specs(HarnessSpec(env_id="MiniGrid-DoorKey-5x5-v0"), np.random.default_rng(0), 4)
        >>> len(specs), all(len(s.transforms) == 1 for s in specs)
        (4, True)
        >>> levels = random_specs(HarnessSpec(env_id="MiniGrid-DoorKey-5x5-v0"), np.random.default_rng(0), 4, kinds=("state",))
        >>> from envharness.transforms import TRANSFORMS
        >>> all(TRANSFORMS[s.transforms[0].name].kind == "state" for s in levels)
        True
    """
    probe = base.build()
    spaces = (probe.observation_space, probe.action_space)
    view = probe.adapter
    probe.close()
    names = sorted(
        name for name, cls in TRANSFORMS.items() if cls.kind in kinds and cls.__module__.startswith("envharness.") and cls.drawable
    )
    if not names:
        return []
    out: list[HarnessSpec] = []
    seen: set[str] = set()
    for _ in range(tries):
        if len(out) >= n:
            break
        cls = TRANSFORMS[names[int(rng.integers(len(names)))]]
        try:
            transform = _draw(cls, rng)
            if not transform.proposable(view):
                continue
            spec = base.extended(transform)
            if spec.hash() in seen:
                continue
            env = spec.build()
            try:
                if (env.observation_space, env.action_space) != spaces:
                    continue
                env.reset(seed=int(rng.integers(2**31)))
            finally:
                env.close()
        except (EnvHarnessError, ValueError, TypeError):
            continue  # parameters the transform refuses, or an env it does not apply to
        seen.add(spec.hash())
        out.append(spec)
    return out
