"""``python -m lmswitch eval --report``: the whole evaluation of the shipped switches, written to EVALUATION.md.

:func:`run_report` runs one step per section of the report (the sentiment, detox
and formality sweeps, data efficiency, the composition grid); each step returns
its evaluations with the :class:`Check` of each of its targets, and the whole is a
:class:`Report`, whose ``to_dict()`` is the JSON that the CLI prints and the report
saves. The transfer of the sentiment switch to a second model has its own section
(:mod:`lmswitch.harness.transfer_report`).

>>> report = run_report(lm, "EVALUATION.md", suite=QUICK)        # doctest: +SKIP
>>> missed = [check.target for check in report.checks if not check.met]   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import torch

from lmswitch.core.card import TrainingRecord
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SAMPLING, TrainConfig
from lmswitch.core.packed import cpu_name
from lmswitch.core.switch import Switch
from lmswitch.core.train import train_switch
from lmswitch.harness.datasets import SOURCE_PATH, load_dataset
from lmswitch.harness.evaluate import (
    POSITIVE,
    PROTOCOL,
    TOXIC,
    Check,
    Evaluation,
    Progress,
    Protocol,
    evaluate_grid,
    evaluate_sweep,
)
from lmswitch.harness.figures import export, grid_figure, sweep_figure
from lmswitch.harness.options import load_prompts
from lmswitch.harness.pretrained import PRETRAINED_DIR, Log, get_spec, load_pretrained, quiet
from lmswitch.io.atomic import write_file

FIGURES = "docs/evaluation"  # where the report's figures and JSON go, relative to the report (its links point there)


@dataclass(frozen=True)
class Suite:
    """How big the evaluation is: prompts per set, samples per prompt, and the ε values."""

    prompts: int = 40
    samples: int = PROTOCOL.samples
    grid_prompts: int = 20
    sentiment_eps: tuple[float, ...] = (-15, -12, -9, -6, -3, 0, 3, 6, 9, 12, 15)
    detox_eps: tuple[float, ...] = (-4, 0, 2, 4, 6, 8)
    formality_eps: tuple[float, ...] = (-10, -5, 0, 5, 10)
    grid_eps: tuple[float, ...] = (-5, -2.5, 0, 2.5, 5)
    efficiency_pairs: int = 30
    efficiency_eps: tuple[float, ...] = (-5, 3, 5, 8)


QUICK = Suite(prompts=8, samples=2, grid_prompts=4, sentiment_eps=(-12, 0, 12), detox_eps=(0, 4), formality_eps=(-5, 0, 5), grid_eps=(-5, 5), efficiency_eps=(-5, 5))

# the targets of the report (its "Targets" table)
SENTIMENT_BOUND = 1.5  # perplexity bound (× unsteered) of the sentiment targets and frontier
DETOX_BOUND = 1.3  # ... of the detox target and frontier
POSITIVE_TARGET = 0.9  # share positive the sentiment switch must reach at +ε
NEGATIVE_TARGET = 0.1  # ... and stay below at −ε
CONTINUOUS_POINTS = 7  # continuous control: positivity rises strictly over at least this many ε values
EFFICIENCY_TARGET = 0.8  # share positive a switch trained on Suite.efficiency_pairs pairs must reach
DIVERSE = 0.9  # a setting counts as non-repetitive when its Dist-3 keeps 90% of the unsteered Dist-3

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


# --- typed results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sweep:
    """Evaluations of one switch at several ε, one of them 0 (the unsteered model)."""

    switch: str  # the switch's name, the key of its ε in each evaluation's setting
    evals: list[Evaluation]

    def at(self, eps: float) -> Evaluation:
        return _at(self.evals, self.switch, eps)

    def eps(self, ev: Evaluation) -> float:
        """The ε of one of its evaluations."""
        return ev.setting.get(self.switch, 0.0)

    @property
    def base(self) -> Evaluation:
        return self.at(0.0)

    def summaries(self) -> list[dict]:
        return [ev.to_dict() for ev in self.evals]


@dataclass(frozen=True)
class SweepSection(Sweep):
    """A sweep that is a section of the report, with its targets and its strength–fluency frontier."""

    title: str = ""
    figure: str = ""  # PNG file name in the figures folder
    checks: tuple[Check, ...] = ()
    frontier: tuple[tuple[str, str], ...] = ()  # (what, the best setting within the perplexity bound)

    def markdown(self) -> list[str]:
        lines = [f"## {self.title}", "", table(self.evals, self.switch, self.base.perplexity), f"![{self.switch} sweep]({FIGURES}/{self.figure})", ""]
        for ev in (self.evals[0], self.base, self.evals[-1]):
            t = ev.texts[0]
            lines.append(f"- ε {ev.setting.get(self.switch, 0.0):+g}: *{t.prompt}* **{t.text.strip()}**")
        return [*lines, ""]

    def samples(self) -> dict[str, list[dict]]:
        """Three sample texts per ε, for the JSON next to the report."""
        return {f"{ev.setting.get(self.switch, 0.0):+g}": [t.to_dict() for t in ev.texts[:3]] for ev in self.evals}


@dataclass(frozen=True)
class Efficiency:
    """Data efficiency: a sentiment switch trained with ``train_switch``'s defaults on the first ``pairs`` pairs."""

    pairs: int
    training: TrainingRecord  # the small switch's
    evals: list[Evaluation]
    check: Check

    def to_dict(self) -> dict:
        t = self.training
        return {"pairs": self.pairs, "card": {"heldout_gain": t.heldout_gain, "seconds": t.seconds, "steps": t.steps},
                "evals": [ev.to_dict() for ev in self.evals]}

    def markdown(self, base_ppl: float) -> list[str]:
        k, t = self.pairs, self.training
        return [
            f"## Data efficiency: sentiment switch from {k} + {k} sentences",
            "",
            table(self.evals, "sentiment", base_ppl),
            f"Trained with `train_switch`'s defaults ({t.optimizer}, {'rank ' + str(t.rank) if t.rank else 'full rank'}): "
            f"{t.summary()}. Perplexity ratios are against the unsteered row of the sentiment sweep.",
            "",
        ]


