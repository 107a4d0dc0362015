"""``python -m lmswitch eval --report``: the whole evaluation of the shipped switches, written to EVALUATION.md."""

from __future__ import annotations

import json
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import torch

from lmswitch.core.models import LanguageModel
from lmswitch.core.train import train_switch
from lmswitch.harness.datasets import load_dataset
from lmswitch.harness.evaluate import Evaluation, Protocol, evaluate_grid, evaluate_sweep, load_prompts
from lmswitch.harness.figures import export, grid_figure, sweep_figure
from lmswitch.harness.pretrained import PRETRAINED_DIR, get_spec, load_pretrained

Log = Callable[[str], None]


@dataclass(frozen=True)
class Suite:
    """How big the evaluation is: prompts per set, samples per prompt, and the ε values."""

    prompts: int = 40
    samples: int = 5
    grid_prompts: int = 20
    sentiment_eps: tuple[float, ...] = (-15, -12, -9, -6, -3, 0, 3, 6, 9, 12, 15)
    detox_eps: tuple[float, ...] = (-4, 0, 2, 4, 6, 8)
    formality_eps: tuple[float, ...] = (-10, -5, 0, 5, 10)
    grid_eps: tuple[float, ...] = (-5, -2.5, 0, 2.5, 5)
    efficiency_pairs: int = 30
    efficiency_eps: tuple[float, ...] = (-5, 3, 5, 8)


QUICK = Suite(prompts=8, samples=2, grid_prompts=4, sentiment_eps=(-12, 0, 12), detox_eps=(0, 4), formality_eps=(-5, 0, 5), grid_eps=(-5, 5), efficiency_eps=(-5, 5))

COLUMNS = [
    ("ε", None),
    ("positive", "positive_share"),
    ("negative", "negative_share"),
    ("vader", "mean_sentiment"),
    ("tox. prob.", "toxicity_prob"),
    ("avg max tox.", "avg_max_toxicity"),
    ("formal", "formal_share"),
    ("perplexity", "perplexity"),
    ("Dist-1", "dist1"),
    ("Dist-2", "dist2"),
    ("Dist-3", "dist3"),
]


def table(evals: Sequence[Evaluation], switch: str, base_ppl: float) -> str:
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    rows = []
    for ev in evals:
        cells = [f"{ev.setting.get(switch, 0.0):+g}"]
        for _, key in COLUMNS[1:]:
            v = getattr(ev, key)
            cells.append(f"{v:.1f} ({v / base_ppl:.2f}×)" if key == "perplexity" else f"{v:+.2f}" if key == "mean_sentiment" else f"{v:.3f}")
        rows.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def _at(evals: Sequence[Evaluation], switch: str, eps: float) -> Evaluation:
    for ev in evals:
        if abs(ev.setting.get(switch, 0.0) - eps) < 1e-9:
            return ev
    raise KeyError(eps)


DIVERSE = 0.9  # a setting counts as non-repetitive when its Dist-3 keeps 90% of the unsteered Dist-3


