"""A transferred switch's strength on the target: the ε scaled from the source against the fluent range probed there.

    PYTHONPATH=. python docs/evaluation/experiments/transfer_fluent.py [--target gemma3-270m] [--prompts 20] [--samples 3]
    PYTHONPATH=. python docs/evaluation/experiments/transfer_fluent.py --dev [--tokens 40]   # how TRANSFER_PROBE was chosen
    PYTHONPATH=. python docs/evaluation/experiments/transfer_fluent.py --sprinkled [--tokens 40]

``--dev``: on 30 neutral dev prompts × 3 samples of ``--tokens`` (40, the app's length; TRANSFER_PROBE was chosen at
25), each transferred switch judged by the probe's rules at a row of ε, the range walking out through that row gives,
and the ranges five probe designs find. ``--sprinkled``: what the sprinkle rule counts on a few of those rows.

Each shipped switch of the embedded model is transferred to the target (``ls.transfer``) and its fluent range probed
there (``ls.calibrated_card``: a transferred switch gets ``TRANSFER_PROBE``, 8 dev prompts). Then, on the *test*
prompts of the switch's own prompt set (sentiment and formality: neutral; detox: provocative), with the same seeds:
the unsteered target, the ε the transfer scaled from the source's recommended one, the recommended ε from the probe,
and both ends of the probed range. Perplexity (under the unsteered target) and Dist-3 are relative to the unsteered
rows; the rules are the probe's (≤ 1.5× perplexity, ≥ 0.95× Dist-3, ≤ 2% of samples looping). EVALUATION.md,
"Transferred switches: the fluent range on the target".
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import replace

import lmswitch as ls
from lmswitch.harness.evaluate import PROTOCOL, evaluate_settings, sprinkled
from lmswitch.harness.frontier import SPECS, FluencyRules, Probe, calibrate
from lmswitch.harness.options import load_prompts
from lmswitch.io.resources import shipped_switches_dir

DEV_STRENGTHS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)


def moved_switch(name: str, source: ls.LanguageModel, target: ls.LanguageModel) -> ls.Switch:
    """The shipped switch ``name`` of ``source`` transferred to ``target``."""
    return ls.transfer(ls.load_switch(shipped_switches_dir() / f"{name}.safetensors", source), source, target)


def dev_probes(tokens: int) -> tuple[Probe, ...]:
    """The probe designs compared on dev, sampling ``tokens`` each (the third is the 25-token check's longer probe)."""
    return (Probe(max_new_tokens=tokens), Probe(prompts=8, max_new_tokens=tokens), Probe(prompts=8, samples=3, max_new_tokens=20),
            Probe(prompts=8, max_new_tokens=16), Probe(prompts=12, max_new_tokens=tokens))


def walked(eps_problems: dict[float, list[str]], side: int) -> float:
    """The fluent limit on ``side`` walking out from 0 through the dev row, stopping at the first setting that breaks."""
    reached = 0.0
    for s in DEV_STRENGTHS:
        if eps_problems[side * s]:
            break
        reached = side * s
    return reached


def dev(source: ls.LanguageModel, target: ls.LanguageModel, tokens: int) -> None:
    """The dev table: each setting of a row of ε judged by the probe's rules against the unsteered rows (30 neutral dev
    prompts × 3 samples of ``tokens``), the range walking out through it gives, and the ranges the probe designs find."""
    prompts = load_prompts("neutral", 30, split="dev")
    protocol = replace(PROTOCOL, samples=3, max_new_tokens=tokens)
    base = evaluate_settings(target, [[]], prompts, protocol)[0]
    rules = FluencyRules()
    for name in SPECS:
        moved = moved_switch(name, source, target)
        eps = [side * s for side in (1, -1) for s in DEV_STRENGTHS]
        evals = evaluate_settings(target, [[(moved, e)] for e in eps], prompts, protocol)
        problems = {e: rules.problems(ev, base) for e, ev in zip(eps, evals, strict=True)}
        for e, ev in zip(eps, evals, strict=True):
            print(f"{name} {e:+g}: {ev.perplexity / base.perplexity:.2f}× {'; '.join(problems[e]) or 'fluent'}", flush=True)
        ranges = []
        for probe in dev_probes(tokens):
            start = time.perf_counter()
            ranges.append(f"{probe.prompts}×{probe.samples}×{probe.max_new_tokens}: {calibrate(target, moved, probe)} "
                          f"in {time.perf_counter() - start:.1f} s")
        print(f"{name}: on dev {walked(problems, -1):+g} … {walked(problems, +1):+g}; probes {'; '.join(ranges)}", flush=True)


SPRINKLED_ROWS = (("sentiment", 1.0), ("sentiment", 2.0), ("detox", -2.0), ("formality", -1.0), ("formality", -4.0))


def what_sprinkles(source: ls.LanguageModel, target: ls.LanguageModel, tokens: int) -> None:
    """What the sprinkle rule counts on the dev rows (30 neutral dev prompts × 3 samples of ``tokens``): per setting,
    the share of samples that sprinkle, how many of them also sprinkle unsteered (same prompt and seed), the word or
    mark each sprinkles most, counted over samples, and a few of them."""
    prompts = load_prompts("neutral", 30, split="dev")
    protocol = replace(PROTOCOL, samples=3, max_new_tokens=tokens)
    moved = {name: moved_switch(name, source, target) for name in dict.fromkeys(name for name, _ in SPRINKLED_ROWS)}
    rows = [("unsteered", [])] + [(f"{name} {eps:+g}", [(moved[name], eps)]) for name, eps in SPRINKLED_ROWS]
    evals = evaluate_settings(target, [setting for _, setting in rows], prompts, protocol)
    for (label, _), ev in zip(rows, evals, strict=True):
        strung = Counter(found[0] for s in ev.texts if (found := sprinkled(s.text)))
        both = sum(bool(sprinkled(s.text)) and bool(sprinkled(b.text)) for s, b in zip(ev.texts, evals[0].texts, strict=True))
        print(f"{label}: {ev.sprinkle:.1%} sprinkle, {both} of them also unsteered; {strung.most_common(8)}", flush=True)
        for text in [s.text for s in ev.texts if sprinkled(s.text)][:3]:
            print(f"    {text[:160]!r}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="gemma3-270m")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--dev", action="store_true", help="the dev table instead (how TRANSFER_PROBE was chosen)")
    ap.add_argument("--sprinkled", action="store_true", help="what the sprinkle rule counts on a few dev rows instead")
    ap.add_argument("--tokens", type=int, default=40, help="--dev and --sprinkled: tokens per sample (40: the app's length)")
    args = ap.parse_args()
    source, target = ls.load_model(), ls.load_model(args.target)
    if args.dev:
        return dev(source, target, args.tokens)
    if args.sprinkled:
        return what_sprinkles(source, target, args.tokens)
    protocol = replace(PROTOCOL, samples=args.samples, max_new_tokens=25)
    print(f"{source.name} → {target.name}; test prompts × {args.samples} samples of 25 tokens, same seeds per row\n")
    print("| switch | setting | ε | perplexity | Dist-3 | looping | its metric |\n|---|---|---|---|---|---|---|")
    for name, spec in SPECS.items():
        moved = moved_switch(name, source, target)
        start = time.perf_counter()
        moved.card = ls.calibrated_card(target, moved)
        probe_s = time.perf_counter() - start
        low, high = moved.card.fluent_eps
        rows = {"unsteered": 0.0, "scaled from the source": moved.card.transfer.scaled_eps,
                "recommended (probe)": moved.card.recommended_eps, "probe's negative limit": low, "probe's positive limit": high}
        prompts = load_prompts(spec.prompts, args.prompts, split="test")
        evals = evaluate_settings(target, [[(moved, eps)] if eps else [] for eps in rows.values()], prompts, protocol)
        base = evals[0]
        for (label, eps), ev in zip(rows.items(), evals, strict=True):
            broken = FluencyRules().problems(ev, base)
            print(f"| {name} | {label} | {eps:+g} | {ev.perplexity / base.perplexity:.2f}× | {ev.dist3 / base.dist3:.2f}× | "
                  f"{ev.repetition:.0%} | {spec.metric} {getattr(ev, spec.metric):.3f}{' ✗ ' + '; '.join(broken) if broken else ''} |")
        print(f"<!-- {name}: probed {low:+g} … {high:+g} in {probe_s:.1f} s; sample at the scaled ε: "
              f"{evals[1].texts[0].text!r}; at the recommended: {evals[2].texts[0].text!r} -->", flush=True)


if __name__ == "__main__":
    main()
