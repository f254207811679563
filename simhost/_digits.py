"""Numbers typed or written by people and programs: only a few plain ASCII digits."""

from __future__ import annotations

MAX_DIGITS = 9


def small_number(text: str) -> int | None:
    """``text`` as a number if it is 1 to 9 ASCII digits (no sign, no spaces), else None.

    ``str.isdigit`` alone is not enough before ``int()``: it accepts digits such as
    ``²`` that ``int()`` refuses, and ``int()`` refuses more than 4,300 digits.
    """
    if 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit():
        return int(text)
    return None
