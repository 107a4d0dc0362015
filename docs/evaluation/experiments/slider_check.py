"""Every whole ε of the shipped sliders on the test prompts, by the fluency rules: ``check_sliders`` alone, without the
frontier sweep that ``eval --frontier … --sliders`` runs first.

    PYTHONPATH=. python docs/evaluation/experiments/slider_check.py --out docs/evaluation/frontier/sliders-sprinkle

For each switch (default: the three shipped ones) and each length in ``--tokens`` (default 25, the protocol's, and 40,
the app's and the CLI's), the 50 test prompts of its frontier set × the protocol's 5 samples, the unsteered model in the
same call with the same seeds, bfloat16 unless ``--dtype``. Writes ``sliders-<tokens>.json`` (each position's metrics
and the rules it breaks) and prints a markdown table per length: metric / perplexity × unsteered / looping samples /
samples sprinkling one word or mark (``Evaluation.sprinkle``). ``--past``: also the whole ε one step past each end of
each slider (its own call, the unsteered model again first), the positions the calibration dropped, with the token
their sprinkling samples string most.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import lmswitch as ls
from lmswitch.harness.evaluate import PROTOCOL, evaluate_settings, sprinkled
from lmswitch.harness.frontier import FrontierSpec, check_sliders
from lmswitch.harness.options import load_prompts
from lmswitch.io.resources import shipped_switch_path


def cell(ev, base, metric: str) -> str:
    return (f"{getattr(ev, metric):.3g} / {ev.perplexity / base.perplexity:.2f}× / {ev.repetition:.1%} / "
            f"{ev.sprinkle:.1%}")


def past_rows(lm, switch, spec, protocol, limit) -> list[dict]:
    """The whole ε one step past each end of ``switch``'s slider, scored against unsteered by the rules."""
    low, high = switch.slider_range()
    eps = [low - 1, high + 1]
    base, *evals = evaluate_settings(lm, [[]] + [[(switch, e)] for e in eps], load_prompts(spec.prompts, limit, split="test"),
                                     protocol)
    rows = []
    for e, ev in zip(eps, evals, strict=True):
        strung = Counter(tokens[0] for s in ev.texts if (tokens := sprinkled(s.text))).most_common(1)
        rows.append({"eps": e, "cell": cell(ev, base, spec.metric), "strung_most": strung,
                     "problems": spec.rules.problems(ev, base)})
        print(f"| {e:+g} (past the range) | {rows[-1]['cell']} | {'; '.join(rows[-1]['problems']) or 'fluent'} "
              f"| most strung: {strung} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--switches", default="sentiment,detox,formality")
    ap.add_argument("--tokens", default=f"{PROTOCOL.max_new_tokens},40", help="new-token lengths, comma-separated")
    ap.add_argument("--limit", type=int, default=None, help="test prompts per switch (default: all 50)")
    ap.add_argument("--dtype", default=None, help="the model's dtype (default: the app's)")
    ap.add_argument("--out", type=Path, required=True, help="folder for sliders-<tokens>.json")
    ap.add_argument("--past", action="store_true", help="also one whole ε past each end of each slider")
    args = ap.parse_args()
    lm = ls.load_model(dtype=args.dtype or "auto")
    args.out.mkdir(parents=True, exist_ok=True)
    for tokens in (int(t) for t in args.tokens.split(",")):
        protocol = replace(PROTOCOL, max_new_tokens=tokens)
        checks, past, started = [], {}, time.perf_counter()
        for name in args.switches.split(","):
            spec = FrontierSpec.for_switch(name)
            switch = ls.load_switch(shipped_switch_path(name), lm)
            check = check_sliders(lm, switch, spec, protocol, args.limit)
            checks.append(check)
            print(f"\n#### {name} at {tokens} tokens, unsteered {getattr(check.base, spec.metric):.3g} {spec.metric}, "
                  f"{check.base.sprinkle:.1%} sprinkling\n\n| ε | {spec.metric} / perplexity / looping / sprinkling | rules broken |\n|---|---|---|")
            for eps, ev in check.points:
                print(f"| {eps:+g} | {cell(ev, check.base, spec.metric)} | {'; '.join(check.rules.problems(ev, check.base)) or 'fluent'} |")
            if args.past:
                past[name] = past_rows(lm, switch, spec, protocol, args.limit)
        data = {"model": lm.name, "protocol": protocol.to_dict(), "seconds": round(time.perf_counter() - started, 1),
                "sliders": [c.to_dict() | {"unsteered_sprinkle": c.base.sprinkle} | ({"past": past[c.switch]} if past else {})
                            for c in checks]}
        (args.out / f"sliders-{tokens}.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
