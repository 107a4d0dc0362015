"""A transferred switch's strength on the target: the ε scaled from the source against the fluent range probed there.

    PYTHONPATH=. python docs/evaluation/experiments/transfer_fluent.py [--target gemma3-270m] [--prompts 20] [--samples 3]
    PYTHONPATH=. python docs/evaluation/experiments/transfer_fluent.py --dev     # how TRANSFER_PROBE was chosen

``--dev``: on 30 neutral dev prompts × 3 samples of 25 tokens, each transferred switch's perplexity at a row of ε, and
the range three probe sizes find (training's 4 prompts, 8 prompts, 8 prompts × 3 samples of 20 tokens).

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
from dataclasses import replace

import lmswitch as ls
from lmswitch.harness.evaluate import PROTOCOL, evaluate_settings, load_prompts
from lmswitch.harness.frontier import SPECS, FluencyRules, Probe, calibrate
from lmswitch.io.resources import shipped_switches_dir

DEV_STRENGTHS = (1.5, 2.0, 3.0, 4.0, 6.0)
DEV_PROBES = (Probe(), Probe(prompts=8), Probe(prompts=8, samples=3, max_new_tokens=20))


def dev(source: ls.LanguageModel, target: ls.LanguageModel) -> None:
    """The dev table: perplexity relative to unsteered along a row of ε, and the ranges three probe sizes find."""
    prompts = load_prompts("neutral", 30, split="dev")
    protocol = replace(PROTOCOL, samples=3, max_new_tokens=25)
    base = evaluate_settings(target, [[]], prompts, protocol)[0]
    for name in SPECS:
        moved = ls.transfer(ls.load_switch(shipped_switches_dir() / f"{name}.safetensors", source), source, target)
        ranges = [calibrate(target, moved, probe) for probe in DEV_PROBES]
        eps = [side * s for side in (1, -1) for s in DEV_STRENGTHS]
        evals = evaluate_settings(target, [[(moved, e)] for e in eps], prompts, protocol)
        row = ", ".join(f"{e:+g}: {ev.perplexity / base.perplexity:.2f}×" for e, ev in zip(eps, evals, strict=True))
        print(f"{name}: {row}; probes {ranges}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="gemma3-270m")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--dev", action="store_true", help="the dev table instead (how TRANSFER_PROBE was chosen)")
    args = ap.parse_args()
    source, target = ls.load_model(), ls.load_model(args.target)
    if args.dev:
        return dev(source, target)
    protocol = replace(PROTOCOL, samples=args.samples, max_new_tokens=25)
    print(f"{source.name} → {target.name}; test prompts × {args.samples} samples of 25 tokens, same seeds per row\n")
    print("| switch | setting | ε | perplexity | Dist-3 | looping | its metric |\n|---|---|---|---|---|---|---|")
    for name, spec in SPECS.items():
        switch = ls.load_switch(shipped_switches_dir() / f"{name}.safetensors", source)
        moved = ls.transfer(switch, source, target)
        start = time.perf_counter()
        moved.card = ls.calibrated_card(target, moved)
        probe_s = time.perf_counter() - start
        low, high = moved.card.fluent_eps
        rows = {"unsteered": 0.0, "scaled from the source": moved.card["transfer"]["scaled_eps"],
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
