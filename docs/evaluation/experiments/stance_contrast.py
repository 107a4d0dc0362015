"""Three more tries at a document's stance on the dev topics; EVALUATION.md, "Seventeenth session".

    PYTHONPATH=. python docs/evaluation/experiments/stance_contrast.py [--split dev]

1. **Opposite negatives.** A one-article switch trained against the model's own *opposing* text instead of nothing:
   ``rewrite`` asks the model (chat template) to rewrite each of the article's sentences so it argues the opposite;
   ``counter`` asks it 32 times for one sentence against the article's headline. Meter accuracy as the harness measures
   it, beside the plain switch.
2. **A general polarity.** The shipped switches as stance meters: how often each ranks a held-out statement of one side
   above the other side's, oriented by which article it scores higher.
3. **A lexicon from the held-out statements.** The A-vs-B switch's shift, counted with the words that occur only in
   one side's statements, beside the curated lexicon.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace

import lmswitch as ls
from lmswitch.core.generate import generate_tokens
from lmswitch.core.options import SamplingOptions
from lmswitch.harness.stance import RULES, STANCE_PROTOCOL, _shifts, load_topics, meter_accuracy, pairwise_accuracy
from lmswitch.io.resources import shipped_switch_path
from lmswitch.lenses.meter import style_slope

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[a-z][a-z'-]+")


def _chat(lm, prompts: list[str]) -> list[str]:
    out = generate_tokens(lm, prompts, [[]] * len(prompts), list(range(len(prompts))), SamplingOptions(max_new_tokens=40, chat=True))
    return [t.strip().split("\n")[0] for t in out.texts]


def opposite(lm, article: str, how: str) -> list[str]:
    if how == "rewrite":
        sentences = [s for s in _SENTENCE.split(article) if len(s.split()) >= 6][1:33]
        return _chat(lm, [f"Rewrite this sentence so that it argues the opposite opinion.\nSentence: {s}\nOpposite:" for s in sentences])
    headline = article.strip().split("\n")[0]
    return _chat(lm, [f'Write one sentence that argues against this opinion: "{headline}"'] * 32)


def only_in(own, other) -> tuple[str, ...]:
    def words(lines):
        return {w for line in lines for w in _WORD.findall(line.lower()) if len(w) > 2}
    return tuple(sorted(words(own) - words(other)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", default="dev", choices=("dev", "test"))
    args = p.parse_args()
    lm = ls.load_model(dtype="auto")
    topics = load_topics(args.split)
    for topic in topics:
        sides = ((topic.article_a, topic.statements_a, topic.statements_b), (topic.article_b, topic.statements_b, topic.statements_a))
        for how in ("plain", "rewrite", "counter"):
            accs = [meter_accuracy(lm, ls.train_switch(lm, art, None if how == "plain" else opposite(lm, art, how)), own, other)
                    for art, own, other in sides]
            print(f"1. {topic.name} {how}: from A {accs[0]:.1%}, from B {accs[1]:.1%}, mean {sum(accs) / 2:.1%}", flush=True)
    for name in ("sentiment", "detox", "formality"):
        switch = ls.load_switch(shipped_switch_path(name))
        for topic in load_topics():
            acc = pairwise_accuracy([style_slope(lm, switch, s) for s in topic.statements_a], [style_slope(lm, switch, s) for s in topic.statements_b])
            a_higher = style_slope(lm, switch, topic.article_a) > style_slope(lm, switch, topic.article_b)
            print(f"2. {name} {topic.split} {topic.name}: {acc if a_higher else 1 - acc:.1%}", flush=True)
    for topic in topics:
        ab = ls.train_switch(lm, topic.article_a, topic.article_b, name=f"{topic.name}-a-vs-b")
        counted = replace(topic, lexicon_a=only_in(topic.statements_a, topic.statements_b), lexicon_b=only_in(topic.statements_b, topic.statements_a))
        for lexicon, t in (("curated", topic), ("statements", counted)):
            for s in _shifts(lm, t, ab, (1.0, 2.0, 4.0), STANCE_PROTOCOL, RULES):
                print(f"3. {topic.name} {lexicon} ε {s.eps:g}: toward A {s.toward_a:+.2f}, toward B {s.toward_b:+.2f}, "
                      f"fluent {s.fluent}", flush=True)


if __name__ == "__main__":
    main()
