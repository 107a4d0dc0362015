"""Training a switch by maximum likelihood, on cached hidden states.

The model body is frozen, so the head inputs ``c`` of the training texts never
change: one body pass computes them, and every optimisation step afterwards
touches only the head. With the base logits ``L0 = E c`` cached too, a step costs
one ``(n, d) @ (d, V)`` product for the steering term ``Δ = ε0 (M c)ᵀ Eᵀ`` and a
softmax, instead of a full forward and backward through the model. (A family that
scales its head's output, Granite or Cohere, scales ``L0`` and ``Δ`` alike.)

Objective (paper, appendix D): a text with label ``y`` (positives +1, negatives
-1, or a graded value in [-1, 1]) is fitted at ``ε0 (y W + W_d)``; the dummy
``W_d`` absorbs the shift between the pretraining corpus and the training
domain when the labels differ. One document alone is fitted at ``ε0 W``.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from lmswitch.core import solver
from lmswitch.core.card import Card, TrainingRecord
from lmswitch.core.hidden import READ_CHARS, EncodedText, ShortText, TokenStates, check_text, encode_texts
from lmswitch.core.judge import fit_judge
from lmswitch.core.models import LanguageModel, check_model, preferred_dtype
from lmswitch.core.options import EXAMPLES, NAMINGS, ONE_DOCUMENT, TWO_DOCUMENTS, Naming, TrainConfig
from lmswitch.core.pause import pause_point
from lmswitch.core.switch import Switch, check_name

ProgressCallback = Callable[[int, int, float], None]  # (step, total, loss)

DEFAULT_CONFIG = TrainConfig()


class TrainingCancelled(Exception):
    """Raised by :func:`train_switch` / :func:`train_events` when their ``cancel`` event is set."""


def _as_texts(texts: str | Sequence[str] | None, what: str) -> list[str]:
    """One side's texts as a list, refusing what is not text with what to do instead."""
    if texts is None:
        return []
    if isinstance(texts, os.PathLike) or isinstance(texts, str) and "\n" not in texts and len(texts) < 4096 and os.path.isfile(texts):
        raise ValueError(f"the {what} side is the name of a file ({os.fspath(texts)!r}), not its text: read it first, "
                         "lmswitch.io.documents.read_document(path) for a document, read_lines(path) for one example per line")
    if isinstance(texts, (bytes, bytearray)):
        raise ValueError(f"the {what} side is bytes: decode it first (data.decode('utf-8'))")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Iterable):
        raise ValueError(f"the {what} side must be a document (a string) or a list of texts; got {type(texts).__name__}")
    return [check_text(text, f"{what} text #{i + 1}") for i, text in enumerate(texts)]


