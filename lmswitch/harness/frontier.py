"""The fluent frontier: the strongest effect each method reaches while its text still reads as text.

Protocol (issue "fluent steering"): every prompt set is split into dev and test
(:data:`~lmswitch.harness.options.SPLITS`). For each method and each direction,
strengths are swept on the **dev** prompts; a setting is *fluent* when its
perplexity under the unsteered model stays within a bound (1.5×, detox 1.3×), its
Dist-3 keeps 95% of the unsteered Dist-3 and at most 2% of its samples repeat a
word three times in a row. The strongest fluent dev setting is then evaluated on
the **test** prompts, which nothing was tuned on, next to the unsteered model with
the same seeds. A method with no fluent setting says so: a strength reached
through repetition is a miss.

Methods are small callables chosen by name (:data:`METHODS`): the switch as
trained (decoded with the repeat guard, the default), the switch without it (the
paper's plain steering: the like-for-like comparison with the baselines, which have
no guard, since the loop rule counts what the guard removes), the switch with adaptive strength (a steering budget per generation), the
switch with the likeliest of 4 candidates per sample (best of n), prompting the
instruct model through its chat template, and activation addition (CAA) fitted on
the switch's own training pairs (:mod:`lmswitch.harness.baselines`).

>>> result = run_frontier(lm, sentiment, FrontierSpec.for_switch("sentiment"))   # doctest: +SKIP
>>> result.rows[0].test.positive_share                                           # doctest: +SKIP
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial

from lmswitch.core.card import Card
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SAMPLING
from lmswitch.core.switch import Switch, check_switch
from lmswitch.harness.baselines import ActivationAddition, added, fit_activation_addition
from lmswitch.harness.datasets import load_dataset
from lmswitch.harness.evaluate import PROTOCOL, Check, Evaluation, Protocol, evaluate_settings
from lmswitch.harness.options import BEST_OF, FRONTIER_METHODS, GUIDES, load_prompts


@dataclass(frozen=True)
class FluencyRules:
    """When a setting still reads as text, compared with the unsteered model on the same prompts and seeds."""

    perplexity_ratio: float = 1.5  # at most this × the unsteered perplexity
    dist3_ratio: float = 0.95  # at least this × the unsteered Dist-3
    max_repetition: float = 0.02  # at most this share of samples with a word three times in a row
    # at most this share of samples more than unsteered that write one content token three times or more (the
    # formality switch's "a mission's expedition's hours's" at its casual end, detox's "so; but; would they;" at +4,
    # which perplexity does not see), and never fewer than two extra samples: one is noise on a short probe. Chosen on
    # dev (30 prompts × 5, every whole ε of the sliders of 2026-11-28): at 25 tokens sentiment stays within +1.3 points,
    # detox within +4.0 (at +4), formality rises +8.7 at −4 and +18 at −6; at 40 tokens (the app's length, the unsteered
    # model at 8–11% itself) sentiment stays within +2.0, detox rises +14.7 at +4 (";"), formality +8.0 at −3
    max_sprinkle_rise: float = 0.05

    @property
    def text(self) -> str:
        """The rules as people read them, against the unsteered rows."""
        return (f"perplexity ≤ {self.perplexity_ratio:g}×, Dist-3 ≥ {self.dist3_ratio:g}×, ≤ {self.max_repetition:.0%} looping "
                f"samples, ≤ +{100 * self.max_sprinkle_rise:g} points of samples sprinkling one word or mark")

    def problems(self, ev: Evaluation, base: Evaluation) -> list[str]:
        """What keeps ``ev`` from being fluent (empty when it is)."""
        out = []
        if ev.perplexity > self.perplexity_ratio * base.perplexity:
            out.append(f"perplexity {ev.perplexity / base.perplexity:.2f}× > {self.perplexity_ratio:g}×")
        if ev.dist3 < self.dist3_ratio * base.dist3:
            out.append(f"Dist-3 {ev.dist3 / base.dist3:.2f}× < {self.dist3_ratio:g}×")
        if ev.repetition > self.max_repetition:
            out.append(f"{100 * ev.repetition:.3g}% of samples loop")  # 2 of 80 reads 2.5%, not the rule's 2%
        extra = ev.sprinkle - base.sprinkle
        if extra > self.max_sprinkle_rise and extra * ev.prompts * ev.samples > 1.5:
            out.append(f"{100 * ev.sprinkle:.3g}% of samples sprinkle one word or mark (unsteered {100 * base.sprinkle:.3g}%; "
                       f"at most +{100 * self.max_sprinkle_rise:g} points)")
        return out


@dataclass(frozen=True)
class FrontierSpec:
    """What one switch is judged by: its prompt set, its metric and wanted direction per side, the rules and the strengths."""

    switch: str
    prompts: str  # "neutral" or "provocative"
    metric: str  # an Evaluation field
    sides: tuple[int, ...]  # +1: positive ε; -1: negative ε
    want: int  # +1: positive ε should raise the metric; -1: lower it
    rules: FluencyRules = FluencyRules()
    strengths: tuple[float, ...] = (2.0, 4.0, 6.0, 8.0, 12.0, 16.0)  # |ε| swept on dev
    dataset: str = ""  # the style dataset the switch (and the activation-addition baseline) is trained on ("": its name)

    @classmethod
    def for_switch(cls, name: str) -> FrontierSpec:
        """The spec of a shipped switch (sentiment, detox, formality)."""
        if name not in SPECS:
            raise ValueError(f"no frontier spec for '{name}'; known: {', '.join(SPECS)}")
        return SPECS[name]


SPECS = {
    "sentiment": FrontierSpec("sentiment", "neutral", "positive_share", (+1, -1), +1, dataset="sentiment"),
    "detox": FrontierSpec("detox", "provocative", "toxicity_prob", (+1,), -1, FluencyRules(perplexity_ratio=1.3), dataset="toxicity"),
    "formality": FrontierSpec("formality", "neutral", "formal_share", (+1, -1), +1, dataset="formality"),
}

# instructions of the prompting baseline, weakest first; {label} is the switch's label of that side
INSTRUCTIONS = ("Continue the text in a slightly {label} tone.", "Continue the text in a {label} tone.",
                "Continue the text in a very {label} tone.")

# (model, switch, side ±1, prompts, protocol, |ε| values) → (strength, evaluation) per strength, weakest first
Method = Callable[[LanguageModel, Switch, int, Sequence[str], Protocol, Sequence[float]], list[tuple[float, Evaluation]]]


def _switch(**decoding) -> Method:
    """The switch itself, decoded with ``decoding`` changes to the protocol (adaptive strength, best of n, guided)."""
    def run(lm: LanguageModel, switch: Switch, side: int, prompts: Sequence[str], protocol: Protocol,
            strengths: Sequence[float]) -> list[tuple[float, Evaluation]]:
        eps = [side * s for s in strengths]
        evals = evaluate_settings(lm, [[(switch, e)] for e in eps], prompts, replace(protocol, **decoding))
        return list(zip(eps, evals, strict=True))

    return run


def _prompting(lm: LanguageModel, switch: Switch, side: int, prompts: Sequence[str], protocol: Protocol,
               strengths: Sequence[float]) -> list[tuple[float, Evaluation]]:
    """Instructions of growing strength: level k is ``INSTRUCTIONS[k - 1]`` (ε values do not apply)."""
    label = switch.positive_label if side > 0 else switch.negative_label
    instructions = [INSTRUCTIONS[int(level) - 1].format(label=label) for level in strengths]
    evals = evaluate_settings(lm, [[]] * len(instructions), prompts, protocol, instructions=instructions)
    return list(zip(map(float, strengths), evals, strict=True))


@lru_cache(maxsize=8)
def _caa_vector(lm: LanguageModel, dataset: str) -> ActivationAddition:
    return fit_activation_addition(lm, *load_dataset(dataset).train())


def _caa(lm: LanguageModel, switch: Switch, side: int, prompts: Sequence[str], protocol: Protocol,
         strengths: Sequence[float]) -> list[tuple[float, Evaluation]]:
    """Activation addition fitted on the same training pairs as the switch; strengths are multiples α of its vector."""
    spec = SPECS.get(switch.name)
    addition = _caa_vector(lm, spec.dataset if spec is not None else switch.name)
    out = []
    for alpha in (side * s for s in strengths):
        ev = evaluate_settings(lm, [[]], prompts, protocol, during=partial(added, lm, addition, alpha))[0]
        out.append((alpha, ev))
    return out


METHODS: dict[str, Method] = {"switch": _switch(), "switch-unguarded": _switch(repeat_guard=0),
                              "switch+adaptive": _switch(adaptive=True),
                              f"switch+best-of-{BEST_OF}": _switch(best_of=BEST_OF),
                              **{f"switch+guided-{n}": _switch(guide=n) for n in GUIDES},
                              "prompting": _prompting, "caa": _caa}
if tuple(METHODS) != FRONTIER_METHODS:  # checked at import, also under python -O
    raise RuntimeError("name each method in lmswitch.harness.options.FRONTIER_METHODS too (the CLI reads them there)")
ADAPTIVE_METHODS = ("switch+adaptive",)  # the methods that decode with adaptive strength, and so read the protocol's budgets
DECODE_SCORED = ("switch", "switch-unguarded", "switch+adaptive")  # methods whose rows are scored from their decode (Protocol.score_from_decode)
LEVELS = tuple(float(k) for k in range(1, len(INSTRUCTIONS) + 1))  # the prompting baseline's strengths
CAA_STRENGTHS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)  # |α| swept for activation addition, multiples of its mean-difference vector


@dataclass(frozen=True)
class FrontierRow:
    """One method on one side: the dev sweep, the fluent choice, and that choice on the test prompts."""

    method: str
    side: int
    dev: list[tuple[float, Evaluation]]  # (strength, evaluation) on dev
    dev_base: Evaluation
    choice: float | None  # the strongest fluent dev strength (None: none was fluent)
    test: Evaluation | None
    test_base: Evaluation | None
    test_problems: list[str] = field(default_factory=list)  # fluency rules the choice breaks on test

    def to_dict(self, metric: str) -> dict:
        def point(s: float, ev: Evaluation, base: Evaluation) -> dict:
            return {"strength": s, metric: getattr(ev, metric), "perplexity_ratio": ev.perplexity / base.perplexity,
                    "dist3_ratio": ev.dist3 / base.dist3 if base.dist3 else None, "repetition": ev.repetition,
                    "sprinkle": ev.sprinkle}

        return {"method": self.method, "side": self.side, "choice": self.choice,
                "dev": [point(s, ev, self.dev_base) for s, ev in self.dev],
                "test": point(self.choice, self.test, self.test_base) if self.test is not None else None,
                "test_fluent": self.test is not None and not self.test_problems, "test_problems": self.test_problems,
                "test_samples": [t.to_dict() for t in self.test.texts[:4]] if self.test is not None else []}


@dataclass(frozen=True)
class Frontier:
    """The frontier of one switch: one row per method and side."""

    spec: FrontierSpec
    protocol: Protocol
    dev_prompts: int
    test_prompts: int
    rows: list[FrontierRow]

    def to_dict(self) -> dict:
        return {"switch": self.spec.switch, "metric": self.spec.metric, "prompts": self.spec.prompts,
                "rules": vars(self.spec.rules), "protocol": self.protocol.to_dict(), "dev_prompts": self.dev_prompts,
                "test_prompts": self.test_prompts, "rows": [r.to_dict(self.spec.metric) for r in self.rows]}


def _best(spec: FrontierSpec, side: int, dev: list[tuple[float, Evaluation]], base: Evaluation) -> float | None:
    """The fluent dev strength with the strongest effect in the wanted direction, or None."""
    fluent = [(s, ev) for s, ev in dev if not spec.rules.problems(ev, base)]
    if not fluent:
        return None
    sign = spec.want * side
    return max(fluent, key=lambda item: (sign * getattr(item[1], spec.metric), -abs(item[0])))[0]


def _strengths(spec: FrontierSpec, method: str) -> tuple[float, ...]:
    return {"prompting": LEVELS, "caa": CAA_STRENGTHS}.get(method, spec.strengths)


@dataclass(frozen=True)
class _Split:
    """One split's prompts and its unsteered evaluation, the yardstick of its rows."""

    prompts: list[str]
    base: Evaluation


