"""The switches shipped in ``lmswitch/data/switches/``, and how they are rebuilt from ``lmswitch/data/styles/``.

``python -m lmswitch build-pretrained`` trains every switch in :data:`SPECS` on its
dataset's training pairs with a fixed seed, measures it (held-out likelihood gain,
zero-shot accuracy of the style meter on the held-out pairs, and a short
generation evaluation at -ε, 0, +ε with the switch's own scorer), writes all of it
into the switch's card and saves one ``.safetensors`` file per switch.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from lmswitch import __version__
from lmswitch.core.card import Card
from lmswitch.core.hidden import encode_texts
from lmswitch.core.judge import fit_judge
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SAMPLING, TrainConfig
from lmswitch.core.switch import Switch, load_switch
from lmswitch.core.train import train_switch
from lmswitch.harness.datasets import DATASETS, HELDOUT_EVERY, SOURCE_PATH, StyleData, load_dataset
from lmswitch.harness.evaluate import Protocol, evaluate_sweep
from lmswitch.harness.frontier import FrontierSpec, Probe, calibrate, probed_card
from lmswitch.harness.options import BUILD_SEED, CARD_PROMPTS, CARD_SAMPLES, load_prompts
from lmswitch.io.atomic import write_file
from lmswitch.io.resources import shipped_switches_dir
from lmswitch.lenses.meter import style_slope

PRETRAINED_DIR = shipped_switches_dir()
SHIPPED_TRAINING = TrainConfig(optimizer="adam", lr=3e-3, steps=300, rank=16)  # detox, formality (the paper objective: it beat the fluency terms on dev, EVALUATION.md)
# the first L-BFGS recipe, full rank: on the grown data it beat the Adam switch on the dev frontier, plain and guided
# (EVALUATION.md); named, not the default, so a rebuild stays bit for bit when the default changes
SENTIMENT_TRAINING = TrainConfig(optimizer="lbfgs")


@dataclass(frozen=True)
class Spec:
    """How one shipped switch is trained and which score it is judged by."""

    name: str
    dataset: str
    description: str
    prompts: str  # evaluation prompt set
    metric: str  # the Evaluation field this switch is meant to move
    direction: int  # +1: positive ε raises the metric; -1: lowers it
    recommended_eps: float  # strength (ε0 units) used for the card's evaluation
    train: TrainConfig = SHIPPED_TRAINING  # train_switch's config (its seed is replaced by the build's)


SPECS: tuple[Spec, ...] = (
    Spec(
        "sentiment",
        "sentiment",
        "Sentiment: positive ε makes text more positive, negative ε more negative.",
        "neutral",
        "positive_share",
        +1,
        4.0,
        SENTIMENT_TRAINING,
    ),
    Spec(
        "detox",
        "toxicity",
        "Detoxification: positive ε makes text less toxic (civil), negative ε more toxic (the paper's convention).",
        "provocative",
        "toxicity_prob",
        -1,
        4.0,
    ),
    Spec(
        "formality",
        "formality",
        "Formality: positive ε makes text more formal, negative ε more casual.",
        "neutral",
        "formal_share",
        +1,
        5.0,
    ),
)

Log = Callable[[str], None]


def quiet(_msg: str) -> None:
    """The :data:`Log` of a caller that wants no progress lines."""


def get_spec(name: str) -> Spec:
    for spec in SPECS:
        if spec.name == name:
            return spec
    raise ValueError(f"no shipped switch named {name!r}; choose from {', '.join(s.name for s in SPECS)}")


def heldout_accuracy(lm: LanguageModel, switch: Switch, positive: Sequence[str], negative: Sequence[str]) -> float:
    """Share of held-out texts whose style-meter slope at ε = 0 has the sign of their label (zero-shot classification)."""
    right = sum(style_slope(lm, switch, t) > 0 for t in positive) + sum(style_slope(lm, switch, t) < 0 for t in negative)
    return right / (len(positive) + len(negative))


def _train(lm: LanguageModel, spec: Spec, data: StyleData, seed: int, say: Log) -> Switch:
    """The switch of ``spec`` trained on ``data``'s training pairs with ``spec.train`` and ``seed``."""
    pos, neg = data.train()
    say(f"[{spec.name}] training on {len(pos)} + {len(neg)} texts of '{spec.dataset}'")
    switch = train_switch(lm, pos, neg, name=spec.name, description=spec.description, positive_label=data.positive_label,
                          negative_label=data.negative_label, config=replace(spec.train, seed=seed))
    say(f"[{spec.name}] {switch.card.training.summary()}")
    return switch


