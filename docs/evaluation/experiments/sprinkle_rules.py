"""The sprinkle rule's noise at 40 tokens, and candidate rules simulated on kept samples.

    PYTHONPATH=. python docs/evaluation/experiments/sprinkle_rules.py sample smol  --out smol.json    # ~6 min
    PYTHONPATH=. python docs/evaluation/experiments/sprinkle_rules.py sample gemma --out gemma.json   # ~15 min
    PYTHONPATH=. python docs/evaluation/experiments/sprinkle_rules.py rules smol.json [--prompts 50 --samples 5]
    PYTHONPATH=. python docs/evaluation/experiments/sprinkle_rules.py probes gemma.json

``sample`` keeps every row's text, NLL and token count (40 tokens, the app's length, neutral dev prompts):

* ``smol``: the three shipped switches on the embedded model, 50 dev prompts × 5 samples (the shipped cards'
  calibration probe), at the whole ε around their slider ends;
* ``gemma``: the three shipped switches transferred to gemma3-270m, 30 dev prompts × 3, at ±0.5, 1, 2, 3, 4, 6.

``rules`` reads the kept rows back (any first prompts and samples of them, e.g. a probe's 8 × 2) and judges each setting
against the unsteered rows by the probe's rules with three forms of the sprinkle rule: none, the project's (the share
of samples that sprinkle any word or mark, ≤ 5 points over unsteered), and per token (the rise of the samples that
sprinkle one same word or mark, ≤ 5 points). ``probes``: how far probes of a few prompts scatter on the kept Gemma
rows. EVALUATION.md, *The sprinkle rule and markup*.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from dataclasses import replace

import lmswitch as ls
from lmswitch.harness.evaluate import PROTOCOL, _Row, _sample, _summarise, sprinkled
from lmswitch.harness.frontier import FluencyRules
from lmswitch.harness.options import load_prompts
from lmswitch.io.resources import shipped_switches_dir

NAMES = ("sentiment", "detox", "formality")
NEAR_ENDS = {"sentiment": (-6, -5, -4, 4, 5, 6), "detox": (-4, -3, -2, 3, 4, 5), "formality": (-4, -3, -2, 3, 4, 5)}
GEMMA_STRENGTHS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
RULES = FluencyRules()


def sample(which: str, out: str) -> None:
    """Sample the rows of ``which`` and keep each one's label, prompt, sample index, text, NLL and token count."""
    source = ls.load_model()
    switches = {n: ls.load_switch(shipped_switches_dir() / f"{n}.safetensors", source) for n in NAMES}
    if which == "smol":
        lm, prompts, samples = source, load_prompts("neutral", 50, split="dev"), 5
        plan = [(f"{n} {e:+d}", [(switches[n], float(e))]) for n, strengths in NEAR_ENDS.items() for e in strengths]
    else:
        lm, prompts, samples = ls.load_model("gemma3-270m"), load_prompts("neutral", 30, split="dev"), 3
        moved = {n: ls.transfer(s, source, lm) for n, s in switches.items()}
        plan = [(f"{n} {side * e:+g}", [(moved[n], side * e)]) for n in NAMES for side in (1, -1) for e in GEMMA_STRENGTHS]
    protocol = replace(PROTOCOL, samples=samples, max_new_tokens=40)
    keys = [(label, p, k) for label, _ in [("unsteered", []), *plan] for p in prompts for k in range(samples)]
    rows = [_Row(setting, p, protocol.seed + k, None) for _, setting in [("unsteered", []), *plan] for p in prompts for k in range(samples)]
    start = time.perf_counter()
    texts, nll, counts = _sample(lm, rows, protocol.sampling(), protocol.batch_size, None)
    print(f"{len(rows)} rows in {time.perf_counter() - start:.0f} s")
    with open(out, "w") as f:
        json.dump([{"label": label, "prompt": p, "k": k, "text": t, "nll": x, "count": c}
                   for (label, p, k), t, x, c in zip(keys, texts, nll, counts, strict=True)], f)


def kept(path: str) -> dict[str, list[dict]]:
    """The kept rows of ``path`` by setting label."""
    by = defaultdict(list)
    with open(path) as f:
        for r in json.load(f):
            by[r["label"]].append(r)
    return by


