"""Stance evaluation: does a switch trained from opinion articles learn their stance, not their topic?

The data (``lmswitch/data/stance/``, provenance in its ``DATA.md``): per topic two
opposing articles (A, B), held-out statements of each side, prompts that invite an
opinion, and a stance lexicon per side. Topics are split into dev (choices are made
there: methods, ε) and test (reported, never tuned on).

Per topic and method it measures:

* **meter accuracy**: a switch trained on one article alone ranks held-out statements
  of its own side above the other side's (pairwise, by the style slope
  :func:`~lmswitch.lenses.meter.style_slope`), averaged over the switches from A and
  from B; chance is 50%;
* **lexicon shift** (A-vs-B switches): continuations of the prompts at ±ε, in (A-lexicon
  hits − B-lexicon hits) per 25 tokens, against the unsteered model on the same seeds,
  with the fluency rules of the frontier (perplexity, Dist-3, loops).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

from lmswitch.core.models import LanguageModel
from lmswitch.core.switch import Switch
from lmswitch.core.train import train_switch
from lmswitch.harness.evaluate import PROTOCOL, Evaluation, Protocol, evaluate_settings
from lmswitch.harness.frontier import FluencyRules
from lmswitch.harness.options import STANCE_METHODS as METHODS
from lmswitch.harness.options import check_split
from lmswitch.io.documents import split_lines
from lmswitch.io.resources import data_path
from lmswitch.lenses.meter import style_slope

STANCE_DIR = data_path("stance")
PER_TOKENS = 25  # lexicon hits are counted per this many tokens of continuation
STRENGTHS = (2.0, 4.0, 8.0)  # ε swept on dev topics for the A-vs-B lexicon shift
STANCE_PROTOCOL = replace(PROTOCOL, samples=2, max_new_tokens=25)
RULES = FluencyRules()


@dataclass(frozen=True)
class Topic:
    """One policy question with two opposing articles and held-out material for each side."""

    name: str
    title: str
    side_a: str
    side_b: str
    split: str  # "dev" or "test"
    article_a: str
    article_b: str
    statements_a: tuple[str, ...]
    statements_b: tuple[str, ...]
    prompts: tuple[str, ...]
    lexicon_a: tuple[str, ...]
    lexicon_b: tuple[str, ...]


def _lines(path) -> tuple[str, ...]:
    return tuple(split_lines(path.read_text(encoding="utf-8")))


def load_topics(split: str | None = None, names: Sequence[str] | None = None) -> list[Topic]:
    """The bundled stance topics, all or those of one split (and only ``names``, if given), sorted by name."""
    check_split(split, "every topic")
    topics = []
    for folder in sorted(p for p in STANCE_DIR.iterdir() if (p / "topic.json").is_file()):
        meta = json.loads((folder / "topic.json").read_text(encoding="utf-8"))
        topics.append(Topic(
            name=folder.name, title=meta["title"], side_a=meta["side_a"], side_b=meta["side_b"], split=meta["split"],
            article_a=(folder / "article_a.txt").read_text(encoding="utf-8"), article_b=(folder / "article_b.txt").read_text(encoding="utf-8"),
            statements_a=_lines(folder / "statements_a.txt"), statements_b=_lines(folder / "statements_b.txt"),
            prompts=_lines(folder / "prompts.txt"), lexicon_a=_lines(folder / "lexicon_a.txt"), lexicon_b=_lines(folder / "lexicon_b.txt")))
    topics = [t for t in topics if split is None or t.split == split]
    unknown = sorted(set(names or ()) - {t.name for t in topics})
    if unknown:
        raise ValueError(f"no {split or 'stance'} topic named {', '.join(unknown)}; choose from {', '.join(t.name for t in topics)}")
    return [t for t in topics if names is None or t.name in names]


def _pattern(lexicon: Sequence[str]) -> re.Pattern:
    return re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(lexicon, key=len, reverse=True)) + r")\b", re.IGNORECASE)


def lexicon_score(lm: LanguageModel, texts: Sequence[str], lexicon_a: Sequence[str], lexicon_b: Sequence[str]) -> float:
    """(A-lexicon hits − B-lexicon hits) per :data:`PER_TOKENS` tokens, over all ``texts`` together."""
    a, b = _pattern(lexicon_a), _pattern(lexicon_b)
    hits = sum(len(a.findall(t)) - len(b.findall(t)) for t in texts)
    tokens = sum(len(lm.tokenizer(t, add_special_tokens=False).input_ids) for t in texts)
    return PER_TOKENS * hits / max(tokens, 1)


def pairwise_accuracy(own: Sequence[float], other: Sequence[float]) -> float:
    """Share of (own, other) pairs where the own-side statement scores higher (ties count half)."""
    pairs = [(x > y) + 0.5 * (x == y) for x in own for y in other]
    return sum(pairs) / len(pairs)


def meter_accuracy(lm: LanguageModel, switch: Switch, own: Sequence[str], other: Sequence[str]) -> float:
    """How often the switch's style slope ranks a held-out statement of its own side above one of the other side."""
    return pairwise_accuracy([style_slope(lm, switch, s) for s in own], [style_slope(lm, switch, s) for s in other])


@dataclass(frozen=True)
class Shift:
    """A-vs-B continuations at ±ε against unsteered: lexicon score change toward each side, and fluency."""

    eps: float
    toward_a: float  # score(+ε) − score(0): > 0 moves toward A's lexicon
    toward_b: float  # score(0) − score(−ε): > 0 moves toward B's lexicon
    fluent: bool
    problems: list[str]
    samples: dict[str, list[str]]  # "+ε", "0", "−ε" → a few continuations


