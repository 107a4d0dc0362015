"""``eval --transfer-to MODEL``: the shipped sentiment switch transferred to another model, against one trained there.

What a user gets from each path is compared side by side with the same seeds. Three switches are probed for their
fluent ε range on dev prompts with one probe (:func:`~lmswitch.harness.frontier.calibrated_card`, the Transfer tab's
by default): the shipped switch on its own model, the transferred switch (:func:`~lmswitch.core.transfer.transfer`)
and a switch trained on the target from the same data with ``train``'s default recipe. Each is then scored on *test*
prompts at its range's ends, their halves, 0 and its recommended ε (the transferred one also at the ε its card scaled
from the source's, which the probe replaces; shown, never counted).

The target (issue 6, with the fluency rules since): between the ends of its range chosen on dev, the transferred
switch moves the positive share on test the same way by at least :data:`TRANSFER_KEEP` of the source switch's move
between its ends, and both ends keep the fluency rules on test (:class:`~lmswitch.harness.frontier.FluencyRules`:
perplexity, Dist-3, looping samples, samples sprinkling one word or mark), so a move reached through word loops is a miss.

>>> report = run_transfer_report(lm, ls.load_model("gemma3-270m"), "EVALUATION.md")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from lmswitch.core.card import Card
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import MIN_ANCHORS, TrainConfig
from lmswitch.core.switch import Switch
from lmswitch.core.transfer import fit_text, strength_advice, transfer
from lmswitch.harness.evaluate import Check, Evaluation, Protocol, evaluate_settings, verdict
from lmswitch.harness.frontier import TRANSFER_PROBE, FluencyRules, Probe, calibrated_card
from lmswitch.harness.options import load_prompts
from lmswitch.harness.pretrained import PRETRAINED_DIR, Log, build_switch, get_spec, load_pretrained, quiet
from lmswitch.harness.report import FIGURES, Sweep, replace_section, table

TRANSFER_KEEP = 0.5  # share of the source switch's move (positive share, between its fluent ends) the transfer must keep


@dataclass(frozen=True)
class TransferSuite:
    """How big the transfer evaluation is and how its switches are probed and trained."""

    prompts: int = 20  # test prompts of the neutral set
    samples: int = 4
    probe: Probe = TRANSFER_PROBE  # every switch's fluent range, on dev prompts; its rules also judge the test rows
    training: TrainConfig = TrainConfig()  # the trained-on-target reference: what `train` does by default
    min_anchors: int = MIN_ANCHORS  # transfer's own refusal threshold


def eps_key(eps: float) -> float:
    """An ε as the report's rows hold it (3 decimals: a scaled ε is a long float)."""
    return round(float(eps), 3)


@dataclass(frozen=True)
class Move:
    """How far a switch moves the positive share between the ends of its fluent range chosen on dev, scored on test."""

    low_eps: float
    high_eps: float
    shift: float  # positive share at the high end − at the low end
    problems: list[str]  # the fluency rules an end breaks on test ("ε +2: perplexity 1.62× > 1.5×")


@dataclass(frozen=True)
class ProbedSweep(Sweep):
    """A switch's test rows (one at ε = 0, the unsteered model), its card (with the fluent range its probe chose on dev),
    and the rules."""

    card: Card = field(default_factory=Card)
    rules: FluencyRules = field(default_factory=FluencyRules)

    @property
    def fluent_eps(self) -> tuple[float, float] | None:
        return self.card.fluent_eps

    def problems(self, ev: Evaluation) -> list[str]:
        return self.rules.problems(ev, self.base)

    @property
    def move(self) -> Move | None:
        """The move between the dev-chosen ends (None without a range)."""
        if self.fluent_eps is None:
            return None
        low, high = (self.at(eps_key(e)) for e in self.fluent_eps)
        problems = [f"ε {self.eps(ev):+g}: {p}" for ev in (low, high) if self.eps(ev) for p in self.problems(ev)]
        return Move(self.eps(low), self.eps(high), high.positive_share - low.positive_share, problems)

    def broken(self) -> list[str]:
        """Each steered setting that breaks the rules on test, with why (the unsteered row is what they compare with)."""
        return [f"ε {self.eps(ev):+g} ({'; '.join(self.problems(ev))})" for ev in self.evals if self.eps(ev) and self.problems(ev)]