def _card_evaluation(lm: LanguageModel, switch: Switch, spec: Spec, prompts: Sequence[str], protocol: Protocol, say: Log) -> dict:
    """The card's short evaluation at -ε, 0, +ε (recommended ε): every metric but the setting, rounded, by ``f"{ε:+g}"``."""
    if not prompts:
        return {}
    by_eps = {}
    r = spec.recommended_eps
    for ev in evaluate_sweep(lm, switch, [-r, 0.0, r], prompts, protocol):
        eps = ev.setting[spec.name]
        by_eps[f"{eps:+g}"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in ev.to_dict().items() if k != "setting"}
        say(f"[{spec.name}] eps {eps:+g}: {spec.metric} {getattr(ev, spec.metric):.3f}, perplexity {ev.perplexity:.1f}")
    return by_eps


def _evaluation_record(spec: Spec, eval_prompts: int, protocol: Protocol, by_eps: dict) -> dict:
    """The card's ``evaluation``: how the short evaluation was run and its metrics by ε."""
    return {
        "prompts": f"{spec.prompts} (first {eval_prompts})",
        "samples_per_prompt": protocol.samples,
        "max_new_tokens": protocol.max_new_tokens,
        "top_p": protocol.top_p,
        "metric": spec.metric,
        "by_eps": by_eps,
    }


def _card(spec: Spec, data: StyleData, accuracy: float) -> dict:
    """What the build adds to the trained switch's card about its making: data, direction, meter accuracy."""
    return {
        "data": {
            "dataset": spec.dataset,
            "files": [f"{SOURCE_PATH}/{f}" for f in DATASETS[spec.dataset].files()],
            "train_pairs": len(data.train()[0]),
            "heldout_pairs": len(data.heldout()[0]),
            "split": f"every tenth pair (index % {HELDOUT_EVERY} == {HELDOUT_EVERY - 1}) held out",
        },
        "direction": f"+eps -> {data.positive_label}, -eps -> {data.negative_label}",
        "heldout_meter_accuracy": round(accuracy, 4),
    }


def _measured(lm: LanguageModel, switch: Switch, spec: Spec, eval_prompts: int, protocol: Protocol, fluent: bool, say: Log) -> dict:
    """The card's measured part: the fluent range (when ``fluent``), the recommended ε and range, the short evaluation.

    Also sets ``switch.eps_range`` (the meter's search range) to ±2 × the recommended ε."""
    card = _calibrated(lm, switch, spec, protocol, say) if fluent else None
    r = (card.recommended_eps if card is not None else None) or spec.recommended_eps
    spec = replace(spec, recommended_eps=r)
    prompts = load_prompts(spec.prompts, eval_prompts) if eval_prompts else []
    by_eps = _card_evaluation(lm, switch, spec, prompts, protocol, say)
    switch.eps_range = (-2 * r, 2 * r)
    out = {"recommended_eps": r, "recommended_eps_range": [-2 * r, 2 * r]}
    if card is not None:  # the range, and what it was measured on
        out.update({k: card[k] for k in ("fluent_eps", "recommended_eps_range", "fluent_eps_probe")})
    return {**out, "evaluation": _evaluation_record(spec, eval_prompts, protocol, by_eps)}


def build_switch(
    lm: LanguageModel,
    spec: Spec,
    *,
    data_dir: str | Path | None = None,
    eval_prompts: int = CARD_PROMPTS,
    samples: int = CARD_SAMPLES,
    seed: int = BUILD_SEED,
    fluent: bool = True,
    log: Log | None = None,
) -> Switch:
    """Train and measure one shipped switch (deterministic for a given model, data and seed).

    ``fluent``: calibrate its fluent ε range on the dev prompts (:data:`CALIBRATION`, the frontier's rules) and
    recommend the fluent limit of its wanted side; off, the spec's ε is recommended as is.

    >>> switch = build_switch(lm, get_spec("sentiment"), eval_prompts=0)   # doctest: +SKIP
    >>> switch.save("sentiment.safetensors")                               # doctest: +SKIP
    """
    say = log or quiet
    start = time.perf_counter()
    data = load_dataset(spec.dataset, data_dir)
    switch = _train(lm, spec, data, seed, say)
    held_pos, held_neg = data.heldout()
    accuracy = heldout_accuracy(lm, switch, held_pos, held_neg)
    say(f"[{spec.name}] style meter on {len(held_pos)} + {len(held_neg)} held-out pairs: {accuracy:.1%} correct")
    measured = _measured(lm, switch, spec, eval_prompts, Protocol(samples=samples, seed=seed), fluent, say)
    switch.card = switch.card.updated(**_card(spec, data, accuracy), **measured,
                                      built_with=f"lmswitch {__version__}: python -m lmswitch build-pretrained",
                                      build_seconds=round(time.perf_counter() - start, 1))
    return switch