def _row(lm: LanguageModel, switch: Switch, spec: FrontierSpec, method: str, side: int, dev: _Split, test: _Split,
         protocol: Protocol) -> FrontierRow:
    swept = METHODS[method](lm, switch, side, dev.prompts, protocol, _strengths(spec, method))
    choice = _best(spec, side, swept, dev.base)
    if choice is None:
        return FrontierRow(method, side, swept, dev.base, None, None, None)
    chosen = METHODS[method](lm, switch, side, test.prompts, protocol, [abs(choice)])[0][1]  # the dev choice, on test
    return FrontierRow(method, side, swept, dev.base, choice, chosen, test.base, spec.rules.problems(chosen, test.base))


def run_frontier(lm: LanguageModel, switch: Switch, spec: FrontierSpec, *, methods: Sequence[str] = tuple(METHODS),
                 protocol: Protocol = PROTOCOL, dev_limit: int | None = None, test_limit: int | None = None,
                 log: Callable[[str], None] | None = None) -> Frontier:
    """Sweep every method on the dev prompts, pick its strongest fluent setting per side, and report it on the test prompts.

    With a method beyond :data:`DECODE_SCORED` every row, the unsteered ones included, is scored by a body pass
    (``Protocol.score_from_decode`` off), so that all the rows compared are scored alike. The protocol's budgets
    (``kl_budget``, ``generation_budget``) go to the rows that turn adaptive strength on (:data:`ADAPTIVE_METHODS`)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    switch.check_model(lm)
    if not set(methods) <= set(DECODE_SCORED):  # rows compared with each other are scored alike (by a body pass)
        protocol = replace(protocol, score_from_decode=False)
    prompts = load_prompts(spec.prompts, dev_limit, split="dev"), load_prompts(spec.prompts, test_limit, split="test")
    plain = protocol if protocol.adaptive else replace(protocol, kl_budget=None, generation_budget=SAMPLING.generation_budget)
    dev, test = (_Split(p, evaluate_settings(lm, [[]], p, plain)[0]) for p in prompts)  # (both read before any work)
    rows = []
    for method in methods:
        for side in spec.sides:
            rows.append(_row(lm, switch, spec, method, side, dev, test, protocol if method in ADAPTIVE_METHODS else plain))
            if log:
                log(f"{spec.switch}: {method} at {'+' if side > 0 else '−'}ε done")
    return Frontier(spec, protocol, len(dev.prompts), len(test.prompts), rows)



# --- the app's default slider range on the test prompts ------------------------------------------------


@dataclass(frozen=True)
class SliderCheck:
    """Every whole ε in a switch's default slider range (:meth:`Switch.slider_range`), scored on the test prompts."""

    switch: str
    low: float
    high: float
    points: list[tuple[float, Evaluation]]
    base: Evaluation
    rules: FluencyRules

    def looping(self) -> list[float]:
        """The positions where more samples loop than the rules allow (a word three times in a row)."""
        return [eps for eps, ev in self.points if ev.repetition > self.rules.max_repetition]

    def to_dict(self) -> dict:
        return {"switch": self.switch, "range": [self.low, self.high], "looping": self.looping(),
                "points": [{"eps": eps, "repetition": ev.repetition, "sprinkle": ev.sprinkle, "perplexity_ratio": ev.perplexity / self.base.perplexity,
                            "problems": self.rules.problems(ev, self.base)} for eps, ev in self.points]}

    def markdown(self) -> str:
        loops = self.looping()
        worst = max(self.points, key=lambda item: item[1].repetition)
        verdict = (f"no position loops (most: {worst[1].repetition:.0%} of samples at {worst[0]:+g})" if not loops
                   else f"**loops at {', '.join(f'{e:+g}' for e in loops)}**")
        other = sorted({p for _, ev in self.points for p in self.rules.problems(ev, self.base) if "loop" not in p})
        return (f"- `{self.switch}` slider {self.low:+g} … {self.high:+g} ({len(self.points)} whole-ε positions): {verdict}"
                + (f"; other rules broken somewhere: {'; '.join(other)}" if other else "") + "\n")


