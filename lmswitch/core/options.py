"""Typed options, each default written once: decoding (:class:`SamplingOptions`) and training (:class:`TrainConfig`).

The CLI, the app, the benchmarks and the report read their defaults from these
classes (``TrainConfig().steps``, ``SAMPLING.top_p``) instead of repeating numbers;
the constants below are the defaults of the engine's other calls (``generate``'s
seed, ``transfer``'s anchors, ...), which those calls' signatures read too. No torch
here: ``lmswitch generate --help`` shows these without loading the library.

>>> cfg = TrainConfig(steps=300, rank=16)     # doctest: +SKIP
>>> train_switch(lm, pos, neg, config=cfg)    # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

from lmswitch.core.checks import check_seed, plain
from lmswitch.core.checks import is_number as _finite
from lmswitch.core.checks import is_whole as _whole

if TYPE_CHECKING:
    import torch

    from lmswitch.core.models import LanguageModel

MAX_STEPS = 100_000
EPS0 = 1e-3  # the ε unit: a slider at 5 is ε = 5 · EPS0, the paper's "5ε0"
DEFAULT_PROMPT = "My weekend was"  # the app's first prompt and the command line's demo prompt
MAX_TEXT_CHARS = 2_000_000  # ~500k tokens; beyond this a text is almost surely not meant for one call
MAX_BEST_OF = 16  # candidates per generation
MAX_GUIDE = 8  # candidates per piece of guided decoding
GUIDE_TOKENS = 5  # guided decoding chooses among its candidates every this many tokens
KL_BUDGET = 1.0  # nats per token; the measurement: Dist-3 0.99 with 74% positive at 1.24× perplexity (core/adaptive.py)
GENERATION_BUDGET = 4.0  # nats of steering per generation (dev frontier, EVALUATION.md "a steering budget per generation")
REPEAT_GUARD = 4  # tokens per row whose logits steering may not raise (0: off); the dev choice, EVALUATION.md (core/guard.py)
MAX_REPEAT_GUARD = 64
RECIPE_NAMES = ("lbfgs-sampled", "lbfgs")  # the L-BFGS recipes of lmswitch.core.solver (its RECIPES maps each to its settings)
LBFGS_MIN_STEPS = 2  # loss evaluations one L-BFGS move takes: the gradient, then a line-search point
OPTIMIZERS = (*RECIPE_NAMES, "adam")  # the L-BFGS recipes, then the paper's Adam steps

# the defaults of the engine's calls that take their settings one by one
SEED = 0  # generate's and sweep's first seed (sample k of a prompt uses SEED + k)
SAMPLES = 1  # generate's texts per prompt
DESCRIPTION = ""  # train_switch's description of the switch
POSITIVE_LABEL = "positive"  # train_switch: what +ε moves toward
NEGATIVE_LABEL = "negative"  # train_switch: what -ε moves toward


@dataclass(frozen=True)
class Naming:
    """What a trained switch is called where its caller names nothing: its two directions and its description."""

    positive_label: str = POSITIVE_LABEL
    negative_label: str = NEGATIVE_LABEL
    description: str = DESCRIPTION


# the shapes of training data (core.train.data_kind; a card's data_shape): one document alone, two documents (A vs B),
# labelled examples
ONE_DOCUMENT, TWO_DOCUMENTS, EXAMPLES = "one document", "two documents", "examples"
# train_switch's naming by the shape of its data; a description's {positive} and {negative} are the labels the switch gets
NAMINGS = {EXAMPLES: Naming(description="learned from labelled examples"),
           ONE_DOCUMENT: Naming("like the document", "unlike the document", "learned from one document"),
           TWO_DOCUMENTS: Naming("document A", "document B", "{positive} (+) vs {negative} (−)")}
ANCHORS = 4000  # transfer: shared word tokens the map is fitted on (at most)
MIN_ANCHORS = 200  # transfer: fewer shared words than this and no map is fitted
HELDOUT_EVERY = 10  # every 10th anchor is held out to report the fit quality
EXPORT_FORMAT = "peft"  # export's default: a LoRA adapter on the output head
EXPORT_FORMATS = (EXPORT_FORMAT, "merged", "gguf", "gguf-lora")  # the last two: lmswitch/core/export_gguf.py


def check_anchors(anchors: int, min_anchors: int, names: tuple[str, str] = ("anchors", "min_anchors")) -> None:
    """Refuse an anchor count that leaves none held out to measure the map's fit, or fewer than ``min_anchors`` (a map
    fitted on fewer words than a reliable one needs); ``names``: the two settings as the caller's user knows them."""
    for value, name, least in ((anchors, names[0], HELDOUT_EVERY), (min_anchors, names[1], 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an integer ≥ {least}"
                             f"{' (one in ten is held out to measure the fit)' if least == HELDOUT_EVERY else ''}; got {value!r}")
    if anchors < min_anchors:
        raise ValueError(f"{names[0]} {anchors} is below {names[1]} {min_anchors}: the map would be fitted on fewer shared "
                         f"words than a reliable one needs; raise {names[0]}, or lower {names[1]} at your own risk")


def _plain_fields(options: object) -> None:
    """A frozen dataclass's NumPy scalars as Python's, so the cards and results that hold them stay JSON."""
    for f in fields(options):
        object.__setattr__(options, f.name, plain(getattr(options, f.name)))


@dataclass(frozen=True)
class SamplingOptions:
    """Decoding settings shared by every row of one call."""

    max_new_tokens: int = field(default=40, metadata={"help": "tokens to generate after the prompt"})
    temperature: float = field(default=1.0, metadata={"help": "softmax temperature; 0 means greedy"})
    top_p: float = field(default=0.9, metadata={"help": "nucleus sampling mass, in [0, 1] (0: the most likely token only)"})
    chat: bool = field(default=False, metadata={"help": "wrap the prompt in the model's chat template (instruct models)"})
    adaptive: bool = field(default=False, metadata={
        "help": "adaptive strength: steer each generation only until its steering budget is spent (generation_budget), "
                "and, with kl_budget, cap every token's KL(steered ‖ unsteered)"})
    kl_budget: float | None = field(default=None, metadata={
        "help": f"with adaptive: the most KL(steered ‖ unsteered) per token, in nats (None: no per-token cap; {KL_BUDGET:g} "
                "was the issue's first measurement)"})
    generation_budget: float | None = field(default=GENERATION_BUDGET, metadata={
        "help": "with adaptive: nats of steering per generation; a row is steered until the log-likelihood ratio "
                "(steered vs unsteered) of its sampled tokens reaches it, then not (None: no such budget)"})
    best_of: int = field(default=1, metadata={
        "help": "sample this many candidates of each generation and keep the one the (steered) model finds most likely "
                "per token, as OpenAI's best_of; costs that many rows of decoding (1: today's single sample)"})
    guide: int = field(default=1, metadata={
        "help": f"guided decoding: every {GUIDE_TOKENS} tokens, sample this many candidate continuations and keep the one "
                "the steering switches' judges (classifiers of their two styles) place furthest the way ε points; with 4, "
                "about 1.8× the time of plain decoding on 2 CPU cores, 2.2× with 8 (benchmarks/RESULTS.md; 1: off)"})
    repeat_guard: int = field(default=REPEAT_GUARD, metadata={
        "help": "steering never raises the logit of a token among each text's last this many tokens, the cause of word "
                "loops; the rest of the steered distribution is unchanged (lmswitch.core.guard; 0: off, the paper's "
                "plain steering)"})

    def __post_init__(self) -> None:
        _plain_fields(self)

    def validate(self, lm: LanguageModel | None = None) -> None:
        """Refuse settings that make no sense; without ``lm``, all but the model's part (its context length, a chat
        template), so that the command line refuses them before it loads the model."""
        top = lm.context_length - 1 if lm is not None else None
        if not _whole(self.max_new_tokens) or self.max_new_tokens < 1 or (top is not None and self.max_new_tokens > top):
            most = top or "the model's context length − 1"
            raise ValueError(f"max_new_tokens must be an integer from 1 to {most}; got {self.max_new_tokens!r}")
        if not (_finite(self.temperature) and 0 <= self.temperature <= 100):
            raise ValueError(f"temperature must be a number from 0 (greedy) to 100; got {self.temperature!r}")
        if not (_finite(self.top_p) and 0 <= self.top_p <= 1):
            raise ValueError(f"top_p must be a number from 0 to 1; got {self.top_p!r}")
        for flag in ("chat", "adaptive"):  # ("no" is truthy: it would switch the option on)
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False; got {getattr(self, flag)!r}")
        if self.kl_budget is not None and not (_finite(self.kl_budget) and self.kl_budget > 0):
            raise ValueError(f"kl_budget must be a positive number of nats per token, or None; got {self.kl_budget!r}")
        if self.kl_budget is not None and not self.adaptive:  # it would change nothing: say so, not ignore it
            raise ValueError("kl_budget caps adaptive strength's steering per token: give it with adaptive=True "
                             "(--adaptive), or leave it out")
        if self.generation_budget is not None and not (_finite(self.generation_budget) and self.generation_budget > 0):
            raise ValueError(f"generation_budget must be a positive number of nats per generation, or None; "
                             f"got {self.generation_budget!r}")
        if self.generation_budget not in (GENERATION_BUDGET, None) and not self.adaptive:  # another budget, unused
            raise ValueError(f"generation_budget caps adaptive strength's steering per generation: give {self.generation_budget:g} "
                             "with adaptive=True (--adaptive), or leave it out")
        if not _whole(self.best_of) or not 1 <= self.best_of <= MAX_BEST_OF:
            raise ValueError(f"best_of must be an integer from 1 to {MAX_BEST_OF}; got {self.best_of!r}")
        if self.best_of > 1 and self.temperature == 0:
            raise ValueError("best_of > 1 needs sampling (temperature > 0): greedy decoding gives every candidate the same text")
        if not _whole(self.guide) or not 1 <= self.guide <= MAX_GUIDE:
            raise ValueError(f"guide must be an integer from 1 (off) to {MAX_GUIDE}; got {self.guide!r}")
        if self.guide > 1 and (self.temperature == 0 or self.best_of > 1 or self.adaptive):
            raise ValueError("guided decoding (guide > 1) needs sampling (temperature > 0) and goes without best_of and "
                             "adaptive strength: choose one of them")
        if not _whole(self.repeat_guard) or not 0 <= self.repeat_guard <= MAX_REPEAT_GUARD:
            raise ValueError(f"repeat_guard must be an integer from 0 (off) to {MAX_REPEAT_GUARD} tokens; got {self.repeat_guard!r}")
        if lm is not None and self.chat and not lm.has_chat_template:
            raise ValueError(f"model '{lm.name}' has no chat template; generate without chat=True")

    @property
    def budget(self) -> float | None:
        """The per-token KL cap the steering hook applies: ``kl_budget`` with ``adaptive``, else None (no cap)."""
        return self.kl_budget if self.adaptive else None

    @property
    def per_generation(self) -> float | None:
        """The steering budget per generation the decode keeps: ``generation_budget`` with ``adaptive``, else None."""
        return self.generation_budget if self.adaptive else None

    @property
    def candidates(self) -> int:
        """Rows decoded per generation: best of n and guided decoding choose among ``n`` candidates (1: neither)."""
        return self.best_of * self.guide

    def to_dict(self) -> dict:
        return asdict(self)


SAMPLING = SamplingOptions()  # the defaults, for signatures that take the fields one by one


@dataclass(frozen=True)
class TrainConfig:
    """How :func:`~lmswitch.core.train.train_switch` optimises a switch (paper appendix D, with early stopping)."""

    optimizer: str = field(default="lbfgs-sampled", metadata={
        "help": "'lbfgs-sampled': full-batch L-BFGS on each token's likely next words and 16 words drawn from the rest of "
                "the vocabulary, along a ridge path, λ chosen on held-out text (fast; Adam's settings, such as the learning "
                "rate and L2 penalty, do not apply); 'lbfgs': the first release of it (the rest of the vocabulary as one "
                "bound, taken again at each λ: slower; the shipped sentiment switch's); 'adam': the paper's Adam steps"})
    self_contrast: bool = field(default=False, metadata={
        "help": "add the model's own continuations of the texts' sentence openings as negatives (label -1 for one document, "
                "0 beside given negatives), so the switch learns what the text does differently, not its topic"})
    steps: int = field(default=200, metadata={"help": "maximum optimiser steps (lbfgs: loss evaluations; its "
                                                       "ridge path usually ends sooner)"})
    lr: float = field(default=1e-2, metadata={"help": "Adam learning rate (paper: 1e-2)"})
    eps0: float = field(default=EPS0, metadata={"help": "the ε unit the switch is fitted at (paper: 1e-3)"})
    l2: float = field(default=0.0, metadata={"help": "L2 penalty on ε0·W (and the dummy matrix)"})
    heldout: float = field(default=0.15, metadata={"help": "fraction of texts (or token blocks) held out for early stopping"})
    batch_tokens: int = field(default=256, metadata={"help": "tokens per optimiser step"})
    eval_every: int = field(default=10, metadata={"help": "steps between held-out evaluations"})
    patience: int = field(default=4, metadata={"help": "evaluations without improvement before stopping"})
    min_steps: int | None = field(default=None, metadata={"help": "steps before early stopping may act (None: half of steps)"})
    chunk_tokens: int = field(default=512, metadata={"help": "tokens per chunk when a long document is encoded"})
    seed: int = field(default=0, metadata={"help": "seed of the held-out split and the batches"})
    rank: int | None = field(default=None, metadata={"help": "keep only the top singular directions of W (None: full rank)"})
    neutral_kl: float = field(default=0.0, metadata={
        "help": "weight of the mean KL(unsteered ‖ steered) over neutral reference text at ±target_eps: keeps the change small "
                "where the model is sure of the next word (0: off)"})
    constant_penalty: float = field(default=0.0, metadata={
        "help": "weight of the squared context-independent logit change at target_eps (the fixed word bonus; 0: off)"})
    target_eps: float = field(default=8.0, metadata={"help": "the strength (ε units) the two fluency terms are measured at"})
    matmul_dtype: torch.dtype | None = field(
        default=None, metadata={"help": "dtype of the head matmuls in training (None: bfloat16 where the hardware is fast at it, else float32)"})

    def __post_init__(self) -> None:
        _plain_fields(self)

    def validate(self, hidden_size: int) -> None:
        """Raise a ValueError that names the bad field and its allowed range."""
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {self.optimizer!r}")
        if self.optimizer != "adam" and self.fluency_terms:
            raise ValueError("the fluency terms (neutral_kl, constant_penalty) train with optimizer='adam' only")
        if not _whole(self.steps) or not 1 <= self.steps <= MAX_STEPS:
            raise ValueError(f"steps must be an integer from 1 to {MAX_STEPS}; got {self.steps!r}")
        if self.optimizer != "adam" and self.steps < LBFGS_MIN_STEPS:
            raise ValueError(f"steps must be at least {LBFGS_MIN_STEPS} for L-BFGS training (a step is a loss evaluation, "
                             f"and a move takes a gradient and a point along it); got {self.steps!r}")
        for label, value, lo, hi in (("lr", self.lr, 0, 1), ("eps0", self.eps0, 0, 1), ("l2", self.l2, -1e-12, 1e6)):
            if not (_finite(value) and lo < value <= hi):
                raise ValueError(f"{label} must be a finite number in ({lo:g}, {hi:g}]; got {value!r}")
        for label, value in (("neutral_kl", self.neutral_kl), ("constant_penalty", self.constant_penalty)):
            if not (_finite(value) and 0 <= value <= 1e6):
                raise ValueError(f"{label} must be a finite number in [0, 1e6]; got {value!r}")
        if not (_finite(self.target_eps) and 0 < self.target_eps <= 1000):
            raise ValueError(f"target_eps must be a finite number in (0, 1000]; got {self.target_eps!r}")
        if self.rank is not None and (not _whole(self.rank) or not 1 <= self.rank <= hidden_size):
            raise ValueError(f"rank must be an integer from 1 to the hidden size {hidden_size}; got {self.rank!r}")
        if not (_finite(self.heldout) and 0 <= self.heldout < 0.5):
            raise ValueError(f"heldout must be a fraction in [0, 0.5); got {self.heldout!r}")
        if not _whole(self.batch_tokens) or self.batch_tokens < 16:
            raise ValueError(f"batch_tokens must be an integer ≥ 16; got {self.batch_tokens!r}")
        for label, value in (("eval_every", self.eval_every), ("patience", self.patience), ("chunk_tokens", self.chunk_tokens)):
            if not _whole(value) or value < 1:
                raise ValueError(f"{label} must be a positive integer; got {value!r}")
        check_seed(self.seed)
        if not _whole(self.warmup) or not 0 <= self.warmup <= self.steps:
            raise ValueError(f"min_steps must be an integer from 0 to steps ({self.steps}); got {self.min_steps!r}")

    @property
    def warmup(self) -> int:
        """Steps before held-out early stopping may act."""
        return self.steps // 2 if self.min_steps is None else self.min_steps

    @property
    def fluency_terms(self) -> dict[str, float]:
        """The fluency terms that are on, with their strength (empty: the paper's objective alone)."""
        if not (self.neutral_kl or self.constant_penalty):
            return {}
        return {"neutral_kl": self.neutral_kl, "constant_penalty": self.constant_penalty, "target_eps": self.target_eps}

    def to_dict(self) -> dict:
        data = asdict(self)
        data["matmul_dtype"] = "auto" if self.matmul_dtype is None else str(self.matmul_dtype).removeprefix("torch.")
        return data