@dataclass(frozen=True)
class TransferReport:
    """Everything :func:`run_transfer_report` measured; :meth:`to_dict` is the JSON the CLI prints and saves."""

    source_model: str
    target_model: str
    suite: TransferSuite
    protocol: Protocol
    advice: str  # what the CLI's `transfer` says about the transferred switch's strength
    source: ProbedSweep  # the shipped switch on the source model
    transferred: ProbedSweep  # the transferred switch on the target (its scaled ε among the rows)
    direct: ProbedSweep  # the switch trained on the target
    seconds: float

    @property
    def cards(self) -> dict[str, Card]:
        """Each switch's card, its probed range included, by its role."""
        return {"source": self.source.card, "transferred": self.transferred.card, "direct": self.direct.card}

    @property
    def met(self) -> bool:
        moved, source = self.transferred.move, self.source.move
        return (moved is not None and source is not None and source.shift > 0 and not moved.problems
                and moved.shift >= TRANSFER_KEEP * source.shift)

    def to_dict(self) -> dict:
        def move(m: Move | None) -> dict | None:
            return None if m is None else asdict(m)

        sweeps = {"source": self.source, "transferred": self.transferred, "direct": self.direct}
        return {"source_model": self.source_model, "target_model": self.target_model, "met": self.met,
                "suite": asdict(self.suite), "protocol": self.protocol.to_dict(),
                "cards": {k: c.to_dict() for k, c in self.cards.items()},
                "moves": {k: move(s.move) for k, s in sweeps.items()},
                "rows": {k: s.summaries() for k, s in sweeps.items()}, "seconds": round(self.seconds, 1)}


def _row(card: Card, extra: tuple[float, ...] = ()) -> list[float]:
    """The ε a switch is scored at: its fluent row (0 alone without a range), its recommended ε and ``extra``."""
    picks = (*card.fluent_row, *extra, card.recommended_eps)
    return sorted({0.0, *(eps_key(e) for e in picks if e is not None)})


def _sweeps(lm: LanguageModel, rows: list[tuple[Switch, list[float]]], prompts: list[str], protocol: Protocol,
            rules: FluencyRules) -> list[ProbedSweep]:
    """Each (switch, ε row) on ``lm`` in one batched call with one unsteered row shared by all (same seeds)."""
    evals = evaluate_settings(lm, [[]] + [[(s, e)] for s, row in rows for e in row if e], prompts, protocol)
    base, rest, out = evals[0], iter(evals[1:]), []
    for switch, row in rows:
        mine = [replace(next(rest) if e else base, setting={switch.name: e}) for e in row]
        out.append(ProbedSweep(switch.name, mine, switch.card, rules))
    return out


def _probed(lm: LanguageModel, switch: Switch, probe: Probe) -> Switch:
    switch.card = calibrated_card(lm, switch, probe)
    return switch


def run_transfer_report(source: LanguageModel, target: LanguageModel, out: str | Path = "EVALUATION.md", *,
                        suite: TransferSuite = TransferSuite(), switch_dir: str | Path = PRETRAINED_DIR, seed: int = 0,
                        command: str = "", data_dir: str | Path | None = None, log: Log | None = None) -> TransferReport:
    """Transfer the shipped sentiment switch to ``target`` and compare it there with a switch trained on ``target`` from
    the same data (the style datasets in ``data_dir``, default the shipped ones), as the module says; write the section
    of ``out`` and its JSON next to the figures."""
    say, start = log or quiet, time.perf_counter()
    shipped = load_pretrained(source, switch_dir)["sentiment"]
    moved = _probed(target, transfer(shipped, source, target, min_anchors=suite.min_anchors), suite.probe)
    shipped = _probed(source, shipped, suite.probe)  # after the transfer, so it scales the shipped card's ε, as a user's does
    say(f"source fluent ε {shipped.card.fluent_text}; transferred {moved.card.fluent_text}; training on {target.name} …")
    spec = replace(get_spec("sentiment"), train=suite.training)
    direct = _probed(target, build_switch(target, spec, data_dir=data_dir, eval_prompts=0, seed=seed, fluent=False, log=say), suite.probe)
    prompts, protocol = load_prompts("neutral", suite.prompts, split="test"), Protocol(samples=suite.samples, seed=seed)
    say(f"trained on {target.name}: fluent ε {direct.card.fluent_text}; scoring on {len(prompts)} test prompts …")
    (src,) = _sweeps(source, [(shipped, _row(shipped.card))], prompts, protocol, suite.probe.rules)
    scaled = (moved.card.transfer.scaled_eps,)
    pair = _sweeps(target, [(moved, _row(moved.card, scaled)), (direct, _row(direct.card))], prompts, protocol, suite.probe.rules)
    report = TransferReport(source.name, target.name, suite, protocol, strength_advice(moved, target.name), src, *pair,
                            time.perf_counter() - start)
    replace_section(Path(out), f"## Transfer: the sentiment switch on {target.name}", markdown(report, command))
    json_path = Path(out).parent / FIGURES / f"transfer-{target.name}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    return report


