"""A switch's card: what it is and how it was made, read and written through one schema.

The file stores the card as one flat JSON object (so older files and other tools
keep reading it). In memory it is a :class:`Card`: the training record as a typed
:class:`TrainingRecord`, the recommended strength, the transfer record as a typed
:class:`TransferRecord`, and every other key kept as it was read (``extra``: dataset provenance, evaluations, notes).
A card is also a read-only mapping over that flat form, so ``card["heldout_gain"]``
and ``card.get("recommended_eps")`` read the same values as the file.

>>> card = Card.from_dict({"recommended_eps": 6, "note": "kept"})
>>> card.recommended_eps, card["note"], card.to_dict()
(6.0, 'kept', {'recommended_eps': 6.0, 'note': 'kept'})
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar


@dataclass(frozen=True)
class TrainingRecord:
    """What :func:`~lmswitch.core.train.train_switch` did: the data, the settings, the curves and the held-out result."""

    n_positive: int
    n_negative: int
    graded_labels: bool
    tokens_train: int
    tokens_heldout: int
    steps: int  # steps actually run (early stopping may end sooner)
    best_step: int  # the step whose W was kept
    stopped_early: bool
    lr: float
    l2: float
    seed: int
    rank: int | None
    batch_tokens: int
    min_steps: int
    dummy_steer: bool
    train_losses: list[float] = field(repr=False)  # (the curves: hundreds of numbers in a notebook's repr)
    heldout_losses: list[list[float]] = field(repr=False)  # [step, loss] pairs
    heldout_nll_with_switch: float | None
    heldout_nll_without_switch: float | None
    heldout_nll_reversed_switch: float | None
    heldout_gain: float | None  # nats per token; > 0: the switch explains held-out text it never saw
    hidden_state_seconds: float
    seconds: float
    optimizer: str = "adam"  # "lbfgs-sampled" or "lbfgs" (ridge path; ``l2`` is the λ it chose), or "adam" (cards before 2026-11-23)
    negatives: str = "given"  # how the negatives were made: "given", "none" (one document), "self-contrast" or "given + self-contrast"
    data_shape: str = ""  # the data's shape (core.train.data_kind; core.options.ONE_DOCUMENT, TWO_DOCUMENTS or EXAMPLES); "" on older cards

    ADAM_ONLY: ClassVar[tuple[str, ...]] = ("lr", "batch_tokens", "min_steps")  # settings only Adam's steps use

    @property
    def step_unit(self) -> str:
        """What ``steps`` counts: Adam's steps, or the L-BFGS recipes' loss evaluations."""
        return "steps" if self.optimizer == "adam" else "loss evaluations"

    def summary(self, digits: int = 4) -> str:
        """The run in one phrase: "60 loss evaluations in 3.1 s; held-out gain +0.0123 nats/token" (or "no held-out split")."""
        gain = "no held-out split" if self.heldout_gain is None else f"held-out gain {self.heldout_gain:+.{digits}f} nats/token"
        return f"{self.steps} {self.step_unit} in {self.seconds:.1f} s; {gain}"

    def unused(self) -> set[str]:
        """The fields that say nothing of this run: Adam's settings after an L-BFGS run, a shape an older card lacks."""
        return (set() if self.optimizer == "adam" else set(self.ADAM_ONLY)) | ({"data_shape"} if not self.data_shape else set())


_TRAINING_KEYS = tuple(f.name for f in fields(TrainingRecord))
_REQUIRED_KEYS = tuple(f.name for f in fields(TrainingRecord) if f.default is MISSING)


