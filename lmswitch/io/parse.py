"""The one parser for switch settings and ε lists, used by the CLI, the app and the API.

>>> parse_setting("sentiment=5, detox=-2")
[('sentiment', 5.0), ('detox', -2.0)]
>>> parse_switch_spec("my/switch.safetensors=-3")
('my/switch.safetensors', -3.0)
>>> parse_eps_list("-10, -5, 0, 5, 10")
[-10.0, -5.0, 0.0, 5.0, 10.0]
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping

FALLBACK_EPS = 5.0  # the paper's 5ε0: ``generate --switch S`` without ``=EPS`` when S's card recommends no ε and was never probed
MAX_EPS_VALUES = 15  # one interactive sweep or grid axis


def _ascii_minus(text: str) -> str:
    """``text`` with the typographic minus (U+2212, as the app's labels write ε) as ``-``."""
    return text.replace("\u2212", "-")


def parse_number(value: object, label: str, kind: type = float) -> float | int:
    """One finite number (``kind`` ``int``: a whole one) from a number or a numeric string (``−2`` too), with errors
    naming ``label``; ``None`` or ``""`` (an emptied number box) is refused as empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{label} is empty: give a number")
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):  # (NumPy's numbers too)
        raise ValueError(f"{label} must be a number; got {value!r}")
    try:
        number = float(_ascii_minus(value).strip() if isinstance(value, str) else value)
    except OverflowError:  # an integer past float's range
        raise ValueError(f"{label} must be a finite number; got {value!r}") from None
    except ValueError:
        raise ValueError(f"{label} must be a number; got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{label} must be a finite number; got {value!r}")
    if kind is int and number != int(number):
        raise ValueError(f"{label} must be a whole number; got {value!r}")
    return kind(number)


def parse_eps(value: object, name: str = "switch") -> float:
    """One finite ε (a number or a numeric string), with an error naming the switch."""
    return parse_number(value, f"the ε of '{name}'")


def parse_switch_spec(value: str, default_eps: float | None = FALLBACK_EPS) -> tuple[str, float | None]:
    """``"NAME_OR_PATH=EPS"`` → (name or path, ε); without ``=EPS`` the ε is ``default_eps`` (``None``: the caller decides).

    The last ``=`` splits, so paths that contain ``=`` still work when an ε is given.
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected NAME=EPS or PATH=EPS (e.g. sentiment=5); got {value!r}")
    ref, sep, eps = value.strip().rpartition("=")
    if not sep:
        return value.strip(), None if default_eps is None else float(default_eps)
    if not ref.strip():
        raise ValueError(f"expected NAME=EPS or PATH=EPS with a switch before '='; got {value!r}")
    return ref.strip(), parse_eps(eps, ref.strip())


def parse_setting(value: str | Mapping[str, object] | None) -> list[tuple[str, float]]:
    """``"sentiment=5, detox=-2"`` (or ``{"sentiment": 5}``) → name/ε pairs; empty → ``[]``.

    Every pair needs an explicit ε here; a name given twice is an error.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, str):
        items = []
        for part in value.split(","):
            if not part.strip():
                continue
            name, sep, eps = part.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"write switches as name=eps, separated by commas (e.g. sentiment=5, detox=-2); got {part.strip()!r}")
            items.append((name.strip(), eps))
    else:
        raise ValueError(f"switches are a 'name=eps, …' string or a {{name: eps}} mapping; got {type(value).__name__}")
    out = [(name, parse_eps(eps, name)) for name, eps in items]
    names = [name for name, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"switch {', '.join(repr(n) for n in twice)} is given more than once")
    return out


def parse_names(value: str | None) -> list[str]:
    """``"a, b , c"`` → ``["a", "b", "c"]``: a comma-separated list of names (metrics, methods, switches), empty parts dropped."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def parse_eps_list(value: str | None, default: list[float] | None = None, max_values: int = MAX_EPS_VALUES) -> list[float]:
    """``"-10, -5, 0, 5, 10"`` (commas, semicolons or spaces; ``−`` as ``-``) → floats; empty → ``default`` (or an error
    without one)."""
    if value is None or not str(value).strip():
        if default is None:
            raise ValueError("give at least one ε value, e.g. -5,0,5")
        return list(default)
    try:
        values = [float(v) for v in re.split(r"[,;\s]+", _ascii_minus(str(value))) if v]
    except ValueError:
        raise ValueError(f"ε values must be numbers separated by commas or spaces, like -10, -5, 0, 5, 10; got {value!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"give finite ε values separated by commas; got {value!r}")
    if len(values) > max_values:
        raise ValueError(f"at most {max_values} ε values; got {len(values)}")
    return values


def eps_grid(low: float, high: float, count: int) -> list[float]:
    """``count`` ε values from ``low`` to ``high`` (rounded to 0.01), e.g. over a slider's range; one that spans 0 has 0
    among them, the unsteered baseline, with each side's values evenly spaced and shared out by its length (detox's
    −2 … +3 in 7: −2, −1, 0, 0.75, 1.5, 2.25, 3, where an even spacing gave −1.17, −0.33, 0.5 …).

    >>> eps_grid(-12, 12, 5), eps_grid(-2, 3, 5), eps_grid(1, 3, 3)
    ([-12.0, -6.0, 0.0, 6.0, 12.0], [-2.0, -1.0, 0.0, 1.5, 3.0], [1.0, 2.0, 3.0])
    """
    if count < 2:
        return [round((low + high) / 2, 2)]
    if not low < 0 < high or count < 3:
        return [round(low + (high - low) * i / (count - 1), 2) for i in range(count)]
    below = min(max(1, round((count - 1) * -low / (high - low))), count - 2)  # values under 0; the rest above it
    above = count - 1 - below
    return [round(low * (below - i) / below, 2) for i in range(below)] + [0.0] + [round(high * i / above, 2) for i in range(1, above + 1)]