@dataclass(frozen=True)
class Composition:
    """The 2-D grid: ``grid[i][j]`` is sentiment at ``eps[i]`` with detox at ``eps[j]``."""

    prompts: int
    samples: int
    eps: tuple[float, ...]
    grid: list[list[Evaluation]]
    check: Check

    def _table(self, title: str, metric: str) -> list[str]:
        return [
            f"| {title} | " + " | ".join(f"detox {b:+g}" for b in self.eps) + " |",
            "|---|" + "---|" * len(self.eps),
            *[f"| sentiment {a:+g} | " + " | ".join(f"{getattr(ev, metric):.2f}" for ev in row) + " |" for a, row in zip(self.eps, self.grid, strict=True)],
            "",
        ]

    def markdown(self) -> list[str]:
        return [
            "## Composition: sentiment × detox (provocative prompts)",
            "",
            f"{self.prompts} provocative prompts × {self.samples} samples per cell. Rows: ε of sentiment; columns: ε of detox.",
            "",
            *self._table("share positive", "positive_share"),
            *self._table("toxicity prob.", "toxicity_prob"),
            f"![composition]({FIGURES}/composition.png)",
            "",
        ]


@dataclass(frozen=True)
class Report:
    """Everything :func:`run_report` measured; :meth:`to_dict` is the JSON the CLI prints and ``results.json`` holds."""

    suite: Suite
    protocol: Protocol
    model: str
    fingerprint: str
    sentiment: SweepSection
    detox: SweepSection
    formality: SweepSection
    efficiency: Efficiency
    composition: Composition
    seconds: float

    @property
    def sweeps(self) -> tuple[SweepSection, ...]:
        return self.sentiment, self.detox, self.formality

    @property
    def checks(self) -> list[Check]:
        return [*(c for s in self.sweeps for c in s.checks), self.efficiency.check, self.composition.check]

    @property
    def frontier(self) -> dict[str, str]:
        return dict(line for s in self.sweeps for line in s.frontier)

    def to_dict(self) -> dict:
        return {
            "suite": asdict(self.suite),
            "protocol": self.protocol.to_dict(),
            "model": self.model,
            "fingerprint": self.fingerprint,
            **{s.switch: s.summaries() for s in self.sweeps},
            "efficiency": self.efficiency.to_dict(),
            "grid": [[ev.to_dict() for ev in row] for row in self.composition.grid],
            "checks": [c.to_dict() for c in self.checks],
            "frontier": self.frontier,
            "seconds": round(self.seconds, 1),
        }


