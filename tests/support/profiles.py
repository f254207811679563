"""Hypothesis profiles. ``ci`` is Hypothesis's own (it loads it by itself where the
``CI`` variable is set: examples derandomized, no deadline), and runs every property
test with the example count it asks for, as CI always has. ``dev``, the default
elsewhere, is Hypothesis's default with a fifth of the examples (at least 10), for a
fast inner loop. ``--hypothesis-profile NAME`` picks either."""

from __future__ import annotations

from hypothesis import settings

DEV_SHARE = 5  # dev runs 1/DEV_SHARE of each test's examples
DEV_MIN = 10

settings.register_profile(
    "dev", max_examples=max(DEV_MIN, settings.default.max_examples // DEV_SHARE)
)
if settings.get_current_profile_name() == "default":  # (not "ci", not one a person chose)
    settings.load_profile("dev")


def examples(count: int) -> int:
    """``count`` examples, or a fifth of them (at least 10) under the ``dev`` profile."""
    if settings.get_current_profile_name() == "dev":
        return max(DEV_MIN, count // DEV_SHARE)
    return count