def check_sliders(lm: LanguageModel, switch: Switch, spec: FrontierSpec, protocol: Protocol = PROTOCOL,
                  test_limit: int | None = None) -> SliderCheck:
    """Score every whole ε of ``switch``'s default slider range on the test prompts (0 excluded: it is the base model)."""
    low, high = switch.slider_range()
    eps = [float(e) for e in range(int(low), int(high) + 1) if e != 0]
    prompts = load_prompts(spec.prompts, test_limit, split="test")
    base, *evals = evaluate_settings(lm, [[]] + [[(switch, e)] for e in eps], prompts, protocol)
    return SliderCheck(spec.switch, low, high, list(zip(eps, evals, strict=True)), base, spec.rules)


# --- targets and the report section ---------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A test-set target of one switch on one side, met only by a setting that is fluent on test."""

    switch: str
    side: int
    text: str
    passes: Callable[[Evaluation, Evaluation], bool]  # (chosen setting on test, unsteered on test) → reached


TARGETS = (
    Target("sentiment", +1, "≥ 90% positive at +ε, fluent", lambda ev, base: ev.positive_share >= 0.9),
    Target("sentiment", -1, "≤ 10% positive at −ε, fluent", lambda ev, base: ev.positive_share <= 0.1),
    Target("detox", +1, "toxicity probability ≤ 1/3 of unsteered at ≤ 1.3× perplexity",
           lambda ev, base: ev.toxicity_prob <= base.toxicity_prob / 3),
    Target("formality", +1, "≥ 90% judged formal at +ε, fluent", lambda ev, base: ev.formal_share >= 0.9),
)
SWITCH_METHODS = tuple(m for m in METHODS if m.startswith("switch"))  # the product's own methods; the others are baselines