# --- the steps of the report --------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """What every step of one report shares."""

    lm: LanguageModel
    suite: Suite
    protocol: Protocol
    fig_dir: Path
    say: Log

    def progress(self, what: str) -> Progress:
        return lambda done, total: self.say(f"{what}: {done}/{total} settings")

    def sweep(self, switch: Switch, name: str, eps: Sequence[float], prompts: list[str], kind: str) -> list[Evaluation]:
        self.say(f"{name} sweep: {len(prompts)} {kind} prompts × {self.suite.samples} samples × {len(eps)} ε values")
        return evaluate_sweep(self.lm, switch, eps, prompts, self.protocol, progress=self.progress(name))


def _shipped(lm: LanguageModel, switch_dir: str | Path) -> dict[str, Switch]:
    switches = load_pretrained(lm, switch_dir)
    missing = [n for n in ("sentiment", "detox", "formality") if n not in switches]
    if missing:
        raise ValueError(f"{switch_dir} lacks {', '.join(missing)}; run `python -m lmswitch build-pretrained` first")
    return switches


def _sentiment_checks(evals: list[Evaluation]) -> tuple[Check, ...]:
    """±recommended ε within the perplexity bound, and continuous control over the sweep."""
    base = _at(evals, "sentiment", 0.0)
    r = get_spec("sentiment").recommended_eps
    plus, minus = _at(evals, "sentiment", r), _at(evals, "sentiment", -r)
    shares = [ev.positive_share for ev in evals]
    monotone = all(b > a for a, b in zip(shares, shares[1:], strict=False))
    within = SENTIMENT_BOUND * base.perplexity
    return (
        Check(f"sentiment +{r:g}: ≥ {POSITIVE_TARGET:.0%} positive at perplexity ≤ {SENTIMENT_BOUND:g}× unsteered",
              f"{plus.positive_share:.1%} at {plus.perplexity / base.perplexity:.2f}× (Dist-3 {plus.dist3:.2f} vs {base.dist3:.2f} unsteered)",
              plus.positive_share >= POSITIVE_TARGET and plus.perplexity <= within),
        Check(f"sentiment −{r:g}: ≤ {NEGATIVE_TARGET:.0%} positive at perplexity ≤ {SENTIMENT_BOUND:g}× unsteered",
              f"{minus.positive_share:.1%} at {minus.perplexity / base.perplexity:.2f}× (Dist-3 {minus.dist3:.2f})",
              minus.positive_share <= NEGATIVE_TARGET and minus.perplexity <= within),
        Check(f"continuous control: positivity rises strictly over ≥ {CONTINUOUS_POINTS} ε values ({len(shares)} measured)",
              " → ".join(f"{x:.2f}" for x in shares), monotone and len(shares) >= CONTINUOUS_POINTS),
    )


def _sentiment_frontier(evals: list[Evaluation]) -> tuple[tuple[str, str], ...]:
    base, b = _at(evals, "sentiment", 0.0), SENTIMENT_BOUND
    return (
        (f"sentiment, most positive within {b:g}× perplexity", frontier(evals, "sentiment", "positive_share", +1, +1, base, b)),
        (f"sentiment, most positive within {b:g}× perplexity and without repetition (Dist-3 ≥ {DIVERSE:.0%} of unsteered)",
         frontier(evals, "sentiment", "positive_share", +1, +1, base, b, diverse=True)),
        (f"sentiment, least positive within {b:g}× perplexity", frontier(evals, "sentiment", "positive_share", -1, -1, base, b)),
        (f"sentiment, least positive within {b:g}× perplexity and without repetition",
         frontier(evals, "sentiment", "positive_share", -1, -1, base, b, diverse=True)),
    )


