"""Hypothesis profiles: ``ci`` runs every property test with the example count it asks
for (what CI has always run); ``dev``, the default outside CI, runs a fifth of them
(at least 10) for a fast inner loop. ``--hypothesis-profile NAME`` picks one."""

from __future__ import annotations

import os

from hypothesis import settings

DEV_SHARE = 5  # dev runs 1/DEV_SHARE of each test's examples
DEV_MIN = 10

settings.register_profile("ci", print_blob=True)
settings.register_profile(
    "dev", print_blob=True, max_examples=max(DEV_MIN, settings.default.max_examples // DEV_SHARE)
)
settings.load_profile("ci" if os.environ.get("CI", "").strip() not in ("", "0", "false") else "dev")


def examples(count: int) -> int:
    """``count`` examples under the ``ci`` profile, a fifth of them (at least 10) under ``dev``."""
    if settings.get_current_profile_name() == "dev":
        return max(DEV_MIN, count // DEV_SHARE)
    return count
