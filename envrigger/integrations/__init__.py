"""Bridges to other agent frameworks; each needs its own optional extra.

``envrigger.integrations.agentlightning`` (extra ``agentlightning``): a ``LitAgent`` that plays
an envharness env, local or served, and a converter from an Agent Lightning store to a run.
"""
