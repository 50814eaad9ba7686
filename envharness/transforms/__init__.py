"""The transform catalog: every built-in transform, by kind, and the registry.

:data:`CATALOG` is the set of built-in classes, fixed at import: the harness trusts them
not to touch the base env outside their surfaces, and audits every other transform.

Example:
    >>> from envharness.transforms import CATALOG, TRANSFORMS
    >>> sorted({cls.kind for cls in TRANSFORMS.values()})
    ['link', 'observation', 'rule', 'state']
    >>> MoveGoal in CATALOG
    True
"""

from envharness.transforms.base import (
    KINDS,
    TRANSFORMS,
    Blocked,
    LinkTransform,
    ObservationTransform,
    RuleTransform,
    StateTransform,
    Step,
    Transform,
    get_transform,
    register_transform,
    transform_from_spec,
)
from envharness.transforms.link import Chain
from envharness.transforms.observation import (
    DelayObservation,
    DropField,
    Flatten,
    ImageOnly,
    MaskObservation,
    ObservationNoise,
    PartialView,
    TextHint,
    TruncateText,
)
from envharness.transforms.rule import (
    ActionCost,
    ActionSlip,
    BlockAction,
    BlockTool,
    BlockVerb,
    RemapActions,
    StepBudget,
    TerminateOn,
    ToolCost,
)
from envharness.transforms.state import (
    AddLava,
    AddWalls,
    DemoStart,
    FrozenLakeMap,
    InitialStateNoise,
    MoveAgent,
    MoveGoal,
    OpenFile,
    PhysicsParams,
    RemoveWalls,
    ReplayPrefix,
    WalkthroughStart,
)

CATALOG: frozenset[type[Transform]] = frozenset(TRANSFORMS.values())

__all__ = [
    "CATALOG",
    "KINDS",
    "TRANSFORMS",
    "ActionCost",
    "ActionSlip",
    "AddLava",
    "AddWalls",
    "BlockAction",
    "BlockTool",
    "BlockVerb",
    "Blocked",
    "Chain",
    "DelayObservation",
    "DropField",
    "Flatten",
    "ImageOnly",
    "FrozenLakeMap",
    "InitialStateNoise",
    "LinkTransform",
    "MaskObservation",
    "MoveAgent",
    "MoveGoal",
    "ObservationNoise",
    "ObservationTransform",
    "OpenFile",
    "PartialView",
    "PhysicsParams",
    "RemapActions",
    "RemoveWalls",
    "ReplayPrefix",
    "RuleTransform",
    "StateTransform",
    "Step",
    "StepBudget",
    "TerminateOn",
    "TextHint",
    "ToolCost",
    "Transform",
    "TruncateText",
    "WalkthroughStart",
    "DemoStart",
    "get_transform",
    "register_transform",
    "transform_from_spec",
]
