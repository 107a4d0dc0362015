"""What counts as a number a user gave, written once: Python's and NumPy's scalars alike (``np.arange(-4, 5)``'s ε, a
``np.float32`` from a table), never a bool."""

from __future__ import annotations

import math
import numbers


def is_number(value: object) -> bool:
    """A finite real number (int, float or a NumPy scalar of either; not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def is_whole(value: object) -> bool:
    """An integer (int or a NumPy integer; not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def plain(value: object) -> object:
    """``value`` as a Python scalar when it is a NumPy one (so it prints and serialises as the user expects)."""
    return value.item() if isinstance(value, numbers.Number) and type(value).__module__ == "numpy" else value