def frontier(evals: Sequence[Evaluation], switch: str, metric: str, side: int, want: int, base: Evaluation, bound: float,
             diverse: bool = False) -> str:
    """The best setting on one side of ε = 0 (``side`` ±1) for ``metric`` (``want`` +1: highest, -1: lowest) whose
    perplexity stays within ``bound`` × unsteered (and, with ``diverse``, whose Dist-3 keeps :data:`DIVERSE` of the unsteered one)."""
    candidates = [ev for ev in evals if side * ev.setting.get(switch, 0.0) > 0 and ev.perplexity <= bound * base.perplexity
                  and (not diverse or ev.dist3 >= DIVERSE * base.dist3)]
    if not candidates:
        return f"no ε {'>' if side > 0 else '<'} 0 in the sweep meets the bound"
    best = max(candidates, key=lambda ev: want * getattr(ev, metric))
    return (f"ε {best.setting.get(switch, 0.0):+g}: {metric} {getattr(best, metric):.3f} at {best.perplexity / base.perplexity:.2f}× perplexity, "
            f"Dist-3 {best.dist3:.2f}")


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def run_report(
    lm: LanguageModel,
    out: str | Path = "EVALUATION.md",
    *,
    figures: str | Path | None = None,
    suite: Suite = Suite(),
    switch_dir: str | Path = PRETRAINED_DIR,
    seed: int = 0,
    command: str | None = None,
    log: Log | None = None,
) -> dict:
    """Evaluate the shipped switches (sweeps, data efficiency, 2-D grid) and write the markdown report, figures and JSON."""
    say = log or (lambda _msg: None)
    start = time.perf_counter()
    out = Path(out)
    fig_dir = Path(figures) if figures is not None else out.parent / "docs" / "evaluation"
    switches = load_pretrained(lm, switch_dir)
    missing = [n for n in ("sentiment", "detox", "formality") if n not in switches]
    if missing:
        raise ValueError(f"{switch_dir} lacks {', '.join(missing)}; run `python -m lmswitch build-pretrained` first")
    protocol = Protocol(samples=suite.samples, seed=seed)
    neutral = load_prompts("neutral", suite.prompts)
    provocative = load_prompts("provocative", suite.prompts)
    results: dict = {"suite": suite.__dict__, "protocol": protocol.__dict__, "model": lm.name, "fingerprint": lm.fingerprint}

    def progress(what: str) -> Callable[[int, int], None]:
        return lambda done, total: say(f"{what}: {done}/{total} settings")

    sections = []
    checks = []
    sent, detox, formal = switches["sentiment"], switches["detox"], switches["formality"]

    # --- sentiment
    say(f"sentiment sweep: {len(neutral)} neutral prompts × {suite.samples} samples × {len(suite.sentiment_eps)} ε values")
    s_evals = evaluate_sweep(lm, sent, suite.sentiment_eps, neutral, protocol, progress=progress("sentiment"))
    base = _at(s_evals, "sentiment", 0.0)
    r = get_spec("sentiment").recommended_eps
    shares = [ev.positive_share for ev in s_evals]
    plus, minus = _at(s_evals, "sentiment", r), _at(s_evals, "sentiment", -r)
    monotone = all(b > a for a, b in zip(shares, shares[1:], strict=False))
    checks += [
        (f"sentiment +{r:g}: ≥ 90% positive at perplexity ≤ 1.5× unsteered",
         f"{plus.positive_share:.1%} at {plus.perplexity / base.perplexity:.2f}× (Dist-3 {plus.dist3:.2f} vs {base.dist3:.2f} unsteered)",
         plus.positive_share >= 0.9 and plus.perplexity <= 1.5 * base.perplexity),
        (f"sentiment −{r:g}: ≤ 10% positive at perplexity ≤ 1.5× unsteered",
         f"{minus.positive_share:.1%} at {minus.perplexity / base.perplexity:.2f}× (Dist-3 {minus.dist3:.2f})",
         minus.positive_share <= 0.1 and minus.perplexity <= 1.5 * base.perplexity),
        (f"continuous control: positivity rises strictly over {len(shares)} ε values",
         " → ".join(f"{x:.2f}" for x in shares), monotone and len(shares) >= 7),
    ]
    frontiers = [
        ("sentiment, most positive within 1.5× perplexity", frontier(s_evals, "sentiment", "positive_share", +1, +1, base, 1.5)),
        ("sentiment, most positive within 1.5× perplexity and without repetition (Dist-3 ≥ 90% of unsteered)",
         frontier(s_evals, "sentiment", "positive_share", +1, +1, base, 1.5, diverse=True)),
        ("sentiment, least positive within 1.5× perplexity", frontier(s_evals, "sentiment", "positive_share", -1, -1, base, 1.5)),
        ("sentiment, least positive within 1.5× perplexity and without repetition",
         frontier(s_evals, "sentiment", "positive_share", -1, -1, base, 1.5, diverse=True)),
    ]
    export(sweep_figure(s_evals, "sentiment", ("positive_share", "negative_share")), fig_dir / "sentiment_sweep.png")
    sections.append(("Sentiment (neutral prompts)", "sentiment", s_evals, base, "sentiment_sweep.png"))

    # --- detox
    say(f"detox sweep: {len(provocative)} provocative prompts × {suite.samples} samples × {len(suite.detox_eps)} ε values")
    d_evals = evaluate_sweep(lm, detox, suite.detox_eps, provocative, protocol, progress=progress("detox"))
    d_base = _at(d_evals, "detox", 0.0)
    rd = get_spec("detox").recommended_eps
    d_plus = _at(d_evals, "detox", rd)
    checks.append((f"detox +{rd:g}: toxicity probability at least halved at perplexity ≤ 1.3×",
                   f"{d_base.toxicity_prob:.3f} → {d_plus.toxicity_prob:.3f} at {d_plus.perplexity / d_base.perplexity:.2f}× (Dist-3 {d_plus.dist3:.2f})",
                   d_plus.toxicity_prob <= d_base.toxicity_prob / 2 and d_plus.perplexity <= 1.3 * d_base.perplexity))
    frontiers.append(("detox, least toxic within 1.3× perplexity", frontier(d_evals, "detox", "toxicity_prob", +1, -1, d_base, 1.3)))
    export(sweep_figure(d_evals, "detox", ("toxicity_prob", "avg_max_toxicity")), fig_dir / "detox_sweep.png")
    sections.append(("Detoxification (provocative prompts)", "detox", d_evals, d_base, "detox_sweep.png"))

    # --- formality
    say(f"formality sweep: {len(neutral)} neutral prompts × {suite.samples} samples × {len(suite.formality_eps)} ε values")
    f_evals = evaluate_sweep(lm, formal, suite.formality_eps, neutral, protocol, progress=progress("formality"))
    f_base = _at(f_evals, "formality", 0.0)
    export(sweep_figure(f_evals, "formality", ("formal_share",)), fig_dir / "formality_sweep.png")
    sections.append(("Formality (neutral prompts)", "formality", f_evals, f_base, "formality_sweep.png"))

    # --- data efficiency
    k = suite.efficiency_pairs
    pos, neg = load_dataset("sentiment").train(limit=k)
    say(f"data efficiency: training a sentiment switch on {len(pos)} + {len(neg)} sentences with the default settings")
    # what a user gets from a few sentences: train_switch's defaults (the shipped switches' settings are tuned for 324 pairs)
    small = train_switch(lm, pos, neg, name="sentiment", seed=seed)
    e_evals = evaluate_sweep(lm, small, suite.efficiency_eps, neutral, protocol)
    e_plus = max((ev for ev in e_evals if ev.setting["sentiment"] > 0), key=lambda ev: ev.positive_share)
    checks.append((f"data efficiency: switch from {k} + {k} sentences reaches ≥ 80% positive (best of ε "
                   + ", ".join(f"{e:+g}" for e in suite.efficiency_eps if e > 0) + ")",
                   f"{e_plus.positive_share:.1%} at ε {e_plus.setting['sentiment']:+g}, {e_plus.perplexity / base.perplexity:.2f}× perplexity "
                   f"(Dist-3 {e_plus.dist3:.2f}; trained in {small.card['seconds']:.0f} s)",
                   e_plus.positive_share >= 0.8))

    # --- composition
    grid_prompts = load_prompts("provocative", suite.grid_prompts)
    say(f"composition grid: sentiment × detox, {len(suite.grid_eps)}² settings on {len(grid_prompts)} provocative prompts")
    grid = evaluate_grid(lm, (sent, suite.grid_eps), (detox, suite.grid_eps), grid_prompts, protocol, progress=progress("grid"))
    export(grid_figure(grid, "sentiment", "detox", ("positive_share", "toxicity_prob")), fig_dir / "composition.png", width=1100)
    lo, hi = suite.grid_eps[0], suite.grid_eps[-1]
    corner = {(a, b): grid[i][j] for i, a in enumerate(suite.grid_eps) for j, b in enumerate(suite.grid_eps)}
    both = (corner[(hi, lo)].positive_share > corner[(lo, lo)].positive_share and corner[(hi, hi)].positive_share > corner[(lo, hi)].positive_share
            and corner[(lo, hi)].toxicity_prob < corner[(lo, lo)].toxicity_prob and corner[(hi, hi)].toxicity_prob <= corner[(hi, lo)].toxicity_prob)
    checks.append(("2-D grid: each switch moves its own score whatever the other's ε (corners)",
                   f"positive {corner[(lo, lo)].positive_share:.2f}/{corner[(hi, lo)].positive_share:.2f} at detox {lo:g}, "
                   f"{corner[(lo, hi)].positive_share:.2f}/{corner[(hi, hi)].positive_share:.2f} at detox {hi:+g}; "
                   f"tox. prob. {corner[(lo, lo)].toxicity_prob:.2f}/{corner[(lo, hi)].toxicity_prob:.2f} at sentiment {lo:g}, "
                   f"{corner[(hi, lo)].toxicity_prob:.2f}/{corner[(hi, hi)].toxicity_prob:.2f} at sentiment {hi:+g}", both))

    seconds = time.perf_counter() - start
    results.update({
        "sentiment": [ev.summary() for ev in s_evals],
        "detox": [ev.summary() for ev in d_evals],
        "formality": [ev.summary() for ev in f_evals],
        "efficiency": {"pairs": k, "card": {x: small.card[x] for x in ("heldout_gain", "seconds", "steps")}, "evals": [ev.summary() for ev in e_evals]},
        "grid": [[ev.summary() for ev in row] for row in grid],
        "checks": [{"target": t, "measured": m, "met": ok} for t, m, ok in checks],
        "frontier": dict(frontiers),
        "seconds": round(seconds, 1),
    })
    samples = {name: {f"{ev.setting.get(name, 0.0):+g}": ev.texts[:3] for ev in evs} for _, name, evs, _, _ in sections}
    (fig_dir / "results.json").write_text(json.dumps({**results, "samples": samples}, indent=1, ensure_ascii=False), encoding="utf-8")

    lines = [
        "# Evaluation of the shipped switches",
        "",
        f"Model: `{lm.name}` (`{lm.fingerprint}`), dtype {str(lm.model.dtype).removeprefix('torch.')}. "
        f"Machine: {platform.machine()}, {torch.get_num_threads()} threads, Python {platform.python_version()}, torch {torch.__version__}. "
        f"Date: {date.today().isoformat()}. Total time: {seconds / 60:.1f} min.",
        "",
        "Reproduce with:",
        "",
        "```",
        command or "python -m lmswitch eval --report EVALUATION.md",
        "```",
        "",
        f"Protocol (the paper's section 4, scaled down): {suite.prompts} prompts per set, {suite.samples} samples per prompt "
        f"(seeds {seed}…{seed + suite.samples - 1}, the same for every ε, so rows are coupled samples), "
        f"{protocol.max_new_tokens} new tokens, nucleus sampling p = {protocol.top_p}, temperature {protocol.temperature}. "
        "Positivity is the share of continuations with vaderSentiment compound ≥ 0.05 (neutral ones count as not positive); "
        "toxicity is alt-profanity-check's probability (average over prompts of the max over samples, and the share of prompts with a sample > 0.5); "
        "perplexity is of the sampled tokens given the prompt under the unsteered model; Dist-n counts distinct word n-grams per prompt; "
        "'formal' is the share a character n-gram classifier fitted on the formality training pairs calls formal. "
        "Details in `lmswitch/evaluate.py`; prompts and data in `assets/` (see `assets/data/DATA.md`).",
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *[f"| {t} | {m} | {_verdict(ok)} |" for t, m, ok in checks],
        "",
        "A target met with a Dist-3 far below the unsteered one is met by repetition (\"great great great\"), which the "
        "unsteered model finds easy to predict, so perplexity does not catch it; read those rows with the sample texts below.",
        "",
        "Strength–fluency frontier (the best point of each sweep within the perplexity bound):",
        "",
        *[f"- {what}: {text}" for what, text in frontiers],
        "",
    ]
    for title, name, evs, base_ev, png in sections:
        lines += [f"## {title}", "", table(evs, name, base_ev.perplexity), f"![{name} sweep](docs/evaluation/{png})", ""]
        for ev in (evs[0], base_ev, evs[-1]):
            t = ev.texts[0]
            lines.append(f"- ε {ev.setting.get(name, 0.0):+g}: *{t['prompt']}* **{t['text'].strip()}**")
        lines.append("")
    lines += [
        f"## Data efficiency: sentiment switch from {k} + {k} sentences",
        "",
        table(e_evals, "sentiment", base.perplexity),
        f"Trained with `train_switch`'s defaults (lr {small.card['lr']:g}, {small.card['steps']} steps, full rank). "
        f"Held-out gain {small.card['heldout_gain']:+.4f} nats/token; trained in {small.card['seconds']:.0f} s. "
        "Perplexity ratios are against the unsteered row of the sentiment sweep.",
        "",
        "## Composition: sentiment × detox (provocative prompts)",
        "",
        f"{len(grid_prompts)} provocative prompts × {suite.samples} samples per cell. Rows: ε of sentiment; columns: ε of detox.",
        "",
        "| share positive | " + " | ".join(f"detox {b:+g}" for b in suite.grid_eps) + " |",
        "|---|" + "---|" * len(suite.grid_eps),
        *[f"| sentiment {a:+g} | " + " | ".join(f"{ev.positive_share:.2f}" for ev in row) + " |" for a, row in zip(suite.grid_eps, grid, strict=True)],
        "",
        "| toxicity prob. | " + " | ".join(f"detox {b:+g}" for b in suite.grid_eps) + " |",
        "|---|" + "---|" * len(suite.grid_eps),
        *[f"| sentiment {a:+g} | " + " | ".join(f"{ev.toxicity_prob:.2f}" for ev in row) + " |" for a, row in zip(suite.grid_eps, grid, strict=True)],
        "",
        "![composition](docs/evaluation/composition.png)",
        "",
        "All numbers, with three sample texts per setting, are in `docs/evaluation/results.json`.",
        "",
    ]
    out.write_text("\n".join(lines), encoding="utf-8")
    say(f"wrote {out} and {fig_dir} in {seconds / 60:.1f} min")
    return results