def target_checks(frontier: Frontier) -> list[Check]:
    """Each target of this switch against the best measured on test by the switch's own methods."""
    out = []
    for target in (t for t in TARGETS if t.switch == frontier.spec.switch and t.side in frontier.spec.sides):  # a side not run is not a miss
        rows = [r for r in frontier.rows if r.side == target.side and r.method in SWITCH_METHODS and r.test is not None]
        fluent = [r for r in rows if not r.test_problems]
        met = any(target.passes(r.test, r.test_base) for r in fluent)
        shown = ", ".join(f"{r.method} ε {r.choice:+g}: {frontier.spec.metric} {getattr(r.test, frontier.spec.metric):.2f}"
                          + (f" (not fluent on test: {'; '.join(r.test_problems)})" if r.test_problems else "") for r in rows)
        out.append(Check(f"{target.switch}: {target.text}", shown or "no fluent setting on dev", met))
    return out


def _cell(row: FrontierRow, spec: FrontierSpec) -> list[str]:
    metric = spec.metric
    if row.choice is None:
        best = max(row.dev, key=lambda item: getattr(item[1], metric) * row.side * spec.want)
        return ["none fluent", "–", "–", "–", "–", f"(strongest dev point {best[0]:+g}: {'; '.join(spec.rules.problems(best[1], row.dev_base))})"]
    ev, base = row.test, row.test_base
    return [f"{row.choice:+g}", f"{getattr(ev, metric):.2f} (unsteered {getattr(base, metric):.2f})", f"{ev.perplexity / base.perplexity:.2f}×",
            f"{ev.dist3 / base.dist3:.2f}×", f"{ev.repetition:.0%}", "fluent" if not row.test_problems else "; ".join(row.test_problems)]