def _sentiment_sweep(run: _Run, switch: Switch, prompts: list[str]) -> SweepSection:
    r = get_spec("sentiment").recommended_eps  # the checks read ±r: swept beside the suite's grid
    evals = run.sweep(switch, "sentiment", sorted({*run.suite.sentiment_eps, -r, r}), prompts, "neutral")
    export(sweep_figure(evals, "sentiment", ("positive_share", "negative_share")), run.fig_dir / "sentiment_sweep.png")
    return SweepSection("sentiment", evals, "Sentiment (neutral prompts)", "sentiment_sweep.png", _sentiment_checks(evals), _sentiment_frontier(evals))


def _detox_sweep(run: _Run, switch: Switch, prompts: list[str]) -> SweepSection:
    """The detox target: toxicity probability at least halved at the recommended ε within the perplexity bound."""
    evals = run.sweep(switch, "detox", run.suite.detox_eps, prompts, "provocative")
    export(sweep_figure(evals, "detox", ("toxicity_prob", "avg_max_toxicity")), run.fig_dir / "detox_sweep.png")
    base = _at(evals, "detox", 0.0)
    r = get_spec("detox").recommended_eps
    plus = _at(evals, "detox", r)
    check = Check(f"detox +{r:g}: toxicity probability at least halved at perplexity ≤ {DETOX_BOUND:g}×",
                  f"{base.toxicity_prob:.3f} → {plus.toxicity_prob:.3f} at {plus.perplexity / base.perplexity:.2f}× (Dist-3 {plus.dist3:.2f})",
                  plus.toxicity_prob <= base.toxicity_prob / 2 and plus.perplexity <= DETOX_BOUND * base.perplexity)
    least = (f"detox, least toxic within {DETOX_BOUND:g}× perplexity", frontier(evals, "detox", "toxicity_prob", +1, -1, base, DETOX_BOUND))
    return SweepSection("detox", evals, "Detoxification (provocative prompts)", "detox_sweep.png", (check,), (least,))


def _formality_sweep(run: _Run, switch: Switch, prompts: list[str]) -> SweepSection:
    evals = run.sweep(switch, "formality", run.suite.formality_eps, prompts, "neutral")
    export(sweep_figure(evals, "formality", ("formal_share",)), run.fig_dir / "formality_sweep.png")
    return SweepSection("formality", evals, "Formality (neutral prompts)", "formality_sweep.png")


def _data_efficiency(run: _Run, prompts: list[str], base: Evaluation) -> Efficiency:
    """What a user gets from a few sentences: ``train_switch``'s defaults (the shipped settings are tuned for 324 pairs)."""
    k = run.suite.efficiency_pairs
    pos, neg = load_dataset("sentiment").train(limit=k)
    run.say(f"data efficiency: training a sentiment switch on {len(pos)} + {len(neg)} sentences with the default settings")
    small = train_switch(run.lm, pos, neg, name="sentiment", config=TrainConfig(seed=run.protocol.seed))
    evals = evaluate_sweep(run.lm, small, run.suite.efficiency_eps, prompts, run.protocol)
    best = max((ev for ev in evals if ev.setting["sentiment"] > 0), key=lambda ev: ev.positive_share)
    positive_eps = ", ".join(f"{e:+g}" for e in run.suite.efficiency_eps if e > 0)
    check = Check(f"data efficiency: switch from {k} + {k} sentences reaches ≥ {EFFICIENCY_TARGET:.0%} positive (best of ε {positive_eps})",
                  f"{best.positive_share:.1%} at ε {best.setting['sentiment']:+g}, {best.perplexity / base.perplexity:.2f}× perplexity "
                  f"(Dist-3 {best.dist3:.2f}; trained in {small.card.training.seconds:.0f} s)",
                  best.positive_share >= EFFICIENCY_TARGET)
    return Efficiency(k, small.card.training, evals, check)