# the shipped switches' fluent range: the full protocol's dev split (250 samples, so one looping sample is 0.4%), measured
# well enough to recommend its limit, at the length the app and the command line write by default (25 tokens before:
# detox +4 passed there, yet strung semicolons in 15% more of its 40-token dev samples than unsteered), every whole ε
CALIBRATION = Probe(prompts=50, samples=5, max_new_tokens=SAMPLING.max_new_tokens, recommend=1.0,
                    strengths=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0), inner=(0.5,))


def _calibrated(lm: LanguageModel, switch: Switch, spec: Spec, protocol: Protocol, say: Log) -> Card:
    """``switch``'s card calibrated on the dev prompts of its evaluation set (the frontier's rules, :meth:`Card.calibrated`);
    a warning when no positive ε was fluent (every shipped switch's wanted side is +ε)."""
    probe = replace(CALIBRATION, prompt_set=spec.prompts, rules=FrontierSpec.for_switch(spec.name).rules)
    low, high = calibrate(lm, switch, probe, protocol)
    say(f"[{spec.name}] fluent ε on {probe.prompts} dev prompts: {low:+g} … {high:+g}")
    if high <= 0:
        say(f"[{spec.name}] ⚠ no probed +ε was fluent; the card recommends the spec's ε, {spec.recommended_eps:+g}")
    return probed_card(switch.card, (low, high), probe)


def recalibrate_switch(lm: LanguageModel, switch: Switch, *, eval_prompts: int = CARD_PROMPTS, samples: int = CARD_SAMPLES,
                       seed: int = BUILD_SEED, data_dir: str | Path | None = None, log: Log | None = None) -> Switch:
    """A shipped switch with its weights kept and its card measured again: the fluent ε range on the dev prompts
    (:data:`CALIBRATION`, the frontier's rules), the recommended ε moved to its limit, and the card's short
    evaluation at ±that ε; its judge (guided decoding's classifier) is fitted again on its training pairs. What the
    card says of its training is left as it was.

    >>> switch = recalibrate_switch(lm, load_switch("sentiment.safetensors"))   # doctest: +SKIP
    """
    say = log or quiet
    start = time.perf_counter()
    spec = get_spec(switch.name)
    switch.judge = shipped_judge(lm, spec, data_dir)
    measured = _measured(lm, switch, spec, eval_prompts, Protocol(samples=samples, seed=seed), True, say)
    switch.card = switch.card.updated(**measured, judge_fitted_on=f"the training pairs of '{spec.dataset}'", recalibrated_with=f"lmswitch {__version__}: python -m lmswitch build-pretrained "
                                      "--recalibrate", recalibration_seconds=round(time.perf_counter() - start, 1))
    return switch


def shipped_judge(lm: LanguageModel, spec: Spec, data_dir: str | Path | None = None) -> torch.Tensor | None:
    """The judge :func:`~lmswitch.core.train.train_switch` fits, from ``spec``'s training pairs (one body pass)."""
    pos, neg = load_dataset(spec.dataset, data_dir).train()
    return fit_judge(encode_texts(lm, pos + neg, [1.0] * len(pos) + [-1.0] * len(neg), spec.train.chunk_tokens))


