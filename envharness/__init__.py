"""envharness: wrap any Gymnasium env in one line and reshape it with composable transforms.

The original verifier is kept and enforced: ``info["verdict"]`` comes from the base env,
never from a transform.

Example:
    >>> import envharness
    >>> from envharness.transforms import MoveGoal, ActionSlip
    >>> env = envharness.wrap("MiniGrid-Empty-8x8-v0", MoveGoal(max_dist=3), ActionSlip(p=0.1))
    >>> obs, info = env.reset(seed=0)
    >>> sorted(info["level"])[:3]
    ['goal_distance', 'height', 'n_doors']
"""

from envharness.errors import (
    ActionError,
    EnvHarnessError,
    EnvNotFoundError,
    EpisodeEndedError,
    IncompatibleTransformError,
    SpecError,
    StateAccessError,
    TransformError,
    UnknownTransformError,
    VerifierTamperError,
)
from envharness.harness import Harness, allowing_imports, wrap
from envharness.spec import HarnessSpec, TransformSpec, register
from envharness.verifier import Verdict

__version__ = "0.1.0"

__all__ = [
    "EnvHarnessError",
    "EnvNotFoundError",
    "EpisodeEndedError",
    "ActionError",
    "Harness",
    "HarnessSpec",
    "IncompatibleTransformError",
    "SpecError",
    "StateAccessError",
    "TransformError",
    "TransformSpec",
    "UnknownTransformError",
    "Verdict",
    "VerifierTamperError",
    "__version__",
    "allowing_imports",
    "register",
    "wrap",
]
