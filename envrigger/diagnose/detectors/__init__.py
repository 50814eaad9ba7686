"""Detectors: from per-episode facts to flags, one module per kind of weakness.

The face of the package: :data:`EPISODE_DETECTORS` (each ``(frame, config) -> flags``, in
the order they run; each registers itself with ``@episode_detector(order=N)``, and every
module here is imported, so a new detector is one new module and its tests), :func:`flag_behaviours` (flags from the streamed step counts) and
:data:`STATE_DETECTORS`; what they read, :class:`DiagnoseConfig` and :class:`EpisodeFrame`; and the
finding vocabulary, :data:`FINDING_NAMES`: every detector declares the names it produces with
``@produces`` (see :mod:`envrigger.diagnose.finding_names`), so with all of them imported
here the registry is whole.

- :mod:`~envrigger.diagnose.detectors.endings`: timeouts, errors, terminal causes, giving up;
- :mod:`~envrigger.diagnose.detectors.regions`: level-feature regions where failure concentrates;
- :mod:`~envrigger.diagnose.detectors.outcomes`: reward without success, variance across seeds, return gaps;
- :mod:`~envrigger.diagnose.detectors.model_calls`: an LLM agent's malformed, truncated, verbose and slow calls;
- :mod:`~envrigger.diagnose.detectors.behaviours`: loops, revisits, no-ops, repeats, blocked actions, tool errors, costly events.
"""

import importlib
import pkgutil

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.detectors.behaviours import STATE_DETECTORS, STEP_TITLES, flag_behaviours
from envrigger.diagnose.detectors.endings import endings
from envrigger.diagnose.detectors.model_calls import model_calls
from envrigger.diagnose.detectors.outcomes import return_gaps, reward_without_success, variance_across_seeds
from envrigger.diagnose.detectors.regions import feature_regions
from envrigger.diagnose.finding_names import FINDING_NAMES, FindingName, episode_detector, episode_detectors, produced, produces
from envrigger.diagnose.frame import EpisodeFrame

for _module in pkgutil.iter_modules(__path__):  # every detector module registers itself: a new one is listed nowhere
    importlib.import_module(f"{__name__}.{_module.name}")

EPISODE_DETECTORS = episode_detectors()

__all__ = [
    "EPISODE_DETECTORS",
    "FINDING_NAMES",
    "STATE_DETECTORS",
    "STEP_TITLES",
    "DiagnoseConfig",
    "EpisodeFrame",
    "FindingName",
    "endings",
    "episode_detector",
    "episode_detectors",
    "feature_regions",
    "flag_behaviours",
    "model_calls",
    "produced",
    "produces",
    "return_gaps",
    "reward_without_success",
    "variance_across_seeds",
]