def evaluation(rows: list[dict], prompts: int, samples: int):
    """The rules' :class:`Evaluation` of the first ``prompts`` × ``samples`` of one setting's kept rows (no scorers)."""
    order = list(dict.fromkeys(r["prompt"] for r in rows))[:prompts]
    kept = sorted((r for r in rows if r["prompt"] in order and r["k"] < samples), key=lambda r: (order.index(r["prompt"]), r["k"]))
    zeros = [0.0] * len(kept)
    return _summarise([], [(r["prompt"], r["k"]) for r in kept], [r["text"] for r in kept], [r["nll"] for r in kept],
                      [r["count"] for r in kept], zeros, zeros, zeros, samples, 0.0)


def per_token(ev, base) -> str | None:
    """The per-token sprinkle rule: the word or mark whose sprinkling samples rose most over unsteered, if over the rule."""
    def counts(e) -> Counter:
        return Counter(t for s in e.texts for t in set(sprinkled(s.text)))
    mine, theirs = counts(ev), counts(base)
    token, rise = max(((t, mine[t] - theirs[t]) for t in mine), key=lambda x: x[1], default=(None, 0))
    n = len(ev.texts)
    return f"'{token}' +{rise}/{n}" if rise / n > RULES.max_sprinkle_rise and rise > 1.5 else None


def rules(path: str, prompts: int, samples: int) -> None:
    """Each kept setting judged by the rules with no sprinkle rule, the project's, and the per-token one."""
    by = kept(path)
    base = evaluation(by.pop("unsteered"), prompts, samples)
    print(f"{path}: {prompts} prompts × {samples} samples; unsteered sprinkle {base.sprinkle:.1%}")
    for label, rows in by.items():
        ev = evaluation(rows, prompts, samples)
        found = RULES.problems(ev, base)
        others = [p for p in found if "sprinkle" not in p]
        token = per_token(ev, base)
        top = Counter(t for s in ev.texts for t in set(sprinkled(s.text))).most_common(3)
        print(f"{label}: {ev.perplexity / base.perplexity:.2f}× perplexity, {ev.sprinkle:.1%} sprinkle {top} | "
              f"none: {'; '.join(others) or 'fluent'} | project's: {'; '.join(found) or 'fluent'} | "
              f"per token: {'; '.join(others + ([token] if token else [])) or 'fluent'}")


def _walk(by: dict, name: str, order: list[str], samples: int, outer: tuple, inner: tuple) -> tuple[float, float]:
    """:func:`~lmswitch.harness.frontier.calibrate`'s walk on the kept rows of ``order``'s prompts: out through
    ``outer`` to the first setting that breaks the rules, through ``inner`` on a side that broke at the first."""
    def judged(label: str):
        return evaluation([r for r in by[label] if r["prompt"] in order], len(order), samples)
    base, reached = judged("unsteered"), []
    for side in (-1, 1):
        limit = 0.0
        for strengths in (outer, inner):
            for s in strengths:
                if RULES.problems(judged(f"{name} {side * s:+g}"), base):
                    break
                limit = side * s
            if limit:
                break
        reached.append(limit)
    return reached[0], reached[1]


def probes(path: str) -> None:
    """Each kept switch's range walking through every kept ε on all the kept rows, then the ranges of
    ``TRANSFER_PROBE``'s walk (2, 4, 6, then 0.5, 1) on each disjoint slice of the prompts of 4, 8 and 12 prompts × 2
    samples and 8 × 3: how much a probe of that size scatters."""
    by = kept(path)
    prompts = list(dict.fromkeys(r["prompt"] for r in by["unsteered"]))
    for name in NAMES:
        print(f"{name}: all kept rows {_walk(by, name, prompts, 3, GEMMA_STRENGTHS, ())}")
        for size, samples in ((4, 2), (8, 2), (12, 2), (8, 3)):
            slices = [prompts[k : k + size] for k in range(0, len(prompts) - size + 1, size)]
            print(f"  {size} × {samples}: {[_walk(by, name, s, samples, (2.0, 4.0, 6.0), (0.5, 1.0)) for s in slices]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("which", choices=["smol", "gemma"])
    s.add_argument("--out", required=True)
    r = sub.add_parser("rules")
    r.add_argument("path")
    r.add_argument("--prompts", type=int, default=50)
    r.add_argument("--samples", type=int, default=5)
    w = sub.add_parser("probes")
    w.add_argument("path", help="kept gemma rows")
    args = ap.parse_args()
    if args.command == "sample":
        sample(args.which, args.out)
    elif args.command == "probes":
        probes(args.path)
    else:
        rules(args.path, args.prompts, args.samples)


if __name__ == "__main__":
    main()