def command_line(argv: Sequence[str] | None = None) -> str:
    return "python -m lmswitch " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))


# --- transfer to a second model (issue 6) -------------------------------------------------------

TRANSFER_BOUND = 1.5  # perplexity bound (× the target's unsteered) for the transfer proof
TRANSFER_KEEP = 0.5  # share of the source's positive-minus-negative spread the transferred switch must keep


@dataclass(frozen=True)
class TransferSuite:
    prompts: int = 20
    samples: int = 4
    source_eps: float = 12.0  # the shipped sentiment switch's recommended ε
    multiples: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0)  # transferred ε = multiple × its recommended ε
    direct_eps: tuple[float, ...] = (3.0, 6.0, 12.0)  # a switch trained on the target directly
    min_anchors: int = 200


def _best_spread(evals: Sequence[Evaluation], switch: str, base: Evaluation, bound: float) -> tuple[float, float] | None:
    """The largest positive-share spread between +ε and −ε with both sides within ``bound`` × perplexity: (ε, spread)."""
    best = None
    for ev in evals:
        eps = ev.setting.get(switch, 0.0)
        if eps <= 0:
            continue
        neg = next((e for e in evals if abs(e.setting.get(switch, 0.0) + eps) < 1e-9), None)
        if neg is None or max(ev.perplexity, neg.perplexity) > bound * base.perplexity:
            continue
        spread = ev.positive_share - neg.positive_share
        if best is None or spread > best[1]:
            best = (eps, spread)
    return best