@dataclass(frozen=True)
class StanceRow:
    topic: str
    split: str
    method: str
    meter_accuracy: float  # one-article switches, mean over A and B
    meter_accuracy_ab: float  # the A-vs-B switch
    train_seconds: float  # one-article switch from article A (mean of A and B), including caching and negatives
    shifts: list[Shift] = field(default_factory=list)


def _shifts(lm: LanguageModel, topic: Topic, switch: Switch, strengths: Sequence[float], protocol: Protocol,
            rules: FluencyRules) -> list[Shift]:
    settings = [[]] + [[(switch, side * e)] for e in strengths for side in (1, -1)]
    base, *evals = evaluate_settings(lm, settings, list(topic.prompts), protocol)

    def score(ev: Evaluation) -> float:
        return lexicon_score(lm, [s.text for s in ev.texts], topic.lexicon_a, topic.lexicon_b)

    s0, out = score(base), []
    for k, e in enumerate(strengths):
        plus, minus = evals[2 * k], evals[2 * k + 1]
        problems = [f"+{e:g}: {p}" for p in rules.problems(plus, base)] + [f"−{e:g}: {p}" for p in rules.problems(minus, base)]
        shown = {f"+{e:g}": [s.text for s in plus.texts[:3]], "0": [s.text for s in base.texts[:3]], f"−{e:g}": [s.text for s in minus.texts[:3]]}
        out.append(Shift(e, score(plus) - s0, s0 - score(minus), not problems, problems, shown))
    return out


def evaluate_topic(lm: LanguageModel, topic: Topic, method: str, strengths: Sequence[float], *,
                   protocol: Protocol = STANCE_PROTOCOL, rules: FluencyRules = RULES) -> StanceRow:
    """Train the method's switches on ``topic`` (from A, from B, A vs B) and measure them."""
    config = METHODS[method]
    seconds, accuracies = [], []
    for own, other, mine, theirs in ((topic.article_a, "a", topic.statements_a, topic.statements_b),
                                     (topic.article_b, "b", topic.statements_b, topic.statements_a)):
        start = time.perf_counter()
        switch = train_switch(lm, own, config=config, name=f"{topic.name}-{other}")
        seconds.append(time.perf_counter() - start)
        accuracies.append(meter_accuracy(lm, switch, mine, theirs))
    ab = train_switch(lm, topic.article_a, topic.article_b, config=config, name=f"{topic.name}-a-vs-b")
    shifts = _shifts(lm, topic, ab, strengths, protocol, rules) if strengths else []
    return StanceRow(topic.name, topic.split, method, sum(accuracies) / 2, meter_accuracy(lm, ab, topic.statements_a, topic.statements_b),
                     sum(seconds) / 2, shifts)


@dataclass(frozen=True)
class StanceReport:
    dev: list[StanceRow]
    test: list[StanceRow]
    chosen_eps: dict[str, float | None]  # per method: the largest ε fluent on every dev topic in both directions

    def to_dict(self) -> dict:
        return asdict(self)


def _chosen(rows: Sequence[StanceRow], method: str) -> float | None:
    fluent = [e for e in STRENGTHS if all(next(s for s in r.shifts if s.eps == e).fluent for r in rows if r.method == method)]
    return max(fluent) if fluent else None


def run_stance(lm: LanguageModel, methods: Sequence[str] = tuple(METHODS), *, log: Callable[[str], None] = print) -> StanceReport:
    """Dev topics with the ε sweep, then test topics at each method's chosen ε."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown stance method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    dev = []
    for topic in load_topics("dev"):
        for method in methods:
            log(f"dev {topic.name} {method}")
            dev.append(evaluate_topic(lm, topic, method, STRENGTHS))
    chosen = {m: _chosen(dev, m) for m in methods}
    test = []
    for topic in load_topics("test"):
        for method in methods:
            log(f"test {topic.name} {method} at ε {chosen[method]}")
            test.append(evaluate_topic(lm, topic, method, [chosen[method]] if chosen[method] else []))
    return StanceReport(dev, test, chosen)


def markdown(report: StanceReport) -> str:
    """Per topic and method: meter accuracies, training time, and the lexicon shift at the chosen ε."""
    lines = ["| split | topic | method | meter acc. (one article) | meter acc. (A vs B) | train s | ε | toward A | toward B | fluent |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in report.dev + report.test:
        eps = report.chosen_eps.get(row.method)
        shift = next((s for s in row.shifts if s.eps == eps), None)
        cells = [f"{eps:g}", f"{shift.toward_a:+.2f}", f"{shift.toward_b:+.2f}", "yes" if shift.fluent else "; ".join(shift.problems)] \
            if shift else ["—"] * 4
        lines.append(f"| {row.split} | {row.topic} | {row.method} | {row.meter_accuracy:.0%} | {row.meter_accuracy_ab:.0%} | "
                     f"{row.train_seconds:.1f} | " + " | ".join(cells) + " |")
    for method in report.chosen_eps:
        test = [r for r in report.test if r.method == method]
        if test:
            mean = sum(r.meter_accuracy for r in test) / len(test)
            lines.append(f"\nTest mean, {method}: one-article meter accuracy {mean:.0%} (target ≥ 85%).")
    return "\n".join(lines)
