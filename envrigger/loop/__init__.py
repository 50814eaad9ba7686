"""The EnvRigger loop: collect, diagnose, propose, validate, admit, train every arm, pick, evaluate held-out.

The face of the package: :class:`LoopConfig`, :class:`LevelSplit`, :func:`evaluate`,
:func:`run_loop`, and for claims across training seeds :func:`run_seeds` (several at once:
:func:`run_many`) and :func:`across_seeds`. Inside, the pipeline in the order it runs:

- :mod:`~envrigger.loop.config`: :class:`LoopConfig`, the seed ranges;
- :mod:`~envrigger.loop.levels`: fresh seeds and the level-disjoint :class:`LevelSplit`;
- :mod:`~envrigger.loop.arms`: the arms, one registered unit each (:func:`register_arm`);
  :mod:`~envrigger.loop.samplers`, :mod:`~envrigger.loop.mixture`: what they train on (PLR,
  the curriculum, the mixture env);
- :mod:`~envrigger.loop.learners`: the learners, behind one protocol;
- :mod:`~envrigger.loop.train`: one arm's training for a round;
- :mod:`~envrigger.loop.propose`, :mod:`~envrigger.loop.validate`, :mod:`~envrigger.loop.gates`,
  :mod:`~envrigger.loop.library`: candidates, their gates, and the library that admits them;
- :mod:`~envrigger.loop.round`: the rigger round that ties those together;
- :mod:`~envrigger.loop.evaluate`: scoring on the original env with its own verifier;
- :mod:`~envrigger.loop.run` and :mod:`~envrigger.loop.seeds`: one master seed, and many.

Arms (``LoopConfig.arms``), each a learner trained from the same initial weights for the
same number of steps per round:

- ``original``: the original env only, fresh levels;
- ``dr``: domain randomization, uniformly over the original and random catalog reshapings
  with random parameters (no diagnosis);
- ``plr``: prioritized level replay over the original env's levels (learnability-ranked);
- ``rigger``: the EnvRigger curriculum over the original and the admitted components.

Levels are disjoint by ``level_id``: held-out levels (seeds ``1_000_000 + i``) and
validation levels (``1_500_000 + i``, skipping held-out levels) are reserved, and every seed
used to train, collect or validate candidates whose base level is reserved is skipped. An
env with too few distinct levels for that is refused. Every round each arm is scored on
the validation levels; at the end each arm's best round (by validation success) is
evaluated once on the held-out levels, and the levels used are checked for overlap.
"""

from envrigger.loop.arms import register_arm, registered
from envrigger.loop.config import LoopConfig
from envrigger.loop.evaluate import evaluate
from envrigger.loop.learners import LEARNERS
from envrigger.loop.levels import LevelSplit
from envrigger.loop.run import run_loop
from envrigger.loop.samplers import Curriculum
from envrigger.loop.seeds import SeedsRun, across_seeds, run_many, run_seeds

ARMS = tuple(registered())
"""The stock arms' names, in the order a round trains them (an arm registered later is in :func:`registered`)."""

__all__ = [
    "ARMS",
    "LEARNERS",
    "Curriculum",
    "LevelSplit",
    "LoopConfig",
    "SeedsRun",
    "across_seeds",
    "register_arm",
    "registered",
    "evaluate",
    "run_loop",
    "run_many",
    "run_seeds",
]
