"""A switch is data: one d × d matrix ``W`` plus the card that says what it is and how it was made.

Files are single ``.safetensors`` files (never pickle) with the card as JSON in the
metadata header, so loading a switch cannot run code.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from lmswitch.core.card import Card
from lmswitch.core.checks import is_number
from lmswitch.core.options import DESCRIPTION, EPS0, NEGATIVE_LABEL, POSITIVE_LABEL
from lmswitch.io.atomic import writable, write_file
from lmswitch.io.resources import resolve_switch_file

if TYPE_CHECKING:
    from lmswitch.core.models import LanguageModel

FORMAT_VERSION = "1"
TENSORS = ("W", "judge")  # stored as tensors, not in the JSON header
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,47}$")
MAX_EPS_RANGE = 1000.0  # |ε| of a switch's search range at most (the steering check's MAX_ABS_EPS, which imports this)
# a switch steers nothing when even the largest ε moves the head input by less than this share of its length
# (``|ε|·ε0·‖W‖ ≤ MAX_EPS_RANGE·ε0·‖W‖_F``): below float32's rounding; a shipped switch's ‖W‖_F·ε0 is ~0.1
NULL_EFFECT = 1e-7
TRANSFER_IT = "transfer the switch to it (ls.transfer, or `python -m lmswitch transfer`)"  # a switch for another model
STEERS_NOTHING = "is all zeros (or too small to change anything)"  # what is said of such a switch (Switch.steers_nothing)
MAX_FILE_BYTES = 2 * 1024**3  # a 16k × 16k float32 matrix is 1 GiB; anything much larger is not a switch


class SwitchFileError(ValueError):
    """A switch file that cannot be used: corrupt, wrong shape, non-finite, or made for another model."""


def _eps_range(value: object) -> tuple[float, float]:
    """``(low, high)`` of a switch's ε search range: finite, ``low < 0 < high``, within ±:data:`MAX_EPS_RANGE`."""
    try:
        low, high = (float(x) for x in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise SwitchFileError(f"eps_range must be two numbers (low, high); got {value!r}") from None
    if not (-MAX_EPS_RANGE <= low < 0 < high <= MAX_EPS_RANGE):  # (NaN fails every comparison)
        raise SwitchFileError(f"eps_range must be (low < 0, high > 0) within ±{MAX_EPS_RANGE:g}; got {value!r}")
    return low, high


def _inside(end: float) -> float:
    """A fluent range's upper ``end`` as a slider's: down to a whole ε, or where that loses its side of 0 (+0.5 → 0: the
    slider of a switch fluent at −2 … +0.5 could not steer toward + at all) to a half ε (the slider's step), else as
    measured."""
    for step in (1.0, 0.5):
        inside = math.floor(end / step) * step
        if inside > 0 or end <= 0:
            return float(inside)
    return end


@dataclass(eq=False)
class Switch:
    """A learned steering matrix and its card.

    Steering with value ``eps`` (in units of ``eps0``) maps the head input
    ``c → c + eps · eps0 · W c``. Switches combine as arithmetic:

    >>> both = sentiment + 0.5 * formality       # doctest: +SKIP
    >>> ruder = -detox                           # doctest: +SKIP
    """

    W: torch.Tensor  # (d, d), float32, acts as c ↦ W c on the head input c
    name: str = "switch"
    description: str = DESCRIPTION
    eps0: float = EPS0
    eps_range: tuple[float, float] = (-10.0, 10.0)  # the meter's search range, in eps0 units (the slider: slider_range)
    positive_label: str = POSITIVE_LABEL  # what +eps moves toward
    negative_label: str = NEGATIVE_LABEL  # what -eps moves toward
    model_name: str = ""
    model_fingerprint: str = ""
    card: Card = field(default_factory=Card)  # what it is and how it was made (a plain dict is parsed into a Card)
    judge: torch.Tensor | None = None  # (d + 1,) [w, b]: log-odds of the positive side from a text's mean head input

    def __post_init__(self) -> None:
        self.W = torch.as_tensor(self.W).detach().to("cpu", torch.float32).contiguous()
        if self.W.ndim != 2 or self.W.shape[0] != self.W.shape[1]:
            raise SwitchFileError(f"a switch matrix must be square (d × d); got shape {tuple(self.W.shape)}")
        if not torch.isfinite(self.W).all():
            raise SwitchFileError(f"switch '{self.name}' has NaN or infinite entries")
        if self.judge is not None:
            self.judge = torch.as_tensor(self.judge).detach().to("cpu", torch.float32).contiguous()
            if self.judge.shape != (self.W.shape[0] + 1,) or not torch.isfinite(self.judge).all():
                raise SwitchFileError(f"switch '{self.name}' has a judge of shape {tuple(self.judge.shape)} (or non-finite); "
                                      f"expected {self.W.shape[0] + 1} finite numbers")
        if not (math.isfinite(self.eps0) and self.eps0 > 0):
            raise SwitchFileError(f"eps0 must be a positive finite number; got {self.eps0}")
        for key in ("name", "description", "positive_label", "negative_label", "model_name", "model_fingerprint"):
            if not isinstance(getattr(self, key), str):
                raise SwitchFileError(f"the switch's {key} must be text; got {getattr(self, key)!r}")
        self.eps_range = _eps_range(self.eps_range)
        try:
            self.card = Card.from_dict(self.card)
        except (TypeError, ValueError) as err:
            raise SwitchFileError(f"switch '{self.name}' has a malformed card ({err})") from None

    def __repr__(self) -> str:  # not the dataclass's: that prints all of W and the card
        made_for = f", for {self.model_name}" if self.model_name else ""
        return (f"Switch({self.name!r}, {self.dim} × {self.dim}{made_for}, "
                f"+ε → {self.positive_label!r}, −ε → {self.negative_label!r})")

    @property
    def dim(self) -> int:
        return self.W.shape[0]

    @property
    def steers_nothing(self) -> bool:
        """True for an all-zero switch, or one so small that even ε = ±:data:`MAX_EPS_RANGE` changes no head input
        beyond float32's rounding (:data:`NULL_EFFECT`): it would not steer anything."""
        return float(torch.linalg.vector_norm(self.W)) * self.eps0 * MAX_EPS_RANGE <= NULL_EFFECT

    def check_steers(self, lacks: str, fix: str = "train it or load another") -> None:
        """Refuse a switch that :attr:`steers_nothing`, for work that needs it to (``lacks``: what it then has none of)."""
        if self.steers_nothing:
            raise ValueError(f"switch '{self.name}' {STEERS_NOTHING}: {lacks}; {fix}")

    @property
    def digest(self) -> str:
        """A content id of ``W`` and ``eps0`` (sha256, 16 hex digits): equal for equal switches, whatever their name.

        Caches key results on it (never on ``id()``, which Python reuses). Recomputed
        when ``W`` is replaced or changed in place.
        """
        key = (id(self.W), self.W._version, self.eps0)
        cached = self.__dict__.get("_digest")
        if cached is None or cached[0] != key:
            h = hashlib.sha256(self.W.numpy().tobytes())
            h.update(repr(float(self.eps0)).encode())
            cached = self.__dict__["_digest"] = (key, h.hexdigest()[:16])
        return cached[1]

    def slider_range(self, wide: bool = False) -> tuple[float, float]:
        """The ε range a user is offered by default (the app's slider): the card's calibrated fluent range when it has
        one (beyond it text reads less well), else at least −10…+10, wider when the switch recommends more.
        ``wide``: twice as far each way."""
        fluent = self.card.fluent_eps
        if fluent is not None and fluent[1] > fluent[0]:
            lo, hi = -_inside(-float(fluent[0])), _inside(float(fluent[1]))  # never past the fluent range
            if hi <= lo:  # a range narrower than one whole ε: as measured
                lo, hi = float(fluent[0]), float(fluent[1])
        else:
            r = float(math.ceil(max(10.0, *map(abs, self.eps_range))))
            lo, hi = -r, r
        if wide:
            reach = max(abs(lo), abs(hi))
            return -2 * reach, 2 * reach
        return lo, hi

    def on_slider(self, eps: float, wide: bool = False) -> float:
        """``eps`` moved into :meth:`slider_range` (the nearest end when outside it)."""
        lo, hi = self.slider_range(wide)
        return min(max(float(eps), lo), hi)

    # --- arithmetic -----------------------------------------------------------------
    def __mul__(self, k: float) -> Switch:
        if not is_number(k):  # not float(k): "2" is a typo a setting's ε refuses too, with the same ValueError
            raise ValueError(f"a switch is scaled by a finite number; got {k!r}")
        k = float(k)
        out = replace(self, W=self.W * k, name=f"{k:g}*{self.name}", card={"scaled_from": self.name, "factor": k},
                      judge=None if self.judge is None or k == 0 else self.judge * math.copysign(1.0, k))
        return out._swap_labels() if k < 0 else out

    __rmul__ = __mul__

    def __neg__(self) -> Switch:
        return replace(self, W=-self.W, name=f"-{self.name}", card={"negated_from": self.name},
                       judge=None if self.judge is None else -self.judge)._swap_labels()

    def __add__(self, other: Switch) -> Switch:
        if not isinstance(other, Switch):
            return NotImplemented
        self._check_same_model(other)
        W = self.W + other.W * (other.eps0 / self.eps0)  # express both in self's eps0 units
        return replace(
            self,
            W=W,
            name=f"{self.name}+{other.name}",
            description=f"sum of '{self.name}' and '{other.name}'",
            positive_label=f"{self.positive_label} & {other.positive_label}",
            negative_label=f"{self.negative_label} & {other.negative_label}",
            card={"sum_of": [self.name, other.name]},
            judge=None,  # two styles at once have no single judge
        )

    def __sub__(self, other: Switch) -> Switch:
        return self + (-other)

    def _swap_labels(self) -> Switch:
        self.positive_label, self.negative_label = self.negative_label, self.positive_label
        return self

    def _check_same_model(self, other: Switch) -> None:
        if self.dim != other.dim:
            raise ValueError(f"cannot combine switches of size {self.dim} and {other.dim}")
        if self.model_fingerprint and other.model_fingerprint and self.model_fingerprint != other.model_fingerprint:
            raise ValueError(
                f"'{self.name}' was made for {self.model_name} ({self.model_fingerprint}) and "
                f"'{other.name}' for {other.model_name} ({other.model_fingerprint}); transfer one first"
            )

    def check_model(self, lm: LanguageModel) -> None:
        """Raise :class:`SwitchFileError` unless this switch was made for ``lm`` (a TypeError unless it is a model)."""
        from lmswitch.core.models import check_model  # (this module loads without transformers)

        check_model(lm)
        if self.dim != lm.hidden_size and self.model_fingerprint and self.model_fingerprint == lm.fingerprint:
            raise SwitchFileError(  # its header names this very model: the file was damaged or edited, not mistaken
                f"switch '{self.name}' says it was made for '{lm.name}' (fingerprint {lm.fingerprint}), whose hidden size is "
                f"{lm.hidden_size}, but its matrix is {self.dim} × {self.dim}: the file is inconsistent (damaged or edited); "
                "train or transfer it again, or use an intact copy"
            )
        if self.dim != lm.hidden_size:
            raise SwitchFileError(
                f"switch '{self.name}' is {self.dim} × {self.dim} but model '{lm.name}' has hidden size "
                f"{lm.hidden_size}; it was made for {self.model_name or 'another model'}. Load the model it was made for, "
                f"or {TRANSFER_IT}."
            )
        if self.model_fingerprint and self.model_fingerprint != lm.fingerprint:
            raise SwitchFileError(
                f"switch '{self.name}' was made for model '{self.model_name}' (fingerprint {self.model_fingerprint}), "
                f"not for '{lm.name}' (fingerprint {lm.fingerprint}). Load the model it was made for, "
                f"or {TRANSFER_IT}."
            )

    # --- files ------------------------------------------------------------------------
    def header(self) -> dict:
        """Everything but ``W``, as JSON-ready data (what the file header stores)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in TENSORS}
        data["eps_range"] = list(_eps_range(self.eps_range))  # (assigned after construction: checked here)
        data["card"] = self.card.to_dict()
        return data

    def save(self, path: str | os.PathLike) -> Path:
        """Write one ``.safetensors`` file atomically (write to a temp file, then rename). A new file gets the
        permissions any new file gets (the umask's), a replaced one keeps its own. Checked again first, as when it was
        made: a matrix or card set since is validated (a NaN matrix, a card given as a dict) before it is written."""
        self.__post_init__()
        path = switch_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": "lmswitch", "version": FORMAT_VERSION, "switch": json.dumps(self.header())}
        tensors = {k: getattr(self, k) for k in TENSORS if getattr(self, k) is not None}
        return write_file(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def check_name(name: object) -> str:
    """A switch name usable as a file name: 1–48 letters, digits, ``_ . + -``, starting with a letter or digit."""
    if not isinstance(name, str) or not NAME_RE.match(name.strip()):
        got = f"{name[:48]!r}… ({len(name):,} characters)" if isinstance(name, str) and len(name) > 60 else repr(name)
        raise ValueError(
            f"switch names are 1–48 characters of letters, digits, '_', '.', '+' or '-', starting with a letter or digit; got {got}"
        )
    return name.strip()


def usable_name(text: str) -> str:
    """``text`` made into a name :func:`check_name` accepts (other characters become '-'), for a switch named elsewhere;
    a name it accepts stays as it is."""
    if NAME_RE.match(text):
        return text
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", text).lstrip("-._+")[:48].rstrip("-") or "switch"


def switch_path(path: str | os.PathLike, *, overwrite: bool = True) -> Path:
    """``path`` (``~`` expanded) once a switch file can be written there: a ``.safetensors`` name, not a folder, in a
    folder that exists or can be made, and writable; with ``overwrite`` False, not an existing file. Checked before any
    work, so an hour's training is not lost to a typo in its output path."""
    p = Path(path).expanduser()
    if p.suffix != ".safetensors":
        raise ValueError(f"switch files end in .safetensors; got '{p.name}'")
    if p.is_dir():
        raise ValueError(f"{p} is a folder; give a file name ending in .safetensors")
    if p.exists() and not overwrite:
        raise ValueError(f"{p} exists; choose another name, or pass overwrite=True (--force) to replace it")
    return writable(p)


def distinct(switches: list[Switch]) -> list[Switch]:
    """``switches`` less any whose matrix an earlier one has (a switch imported twice, or trained twice alike), in order."""
    first: dict[str, Switch] = {}
    for s in switches:
        first.setdefault(s.digest, s)
    return list(first.values())


def check_switch(switch: object, lm: LanguageModel) -> Switch:
    """``switch`` itself once it is a :class:`Switch` made for ``lm``; a name or a path is refused with how to load it."""
    if not isinstance(switch, Switch):
        hint = " (load it first: ls.load_switch(path))" \
            if isinstance(switch, str | os.PathLike) else ""
        raise TypeError(f"expected a Switch; got {type(switch).__name__} {str(switch)[:60]!r}{hint}")
    switch.check_model(lm)
    return switch


def _unreadable(path: Path, err: Exception) -> str:
    """Why ``path`` is no safetensors file: another kind of file, or a switch file damaged on the way."""
    if path.suffix != ".safetensors":
        return (f"{path.name} is not a switch file: a switch is a .safetensors file, as `python -m lmswitch train --out` and "
                f"the app's download button write them (this one does not read as safetensors: {err})")
    return f"{path.name} is not a valid safetensors file ({err}); it may be truncated or corrupted"


def load_switch(path: str | os.PathLike, model: LanguageModel | None = None) -> Switch:
    """Read and validate a switch file, or a shipped switch by name (``"sentiment"``; a file of that name wins); with
    ``model``, also check it was made for that model.

    Every failure is a :class:`SwitchFileError` whose message says what is wrong.

    >>> detox = load_switch("detox", lm)   # doctest: +SKIP
    """
    try:
        if not isinstance(path, str | os.PathLike):
            raise SwitchFileError(f"a switch is loaded from a file path or a shipped switch's name (\"sentiment\"); got "
                                  f"{type(path).__name__}")
        path = resolve_switch_file(path)
    except FileNotFoundError as err:
        raise SwitchFileError(str(err)) from None
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise SwitchFileError(f"{path.name} is {size / 1e9:.1f} GB, larger than any switch ({MAX_FILE_BYTES / 1e9:.0f} GB max)")
    try:
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
            keys = set(f.keys())
            if meta.get("format") != "lmswitch" or "switch" not in meta:
                raise SwitchFileError(f"{path.name} is a safetensors file but not an lmswitch switch (no switch header)")
            if meta.get("version", FORMAT_VERSION) != FORMAT_VERSION:  # read as this version, it could steer wrongly
                raise SwitchFileError(f"{path.name} is a switch of file format version {meta['version']!r}; this lmswitch reads "
                                      f"version {FORMAT_VERSION} only: a file of another version needs the lmswitch release that writes it")
            if "W" not in keys or not keys <= set(TENSORS):
                raise SwitchFileError(f"{path.name} should hold the tensor 'W' and at most a 'judge'; it holds {sorted(keys)}")
            W = f.get_tensor("W")
            judge = f.get_tensor("judge") if "judge" in keys else None
    except SafetensorError as err:
        raise SwitchFileError(_unreadable(path, err)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SwitchFileError(f"cannot read {path.name}: {err}") from None
    try:
        header = json.loads(meta["switch"])
        if not isinstance(header, dict):
            raise TypeError("header is not an object")
    except (json.JSONDecodeError, TypeError) as err:
        raise SwitchFileError(f"{path.name} has an unreadable switch header ({err})") from None
    if W.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise SwitchFileError(f"{path.name}: W has dtype {W.dtype}; expected a floating-point matrix")
    # copies, not views of the file's memory map: a file rewritten in place (a `cp` over it) must not change a loaded
    # switch, nor a shorter one crash the process when its pages are read
    W = W.to(torch.float32, copy=True)
    judge = judge.to(torch.float32, copy=True) if judge is not None else None
    known = {f for f in Switch.__dataclass_fields__ if f not in TENSORS}
    try:
        switch = Switch(W=W, judge=judge, **{k: v for k, v in header.items() if k in known})
    except SwitchFileError as err:
        raise SwitchFileError(f"{path.name}: {err}") from None
    except TypeError as err:
        raise SwitchFileError(f"{path.name} has a malformed switch header ({err})") from None
    if model is not None:
        switch.check_model(model)
    return switch