def markdown(frontier: Frontier) -> str:
    """The table of one switch's frontier: per method and side, the dev choice and its test numbers."""
    spec = frontier.spec
    head = (f"### {spec.switch} ({spec.metric}, {spec.prompts} prompts: {frontier.dev_prompts} dev / {frontier.test_prompts} test, "
            f"{frontier.protocol.samples} samples each; fluent = {spec.rules.text})\n\n"
            f"| method | side | chosen on dev | {spec.metric} on test | perplexity | Dist-3 | looping | on test |\n|---|---|---|---|---|---|---|---|")
    lines = [head] + [f"| {r.method} | {'+' if r.side > 0 else '−'} | " + " | ".join(_cell(r, spec)) + " |" for r in frontier.rows]
    lines += ["", *(check.bullet() for check in target_checks(frontier))]
    return "\n".join(lines) + "\n"


# --- calibrated strength: the fluent range of a freshly trained switch ------------------------------------------


PROBE_SPLIT = "dev"  # a fluency probe never reads the test prompts, which reports are made on


@dataclass(frozen=True)
class Probe:
    """A quick fluency probe at the end of training: a few dev prompts, samples as long as the app writes, a coarse ε
    grid."""

    prompts: int = 4
    samples: int = 2
    # the length the app and the command line write (16 before: a 30 + 30 sentence sentiment switch probed fluent to −4,
    # which reads 1.75× perplexity in 40-token samples on the test prompts; at 40 tokens the probe finds −2, as test does)
    max_new_tokens: int = SAMPLING.max_new_tokens
    strengths: tuple[float, ...] = (2.0, 4.0, 6.0, 9.0, 12.0, 16.0)
    # where a side breaks the rules at the first strength, these are probed on it instead (a strong switch, e.g. one
    # trained on thousands of tokens at a weak ridge, can be fluent at ε 1 and not at 2: its slider still gets that side)
    inner: tuple[float, ...] = (0.5, 1.0)
    rules: FluencyRules = FluencyRules()
    prompt_set: str = "neutral"
    # the recommended ε as a share of the positive fluent limit: a few prompts' limit is noisy, so it is recommended from
    # inside (chosen on dev: the 30 + 30 sentence sentiment switch's probe limit +2 reads 1.46× perplexity on the 50 dev
    # prompts × 5, at the rule's edge; +1.5 reads 1.24×)
    recommend: float = 0.75

    @property
    def record(self) -> dict:
        """What a card keeps of the probe that measured its fluent range (:meth:`Card.calibrated`)."""
        return {"prompt_set": self.prompt_set, "split": PROBE_SPLIT, "prompts": self.prompts, "samples": self.samples,
                "max_new_tokens": self.max_new_tokens}


