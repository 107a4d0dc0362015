"""Phrase repetition along the shipped sliders: does steering repeat whole phrases more often than the unsteered model?

    PYTHONPATH=. python docs/evaluation/experiments/phrase_loops.py --out /tmp/phrase_loops/phrase_loops.json
    PYTHONPATH=. python docs/evaluation/experiments/phrase_loops.py --prompts 20 --tokens 40 --switches formality --out f.json

The frontier's loop rule (:func:`~lmswitch.harness.evaluate.loops`) only counts one word three times in a row; steered
samples also repeat whole phrases ("Is the answer to this question? Yes Is the answer to this question") or string
possessives ("downtown's "Glass Sushi"'s …"'s"). For each shipped switch, as
:func:`~lmswitch.harness.frontier.check_sliders` does (one ``evaluate_settings`` call, the unsteered row first, every
whole ε of ``switch.slider_range()`` but 0, the same seeds in every row), but on the **dev** prompts (default 30 of the
switch's frontier set × ``PROTOCOL.samples``), with the default protocol (repeat guard on, as in the app), once per
length in ``--tokens`` (default 25, the protocol's, and 40, the app's). Per sample, on words split at whitespace,
lower-cased, punctuation stripped from their edges:

* ``word_loop``: the existing rule (one word three times in a row);
* ``phrase3`` / ``phrase4``: some n-gram with n ≥ 3 (≥ 4) occurs twice or more, the occurrences not overlapping;
* ``immediate``: a span of 2–8 words immediately followed by itself ("a b c a b c");
* ``poss3``: (formality only) three or more "'s" (also "’s"), contractions ("it's", "he's") included;
* ``poss3_noun``: the same without the "'s" of it, he, she, that, what, there, here, who, let, where, how, when, why.

Each steered row's count is compared with the unsteered row's by a one-sided Fisher exact test (``p_*``: the steered
rate is higher). The JSON (``--out``) holds per switch and length every row's counts, shares and p-values, the samples
with the worst phrase repeats at both slider ends, and all texts with their flags.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import replace
from pathlib import Path

from scipy.stats import fisher_exact

import lmswitch as ls
from lmswitch.harness.evaluate import PROTOCOL, Evaluation, evaluate_settings, loops
from lmswitch.harness.frontier import FrontierSpec
from lmswitch.harness.options import load_prompts
from lmswitch.io.resources import shipped_switch_path

METRICS = ("word_loop", "phrase3", "phrase4", "immediate", "poss3", "poss3_noun")
_EDGES = re.compile(r"^[\W_]+|[\W_]+$")
_POSSESSIVE = re.compile(r"['’]s\b", re.IGNORECASE)
_CONTRACTED = re.compile(r"\b(?:it|he|she|that|what|there|here|who|let|where|how|when|why)['’]s\b", re.IGNORECASE)  # "it's": not possessive


def words(text: str) -> list[str]:
    """Whitespace-split words, lower-cased, punctuation stripped from their edges (words of punctuation only dropped)."""
    out = (_EDGES.sub("", w.lower()) for w in text.split())
    return [w for w in out if w]


def longest_repeat(ws: list[str]) -> int:
    """The longest n such that some n-gram of ``ws`` occurs twice without the occurrences overlapping (0: none)."""
    best = 0
    for n in range(1, len(ws) // 2 + 1):
        first: dict[tuple[str, ...], int] = {}
        found = False
        for i in range(len(ws) - n + 1):
            gram = tuple(ws[i : i + n])
            j = first.setdefault(gram, i)
            if i - j >= n:
                found = True
                break
        if not found:
            break  # no repeated n-gram means no repeated longer one either
        best = n
    return best


def immediate_loop(ws: list[str], shortest: int = 2, longest: int = 8) -> bool:
    """Whether a span of ``shortest``–``longest`` words is immediately followed by itself."""
    return any(ws[i : i + k] == ws[i + k : i + 2 * k] for k in range(shortest, longest + 1) for i in range(len(ws) - 2 * k + 1))


def flags(text: str) -> dict:
    ws = words(text)
    rep = longest_repeat(ws)
    return {"word_loop": loops(text), "phrase3": rep >= 3, "phrase4": rep >= 4, "immediate": immediate_loop(ws),
            "poss3": len(_POSSESSIVE.findall(text)) >= 3,
            "poss3_noun": len(_POSSESSIVE.findall(text)) - len(_CONTRACTED.findall(text)) >= 3, "longest_repeat": rep}


def row(eps: float, ev: Evaluation, base_counts: dict | None, metrics: tuple[str, ...]) -> dict:
    f = [flags(s.text) for s in ev.texts]
    n = len(f)
    counts = {m: sum(x[m] for x in f) for m in metrics}
    out = {"eps": eps, "n": n, "counts": counts, "shares": {m: counts[m] / n for m in metrics}}
    if base_counts is not None:  # one-sided: the steered rate is higher than the unsteered one
        out["p"] = {m: float(fisher_exact([[counts[m], n - counts[m]], [base_counts[m], n - base_counts[m]]], alternative="greater")[1])
                    for m in metrics}
    out["samples"] = [{"prompt": s.prompt, "text": s.text, **x} for s, x in zip(ev.texts, f, strict=True)]
    return out


def worst(r: dict, k: int) -> list[dict]:
    """The ``k`` samples of a row with the longest repeated phrase (ties: immediate loops, then more possessives first)."""
    ranked = sorted(r["samples"], key=lambda s: (s["longest_repeat"], s["immediate"], len(_POSSESSIVE.findall(s["text"]))), reverse=True)
    return [{"eps": r["eps"], "prompt": s["prompt"], "text": s["text"], "longest_repeat": s["longest_repeat"]}
            for s in ranked[:k] if s["longest_repeat"] >= 3 or s["immediate"] or s["poss3"]]


def cell(r: dict, m: str) -> str:
    c, n = r["counts"][m], r["n"]
    p = r.get("p", {}).get(m)
    return f"{c}/{n} {100 * c / n:.1f}%" + ("" if p is None else f" (p {p:.2g})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--switches", default="sentiment,detox,formality")
    ap.add_argument("--prompts", type=int, default=30, help="prompts of the split, per switch")
    ap.add_argument("--samples", type=int, default=PROTOCOL.samples, help="samples per prompt (seeds 0, 1, …)")
    ap.add_argument("--tokens", default=f"{PROTOCOL.max_new_tokens},40", help="new-token lengths, comma-separated")
    ap.add_argument("--split", choices=("dev", "test"), default="dev", help="the prompt split (dev: nothing here is tuned on test)")
    ap.add_argument("--examples", type=int, default=3, help="worst samples kept per slider end")
    ap.add_argument("--out", type=Path, required=True, help="the JSON to write")
    args = ap.parse_args()
    lm = ls.load_model()
    result: dict = {"model": lm.name, "split": args.split, "prompts": args.prompts, "protocol": {}, "switches": {}}
    started = time.perf_counter()
    for name in args.switches.split(","):
        spec = FrontierSpec.for_switch(name)
        switch = ls.load_switch(shipped_switch_path(name), lm)
        low, high = switch.slider_range()
        eps = [float(e) for e in range(int(low), int(high) + 1) if e != 0]
        prompts = load_prompts(spec.prompts, args.prompts, split=args.split)
        metrics = METRICS if name == "formality" else METRICS[:-2]
        result["switches"][name] = {"slider": [low, high], "prompt_set": spec.prompts, "lengths": {}}
        for tokens in (int(t) for t in args.tokens.split(",")):
            protocol = replace(PROTOCOL, samples=args.samples, max_new_tokens=tokens)
            result["protocol"][str(tokens)] = protocol.to_dict()
            start = time.perf_counter()
            base, *evals = evaluate_settings(lm, [[]] + [[(switch, e)] for e in eps], prompts, protocol)
            seconds = time.perf_counter() - start
            b = row(0.0, base, None, metrics)
            rows = [b] + [row(e, ev, b["counts"], metrics) for e, ev in zip(eps, evals, strict=True)]
            ends = {"low": worst(rows[1], args.examples), "high": worst(rows[-1], args.examples)}
            result["switches"][name]["lengths"][str(tokens)] = {"seconds": seconds, "rows": rows, "examples": ends}
            print(f"\n### {name}, {len(prompts)} {args.split} prompts × {args.samples} samples × {tokens} tokens, "
                  f"{len(rows)} settings in {seconds:.0f} s (p: one-sided Fisher vs unsteered)\n")
            print("| ε | " + " | ".join(metrics) + " |\n|---|" + "---|" * len(metrics))
            for r in rows:
                print(f"| {r['eps']:+g} | " + " | ".join(cell(r, m) for m in metrics) + " |")
            for end, samples in ends.items():
                for s in samples:
                    print(f"<!-- {end} ε {s['eps']:+g}, repeat {s['longest_repeat']} words: {s['prompt']!r} → {s['text']!r} -->")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")  # after each length
    result["seconds"] = time.perf_counter() - started
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\n{result['seconds']:.0f} s in all; {args.out}")


if __name__ == "__main__":
    main()