def build_pretrained(
    lm: LanguageModel,
    out_dir: str | Path = PRETRAINED_DIR,
    *,
    names: Sequence[str] | None = None,
    data_dir: str | Path | None = None,
    eval_prompts: int = CARD_PROMPTS,
    samples: int = CARD_SAMPLES,
    seed: int = BUILD_SEED,
    fluent: bool = True,
    recalibrate: bool = False,
    log: Log | None = None,
) -> list[Path]:
    """Rebuild the shipped switches (all of :data:`SPECS`, or ``names``) into ``out_dir``; returns the files written.

    ``recalibrate``: keep each switch's weights (read from ``out_dir``), measure its card again and fit its judge
    (:func:`recalibrate_switch`).
    """
    specs = [get_spec(n) for n in names] if names else list(SPECS)
    out = Path(out_dir)
    paths = []
    for spec in specs:
        if recalibrate:
            switch = recalibrate_switch(lm, _existing(out, spec, lm), eval_prompts=eval_prompts, samples=samples, seed=seed,
                                        data_dir=data_dir, log=log)
        else:
            switch = build_switch(lm, spec, data_dir=data_dir, eval_prompts=eval_prompts, samples=samples, seed=seed, fluent=fluent,
                                  log=log)
        paths.append(switch.save(out / f"{spec.name}.safetensors"))
        if log:
            log(f"[{spec.name}] saved {paths[-1]}")
    if write_index(out) is None and log:
        log(f"kept {out / 'README.md'}: it is not a switch index, so the index was not written")
    return paths


def _existing(folder: Path, spec: Spec, lm: LanguageModel) -> Switch:
    path = folder / f"{spec.name}.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"--recalibrate keeps an existing switch's weights, but {path} does not exist; build it first "
                                f"(python -m lmswitch build-pretrained --only {spec.name}"
                                + ("" if folder.resolve() == Path(PRETRAINED_DIR).resolve() else f" --out {shlex.quote(str(folder))}") + ")")
    switch = load_switch(path)
    switch.check_model(lm)
    return switch


INDEX_TITLE = "# Shipped switches"  # the first line of a switch folder's README.md that write_index wrote


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4f}"


def write_index(folder: str | Path) -> Path | None:
    """``README.md`` in a switch folder: one row per shipped switch there (:data:`SPECS`; other files are not read),
    from the cards. A README.md that is not such an index (its first line) is left as it was: None."""
    folder = Path(folder)
    out = folder / "README.md"
    if out.exists() and not out.read_text(encoding="utf-8", errors="replace").startswith(INDEX_TITLE):
        return None
    rows = []
    for path in sorted(folder / f"{spec.name}.safetensors" for spec in SPECS):
        if not path.is_file():
            continue
        s = load_switch(path)
        c = s.card
        ev = c.get("evaluation", {})
        by_eps = ev.get("by_eps", {})
        metric = ev.get("metric", "")
        moved = " / ".join(f"{k}: {v[metric]:.2f} (ppl {v['perplexity']:.1f})" for k, v in by_eps.items()) if metric else "—"
        rows.append(f"| `{path.name}` | {s.description} | {c.get('data', {}).get('dataset', '—')} "
                    f"({c.get('data', {}).get('train_pairs', '?')} pairs) | {c.get('steps')} | {_signed(c.get('heldout_gain'))} | "
                    f"{c.get('heldout_meter_accuracy', 0):.0%} | ±{c.get('recommended_eps', '?')} | {c.fluent_text or '—'} | {metric}: {moved} |")
    text = "\n".join([
        INDEX_TITLE,
        "",
        f"Built by `python -m lmswitch build-pretrained` from `{SOURCE_PATH}/` (see `{SOURCE_PATH}/DATA.md`); "
        "every number below comes from the switch's own card (`python -m lmswitch info --switch FILE`). "
        "Held-out gain: nats per token by which the switch explains held-out training text better than the base model. "
        "Meter: zero-shot accuracy of the style meter's sign on the held-out pairs. "
        "The evaluation columns come from the card's short evaluation (prompts and samples are in the card); "
        "Fluent ε: the range in which the switch still wrote fluent text on the dev prompts (the frontier's rules; "
        "the app's sliders span it); the full evaluation is in EVALUATION.md.",
        "",
        "| file | what it does | data | steps | held-out gain | meter | recommended ε | fluent ε (dev prompts) | evaluation at −ε / 0 / +ε |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    write_file(out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return out


def load_pretrained(lm: LanguageModel | None = None, folder: str | Path = PRETRAINED_DIR) -> dict[str, Switch]:
    """Every ``.safetensors`` switch in ``folder`` by name, checked against ``lm`` when given."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"switch folder {folder} does not exist")
    return {path.stem: load_switch(path, lm) for path in sorted(folder.glob("*.safetensors"))}
