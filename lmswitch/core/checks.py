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


MAX_SEED = 2**32 - 1  # torch's CPU generator keeps a seed's low 32 bits: 2**32 would draw what 0 draws


def check_seed(seed: object, what: str = "seed") -> int:
    """A seed a generator tells apart from every other: an integer from 0 to :data:`MAX_SEED`."""
    if not is_whole(seed) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{what} must be an integer from 0 to {MAX_SEED:,} (2³² − 1: the random generator keeps 32 bits, "
                         f"so a larger seed would repeat a smaller one's text); got {seed!r}")
    return int(seed)


def check_eps_values(values: object, what: str) -> list[float]:
    """A list of finite ε values (a sweep's, a grid's side), at least one; ``what`` says whose, in the message."""
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise ValueError(f"the ε values for {what} must be a list of numbers, e.g. [-4, 0, 4]; got {values!r}")
    values = [e.item() if getattr(e, "ndim", None) == 0 else e for e in values]  # (a tensor's or an array's numbers)
    if not values:
        raise ValueError(f"give at least one ε value for {what}")
    bad = [e for e in values if not is_number(e)]
    if bad:
        raise ValueError(f"the ε values for {what} must be finite numbers; got {bad[0]!r}")
    return [float(e) for e in values]


MAX_SAMPLES = 1024  # texts per prompt one generate call writes


def check_samples(samples: object) -> int:
    """A count of texts per prompt :func:`~lmswitch.core.generate.generate` writes: an integer from 1 to
    :data:`MAX_SAMPLES`."""
    if not is_whole(samples) or not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be an integer from 1 to {MAX_SAMPLES}; got {samples!r}")
    return int(samples)
