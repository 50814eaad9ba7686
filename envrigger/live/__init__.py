"""Recording agents that run in their own live harness: the env server's run store (and, next, the model-call proxy).

Contains :class:`StoreRecorder`, which ``envharness serve --record RUN`` loads through the
entry point group ``envharness.recorders`` (so envharness never imports envrigger): every
episode a served session plays is committed to a run directory as ``envrigger collect``
writes it, with its level id, verdict and session id.
"""

from envrigger.live.record import StoreRecorder

__all__ = ["StoreRecorder"]
