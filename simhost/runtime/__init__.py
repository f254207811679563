"""``simhost runtime``: a deterministic stand-in agent runtime (no LLM).

A small prompt grammar (:mod:`simhost.runtime.grammar`) maps prompts to tool
calls (:mod:`simhost.runtime.tools`) that act inside a workspace only after the
policy file, the session's permission preset, a standing grant or the editor
allowed them (:mod:`simhost.runtime.policy`). Sessions persist under a state
folder (:mod:`simhost.runtime.sessions`). :mod:`simhost.runtime.server` speaks
the bridge dialect on permclient's connection core; docs/bridge-protocol.md is
the contract and docs/runtime.md the user's guide.
"""