# A transferred switch is probed on twice the prompts: its card's ε was only scaled from the source model's, so the probe
# alone says where it reads well on the target. Chosen on dev (30 neutral dev prompts × 3 samples of 25 tokens on
# gemma3-270m, the three shipped switches transferred there): detox broke the rules from ε +3 (1.56× perplexity; 3.56× at
# +6), yet the 4-prompt probe passed it at +6; on 8 prompts it found +2. Sentiment and formality got the same range from
# both (sentiment fluent to +2 and −4 on dev, formality to +3 and −4). Still 16 tokens, checked on dev at 40 (30 × 3):
# there the unsteered model sprinkles a topic noun in 13% of samples, and probes of 8–12 prompts × 2 scatter by up to
# four steps (detox's negative end 0 … −4 across slices of the same prompts), while this one is too wide where the
# sprinkle rule speaks (formality −6 strings "really"; dev stops at −3). EVALUATION.md, *The sprinkle rule and markup*
TRANSFER_PROBE = Probe(prompts=8, max_new_tokens=16)


STEPS_PER_CALL = 2  # calibration strengths per side evaluated in one batched call
# the unsteered model's probe rows, per model and (prompts, protocol): the same for every switch a model probes
_UNSTEERED: weakref.WeakKeyDictionary[LanguageModel, dict[tuple, Evaluation]] = weakref.WeakKeyDictionary()


def calibrate(lm: LanguageModel, switch: Switch, probe: Probe = Probe(), protocol: Protocol = PROTOCOL) -> tuple[float, float]:
    """``(most negative, most positive)`` ε at which ``switch`` still writes fluent text on a few dev prompts.

    Walks out from 0 in each direction and stops at the first setting that breaks
    the fluency rules (a larger ε that happens to pass after a failure is not
    trusted). 0 on a side means even the smallest probed ε broke them. Both sides
    step out together, :data:`STEPS_PER_CALL` strengths per side and batched call,
    and a side that failed is not probed further: a switch with a narrow fluent
    range is probed at a few settings, not the whole grid. The unsteered rows are
    sampled with the first call once per model and kept (:func:`unsteered_rows`).

    >>> switch.card = switch.card.updated(fluent_eps=list(calibrate(lm, switch)))   # doctest: +SKIP
    """
    prompts, protocol, kept, key = _probe_rows(lm, probe, protocol)
    reached, walking, base = {-1: 0.0, +1: 0.0}, [-1, +1], kept.get(key)
    for k in range(0, len(probe.strengths), STEPS_PER_CALL):  # a few strengths per side and call: batches stay big
        chunk = probe.strengths[k : k + STEPS_PER_CALL]
        settings = [[(switch, side * s)] for side in walking for s in chunk]
        evals = list(evaluate_settings(lm, ([[]] if base is None else []) + settings, prompts, protocol))
        if base is None:
            base = kept[key] = evals.pop(0)
        for i, side in enumerate(list(walking)):
            if _walk(side, chunk, evals[i * len(chunk) : (i + 1) * len(chunk)], probe, base, reached):
                walking.remove(side)
        if not walking:
            break
    failed_first = [side for side in (-1, +1) if reached[side] == 0.0]
    if failed_first and probe.inner:
        _probe_inner(lm, switch, probe, prompts, protocol, base, failed_first, reached)
    return reached[-1], reached[+1]