@dataclass(frozen=True, kw_only=True)
class TransferRecord:
    """How :func:`~lmswitch.core.transfer.transfer` mapped a switch to another model: its source, the fit of the map
    between the two vocabularies, and the ε it scaled. Fields in the order the file writes them."""

    source_switch: str
    source_model: str
    source_fingerprint: str
    anchors: int  # shared words the map was fitted on
    heldout_anchors: int  # shared words held out to score it
    heldout_r2: float | None
    heldout_top1: float | None  # the share of held-out words whose mapped embedding is nearest to their own
    method: str = "ridge"  # "procrustes" or "ridge" (records before 2026-11-21 lack it: they were all ridge)
    ridge: float | None = None  # the ridge method's relative ridge
    eps_scale: float  # target ε per source ε for the same typical logit change
    source_recommended_eps: float | None  # None: the source was probed and no +ε read fluently on it
    scaled_eps: float | None = None  # source_recommended_eps × eps_scale (from_dict fills it in on records before 2026-11-29)
    example_anchors: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # keys this version does not know, kept as read
    read: tuple[str, ...] = field(default=(), compare=False, repr=False)  # the keys as read: a file rewrites unchanged

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransferRecord:
        """The typed record of a card's ``transfer`` object (which must hold every field without a default); its numbers
        are finite, and None only where the field's type allows it."""
        for f in (f for f in fields(cls) if f.type.startswith(("int", "float"))):
            if _number_or_none(data.get(f.name), f"transfer.{f.name}") is None and "None" not in f.type:
                raise ValueError(f"card field 'transfer.{f.name}' must be a finite number; got None")
        known = {f.name for f in fields(cls)} - {"extra", "read"}
        record = cls(**{k: v for k, v in data.items() if k in known}, extra={k: v for k, v in data.items() if k not in known},
                     read=tuple(data))
        if record.scaled_eps is None and record.source_recommended_eps is not None:
            return replace(record, scaled_eps=round(record.source_recommended_eps * record.eps_scale, 3))
        return record

    def to_dict(self) -> dict:
        """The JSON-ready ``transfer`` object: a record read from a file gives back its keys in their order (what reading
        filled in, an older file's method and scaled ε, is filled in again when it is read)."""
        out = {**{f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "read")}, **self.extra}
        return {k: out[k] for k in self.read} if self.read else out


_TRANSFER_REQUIRED = tuple(f.name for f in fields(TransferRecord) if f.default is MISSING and f.default_factory is MISSING)


def _number_or_none(value: object, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"card field '{key}' must be a finite number; got {value!r}")
    return float(value)


def _fluent_range(value: object) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"card field 'fluent_eps' must be [most negative, most positive]; got {value!r}")
    low, high = (_number_or_none(v, "fluent_eps") for v in value)
    if low is None or high is None or low > 0 or high < 0:
        raise ValueError(f"card field 'fluent_eps' must be [ε ≤ 0, ε ≥ 0]; got {value!r}")
    return low, high


def _transfer(data: dict) -> TransferRecord | None:
    """Pop a flat card's ``transfer`` object as a typed record. One without a record's every field (not written by
    :func:`~lmswitch.core.transfer.transfer`) stays in ``data`` as it was: nothing is invented."""
    transfer = data.get("transfer")
    if transfer is None or isinstance(transfer, TransferRecord):
        return data.pop("transfer", None)
    if not isinstance(transfer, dict):
        raise ValueError(f"card field 'transfer' must be an object; got {type(transfer).__name__}")
    return TransferRecord.from_dict(data.pop("transfer")) if all(k in transfer for k in _TRANSFER_REQUIRED) else None


