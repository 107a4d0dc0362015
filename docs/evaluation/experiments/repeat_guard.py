"""The repeat guard at the shipped switches' slider ends (EVALUATION.md, "The repeat guard"): chosen on dev, reported on test.

    PYTHONPATH=. python docs/evaluation/experiments/repeat_guard.py --split dev --windows 0,1,4,8
    PYTHONPATH=. python docs/evaluation/experiments/repeat_guard.py --split test --windows 0,4
    PYTHONPATH=. python docs/evaluation/experiments/repeat_guard.py --sliders --windows 4 --out docs/evaluation/frontier/sliders-guard
    PYTHONPATH=. python docs/evaluation/experiments/repeat_guard.py --split dev --windows 4 --spans 0,32 --tokens 40

``--spans``: the counting guard (a token written twice among the last span tokens guarded too; tried, not adopted)
against the library's, at the slider ends, with a column of samples holding three "'s" or more.

``--sliders``: every whole ε of each slider on the test prompts (``check_sliders``, as ``eval --frontier … --sliders``),
decoded with the first window given; ``--out`` also writes ``sliders.json`` there.

For each shipped switch, at both ends of its slider (its card's fluent range: where a user can drag it), on its
frontier prompt set (neutral; provocative for detox) with the frontier's protocol (5 samples × 25 tokens, top-p 0.9,
seeds 0–4), in bfloat16 as the app runs: the unsteered model and the switch decoded with each guard window (0: no
guard, the paper's plain steering), all with the same seeds. Each row: the switch's metric, perplexity and Dist-3 as
multiples of the unsteered model's, looping samples (a word three times in a row, the frontier's rule), samples that
repeat a word twice or a three-word phrase (:func:`~lmswitch.core.guided.repetitive`, what a reader also notices),
and the frontier's verdict.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, deque
from dataclasses import replace
from pathlib import Path

import torch

import lmswitch as ls
from lmswitch.core import generate
from lmswitch.core.guard import RepeatGuard
from lmswitch.core.guided import repetitive
from lmswitch.harness.evaluate import PROTOCOL, Evaluation, evaluate_settings
from lmswitch.harness.frontier import FrontierSpec, check_sliders
from lmswitch.harness.options import load_prompts
from lmswitch.io.resources import shipped_switch_path


def phrase_share(ev: Evaluation) -> float:
    return sum(repetitive(s.text) for s in ev.texts) / max(len(ev.texts), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", choices=("dev", "test"), default="dev")
    ap.add_argument("--windows", default="0,1,4,8", help="guard windows to compare (0: no guard)")
    ap.add_argument("--switches", default="sentiment,detox,formality")
    ap.add_argument("--prompts", type=int, default=50, help="prompts of the split (the frontier's 50)")
    ap.add_argument("--sliders", action="store_true", help="every whole ε of each slider on the test prompts")
    ap.add_argument("--out", type=Path, help="with --sliders: write sliders.json to this folder")
    ap.add_argument("--spans", default=None, help="compare the counting guard (CountingGuard) with these spans (0: only the "
                                                  "window, the library's guard) at --windows' first")
    ap.add_argument("--uses", type=int, default=2, help="with --spans: CountingGuard.uses")
    ap.add_argument("--tokens", type=int, default=PROTOCOL.max_new_tokens, help="tokens per sample (the frontier's 25; the app's 40)")
    args = ap.parse_args()
    lm = ls.load_model()
    windows = [int(w) for w in args.windows.split(",")]
    protocol = replace(PROTOCOL, max_new_tokens=args.tokens)
    if args.spans:
        return spans(lm, args, protocol, windows[0], [int(s) for s in args.spans.split(",")])
    if args.sliders:
        return sliders(lm, args.switches.split(","), windows[0], args.prompts, args.out)
    print("| switch | ε | guard | metric | perplexity | Dist-3 | looping | word or phrase repeated | verdict |\n|---|---|---|---|---|---|---|---|---|")
    for name in args.switches.split(","):
        spec = FrontierSpec.for_switch(name)
        switch = ls.load_switch(shipped_switch_path(name), lm)
        prompts = load_prompts(spec.prompts, args.prompts, args.split)
        start = time.perf_counter()
        base = evaluate_settings(lm, [[]], prompts, replace(PROTOCOL, repeat_guard=0))[0]
        print(f"| {name} | 0 | – | {getattr(base, spec.metric):.3f} | {base.perplexity:.2f} | {base.dist3:.3f} | "
              f"{base.repetition:.1%} | {phrase_share(base):.1%} | – |")
        low, high = switch.slider_range()
        ends = [e for e in (high, low) if e]
        for w in windows:
            evs = evaluate_settings(lm, [[(switch, e)] for e in ends], prompts, replace(PROTOCOL, repeat_guard=w))
            for e, ev in zip(ends, evs, strict=True):
                problems = spec.rules.problems(ev, base)
                print(f"| {name} | {e:+g} | {w or 'off'} | {getattr(ev, spec.metric):.3f} | {ev.perplexity / base.perplexity:.2f}× | "
                      f"{ev.dist3 / base.dist3:.3f}× | {ev.repetition:.1%} | {phrase_share(ev):.1%} | "
                      f"{'fluent' if not problems else '; '.join(problems)} |", flush=True)
        print(f"<!-- {name}: {spec.metric}, {len(prompts)} {args.split} prompts × {PROTOCOL.samples}, {time.perf_counter() - start:.0f} s -->",
              flush=True)


class CountingGuard(RepeatGuard):
    """A variant tried and not adopted (EVALUATION.md, "Phrase repeats"): besides the last ``window`` tokens, steering may
    not raise a token written ``uses`` times among a row's last ``span`` tokens (``span`` 0: the library's guard)."""

    span, uses = 0, 2

    @classmethod
    def of_rows(cls, rows, window: int) -> RepeatGuard:
        keep = max(window, cls.span)
        return cls([deque(list(ids)[-keep:], maxlen=keep) for ids in rows], window)

    def _recent_ids(self) -> torch.Tensor:
        rows = []
        for recent in map(list, self.recent):
            last = recent[-self.window :]
            counts = Counter(recent[-self.span :]) if self.span else Counter()
            rows.append(last + [t for t, n in counts.items() if n >= self.uses and t not in last])
        width = max(map(len, rows), default=0)
        return torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.long).reshape(len(rows), width)


def possessive_share(ev: Evaluation) -> float:
    """Samples with three or more "'s" (the formality switch's negative side strings them together)."""
    return sum(s.text.count("'s") >= 3 for s in ev.texts) / max(len(ev.texts), 1)


def spans(lm: ls.LanguageModel, args: argparse.Namespace, protocol, window: int, spans: list[int]) -> None:
    """Each switch's slider ends with the guard's ``window`` and each of ``spans`` (words written ``--uses`` times
    among the last span tokens guarded too), beside the unsteered model, all with the same seeds."""
    print("| switch | ε | span | metric | perplexity | Dist-3 | looping | repeats | three 's | verdict |\n|---|---|---|---|---|---|---|---|---|---|")
    CountingGuard.uses = args.uses
    generate.RepeatGuard = CountingGuard  # what generate_tokens builds (the evaluation's decode)
    for name in args.switches.split(","):
        spec = FrontierSpec.for_switch(name)
        switch = ls.load_switch(shipped_switch_path(name), lm)
        prompts = load_prompts(spec.prompts, args.prompts, args.split)
        low, high = switch.slider_range()
        ends = [e for e in (high, low) if e]
        start = time.perf_counter()
        for span in spans:
            CountingGuard.span = span
            base, *evs = evaluate_settings(lm, [[]] + [[(switch, e)] for e in ends], prompts, replace(protocol, repeat_guard=window))
            for e, ev in [(0.0, base), *zip(ends, evs, strict=True)]:
                problems = spec.rules.problems(ev, base) if e else []
                print(f"| {name} | {e:+g} | {span} | {getattr(ev, spec.metric):.3f} | {ev.perplexity / base.perplexity:.2f}× | "
                      f"{ev.dist3 / base.dist3:.3f}× | {ev.repetition:.1%} | {phrase_share(ev):.1%} | {possessive_share(ev):.1%} | "
                      f"{'fluent' if not problems else '; '.join(problems)} |", flush=True)
        print(f"<!-- {name}: {spec.metric}, {len(prompts)} {args.split} prompts × {protocol.samples} × {protocol.max_new_tokens} "
              f"tokens, uses {args.uses}, {time.perf_counter() - start:.0f} s -->", flush=True)


def sliders(lm: ls.LanguageModel, names: list[str], window: int, limit: int, out: Path | None) -> None:
    """Each slider's whole ε on the test prompts with the guard's ``window``: metric / perplexity × / looping / repeats."""
    checks = []
    print("| switch | ε | metric | perplexity | Dist-3 | looping | word or phrase repeated | verdict |\n|---|---|---|---|---|---|---|---|")
    for name in names:
        spec = FrontierSpec.for_switch(name)
        check = check_sliders(lm, ls.load_switch(shipped_switch_path(name), lm), spec, replace(PROTOCOL, repeat_guard=window), limit)
        checks.append(check.to_dict())
        for e, ev in [(0.0, check.base), *check.points]:
            problems = spec.rules.problems(ev, check.base) if e else []
            print(f"| {name} | {e:+g} | {getattr(ev, spec.metric):.3f} | {ev.perplexity / check.base.perplexity:.2f}× | "
                  f"{ev.dist3 / check.base.dist3:.3f}× | {ev.repetition:.1%} | {phrase_share(ev):.1%} | "
                  f"{'fluent' if not problems else '; '.join(problems)} |", flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "sliders.json").write_text(json.dumps(checks, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