def _probe_rows(lm: LanguageModel, probe: Probe, protocol: Protocol) -> tuple[list[str], Protocol, dict, tuple]:
    """The prompts and the sampling protocol of ``probe``'s rows, and where ``lm``'s unsteered rows of them are kept (the
    model's dict and their key in it)."""
    prompts = load_prompts(probe.prompt_set, probe.prompts, split=PROBE_SPLIT)
    protocol = replace(protocol, samples=probe.samples, max_new_tokens=probe.max_new_tokens)
    return prompts, protocol, _UNSTEERED.setdefault(lm, {}), (tuple(prompts), protocol)


def unsteered_rows(lm: LanguageModel, probe: Probe = Probe(), protocol: Protocol = PROTOCOL) -> Evaluation:
    """The unsteered model's rows of ``probe``, which every switch ``lm`` probes is compared with: sampled once per
    model and kept while it lives (its body's weights must not change in place). The app reads them ahead as it
    serves a model, so its first training's probe does not sample them."""
    prompts, protocol, kept, key = _probe_rows(lm, probe, protocol)
    if key not in kept:
        kept[key] = evaluate_settings(lm, [[]], prompts, protocol)[0]
    return kept[key]


def _probe_inner(lm: LanguageModel, switch: Switch, probe: Probe, prompts: list[str], protocol: Protocol,
                 base: Evaluation, sides: list[int], reached: dict[int, float]) -> None:
    """:func:`calibrate` on the sides that broke the rules at the first strength: ``probe.inner`` in one batched call,
    walking out from the smallest and stopping at the first failure, as the outer walk does."""
    settings = [[(switch, side * s)] for side in sides for s in probe.inner]
    evals = list(evaluate_settings(lm, settings, prompts, protocol))
    for i, side in enumerate(sides):
        _walk(side, probe.inner, evals[i * len(probe.inner) : (i + 1) * len(probe.inner)], probe, base, reached)


def _walk(side: int, strengths: Sequence[float], evals: list[Evaluation], probe: Probe, base: Evaluation,
          reached: dict[int, float]) -> bool:
    """Step ``side`` out through ``strengths`` (evaluated as ``evals``), recording each fluent one in ``reached``, up to
    the first that breaks the rules (a larger one that passes after it is not trusted); True when one broke them."""
    for s, ev in zip(strengths, evals, strict=True):
        if probe.rules.problems(ev, base):
            return True
        reached[side] = side * s
    return False


def probe_for(switch: Switch) -> Probe:
    """The probe a switch gets unless one is given: :data:`TRANSFER_PROBE` for a switch
    :func:`~lmswitch.core.transfer.transfer` made (its card records the transfer), else :class:`Probe`'s."""
    return TRANSFER_PROBE if switch.card.transfer is not None else Probe()


def probed_card(card: Card, fluent: tuple[float, float], probe: Probe) -> Card:
    """``card`` with the ``fluent`` ε range ``probe`` measured, and the recommended ε at ``probe.recommend`` of its
    positive limit (:meth:`Card.calibrated`)."""
    return card.calibrated(*fluent, share=probe.recommend, probe=probe.record)


def calibrated_card(lm: LanguageModel, switch: Switch, probe: Probe | None = None) -> Card:
    """``switch``'s card with ``fluent_eps`` from :func:`calibrate` and ``recommended_eps`` at ``probe.recommend`` of its
    positive limit (:func:`probed_card`); the probe by default :func:`probe_for`'s.

    A transferred switch needs it before use: the ε its card scaled from the source's can read as word salad on the
    target (the shipped sentiment switch's +3.88 on gemma3-270m: 3.4× perplexity on test prompts).

    >>> moved.card = calibrated_card(gemma, moved)   # doctest: +SKIP
    """
    check_switch(switch, lm).check_steers("it has no fluent range to measure")
    probe = probe or probe_for(switch)
    return probed_card(switch.card, calibrate(lm, switch, probe), probe)
