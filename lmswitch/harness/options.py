"""The evaluation harness's options, each default written once: the sampling settings of an evaluation
(:class:`Protocol`), the names of the fluent frontier's and the stance evaluation's methods, and the settings of the
shipped switches' build. The harness reads them here, and so does the command line in its help, which is why this
module imports no torch.

>>> Protocol(samples=25, max_new_tokens=20)   # the paper's own protocol   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lmswitch.core.checks import check_seed
from lmswitch.core.options import SAMPLING, SamplingOptions, TrainConfig

# every prompt set, dataset and stance topic list splits in two: even items (0, 2, …) are dev, odd ones test; settings
# are chosen on dev only and reported on test
SPLITS = ("dev", "test")


def check_split(split: str | None, whole: str) -> None:
    """Refuse a ``split`` that is none of :data:`SPLITS` or None (``whole``: what None gives)."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)} or None ({whole}); got {split!r}")


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