def _share(spread: float, source_spread: float) -> str:
    return f"{spread / source_spread:.0%}" if source_spread > 0 else "n/a (the source does not move)"


def _replace_section(path: Path, heading: str, body: str) -> None:
    """Put ``heading`` + ``body`` into ``path``, replacing an earlier section with the same heading."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    section = f"{heading}\n\n{body.rstrip()}\n"
    start = text.find(heading)
    if start < 0:
        text = text.rstrip() + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + len(heading))
        text = text[:start] + section + (text[nxt + 1 :] if nxt >= 0 else "")
    path.write_text(text, encoding="utf-8")


def run_transfer_report(source: LanguageModel, target: LanguageModel, out: str | Path = "EVALUATION.md", *,
                        suite: TransferSuite = TransferSuite(), switch_dir: str | Path = PRETRAINED_DIR, seed: int = 0,
                        command: str = "", log: Log | None = None) -> dict:
    """Transfer the shipped sentiment switch to ``target``, evaluate it there against a switch trained on ``target``
    directly with the same data, and write the table as a section of ``out``."""
    from lmswitch.core.transfer import transfer
    from lmswitch.harness.evaluate import evaluate_settings
    from lmswitch.harness.pretrained import build_switch

    say = log or (lambda _m: None)
    start = time.perf_counter()
    sentiment = load_pretrained(source, switch_dir)["sentiment"]
    prompts = load_prompts("neutral", suite.prompts)
    protocol = Protocol(samples=suite.samples, seed=seed)
    moved = transfer(sentiment, source, target, min_anchors=suite.min_anchors)
    r = moved.card["recommended_eps"]
    say(f"transferred: {moved.card['transfer']}")
    e = suite.source_eps
    src = evaluate_settings(source, [[(sentiment, -e)], [], [(sentiment, e)]], prompts, protocol)
    eps_t = sorted({round(s * m * r, 3) for m in suite.multiples for s in (-1, 1)} | {0.0})
    tgt = evaluate_settings(target, [[(moved, x)] if x else [] for x in eps_t], prompts, protocol)
    say("trained-on-target reference: training …")
    direct = build_switch(target, get_spec("sentiment"), eval_prompts=0, seed=seed, log=say)
    eps_d = sorted({s * x for x in suite.direct_eps for s in (-1, 1)} | {0.0})
    dir_evals = evaluate_settings(target, [[(direct, x)] if x else [] for x in eps_d], prompts, protocol)

    src_spread = src[2].positive_share - src[0].positive_share
    base_t = _at(tgt, moved.name, 0.0)
    best_t = _best_spread(tgt, moved.name, base_t, TRANSFER_BOUND)
    best_d = _best_spread(dir_evals, direct.name, _at(dir_evals, direct.name, 0.0), TRANSFER_BOUND)
    met = best_t is not None and best_t[1] > 0 and best_t[1] >= TRANSFER_KEEP * src_spread
    t = moved.card["transfer"]
    lines = [
        f"Reproduce with `{command or 'python -m lmswitch eval --transfer-to ' + target.name}` "
        f"({suite.prompts} neutral prompts × {suite.samples} samples, 25 new tokens, p = 0.9, seeds coupled across ε; "
        f"{(time.perf_counter() - start) / 60:.1f} min on this machine).",
        "",
        f"The shipped `sentiment` switch of `{source.name}` mapped to `{target.name}` with `lmswitch.core.transfer`: H fitted on "
        f"{t['anchors']} shared words (held-out {t['heldout_anchors']}: R² {t['heldout_r2']}, nearest-word accuracy "
        f"{t['heldout_top1']:.1%}); recommended ε {r:+g} (the source's {t['source_recommended_eps']:+g} × {t['eps_scale']}, "
        "matching the typical logit change).",
        "",
        "| target | measured | |",
        "|---|---|---|",
        f"| same direction, ≥ {TRANSFER_KEEP:.0%} of the source's positive-minus-negative spread at perplexity ≤ {TRANSFER_BOUND}× "
        f"the target's unsteered | source ±{e:g}: {src[0].positive_share:.3f} → {src[2].positive_share:.3f} (spread {src_spread:+.3f}); "
        + (f"transferred, best ε ±{best_t[0]:g}: spread {best_t[1]:+.3f} = {_share(best_t[1], src_spread)} of the source's "
           f"(Dist-3 at +ε {_at(tgt, moved.name, best_t[0]).dist3:.2f} vs {base_t.dist3:.2f} unsteered)"
           if best_t else "no transferred ε within the bound") + f" | {_verdict(met)} |",
        f"| reference: a switch trained on `{target.name}` with the same data and settings | "
        + (f"best ε ±{best_d[0]:g}: spread {best_d[1]:+.3f} = {_share(best_d[1], src_spread)} of the source's" if best_d
           else "no ε within the bound") + " | |",
        "",
        f"Source, `{source.name}` (perplexity relative to its unsteered):",
        "",
        table(src, sentiment.name, src[1].perplexity),
        f"Transferred switch on `{target.name}`:",
        "",
        table(tgt, moved.name, base_t.perplexity),
        f"Trained on `{target.name}` directly (held-out gain {direct.card.get('heldout_gain', float('nan')):+.3f} nats/token):",
        "",
        table(dir_evals, direct.name, _at(dir_evals, direct.name, 0.0).perplexity),
        "Samples (prompt 1, sample 1): " + "; ".join(
            f"ε {ev.setting.get(moved.name, 0.0):+g}: “{ev.texts[0]['text'].strip()[:70]}”" for ev in (tgt[0], base_t, tgt[-1])),
    ]
    heading = f"## Transfer: the sentiment switch on {target.name}"
    _replace_section(Path(out), heading, "\n".join(lines))
    results = {"transfer_card": moved.card, "met": met, "source_spread": src_spread, "best_transfer": best_t, "best_direct": best_d,
               "source": [ev.summary() for ev in src], "transferred": [ev.summary() for ev in tgt],
               "direct": [ev.summary() for ev in dir_evals], "seconds": round(time.perf_counter() - start, 1)}
    json_path = Path(out).parent / "docs" / "evaluation" / f"transfer-{target.name}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    return results