def _corner_check(grid: list[list[Evaluation]], eps: Sequence[float]) -> Check:
    """Each switch moves its own score whatever the other's ε, read at the grid's four corners."""
    lo, hi = eps[0], eps[-1]
    corner = {(a, b): grid[i][j] for i, a in enumerate(eps) for j, b in enumerate(eps)}
    pos = {ab: ev.positive_share for ab, ev in corner.items()}
    tox = {ab: ev.toxicity_prob for ab, ev in corner.items()}
    both = (pos[(hi, lo)] > pos[(lo, lo)] and pos[(hi, hi)] > pos[(lo, hi)]
            and tox[(lo, hi)] < tox[(lo, lo)] and tox[(hi, hi)] <= tox[(hi, lo)])
    return Check("2-D grid: each switch moves its own score whatever the other's ε (corners)",
                 f"positive {pos[(lo, lo)]:.2f}/{pos[(hi, lo)]:.2f} at detox {lo:g}, {pos[(lo, hi)]:.2f}/{pos[(hi, hi)]:.2f} at detox {hi:+g}; "
                 f"tox. prob. {tox[(lo, lo)]:.2f}/{tox[(lo, hi)]:.2f} at sentiment {lo:g}, "
                 f"{tox[(hi, lo)]:.2f}/{tox[(hi, hi)]:.2f} at sentiment {hi:+g}", both)


def _composition(run: _Run, sentiment: Switch, detox: Switch) -> Composition:
    prompts = load_prompts("provocative", run.suite.grid_prompts)
    eps = run.suite.grid_eps
    run.say(f"composition grid: sentiment × detox, {len(eps)}² settings on {len(prompts)} provocative prompts")
    grid = evaluate_grid(run.lm, (sentiment, eps), (detox, eps), prompts, run.protocol, progress=run.progress("grid"))
    export(grid_figure(grid, "sentiment", "detox", ("positive_share", "toxicity_prob")), run.fig_dir / "composition.png", width=1100)
    return Composition(len(prompts), run.suite.samples, tuple(eps), grid, _corner_check(grid, eps))


# --- the markdown ---------------------------------------------------------------------------------


TITLE = "# Evaluation of the shipped switches"  # a new report file's first line
REPORT_HEADING = "## The report: model, machine and protocol"  # the first of the report's own sections


def machine() -> str:
    """This machine for a report's or benchmark's heading: "x86_64 AMD EPYC (AVX512-BF16), 2 cores, 2 threads, torch …"."""
    return (f"{platform.machine()} {cpu_name()}".strip()
            + f", {os.cpu_count()} cores, {torch.get_num_threads()} threads, torch {torch.__version__}")


def _preamble(report: Report, lm: LanguageModel, command: str | None) -> list[str]:
    suite, protocol, seed = report.suite, report.protocol, report.protocol.seed
    return [
        REPORT_HEADING,
        "",
        f"Model: `{lm.name}` (`{lm.fingerprint}`), dtype {str(lm.model.dtype).removeprefix('torch.')}. "
        f"Machine: {machine()}, Python {platform.python_version()}. "
        f"Date: {date.today().isoformat()}. Total time: {report.seconds / 60:.1f} min.",
        "",
        "Reproduce with:",
        "",
        "```",
        command or "python -m lmswitch eval --report EVALUATION.md",
        "```",
        "",
        f"Protocol (the paper's section 4, scaled down): {suite.prompts} prompts per set, {suite.samples} samples per prompt "
        f"(seeds {seed}…{seed + suite.samples - 1}, the same for every ε, so rows are coupled samples), "
        f"{protocol.max_new_tokens} new tokens, nucleus sampling p = {protocol.top_p}, temperature {protocol.temperature}, "
        + (f"the repeat guard on (steering may not raise the text's last {protocol.repeat_guard} tokens; the paper: off). "
           if protocol.repeat_guard else "the paper's plain steering (no repeat guard). ") +
        f"Positivity is the share of continuations with vaderSentiment compound ≥ {POSITIVE:g} (neutral ones count as not positive); "
        f"toxicity is alt-profanity-check's probability (average over prompts of the max over samples, and the share of prompts with a sample > {TOXIC:g}); "
        "perplexity is of the sampled tokens given the prompt under the unsteered model; Dist-n counts distinct word n-grams per prompt; "
        "'formal' is the share a character n-gram classifier fitted on the formality training pairs calls formal. "
        f"Details in `lmswitch/harness/evaluate.py`; prompts and data in `lmswitch/data/` (see `{SOURCE_PATH}/DATA.md`).",
        "",
    ]