def _split(data: TokenStates, n_texts: int, heldout: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean masks (train, held-out), stratified by label sign so both sides are represented in the held-out part.

    Labels +1, 0 and -1 are stratified apart. A side with enough texts (≥ 10) holds out whole texts; a side with fewer
    (one document) holds out contiguous token blocks, whose hidden states keep their full context."""
    if heldout == 0:
        return torch.ones(len(data.unit), dtype=torch.bool), torch.zeros(len(data.unit), dtype=torch.bool)
    text_of = data.unit // 1_000_000
    sign = torch.sign(data.labels.cpu())
    held = torch.zeros(len(data.unit), dtype=torch.bool)
    for side in (sign == value for value in sign.unique().flip(0)):  # +1, 0 (self-contrast, neutral grades), -1 apart
        whole_texts = len(text_of[side].unique()) >= 10
        ids = (text_of if whole_texts else data.unit)[side].unique()
        if len(ids) < 2:
            continue
        k = max(1, round(heldout * len(ids)))
        chosen = ids[torch.randperm(len(ids), generator=generator)[:k]]
        held |= side & torch.isin(text_of if whole_texts else data.unit, chosen)
    return ~held, held


class _SteeredNLL(torch.autograd.Function):
    """Mean NLL of ``targets`` under logits ``L0 + U Eᵀ``, with a lean backward.

    ``U`` (n, d) is the steering term ``ε0 M c`` (times the family's after-head scale); ``L0`` (n, V) the cached base
    logits. Autograd through ``cross_entropy`` would materialise several (n, V)
    buffers; here the forward keeps one and the backward turns it into the
    softmax in place, so a step is two (n, d, V) matmuls and three passes over
    (n, V). The matmuls run in ``E_mm``'s dtype (bf16 where it is fast): the steering
    term is small, so its relative rounding error barely moves the loss.
    """

    @staticmethod
    def rows(U: torch.Tensor, E_mm: torch.Tensor, L0: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each row's NLL, with the (n, V) logits and their log-sum-exp that the backward reuses."""
        logits = (U.to(E_mm.dtype) @ E_mm.T).float().add_(L0)  # (n, V)
        lse = torch.logsumexp(logits, dim=-1)  # (n,)
        return lse - logits.gather(1, targets[:, None]).squeeze(1), logits, lse

    @staticmethod
    def forward(ctx, U: torch.Tensor, E_mm: torch.Tensor, L0: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        nll, logits, lse = _SteeredNLL.rows(U, E_mm, L0, targets)
        ctx.save_for_backward(logits, lse, E_mm, targets)
        return nll.mean()

    @staticmethod
    @torch.no_grad()
    def value(U: torch.Tensor, E_mm: torch.Tensor, L0: torch.Tensor, targets: torch.Tensor, chunk: int = 128) -> torch.Tensor:
        """The forward's loss without a backward to keep for: ``chunk`` rows at a time, so their logits (25 MB in
        float32) stay in cache through the sum and the log-sum-exp: ~2× faster than all at once on 2,000 held-out
        rows, and 0.39 → 0.25 s against 256 rows on the AMX Xeon (the same value to 7 digits there)."""
        parts = [_SteeredNLL.rows(U[s : s + chunk], E_mm, L0[s : s + chunk], targets[s : s + chunk])[0] for s in range(0, len(U), chunk)]
        return torch.cat(parts).mean()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, lse, E_mm, targets = ctx.saved_tensors
        probs = logits.sub_(lse[:, None]).exp_()  # softmax, in place
        probs[torch.arange(len(targets)), targets] -= 1.0
        probs.mul_(grad / len(targets))
        grad_U = (probs.to(E_mm.dtype) @ E_mm).float()  # (n, d)
        return grad_U, None, None, None


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


# --- typed progress events: what a progress bar, the app or a log consumes -----------------------
@dataclass(frozen=True)
class Encoded:
    """The texts' head inputs are computed (the one body pass); optimisation starts next."""

    tokens_train: int
    tokens_heldout: int
    seconds: float


@dataclass(frozen=True)
class Step:
    """One optimiser step finished; ``loss`` is its training loss (nats per token)."""

    step: int
    total: int
    loss: float


@dataclass(frozen=True)
class Evaluated:
    """The held-out loss after ``step``; ``best`` when it is the lowest so far (that W is kept)."""

    step: int
    heldout_loss: float
    best: bool


@dataclass(frozen=True)
class Done:
    """Training finished; ``switch.card`` records the data, the settings and the curves. ``documents``: each side given
    as one document of at most :data:`~lmswitch.core.hidden.READ_CHARS` characters (the positive first), as the
    training's body pass read it, so the lenses need no pass of their own (``what_was_learned(..., read=done.documents)``;
    none for a tokenizer with start tokens, :func:`~lmswitch.core.hidden.encode_texts`)."""

    switch: Switch
    documents: tuple[EncodedText, ...] = ()


TrainEvent = Encoded | Step | Evaluated | Done


@dataclass(frozen=True)
class _Examples:
    texts: list[str]  # positives, then negatives
    labels: list[float]  # one per text, in [-1, 1]
    n_positive: int
    n_negative: int
    graded: bool


def _unique(ex: _Examples) -> tuple[_Examples, list[int]]:
    """``ex`` less every text that repeats an earlier one of its label (spacing and case ignored), and the indices kept.
    A repeat held out was a copy of a training text: one sentence given 40 times scored a held-out gain of +0.48
    ("Enough data … explains text it never saw")."""
    seen: set[tuple[str, float]] = set()
    keep = [i for i, key in enumerate(zip(_normalised(ex.texts, ordered=False), ex.labels, strict=True))
            if not (key in seen or seen.add(key))]
    n_positive = sum(i < ex.n_positive for i in keep)
    kept = _Examples([ex.texts[i] for i in keep], [ex.labels[i] for i in keep], n_positive, len(keep) - n_positive, ex.graded)
    return kept, keep


MIN_DOCUMENT_TOKENS = 32  # a side given as one document shorter than this cannot be learned from
FOREIGN_TOKEN_RATIO = 1.4  # tokens per character this many times the bundled English reference's: warn
# a short text says less: four short English sentences ("Trains are good.", 59 characters) tokenize at 1.45× the reference
SHORT_TEXT_CHARS, SHORT_TEXT_RATIO = 200, 1.6  # under this many characters, warn only past this ratio (German: 1.8×)


# two documents that share this share of the shorter one's five-word runs are one text (two saves of one article, as
# PDF and Word: 100%; an article and a part of it: 99.6%); opposing articles on one topic share 1–18% (the stance data),
# an article and a copy with one word in 80 changed 94%. (Sentence lists are left alone: one prompt before contrasting
# replies shares most of its runs.)
NEAR_COPY_SHARE = 0.98


def _normalised(texts: Sequence[str], ordered: bool = True) -> list[str]:
    """The texts with spacing and case ignored (sorted, unless ``ordered`` is False)."""
    plain = [" ".join(t.split()).casefold() for t in texts]
    return sorted(plain) if ordered else plain


def shared_share(a: Sequence[str], b: Sequence[str], n: int = 5) -> float:
    """The share of the shorter side's runs of ``n`` words (case and punctuation ignored) that the other side has too."""
    def runs(texts: Sequence[str]) -> set[tuple[str, ...]]:
        words = re.findall(r"\w+", " ".join(texts).casefold())
        return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}

    ra, rb = runs(a), runs(b)
    return len(ra & rb) / min(len(ra), len(rb)) if ra and rb else 0.0


def _check_sides(lm: LanguageModel, pos: list[str], neg: list[str]) -> None:
    """Refuse training data that cannot give a switch: identical sides, or a side's one document too short to learn from
    (a list of sentences gets advice on its size after training instead: :func:`advise_on_data`)."""
    if neg and _normalised(pos) == _normalised(neg):
        raise ValueError("the positive and negative texts are identical (ignoring spacing and case): a switch learns what "
                         "differs between them, so give two different documents or lists")
    if len(pos) == len(neg) == 1 and (share := shared_share(pos, neg)) >= NEAR_COPY_SHARE:
        raise ValueError(f"the two documents are nearly one text ({share:.0%} of the shorter one's five-word runs are in the "
                         "other; two saves of one article, or an article and a part of it, are one text): a switch learns "
                         "what differs between them, so give two documents that differ")
    for what, texts in (("positive", pos), ("negative", neg)):
        tokens = len(lm.tokenizer(texts[0], add_special_tokens=False).input_ids) if len(texts) == 1 else None
        if tokens is not None and tokens < MIN_DOCUMENT_TOKENS:  # one document, or a list of one sentence
            whose = f"the {what} side is one text of" if neg else "the document has"  # a document alone has no sides
            raise ValueError(f"{whose} {tokens} token{'s' if tokens != 1 else ''}; a switch needs at least {MIN_DOCUMENT_TOKENS} tokens (about "
                             f"{MIN_DOCUMENT_TOKENS * 3 // 4} words) to learn from one text, and a document of 300+ words "
                             "works much better" + ("; or give two or more example sentences a side" if neg else ""))


def language_warning(lm: LanguageModel, texts: str | Sequence[str]) -> str | None:
    """A warning when the model's tokenizer splits the texts far finer than its English reference text (another
    language or script, which a small model handles poorly), else None."""
    from lmswitch.io.resources import read_data_text

    texts = [texts] if isinstance(texts, str) else list(texts)
    chars = sum(len(t) for t in texts)
    if not chars:
        return None
    reference = read_data_text("reference.txt")
    ratio = sum(len(lm.tokenizer(t, add_special_tokens=False).input_ids) for t in texts) / chars
    base = len(lm.tokenizer(reference, add_special_tokens=False).input_ids) / len(reference)
    if ratio <= (FOREIGN_TOKEN_RATIO if chars >= SHORT_TEXT_CHARS else SHORT_TEXT_RATIO) * base:
        return None
    return (f"The model's tokenizer needs {100 * ratio:.0f} tokens per 100 characters of this text against {100 * base:.0f} "
            f"for its English reference text: the text is probably in a language or script that '{lm.name}' handles "
            "poorly, so the switch may learn little beyond the language itself.")


def _examples(positive: str | Sequence[str], negative: str | Sequence[str] | None, labels: Sequence[float] | None) -> _Examples:
    pos, neg = _as_texts(positive, "positive"), _as_texts(negative, "negative")
    if not pos:
        raise ValueError("no positive texts given: a switch needs examples of the style to move toward")
    texts = pos + neg
    if labels is None:
        return _Examples(texts, [1.0] * len(pos) + [-1.0] * len(neg), len(pos), len(neg), False)
    values = [float(x) for x in labels]
    if len(values) != len(texts):
        raise ValueError(f"got {len(values)} labels for {len(texts)} texts (positives then negatives)")
    bad = [x for x in values if not (math.isfinite(x) and -1 <= x <= 1)]
    if bad:
        raise ValueError(f"labels must be finite numbers in [-1, 1]; got {bad[:3]}")
    if not any(values):
        raise ValueError("every label is 0: a text labelled 0 belongs to neither side, so there is nothing to steer toward; "
                         "label the texts of one style toward +1 and the other's toward -1")
    return _Examples(texts, values, len(pos), len(neg), True)


def data_kind(positive: str | Sequence[str], negative: str | Sequence[str] | None) -> str:
    """The shape of a switch's training data, a key of :data:`~lmswitch.core.options.NAMINGS`: "one document" (a
    document string alone), "two documents" (two strings) or "examples" (anything else)."""
    if isinstance(positive, str) and negative is None:
        return ONE_DOCUMENT
    return TWO_DOCUMENTS if isinstance(positive, str) and isinstance(negative, str) else EXAMPLES


def naming(positive: str | Sequence[str], negative: str | Sequence[str] | None, positive_label: str | None = None,
           negative_label: str | None = None, description: str | None = None) -> Naming:
    """The labels and description a switch trained on this data gets: each one given, else its data shape's
    (:func:`data_kind`): a one-document switch moves "like the document" at +ε and "unlike the document" at −ε; two
    documents' is "A (+) vs B (−)" in their labels. A blank label is not given (a slider would name no direction); a blank
    description is kept."""
    default = NAMINGS[data_kind(positive, negative)]

    def label(value: str | None, otherwise: str) -> str:  # (not a string: the switch refuses it)
        blank = value is None or isinstance(value, str) and not value.strip()
        return otherwise if blank else value.strip() if isinstance(value, str) else value

    positive, negative = label(positive_label, default.positive_label), label(negative_label, default.negative_label)
    return Naming(positive, negative, default.description.format(positive=positive, negative=negative) if description is None else description)


def _with_self_contrast(lm: LanguageModel, ex: _Examples, seed: int) -> _Examples:
    """The examples plus the model's own continuations of their openings: the negatives of a lone document (label -1),
    or a neutral middle (label 0) beside given negatives."""
    from lmswitch.core.contrast import self_contrast

    own = self_contrast(lm, ex.texts, seed=seed)
    label = 0.0 if ex.n_negative or ex.graded else -1.0
    return _Examples(ex.texts + own, ex.labels + [label] * len(own), ex.n_positive, ex.n_negative + len(own),
                     ex.graded or bool(ex.n_negative))


class _Objective:
    """The training problem on cached states: NLL of the tokens at ε0 (y·W + W_d), for train and held-out parts.

    ``C`` (n, d) head inputs, ``Y`` (n,) targets, ``L`` (n,) labels and, when they
    fit in ~1 GB, ``L0`` (n, V) base logits are computed once; a step then costs
    only the steering term's matmuls.
    """

    CACHE_LOGITS = 256 * 1024**2  # (tokens × vocabulary) floats of base logits kept

    def __init__(self, lm: LanguageModel, data: TokenStates, masks: tuple[torch.Tensor, torch.Tensor], config: TrainConfig,
                 use_dummy: bool, neutral: torch.Tensor | None = None, stepped: bool = True) -> None:
        """``stepped``: Adam steps will read the training part's base logits (L-BFGS reduces the vocabulary instead)."""
        self.lm, self.eps0, self.use_dummy = lm, config.eps0, use_dummy
        # (V, d) in the training matmul dtype: bfloat16 only where it is fast (a CPU without native bf16 runs it ~100× slower)
        self.E_mm = lm.head_weight(config.matmul_dtype or preferred_dtype(lm.head_device))
        self.device = self.E_mm.device
        self.train = self._part(data, masks[0], cache=stepped)
        self.held = self._part(data, masks[1])
        self.fluency = _Fluency(self, config, neutral) if config.fluency_terms else None

    def _part(self, data: TokenStates, mask: torch.Tensor, cache: bool = True) -> tuple[torch.Tensor, ...]:
        m = mask.to(self.device)
        C, Y, L = data.hidden[m], data.targets[m], data.labels[m]
        L0 = self.base_logits(C) if cache and len(C) and len(C) * self.lm.vocab_size <= self.CACHE_LOGITS else None
        return C, Y, L, L0

    def base_logits(self, C: torch.Tensor) -> torch.Tensor:  # (n, V) logits before any soft-capping, float32
        return self.lm.raw_logits(C, dtype=torch.float32)

    def loss(self, part: tuple, W: torch.Tensor, Wd: torch.Tensor, idx: torch.Tensor | None = None, sign: float = 1.0,
             with_w: bool = True) -> torch.Tensor:
        """Mean NLL of the part's targets (rows ``idx``) at steering ε0 (sign·label·W + W_d)."""
        C, Y, L, L0 = part if idx is None else (*(x[idx] for x in part[:3]), None if part[3] is None else part[3][idx])
        steer = torch.zeros_like(C)
        if with_w:
            steer = steer + (sign * L)[:, None] * (C @ W.T)
        if self.use_dummy:
            steer = steer + C @ Wd.T
        L0 = L0 if L0 is not None else self.base_logits(C)
        change = self.eps0 * self.lm.logit_scale * steer  # L0 is scaled after the head (raw_logits); so is the change
        if not self.lm.logit_softcap:
            nll = _SteeredNLL.value if not torch.is_grad_enabled() else _SteeredNLL.apply
            return nll(change, self.E_mm, L0, Y)
        logits = L0 + (change.to(self.E_mm.dtype) @ self.E_mm.T).float()  # (n, V)
        return F.cross_entropy(self.lm.softcap(logits), Y)

    @torch.no_grad()
    def heldout(self, W: torch.Tensor, Wd: torch.Tensor, **kw) -> float:
        return float(self.loss(self.held, W, Wd, **kw)) if len(self.held[0]) else math.nan


class _Fluency:
    """The optional fluency terms, measured at the strength a user steers with (``target_eps``), not at ε0.

    * ``neutral_kl``: mean KL(unsteered ‖ steered) over neutral reference contexts at ±target_eps. Pushing a word
      where the model is sure of the next one (after "great", a comma) costs much; where it is unsure, little, so
      the switch learns to act where the style has room, the cause of word loops being the opposite.
    * ``constant_penalty``: the mean squared logit change (vocabulary-centred, nats²) of the *mean* training context at
      target_eps, the part of the change that is the same in every context: a fixed bonus on a few words.
    """

    NEUTRAL_ROWS = 128  # neutral contexts per step

    def __init__(self, obj: _Objective, config: TrainConfig, neutral: torch.Tensor | None) -> None:
        self.obj, self.config, self.scale = obj, config, config.target_eps * config.eps0 * obj.lm.logit_scale  # in logits
        if config.neutral_kl:
            if neutral is None or not len(neutral):
                raise ValueError("neutral_kl needs neutral reference contexts")
            self.neutral = neutral.to(obj.device, torch.float32)
            self.neutral_base = obj.base_logits(self.neutral)  # (N, V) raw logits and their log-probabilities, computed once
            self.neutral_logp = torch.log_softmax(obj.lm.softcap(self.neutral_base), -1)
        if config.constant_penalty:
            E = obj.lm.head_weight(torch.float32)
            Ec = E - E.mean(0, keepdim=True)  # a shift of every logit by the same amount changes nothing
            self.gram = Ec.T @ Ec / len(Ec)  # (d, d): mean over the vocabulary of (Ec v)² = vᵀ G v
            self.mean_context = obj.train[0].mean(0)

    def __call__(self, W: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        total = torch.zeros((), device=self.obj.device)
        if self.config.neutral_kl:
            total = total + self.config.neutral_kl * self.neutral_kl(W, generator)
        if self.config.constant_penalty:
            v = self.scale * (W @ self.mean_context)
            total = total + self.config.constant_penalty * (v @ self.gram @ v)
        return total

    def neutral_kl(self, W: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        idx = torch.randperm(len(self.neutral), generator=generator)[: self.NEUTRAL_ROWS].to(self.obj.device)
        C, L0, base = self.neutral[idx], self.neutral_base[idx], self.neutral_logp[idx]
        lm, E = self.obj.lm, self.obj.E_mm
        shift = ((self.scale * (C @ W.T)).to(E.dtype) @ E.T).float()
        sign = 1.0 if torch.rand((), generator=generator) < 0.5 else -1.0  # one side per step: unbiased, half the cost
        return F.kl_div(torch.log_softmax(lm.softcap(L0 + sign * shift), -1), base, log_target=True, reduction="batchmean")


@dataclass
class _Run:
    """The optimisation's state: parameters, curves and the best held-out point."""

    W: torch.Tensor  # (d, d) the switch
    Wd: torch.Tensor  # (d, d) the dummy matrix (absorbs the domain shift)
    losses: list[float] = field(default_factory=list)
    held_curve: list[tuple[int, float]] = field(default_factory=list)
    best: tuple[float, int, torch.Tensor, torch.Tensor] | None = None
    bad_evals: int = 0
    stopped_early: bool = False
    steps_done: int = 0
    chosen_l2: float | None = None  # lbfgs: the λ of the ridge path that was kept


def _optimise(obj: _Objective, config: TrainConfig, is_cancelled: Callable[[], bool], generator: torch.Generator,
              run: _Run) -> Iterator[TrainEvent]:
    """Adam on the cached states with held-out early stopping; yields a Step per step and an Evaluated per evaluation."""
    params = [run.W, run.Wd] if obj.use_dummy else [run.W]
    opt = torch.optim.Adam(params, lr=config.lr)
    n = len(obj.train[0])
    for step in range(1, config.steps + 1):
        if is_cancelled():
            raise TrainingCancelled(f"training cancelled at step {step - 1} of {config.steps}")
        idx = torch.randperm(n, generator=generator)[: config.batch_tokens].to(obj.device) if n > config.batch_tokens else None
        loss = obj.loss(obj.train, run.W, run.Wd, idx)
        if config.l2:
            loss = loss + config.l2 * (config.eps0**2) * sum((p**2).sum() for p in params)
        if obj.fluency is not None:
            loss = loss + obj.fluency(run.W, generator)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run.losses.append(loss.item())
        run.steps_done = step
        yield Step(step, config.steps, run.losses[-1])
        if len(obj.held[0]) and step >= config.warmup and (step % config.eval_every == 0 or step in (config.steps, config.warmup)):
            yield _evaluate(obj, config, run, step)
            if run.bad_evals >= config.patience:
                run.stopped_early = True
                return


def _optimise_lbfgs(obj: _Objective, config: TrainConfig, is_cancelled: Callable[[], bool], run: _Run) -> Iterator[TrainEvent]:
    """L-BFGS along the ridge path on the candidate-reduced loss (:mod:`lmswitch.core.solver`); the exact held-out loss
    after each λ chooses where to stop and which λ to keep. Yields the Steps of each λ's loss evaluations, then its Evaluated."""
    recipe = solver.RECIPES[config.optimizer]
    tail = torch.Generator(device=obj.lm.head_device).manual_seed(config.seed)  # draws where the head computes (a GPU's)
    train = solver.reduce(obj.lm, *obj.train[:3], samples=recipe.tail_samples, generator=tail)
    has_held = len(obj.held[0]) > 0
    path = solver.PATH if has_held else solver.PATH[: solver.PATH.index(solver.NO_HELDOUT_LAMBDA) + 1]
    total = min(config.steps, recipe.planned(path))
    steps: list[Step] = []

    def on_evaluation(evaluations: int, value: float) -> None:
        pause_point()  # a server's other users go first here (lmswitch.core.pause)
        if is_cancelled():
            raise TrainingCancelled(f"training cancelled at step {evaluations - 1} of {total}")
        run.losses.append(value)
        steps.append(Step(evaluations, total, value))

    kept: list[tuple[float, float, int, torch.Tensor, torch.Tensor]] = []  # (λ, held-out loss, step, W, W_d) per λ
    for lam in solver.ridge_path(obj.lm, train, obj.eps0, obj.use_dummy, run.W, run.Wd, max_evaluations=total,
                                 on_evaluation=on_evaluation, path=path, recipe=recipe):
        yield from steps
        run.steps_done = steps[-1].step if steps else run.steps_done
        steps.clear()
        if not has_held:
            run.chosen_l2 = lam
            continue
        event = _evaluate(obj, config, run, run.steps_done)
        kept.append((lam, event.heldout_loss, event.step, run.W.detach().clone(), run.Wd.detach().clone()))
        yield event
        if event.heldout_loss > (1 + solver.TOLERANCE) * run.best[0]:
            run.stopped_early = True
            break
    if kept:  # the least regularised λ within the tolerance of the best held-out loss: the strongest switch that still generalises
        lam, h, step, W, Wd = next((k for k in reversed(kept) if k[1] <= (1 + solver.TOLERANCE) * run.best[0]), kept[0])
        run.best, run.chosen_l2 = (h, step, W, Wd), lam


def _evaluate(obj: _Objective, config: TrainConfig, run: _Run, step: int) -> Evaluated:
    h = obj.heldout(run.W, run.Wd)
    run.held_curve.append((step, h))
    better = run.best is None or h < run.best[0] - 1e-5
    if better:
        run.best = (h, step, run.W.detach().clone(), run.Wd.detach().clone())
        run.bad_evals = 0
    else:
        run.bad_evals += 1
    return Evaluated(step, h, better)


def _truncate(W: torch.Tensor, rank: int | None) -> torch.Tensor:
    """Keep the top ``rank`` singular directions of ``W`` (its word dimensions); the rest mostly fit noise."""
    if rank is None or rank >= W.shape[0]:
        return W
    U, S, Vh = torch.linalg.svd(W.float())
    return (U[:, :rank] * S[:rank]) @ Vh[:rank]


def _optimizer(lm: LanguageModel, config: TrainConfig) -> str:
    """The optimiser that runs: the L-BFGS solver needs logits that are the head's output itself, so a soft-capping or
    after-head scaling family trains with Adam."""
    return config.optimizer if lm.logits_are_head_output else "adam"


def _card(ex: _Examples, obj: _Objective, config: TrainConfig, run: _Run, best_step: int, seconds: tuple[float, float],
          negatives: str, data_shape: str, held_with: float | None = None) -> Card:
    """The training record stored with the switch; ``held_with``: the held-out loss of the final W, when known."""
    held_with = obj.heldout(run.W, run.Wd) if held_with is None else held_with
    held_without = obj.heldout(run.W, run.Wd, with_w=False)  # gain attributable to the switch: dummy kept, W removed
    held_reversed = obj.heldout(run.W, run.Wd, sign=-1.0)
    record = TrainingRecord(
        n_positive=ex.n_positive, n_negative=ex.n_negative, graded_labels=ex.graded,
        tokens_train=int(len(obj.train[0])), tokens_heldout=int(len(obj.held[0])),
        steps=run.steps_done, best_step=best_step, stopped_early=run.stopped_early,
        lr=config.lr, l2=config.l2 if run.chosen_l2 is None else run.chosen_l2, seed=config.seed, rank=config.rank, batch_tokens=config.batch_tokens,
        min_steps=config.warmup, dummy_steer=obj.use_dummy,
        train_losses=[round(x, 5) for x in run.losses], heldout_losses=[[s, round(h, 5)] for s, h in run.held_curve],
        heldout_nll_with_switch=_finite_or_none(held_with), heldout_nll_without_switch=_finite_or_none(held_without),
        heldout_nll_reversed_switch=_finite_or_none(held_reversed),
        heldout_gain=held_without - held_with if len(obj.held[0]) else None,
        hidden_state_seconds=round(seconds[0], 3), seconds=round(seconds[1], 3), optimizer=_optimizer(obj.lm, config),
        negatives=negatives, data_shape=data_shape,
    )
    return Card(training=record, extra={"objective": config.fluency_terms} if config.fluency_terms else {})


def _neutral_contexts(lm: LanguageModel) -> torch.Tensor:
    """Head inputs over the bundled neutral reference text (cached per model by the lens that reads it too)."""
    from lmswitch.lenses.svd import reference_hidden  # the lens tier owns the reference text and its cache

    return reference_hidden(lm)


def _cancel_check(cancel: threading.Event | Callable[[], bool] | None) -> Callable[[], bool]:
    if cancel is not None and not (isinstance(cancel, threading.Event) or callable(cancel)):
        raise ValueError(f"cancel must be a threading.Event or a function that returns True to stop; got {type(cancel).__name__}")
    return cancel.is_set if isinstance(cancel, threading.Event) else (cancel or (lambda: False))


def train_events(
    lm: LanguageModel,
    positive: str | Sequence[str],
    negative: str | Sequence[str] | None = None,
    *,
    labels: Sequence[float] | None = None,
    name: str = "switch",
    description: str | None = None,
    positive_label: str | None = None,
    negative_label: str | None = None,
    config: TrainConfig = DEFAULT_CONFIG,
    cancel: threading.Event | Callable[[], bool] | None = None,
) -> Iterator[TrainEvent]:
    """Train a switch step by step: yields :class:`Encoded`, then a :class:`Step` per optimiser step and an
    :class:`Evaluated` per held-out evaluation, and last :class:`Done` with the switch.

    Each ``next()`` does a bounded piece of work, so a server can interleave other
    work between steps; closing the iterator, or setting ``cancel``, stops training
    (the latter raises :class:`TrainingCancelled`). A label or description not given
    follows the data's shape (:func:`naming`).

    >>> for event in train_events(lm, pos, neg, config=TrainConfig(steps=50)):   # doctest: +SKIP
    ...     if isinstance(event, Done): switch = event.switch
    """
    start = time.perf_counter()
    check_model(lm)
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, e.g. lmswitch.TrainConfig(steps=100); got {type(config).__name__}")
    config.validate(lm.hidden_size)
    name, stop = check_name(name), _cancel_check(cancel)  # (a switch the app and the command line could not name)
    prep = _prepare(lm, positive, negative, labels, config)
    obj = prep.objective
    hidden_seconds = time.perf_counter() - start
    yield Encoded(len(obj.train[0]), len(obj.held[0]), hidden_seconds)
    d = lm.hidden_size
    # zero start: a random start would leave untrained noise in W that steering then amplifies
    run = _Run(torch.zeros(d, d, device=obj.device, requires_grad=True), torch.zeros(d, d, device=obj.device, requires_grad=obj.use_dummy))
    if _optimizer(lm, config) in solver.RECIPES:
        yield from _optimise_lbfgs(obj, config, stop, run)
    else:
        yield from _optimise(obj, config, stop, prep.generator, run)
    card = _final_card(prep, config, run, (hidden_seconds, time.perf_counter() - start), data_kind(positive, negative))
    named = naming(positive, negative, positive_label, negative_label, description)
    yield Done(Switch(W=run.W.detach().cpu(), name=name, description=named.description, eps0=config.eps0,
                      positive_label=named.positive_label, negative_label=named.negative_label, model_name=lm.name,
                      model_fingerprint=lm.fingerprint, card=card, judge=fit_judge(prep.data)),
               documents=tuple(prep.data.texts[i] for i in prep.documents if i in prep.data.texts))


@dataclass
class _Prepared:
    """Training's data before the optimiser runs: the examples, their cached head inputs and the objective on them."""

    examples: _Examples
    negatives: str  # how the negatives were made (the card's ``negatives``)
    warning: str | None  # a text in a language the model reads poorly (:func:`language_warning`)
    documents: list[int]  # the texts given as one document each, kept whole for the lenses
    data: TokenStates
    objective: _Objective
    generator: torch.Generator  # the held-out split's and Adam's batches' random stream
    repeats: int = 0  # texts dropped as repeats of an earlier one (:func:`_unique`; the card's ``repeated_texts``)


def _prepare(lm: LanguageModel, positive: str | Sequence[str], negative: str | Sequence[str] | None,
             labels: Sequence[float] | None, config: TrainConfig) -> _Prepared:
    """Check the data, add self-contrast negatives if asked, read every text once (the body pass) and split off the
    held-out part."""
    given = _examples(positive, negative, labels)
    ex, keep = _unique(given)
    repeats = len(given.texts) - len(keep)
    try:
        _check_sides(lm, ex.texts[: ex.n_positive], ex.texts[ex.n_positive :])
    except ValueError as err:
        raise ValueError(f"{err} ({_repeats_note(repeats)})" if repeats else str(err)) from None
    warning = language_warning(lm, ex.texts)
    negatives = "given" if ex.n_negative else "none"
    if config.self_contrast:
        ex, negatives = _with_self_contrast(lm, ex, config.seed), "given + self-contrast" if ex.n_negative else "self-contrast"
    generator = torch.Generator().manual_seed(config.seed)
    # each side given as one document, as long as a lens reads (self-contrast text comes after both)
    documents = [i for i, side in ((0, positive), (ex.n_positive, negative)) if isinstance(side, str) and len(side) <= READ_CHARS]
    try:
        data = encode_texts(lm, ex.texts, ex.labels, config.chunk_tokens, keep=documents)
    except ShortText as err:  # named by its side and place in it, as the user gave them (repeats counted)
        i = keep[err.index] if err.index < len(keep) else err.index + repeats  # (self-contrast text comes after)
        side, k = ("positive", i) if i < given.n_positive else ("negative", i - given.n_positive)
        raise ValueError(err.says(f"the {side} text #{k + 1}")) from None
    train_mask, held_mask = _split(data, len(ex.texts), config.heldout, generator)
    if not train_mask.any():
        raise ValueError("no tokens left to train on after holding out data; give more text or set heldout=0")
    obj = _Objective(lm, data, (train_mask, held_mask), config, use_dummy=len(set(ex.labels)) > 1,
                     neutral=_neutral_contexts(lm) if config.neutral_kl else None,
                     stepped=_optimizer(lm, config) not in solver.RECIPES)
    return _Prepared(ex, negatives, warning, documents, data, obj, generator, repeats)


def _repeats_note(repeats: int) -> str:
    return f"{repeats} repeated text{'s were' if repeats != 1 else ' was'} read once"


def _final_card(prep: _Prepared, config: TrainConfig, run: _Run, seconds: tuple[float, float], kind: str) -> Card:
    """Keep the best W the run found (truncated to ``config.rank``) in ``run`` and return its card."""
    held_best, best_step, W_best, Wd_best = run.best if run.best is not None else (None, run.steps_done, run.W.detach(), run.Wd.detach())
    with torch.no_grad():
        run.W.copy_(_truncate(W_best, config.rank))
        run.Wd.copy_(Wd_best)
        card = _card(prep.examples, prep.objective, config, run, best_step, seconds, prep.negatives, kind,
                     held_with=held_best if config.rank is None else None)  # a truncated W is scored again
    changes = {"warnings": [prep.warning]} if prep.warning else {}
    return card.updated(**changes, **({"repeated_texts": prep.repeats} if prep.repeats else {})) if changes or prep.repeats else card


def train_switch(
    lm: LanguageModel,
    positive: str | Sequence[str],
    negative: str | Sequence[str] | None = None,
    *,
    labels: Sequence[float] | None = None,
    name: str = "switch",
    description: str | None = None,
    positive_label: str | None = None,
    negative_label: str | None = None,
    config: TrainConfig = DEFAULT_CONFIG,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | Callable[[], bool] | None = None,
) -> Switch:
    """Learn a switch from example texts (the whole of :func:`train_events`, returning its switch).

    ``positive``/``negative`` are lists of texts (sentences or whole documents) or a
    single document string. ``labels`` optionally gives a graded label in [-1, 1]
    for every text, positives first then negatives. ``config`` holds the
    optimisation settings (:class:`~lmswitch.core.options.TrainConfig`): steps, lr,
    held-out fraction, early stopping, rank truncation. ``progress(step, total, loss)``
    is called after every step. A label or description not given follows the data's
    shape (:func:`naming`): "like the document" / "unlike the document" for one document.

    Early stopping: after ``config.warmup`` steps (default: half of ``steps``) training
    stops once the held-out loss has not improved for ``patience`` evaluations, and the
    ``W`` with the best held-out loss seen from then on is kept. With little data the
    held-out likelihood of the whole text often stops improving long before the style
    is learned, so the warm-up is not scored.

    >>> s = train_switch(lm, happy_sentences, sad_sentences, name="sentiment")   # doctest: +SKIP
    >>> s.card["heldout_gain"]                                                   # doctest: +SKIP
    0.21
    """
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be a function of (step, total, loss); got {type(progress).__name__}")
    events = train_events(lm, positive, negative, labels=labels, name=name, description=description, positive_label=positive_label,
                          negative_label=negative_label, config=config, cancel=cancel)
    for event in events:
        if isinstance(event, Step) and progress is not None:
            progress(event.step, event.total, event.loss)
        elif isinstance(event, Done):
            return event.switch
    raise RuntimeError("training ended without a switch")  # unreachable: train_events always ends with Done


LITTLE_TEXT_TOKENS = 300  # below this many training tokens a d × d switch mostly memorises its examples
CLEAR_GAIN = 0.01  # nats/token of held-out gain that marks a switch which generalises (shipped switches: 0.02–0.09)


@dataclass(frozen=True)
class DataAdvice:
    """Whether a trained switch's data sufficed (:func:`advise_on_data`): the advice in words, and ``weak`` when the
    switch may not generalise (too little text, or steps that memorised it), which the app's report and the CLI flag
    before the advice. A solver's switch whose held-out gain is ≤ 0 is not flagged: the README's 40 + 40 sentences give
    −0.334 and still rank 90% of unseen sentences right (EVALUATION.md), so its advice says what to add instead."""

    text: str
    weak: bool = False
    no_gain: bool = False  # held-out text fits it no better than the model alone (not flagged weak: see above)


def advise_on_data(card: Mapping) -> DataAdvice:
    """Advice, from a trained switch's card, on whether its training data sufficed.

    Reads ``tokens_train``, ``tokens_heldout``, ``heldout_gain`` (nats per token;
    None without a held-out split) and ``stopped_early``. A card with no training
    record (a switch not made by :func:`train_switch`) gets a plain note.
    """
    if not isinstance(card, Mapping):
        raise ValueError(f"advise_on_data needs a switch's card (switch.card, or its dict); got {type(card).__name__}")
    if card.get("tokens_train") is None:
        return DataAdvice("This switch's card has no training record, so there is no data advice for it.")
    warnings = " ".join(Card.from_dict(card).warnings)
    advice = _advice(card, caveat=bool(warnings))
    if isinstance(repeats := card.get("repeated_texts"), int) and repeats > 0:
        advice = replace(advice, text=f"{advice.text} {_repeats_note(repeats).capitalize()}.")
    return replace(advice, text=f"{advice.text} {warnings}") if warnings else advice


def _reversal(card: Mapping) -> float | None:
    """How much worse held-out text fits with the switch reversed (−W for each label), in nats/token: > 0 means the
    switch points the right way on text it never saw, whatever its gain; None when the card lacks either loss."""
    with_w, reversed_w = card.get("heldout_nll_with_switch"), card.get("heldout_nll_reversed_switch")
    known = all(isinstance(x, (int, float)) and math.isfinite(x) for x in (with_w, reversed_w))
    return float(reversed_w) - float(with_w) if known else None


def _card_kind(card: Mapping) -> str:
    """The card's shape of data (:func:`data_kind`; guessed from the counts on older cards)."""
    return card.get("data_shape") or _older_data_kind(card)


def _more_text(card: Mapping) -> str:
    """What more to train on, for the card's shape of data."""
    kind = _card_kind(card)
    if kind == ONE_DOCUMENT:
        return "Train on a longer document (a few thousand tokens, several pages)"
    if kind == TWO_DOCUMENTS:
        return "Train on longer documents (a few thousand tokens each)"
    return "Add more examples (a few thousand tokens in all: about 100 sentences or more per side)"


def _older_data_kind(card: Mapping) -> str:
    given_negatives = card.get("n_negative") if card.get("negatives") == "given" else 0
    if card.get("n_positive") == 1 and given_negatives in (0, 1):
        return TWO_DOCUMENTS if given_negatives else ONE_DOCUMENT
    return EXAMPLES


def _advice(card: Mapping, caveat: bool = False) -> DataAdvice:
    """The advice proper; ``caveat``: a training warning follows it (a text in a language the model reads poorly, where
    a held-out gain may be the language's own: "Enough data … explains text it never saw" beside "may learn little
    beyond the language itself" contradicted it)."""
    n = int(card["tokens_train"])
    held = int(card.get("tokens_heldout") or 0)
    gain = card.get("heldout_gain")
    gain = float(gain) if isinstance(gain, (int, float)) and math.isfinite(gain) and held else None
    measured = f" (held-out gain {gain:+.3f} nats/token on {held:,} tokens)" if gain is not None else ""
    if n < LITTLE_TEXT_TOKENS:
        return DataAdvice(f"Very little text: {n:,} training tokens{measured}, so the switch mostly memorises these "
                          f"examples. {_more_text(card)} for a reliable switch.", weak=True)
    if gain is None:
        return DataAdvice(f"No held-out split, so whether {n:,} training tokens are enough cannot be measured. Train with a "
                          f"held-out fraction (heldout={TrainConfig().heldout:g}, the default) to check that the switch generalises.")
    reversal = _reversal(card)
    if gain <= 0 and card.get("n_negative") and reversal is not None and reversal >= CLEAR_GAIN:
        return DataAdvice(f"Held-out gain {gain:+.3f} nats/token on {held:,} tokens: on text it never saw, the switch fits "
                          f"no better than the model alone, but it points the right way (reversed, it fits that text "
                          f"{reversal:.3f} nats/token worse). Judge its {n:,} training tokens by what it writes within its "
                          "fluent range.")
    if gain <= 0:
        if card.get("optimizer") in solver.RECIPES:
            sentences = _card_kind(card) == EXAMPLES  # the measured case below
            then = (f"{_more_text(card)}; meanwhile guided decoding with 8 candidates moves generation furthest within the "
                    "fluent range" + (" (a switch from 30 + 30 sentiment sentences: 0.85 positive on test prompts with it, "
                                      "about half without)" if sentences else "") if card.get("n_negative") else
                    "Add more varied text, or for one document try self-contrast negatives (on the command line: train "
                    "--self-contrast); generation may still move in the intended direction")
            return DataAdvice(f"Held-out gain {gain:+.3f} nats/token on {held:,} tokens: the switch explains held-out text no "
                              f"better than the model (its {n:,} training tokens are few or narrow). {then}.", no_gain=True)
        fewer = "a lower learning rate" if card.get("stopped_early") else "fewer steps or a lower learning rate"
        return DataAdvice(f"Held-out gain {gain:+.3f} nats/token on {held:,} tokens: the switch memorised its {n:,} training "
                          f"tokens instead of learning the style. Add more varied text, or train with {fewer}; generation may "
                          "still move in the intended direction.", weak=True)
    if gain < CLEAR_GAIN:
        return DataAdvice(f"Small held-out gain {gain:+.3f} nats/token ({n:,} training, {held:,} held-out tokens): the "
                          "switch generalises a little. More varied text would make it more reliable.")
    if caveat:
        return DataAdvice(f"Held-out gain {gain:+.3f} nats/token on {held:,} held-out tokens ({n:,} training tokens), but "
                          "much of it may come from the text's language rather than its style.")
    return DataAdvice(f"Enough data: held-out gain {gain:+.3f} nats/token on {held:,} held-out tokens ({n:,} training "
                      "tokens), so the switch explains text it never saw.")