@dataclass(frozen=True, eq=True)
class Card(Mapping):
    """The card of a switch. Build it with :meth:`from_dict`; :meth:`to_dict` gives the flat JSON form."""

    training: TrainingRecord | None = None
    recommended_eps: float | None = None  # the strength the switch was built or transferred for (ε0 units)
    fluent_eps: tuple[float, float] | None = None  # (most negative, most positive) ε that still wrote fluent text when probed
    transfer: TransferRecord | None = None  # how a transferred switch was mapped (source, anchors, fit quality, ε scale)
    calibration_error: str | None = None  # why the fluent-range probe failed ("Type: message"), when it did
    warnings: tuple[str, ...] = ()  # the training's warnings on its data (a text in a language the model reads poorly)
    extra: dict = field(default_factory=dict)  # every other key, kept as read
    order: tuple[str, ...] = field(default=(), compare=False, repr=False)  # flat key order as read: files rewrite unchanged

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Card:
        """Split a flat card into its typed parts; keys this version does not know are kept in ``extra``."""
        if isinstance(data, Card):
            return data
        data = dict(data or {})
        order = tuple(data)
        if not all(isinstance(k, str) for k in data):
            raise ValueError("card keys must be strings")
        training = None
        if all(k in data for k in _REQUIRED_KEYS):
            training = TrainingRecord(**{k: data.pop(k) for k in _TRAINING_KEYS if k in data})
        transfer = _transfer(data)
        eps = _number_or_none(data.pop("recommended_eps", None), "recommended_eps")
        error = data.pop("calibration_error", None)
        if error is not None and not isinstance(error, str):
            raise ValueError(f"card field 'calibration_error' must be a string; got {type(error).__name__}")
        warnings = data.pop("warnings", None) or ()
        if not isinstance(warnings, (list, tuple)) or not all(isinstance(w, str) for w in warnings):
            raise ValueError(f"card field 'warnings' must be a list of strings; got {warnings!r}")
        return cls(training=training, recommended_eps=eps, fluent_eps=_fluent_range(data.pop("fluent_eps", None)), transfer=transfer,
                   calibration_error=error, warnings=tuple(warnings), extra=data, order=order)

    def to_dict(self) -> dict:
        """The flat JSON-ready card, as stored in the file header."""
        out = asdict(self.training) if self.training is not None else {}
        if self.recommended_eps is not None:
            out["recommended_eps"] = self.recommended_eps
        if self.fluent_eps is not None:
            out["fluent_eps"] = list(self.fluent_eps)
        if self.transfer is not None:
            out["transfer"] = self.transfer.to_dict()
        if self.calibration_error is not None:
            out["calibration_error"] = self.calibration_error
        if self.warnings:
            out["warnings"] = list(self.warnings)
        out.update(self.extra)
        if not self.order:
            return out
        rank = {k: i for i, k in enumerate(self.order)}
        return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))

    def unused(self) -> set[str]:
        """The training record's fields that say nothing of how this switch was made (:meth:`TrainingRecord.unused`)."""
        return self.training.unused() if self.training is not None else set()

    @property
    def fluent_text(self) -> str:
        """The fluent ε range as people read it (``"-6 … +6"``), or ``""`` when the card has none."""
        return f"{self.fluent_eps[0]:+g} … {self.fluent_eps[1]:+g}" if self.fluent_eps is not None else ""

    def beyond_fluent(self, eps: float) -> bool:
        """Whether ``eps`` lies outside the measured fluent range, where text reads less well (False without one).

        >>> Card.from_dict({"fluent_eps": [-4, 2]}).beyond_fluent(3), Card().beyond_fluent(400)
        (True, False)
        """
        return self.fluent_eps is not None and not self.fluent_eps[0] <= eps <= self.fluent_eps[1]

    @property
    def fluent_row(self) -> list[float]:
        """A row of ε that stays fluent, for a sweep: the fluent range's ends, their halves and 0 (``[]`` without one).

        >>> Card.from_dict({"fluent_eps": [-4, 2]}).fluent_row
        [-4.0, -2.0, 0.0, 1.0, 2.0]
        """
        if self.fluent_eps is None:
            return []
        low, high = self.fluent_eps
        row = sorted({float(low), low / 2, 0.0, high / 2, float(high)})
        return row if len(row) > 1 else []  # a range of 0 alone is no sweep

    def calibrated(self, low: float, high: float, share: float = 1.0, probe: Mapping[str, Any] | None = None) -> Card:
        """This card with its measured fluent range ``[low, high]``, which also becomes its recommended range, and the
        recommended ε at ``share`` of the positive fluent limit; none when no positive ε was fluent (a recommendation from
        before, e.g. the ε a transfer scaled, would lie outside the range just measured). ``probe``: what the range
        was measured on (prompts, samples, tokens), kept as ``fluent_eps_probe``; a card measured again without it
        drops the old one, and a measured range drops a failed probe's ``calibration_error``."""
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1]; got {share!r}")
        flat = {k: v for k, v in self.to_dict().items() if k not in ("fluent_eps_probe", "calibration_error")}
        flat |= {"fluent_eps": [low, high], "recommended_eps_range": [low, high],
                 "recommended_eps": round(share * high, 3) if high > 0 else None}
        return Card.from_dict(flat | ({"fluent_eps_probe": dict(probe)} if probe is not None else {}))

    def updated(self, **changes: Any) -> Card:
        """A new card with some flat keys set (typed parts are re-parsed)."""
        return Card.from_dict({**self.to_dict(), **changes})

    # a read-only mapping over the flat form
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())
