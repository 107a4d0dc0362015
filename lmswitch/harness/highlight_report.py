"""How often the highlight lens lands on the part of a text that carries the style (``eval --highlight``).

The texts are built from the held-out pairs of each shipped switch's dataset, so no
switch was trained on them: one sentence of the side being looked for (the
*target*) between two sentences of the other side, taken from other pairs, its
place rotating (first, middle, last). The detox switch at −ε must find the toxic
sentence among civil ones, at +ε the civil one among toxic ones; the same for
sentiment and formality.

A highlight **hits** when at least half of its span's characters (whitespace not
counted) lie inside the target sentence. A span placed at random hits about as
often as the target's share of the text's characters: the *chance* column.

ε and the span length are chosen on the dev half of the held-out pairs (the best
mean hit rate over both sides; ties go to the weaker ε and the shorter span) and
reported on the test half, beside the default (library, CLI and app: the setting with the best mean over the switches
on dev), the default before it, and the baseline a user would reach for: the style's scorer over every window of words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lmswitch.core.hidden import EncodedText, encode_text
from lmswitch.core.models import LanguageModel
from lmswitch.core.switch import Switch
from lmswitch.harness.datasets import load_dataset
from lmswitch.harness.evaluate import formality_scores, sentiment_scores, toxicity_scores
from lmswitch.lenses.spans import DEFAULT_EPS, DEFAULT_MAX_SPAN, highlight_changes, token_deltas

DATASET_OF = {"sentiment": "sentiment", "detox": "toxicity", "formality": "formality"}  # shipped switch → its dataset
# the baseline a user would pick instead: the project's scorer of that style over every window of words, and which way
# its score points to the switch's positive side (detox's positive side is civil: low toxicity)
SCORER_OF = {"sentiment": (sentiment_scores, +1), "detox": (toxicity_scores, -1), "formality": (formality_scores, +1)}
STRENGTHS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # |ε| tried on dev
SPAN_LENGTHS = (3, 5, 8)  # max_span tried on dev
HIT_SHARE = 0.5  # a span hits when at least this share of its characters is inside the target
PREVIOUS_DEFAULT = (5.0, 5)  # |ε| and max span of the library's default until 2026-11-29, scored on test beside it


@dataclass(frozen=True)
class PlantedText:
    """A text with one target sentence of side ``side`` (+1: the switch's positive side) at ``[start, end)``."""

    text: str
    start: int
    end: int
    side: int

    @property
    def chance(self) -> float:
        """The target's share of the text's non-space characters: how often a span placed at random would hit."""
        return _visible(self.text[self.start:self.end]) / _visible(self.text)

    def inside(self, start: int, end: int) -> float:
        """The share of ``text[start:end]``'s non-space characters that lie inside the target."""
        total = _visible(self.text[start:end])
        return _visible(self.text[max(start, self.start):min(end, self.end)]) / total if total else 0.0


def _visible(text: str) -> int:
    return sum(not c.isspace() for c in text)


def planted_texts(positive: Sequence[str], negative: Sequence[str]) -> list[PlantedText]:
    """For each pair ``i`` and each side, that side's sentence ``i`` between two of the other side's (pairs i+1, i+2)."""
    n = len(positive)
    if n < 3:
        raise ValueError(f"planting needs at least 3 pairs; got {n}")
    texts = []
    for i in range(n):
        for side, own, other in ((+1, positive, negative), (-1, negative, positive)):
            parts = [other[(i + 1) % n], other[(i + 2) % n]]
            place = i % 3
            parts.insert(place, own[i])
            start = sum(len(p) + 1 for p in parts[:place])
            texts.append(PlantedText(" ".join(parts), start, start + len(own[i]), side))
    return texts


@dataclass(frozen=True)
class HitRate:
    """Highlight's hits at one setting on one split: per side, and about how often a random span would hit."""

    eps: float | None  # |ε|; None for the scorer baseline
    max_span: int  # tokens; words for the scorer baseline
    hits_positive: float
    hits_negative: float
    share_inside: float  # mean share of a span's characters inside the target
    chance: float
    texts: int

    @property
    def hits(self) -> float:
        return (self.hits_positive + self.hits_negative) / 2


def _preference(hits: float, eps: float, max_span: int) -> tuple:
    """The order settings are chosen in: more hits (to 1e-9: sums of shares are not exact), then the weaker ε, then the
    shorter span."""
    return round(hits, 9), -eps, -max_span


def _score(lm: LanguageModel, switch: Switch, texts: Sequence[tuple[PlantedText, EncodedText]], eps: float,
           max_spans: Sequence[int]) -> list[HitRate]:
    """Hit rates at ``eps`` for each span length, from one Δ per text."""
    shares = {span: {+1: [], -1: []} for span in max_spans}
    for planted, enc in texts:
        delta = token_deltas(lm, switch, enc, planted.side * eps)
        for span in max_spans:
            found = highlight_changes(switch, enc, delta, eps=planted.side * eps, max_span=span).spans
            shares[span][planted.side].append(planted.inside(found[0].start, found[0].end) if found else 0.0)  # none: a miss
    return [_rate(eps, span, shares[span], [p for p, _ in texts]) for span in max_spans]


def _windows(text: str, max_words: int) -> list[tuple[int, int]]:
    """Every run of 1 … ``max_words`` words of ``text`` as ``(start, end)`` character offsets."""
    words = [m.span() for m in re.finditer(r"\S+", text)]
    return [(words[a][0], words[b - 1][1]) for a in range(len(words)) for b in range(a + 1, min(len(words), a + max_words) + 1)]


def scorer_hits(switch_name: str, texts: Sequence[PlantedText], max_words: int) -> HitRate:
    """The baseline: the window of ≤ ``max_words`` words that the style's scorer places furthest toward the side."""
    scorer, direction = SCORER_OF[switch_name]
    shares = {+1: [], -1: []}
    for planted in texts:
        windows = _windows(planted.text, max_words)
        scores = scorer([planted.text[a:b] for a, b in windows])
        best = max(range(len(windows)), key=lambda i: planted.side * direction * scores[i])  # ties: the earliest
        shares[planted.side].append(planted.inside(*windows[best]))
    return _rate(None, max_words, shares, texts)


def _rate(eps: float | None, max_span: int, shares: dict[int, list[float]], texts: Sequence[PlantedText]) -> HitRate:
    hit = {side: sum(s >= HIT_SHARE for s in v) / len(v) for side, v in shares.items()}
    every = shares[+1] + shares[-1]
    return HitRate(eps, max_span, hit[+1], hit[-1], sum(every) / len(every), sum(p.chance for p in texts) / len(texts), len(texts))


@dataclass(frozen=True)
class SwitchHitRates:
    """One switch's hit rates: every dev setting; on test the chosen one, the default, the one before, the baseline."""

    switch: str
    dev: list[HitRate]
    chosen: HitRate  # on test, at the setting chosen on dev
    default: HitRate  # on test, at the library's default
    previous_default: HitRate  # on test, at PREVIOUS_DEFAULT
    scorer: HitRate  # the baseline on test, its window length chosen on dev


def evaluate_switch(lm: LanguageModel, name: str, switch: Switch, *, data_dir: str | Path | None = None,
                    log: Callable[[str], None] = print) -> SwitchHitRates:
    """Shipped switch ``name``: every |ε| × span length on dev; on test the dev-chosen setting, the library's
    default, the one before it and the scorer baseline."""
    data = load_dataset(DATASET_OF[name], data_dir)
    split = {part: [(p, encode_text(lm, p.text)) for p in planted_texts(*data.heldout(part))] for part in ("dev", "test")}
    dev = [rate for eps in STRENGTHS for rate in _score(lm, switch, split["dev"], eps, SPAN_LENGTHS)]
    best = max(dev, key=lambda r: _preference(r.hits, r.eps, r.max_span))
    log(f"{name}: chose |ε| {best.eps:g}, max span {best.max_span} on dev ({best.hits:.0%} hits)")
    planted = {part: [p for p, _ in texts] for part, texts in split.items()}
    words = max(SPAN_LENGTHS, key=lambda n: _preference(scorer_hits(name, planted["dev"], n).hits, 0.0, n))

    def test(eps: float, span: int) -> HitRate:
        return _score(lm, switch, split["test"], eps, [span])[0]

    return SwitchHitRates(name, dev, test(best.eps, best.max_span), test(abs(DEFAULT_EPS), DEFAULT_MAX_SPAN),
                          test(*PREVIOUS_DEFAULT), scorer_hits(name, planted["test"], words))


def run_highlight_report(lm: LanguageModel, switches: dict[str, Switch], *, data_dir: str | Path | None = None,
                         log: Callable[[str], None] = print) -> list[SwitchHitRates]:
    """:func:`evaluate_switch` for each named shipped switch (a name of :data:`DATASET_OF`)."""
    unknown = [name for name in switches if name not in DATASET_OF]
    if unknown:
        raise ValueError(f"no planted-text data for {', '.join(unknown)}; choose from {', '.join(DATASET_OF)}")
    return [evaluate_switch(lm, name, switch, data_dir=data_dir, log=log) for name, switch in switches.items()]


def common_choice(results: Sequence[SwitchHitRates]) -> tuple[float, int, float]:
    """``(|ε|, max span, mean hits)``: the one setting with the best mean dev hit rate over the switches (the default's rule)."""
    means = []
    for rates in zip(*(r.dev for r in results), strict=True):
        means.append((rates[0].eps, rates[0].max_span, sum(r.hits for r in rates) / len(rates)))
    return max(means, key=lambda m: _preference(m[2], m[0], m[1]))


def to_dict(results: Sequence[SwitchHitRates]) -> list[dict]:
    return [asdict(r) for r in results]


def _row(label: str, r: HitRate) -> str:
    eps = "—" if r.eps is None else f"{r.eps:g}"
    return (f"| {label} | {eps} | {r.max_span} | {r.texts} | {r.hits_positive:.0%} | {r.hits_negative:.0%} | {r.hits:.0%} | "
            f"{r.share_inside:.0%} | {r.chance:.0%} |")


def markdown(results: Sequence[SwitchHitRates]) -> str:
    """Per switch on test: the dev-chosen setting and the defaults; hits per side, the mean share inside, chance."""
    lines = ["Each text is one sentence of the side looked for, planted between two sentences of the other side (held-out "
             "pairs of the switch's dataset, never trained on; its place rotates). A highlight **hits** when at least half "
             "of its span's characters lie inside the planted sentence; *chance*, the planted sentence's share of the "
             f"text's characters, is about how often a span placed at random would. |ε| ∈ {{{', '.join(f'{e:g}' for e in STRENGTHS)}}} × max span ∈ {{{', '.join(map(str, SPAN_LENGTHS))}}} "
             "were tried on the dev half; the table is the test half.", "",
             "| switch: setting (test) | \\|ε\\| | max span | texts | hits, + side | hits, − side | hits | share inside | chance |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines += [_row(f"{r.switch}: chosen on dev", r.chosen), _row(f"{r.switch}: the default", r.default),
                  _row(f"{r.switch}: the default before 2026-11-29", r.previous_default),
                  _row(f"{r.switch}: baseline, its scorer over word windows", r.scorer)]
    eps, span, mean = common_choice(results)
    same = "the default" if (eps, span) == (abs(DEFAULT_EPS), DEFAULT_MAX_SPAN) else \
        f"not the default (|ε| {abs(DEFAULT_EPS):g}, max span {DEFAULT_MAX_SPAN})"
    lines.append(f"\nOne setting for every switch, chosen on dev by the mean hit rate: |ε| {eps:g}, max span {span} "
                 f"({mean:.0%} on dev); {same}.")
    return "\n".join(lines) + ("\n\nHalf the texts look for each side. The baseline's max span counts words, not tokens: it is the window of up to that many words that the style's scorer (vaderSentiment, "
                                "alt-profanity-check, the formality classifier) scores furthest toward the side.")
