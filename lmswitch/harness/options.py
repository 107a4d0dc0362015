"""The evaluation harness's options, each default written once: the sampling settings of an evaluation
(:class:`Protocol`), its prompt sets (:func:`load_prompts`) and metrics (:data:`METRICS`), the names of the fluent
frontier's and the stance evaluation's methods, and the settings of the shipped switches' build. The harness reads
them here, and so does the command line in its help and in the checks it makes before loading a model, which is why
this module imports no torch.

>>> Protocol(samples=25, max_new_tokens=20)   # the paper's own protocol   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from lmswitch.core.checks import check_seed, is_whole
from lmswitch.core.options import SAMPLING, SamplingOptions, TrainConfig
from lmswitch.io.resources import prompts_dir

# every prompt set, dataset and stance topic list splits in two: even items (0, 2, …) are dev, odd ones test; settings
# are chosen on dev only and reported on test
SPLITS = ("dev", "test")


def check_split(split: str | None, whole: str) -> None:
    """Refuse a ``split`` that is none of :data:`SPLITS` or None (``whole``: what None gives)."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)} or None ({whole}); got {split!r}")


# the metrics an evaluation reports, as figures draw them: key -> (axis title, range or None)
METRICS: dict[str, tuple[str, tuple[float, float] | None]] = {
    "positive_share": ("share positive (vader)", (0, 1)),
    "negative_share": ("share negative (vader)", (0, 1)),
    "mean_sentiment": ("mean vader compound", (-1, 1)),
    "toxicity_prob": ("toxicity probability", (0, 1)),
    "avg_max_toxicity": ("average max toxicity", (0, 1)),
    "mean_toxicity": ("mean toxicity (profanity-check)", (0, 1)),
    "formal_share": ("share formal", (0, 1)),
    "perplexity": ("perplexity (unsteered model)", None),
    "dist3": ("Dist-3", (0, 1)),
    "repetition": ("share of looping samples", (0, 1)),
    "sprinkle": ("share of samples sprinkling one word or mark", (0, 1)),
}
PROMPT_SETS = {"neutral": "neutral.txt", "provocative": "provocative.txt"}


def load_prompts(which: str | Path, limit: int | None = None, split: str | None = None) -> list[str]:
    """A shipped prompt set (``"neutral"``, ``"provocative"``) or a text file with one prompt per line.

    ``split="dev"`` keeps the even lines and ``"test"`` the odd ones (fixed, so nothing
    tuned on dev is reported on test); ``limit`` then keeps the first prompts.
    """
    check_split(split, "every prompt")
    path = prompts_dir() / PROMPT_SETS[which] if which in PROMPT_SETS else Path(which)
    if not path.is_file():
        names = ", ".join(PROMPT_SETS)
        there = f" ({path} is a folder)" if path.is_dir() else ""
        raise ValueError(f"no prompt set {str(which)!r}{there}: give one of {names} or a text file with one prompt per line")
    try:
        prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); give one prompt per line") from None
    if split is not None:
        prompts = prompts[SPLITS.index(split) :: 2]
    if not prompts:
        raise ValueError(f"{path} contains no prompts" + (f" in its {split} split" if split else ""))
    if limit is not None:
        if not is_whole(limit) or limit < 1:
            raise ValueError(f"limit must be a positive integer (the number of prompts kept); got {limit!r}")
        prompts = prompts[:limit]
    return prompts


@dataclass(frozen=True)
class Protocol:
    """Sampling settings of one evaluation (the paper: 25 samples, 20 new tokens, p = 0.9)."""

    samples: int = 5
    max_new_tokens: int = 25
    top_p: float = SAMPLING.top_p
    temperature: float = SAMPLING.temperature
    seed: int = 0
    batch_size: int = 128
    adaptive: bool = SAMPLING.adaptive  # per-token KL cap on the steering (lmswitch.core.adaptive)
    kl_budget: float | None = SAMPLING.kl_budget
    generation_budget: float | None = SAMPLING.generation_budget  # with adaptive: steering per generation (lmswitch.core.budget)
    best_of: int = SAMPLING.best_of  # candidates per sample; the likeliest under the steered model is kept
    guide: int = SAMPLING.guide  # guided decoding's candidates per piece (lmswitch.core.guided)
    repeat_guard: int = SAMPLING.repeat_guard  # steering may not raise each text's last this many tokens (lmswitch.core.guard)
    # score a row from the head inputs its decode recorded where those are the unsteered model's (one head pass); False:
    # every row by a second body pass over prompt and text, as rows that cannot be scored so are (instructed, best of
    # n, guided, activation addition), so that a comparison with such rows scores all of them alike
    score_from_decode: bool = True

    @classmethod
    def from_sampling(cls, options: SamplingOptions, *, samples: int, seed: int) -> Protocol:
        """The protocol that decodes with ``options`` (the inverse of :meth:`sampling`), ``samples`` per prompt from ``seed``."""
        if options.chat:
            raise ValueError("an evaluation continues plain prompts: give options without chat")
        return cls(samples=samples, max_new_tokens=options.max_new_tokens, top_p=options.top_p, temperature=options.temperature,
                   seed=seed, adaptive=options.adaptive, kl_budget=options.kl_budget, generation_budget=options.generation_budget,
                   best_of=options.best_of, guide=options.guide, repeat_guard=options.repeat_guard)

    def sampling(self) -> SamplingOptions:
        """The decoding options of this protocol's generations."""
        return SamplingOptions(self.max_new_tokens, self.temperature, self.top_p, adaptive=self.adaptive, kl_budget=self.kl_budget,
                               generation_budget=self.generation_budget, best_of=self.best_of, guide=self.guide,
                               repeat_guard=self.repeat_guard)

    def validate(self) -> None:
        if not isinstance(self.samples, int) or not 1 <= self.samples <= 100:
            raise ValueError(f"samples must be an integer from 1 to 100; got {self.samples!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer; got {self.batch_size!r}")
        check_seed(self.seed)

    def to_dict(self) -> dict:
        return asdict(self)


PROTOCOL = Protocol()  # the defaults, for signatures and help texts that take the fields one by one


# the fluent frontier's methods by name (lmswitch.harness.frontier.METHODS maps each to its callable, in this order)
BEST_OF = 4  # candidates per sample of the best-of method
GUIDES = (4, 8)  # candidates per piece of the guided methods
FRONTIER_METHODS = ("switch", "switch-unguarded", "switch+adaptive", f"switch+best-of-{BEST_OF}",
                    *(f"switch+guided-{n}" for n in GUIDES), "prompting", "caa")
# the stance evaluation's methods: how each trains its switches (lmswitch.harness.stance)
STANCE_METHODS = {"plain": TrainConfig(), "self-contrast": TrainConfig(self_contrast=True)}

CARD_PROMPTS = 20  # prompts of the card's short evaluation (the first ones of the spec's set)
CARD_SAMPLES = 4  # samples per prompt in the card's short evaluation
BUILD_SEED = 0  # the seed a shipped switch is trained, probed and measured with