def _targets(report: Report) -> list[str]:
    return [
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *[check.row() for check in report.checks],
        "",
        "A target met with a Dist-3 far below the unsteered one is met by repetition (\"great great great\"), which the "
        "unsteered model finds easy to predict, so perplexity does not catch it; read those rows with the sample texts below.",
        "",
        "Strength–fluency frontier (the best point of each sweep within the perplexity bound):",
        "",
        *[f"- {what}: {text}" for what, text in report.frontier.items()],
        "",
    ]


def _markdown(report: Report, lm: LanguageModel, command: str | None) -> str:
    lines = [*_preamble(report, lm, command), *_targets(report)]
    for section in report.sweeps:
        lines += section.markdown()
    lines += [
        *report.efficiency.markdown(report.sentiment.base.perplexity),
        *report.composition.markdown(),
        f"All numbers, with three sample texts per setting, are in `{FIGURES}/results.json`.",
        "",
    ]
    return "\n".join(lines)


def run_report(
    lm: LanguageModel,
    out: str | Path = "EVALUATION.md",
    *,
    figures: str | Path | None = None,
    suite: Suite = Suite(),
    switch_dir: str | Path = PRETRAINED_DIR,
    seed: int = 0,
    repeat_guard: int = SAMPLING.repeat_guard,
    command: str | None = None,
    log: Log | None = None,
) -> Report:
    """Evaluate the shipped switches (sweeps, data efficiency, 2-D grid) and write the markdown report, figures and JSON;
    ``repeat_guard=0`` decodes with the paper's plain steering."""
    start = time.perf_counter()
    out = Path(out)
    fig_dir = Path(figures) if figures is not None else out.parent / FIGURES
    switches = _shipped(lm, switch_dir)
    run = _Run(lm, suite, Protocol(samples=suite.samples, seed=seed, repeat_guard=repeat_guard), fig_dir, log or quiet)
    neutral = load_prompts("neutral", suite.prompts)
    provocative = load_prompts("provocative", suite.prompts)
    sentiment = _sentiment_sweep(run, switches["sentiment"], neutral)
    detox = _detox_sweep(run, switches["detox"], provocative)
    formality = _formality_sweep(run, switches["formality"], neutral)
    efficiency = _data_efficiency(run, neutral, sentiment.base)
    composition = _composition(run, switches["sentiment"], switches["detox"])
    report = Report(suite, run.protocol, lm.name, lm.fingerprint, sentiment, detox, formality, efficiency, composition,
                    time.perf_counter() - start)
    samples = {s.switch: s.samples() for s in report.sweeps}
    (fig_dir / "results.json").write_text(json.dumps({**report.to_dict(), "samples": samples}, indent=1, ensure_ascii=False), encoding="utf-8")
    write_sections(out, _markdown(report, lm, command))
    run.say(f"wrote {out} and {fig_dir} in {report.seconds / 60:.1f} min")
    return report


def command_line(argv: Sequence[str] | None = None) -> str:
    """The shell command that runs ``python -m lmswitch`` with ``argv`` (default: this process's own arguments)."""
    return "python -m lmswitch " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))


def write_sections(path: Path, markdown: str) -> None:
    """Put each "## " section of ``markdown`` into ``path`` (:func:`replace_section`): the file's other sections (those
    ``eval --frontier``, ``--stance``, ``--highlight`` and ``--transfer-to`` write) and the text above its first
    section stay. A new file starts with :data:`TITLE`."""
    if not path.exists():
        write_file(path, lambda tmp: tmp.write_text(f"{TITLE}\n", encoding="utf-8"))
    for section in markdown.split("\n## "):
        heading, _, body = section.removeprefix("## ").partition("\n")
        replace_section(path, f"## {heading}", body.strip("\n") + "\n")


def replace_section(path: Path, heading: str, body: str) -> None:
    """Put ``heading`` + ``body`` into ``path``, replacing an earlier section with the same heading (a whole line)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    section = f"{heading}\n\n{body.rstrip()}\n"
    found = re.search(rf"^{re.escape(heading)}$", text, flags=re.MULTILINE)  # not a deeper heading that ends like it
    start = found.start() if found else -1
    if start < 0:
        text = text.rstrip() + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("\n" + text[nxt + 1 :] if nxt >= 0 else "")
    write_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))  # whole: a failure leaves the file as it was
