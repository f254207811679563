"""``simhost runtime``: a deterministic stand-in agent runtime (no LLM).

A small prompt grammar (:mod:`simhost.runtime.grammar`) maps prompts to tool
calls (:mod:`simhost.runtime.tools`) that act inside a workspace only after the
policy file, the session's permission preset, a standing grant or the editor
allowed them (:mod:`simhost.runtime.policy`). Sessions persist under a state
folder (:mod:`simhost.runtime.sessions`). :mod:`simhost.runtime.core` runs the
turns; :mod:`simhost.runtime.server` serves them on permclient's connection core
in one of two dialects: the bridge (:mod:`simhost.runtime.bridge`,
docs/bridge-protocol.md) or ACP v1 (:mod:`simhost.runtime.acp`).
docs/runtime.md is the user's guide.
"""