# --- the section and the CLI's summary ------------------------------------------------------------------------


def _move_text(m: Move | None, source: Move | None) -> str:
    if m is None:
        return "no fluent range"
    share = f" = {m.shift / source.shift:.0%} of the source's" if source is not None and source.shift > 0 else ""
    broken = f"; on test {', '.join(m.problems)}" if m.problems else ""
    return f"ε {m.low_eps:+g} → {m.high_eps:+g}: positive share {m.shift:+.3f}{share}{broken}"


def summary(report: TransferReport) -> str:
    """The CLI's line: the verdict and the three moves."""
    src = report.source.move
    return Check(f"transfer to {report.target_model}", f"transferred {_move_text(report.transferred.move, src)}; source "
                 f"{_move_text(src, None)}; trained on the target {_move_text(report.direct.move, src)}", report.met).line()


def _target_rows(report: TransferReport) -> list[str]:
    src = report.source.move
    return [
        "| target | measured | |", "|---|---|---|",
        f"| same direction, ≥ {TRANSFER_KEEP:.0%} of the source's move between the fluent ends chosen on dev, both ends "
        f"fluent on test | source {_move_text(src, None)}; transferred {_move_text(report.transferred.move, src)} | "
        f"{verdict(report.met)} |",
        f"| reference: a switch trained on `{report.target_model}` from the same data | {_move_text(report.direct.move, src)} | |",
    ]


def _sweep_block(title: str, sweep: ProbedSweep) -> list[str]:
    broken = sweep.broken()
    looping = ", ".join(f"ε {sweep.eps(ev):+g} {100 * ev.repetition:.3g}%" for ev in sweep.evals)
    return [title, "", table(sweep.evals, sweep.switch, sweep.base.perplexity).rstrip(), "", f"Samples that loop: {looping}. "
            + (f"Breaks the fluency rules on test: {', '.join(broken)}." if broken else "Every setting keeps the fluency rules on test."), ""]


def _probe_text(report: TransferReport) -> str:
    p = report.suite.probe
    same = " (the CLI's `transfer` and the app's Transfer tab probe so)" if p == TRANSFER_PROBE else ""
    return f"{p.prompts} dev prompts × {p.samples} samples of {p.max_new_tokens} tokens{same}"


def markdown(report: TransferReport, command: str) -> str:
    """The EVALUATION.md section of ``report``."""
    suite, protocol, rules = report.suite, report.protocol, report.suite.probe.rules
    moved = report.transferred
    t = moved.card.transfer
    samples = [0.0, *(eps_key(e) for e in (moved.card.recommended_eps, t.scaled_eps) if e is not None)]
    return "\n".join([
        f"Reproduce with `{command or 'python -m lmswitch eval --transfer-to ' + report.target_model}` ({suite.prompts} neutral "
        f"*test* prompts × {suite.samples} samples, {protocol.max_new_tokens} new tokens, p = {protocol.top_p}, the same seeds "
        f"in every row; {report.seconds / 60:.1f} min on this machine).",
        "",
        f"The shipped `sentiment` switch of `{report.source_model}` mapped to `{report.target_model}` with `ls.transfer`: H "
        f"{fit_text(t)}. Each switch's fluent range was probed on {_probe_text(report)}: the source on "
        f"`{report.source_model}` {report.source.card.fluent_text or 'none'}; the transferred switch: {report.advice} The switch "
        f"trained on `{report.target_model}` from the same data (`train`'s default recipe: {report.direct.card.training.summary(3)}): "
        f"{report.direct.card.fluent_text or 'none'}.",
        "",
        f"Fluent, against the same model's unsteered rows: {rules.text}.",
        "",
        *_target_rows(report),
        "",
        *_sweep_block(f"Source, `{report.source_model}` (perplexity relative to its unsteered):", report.source),
        *_sweep_block(f"Transferred switch on `{report.target_model}`:", moved),
        *_sweep_block(f"Trained on `{report.target_model}` directly:", report.direct),
        "Samples of the transferred switch (first test prompt, first seed): " + "; ".join(
            f"ε {e:+g}: “{' '.join(moved.at(e).texts[0].text.split())[:90]}”" for e in samples),
    ])
