"""The switches shipped in ``pretrained_switches/``, and how they are rebuilt from ``assets/data/``.

``python -m lmswitch build-pretrained`` trains every switch in :data:`SPECS` on its
dataset's training pairs with a fixed seed, measures it (held-out likelihood gain,
zero-shot accuracy of the style meter on the held-out pairs, and a short
generation evaluation at -ε, 0, +ε with the switch's own scorer), writes all of it
into the switch's card and saves one ``.safetensors`` file per switch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lmswitch import __version__
from lmswitch.core.models import LanguageModel
from lmswitch.core.switch import Switch, load_switch
from lmswitch.core.train import train_switch
from lmswitch.harness.datasets import DATASETS, load_dataset
from lmswitch.harness.evaluate import Protocol, evaluate_sweep, load_prompts
from lmswitch.io.resources import shipped_switches_dir
from lmswitch.lenses.meter import style_slope

PRETRAINED_DIR = shipped_switches_dir()


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
    train: dict = field(default_factory=dict)  # extra train_switch arguments


SPECS: tuple[Spec, ...] = (
    Spec(
        "sentiment",
        "sentiment",
        "Sentiment: positive ε makes text more positive, negative ε more negative.",
        "neutral",
        "positive_share",
        +1,
        12.0,
        {"lr": 3e-3, "steps": 300, "rank": 16},
    ),
    Spec(
        "detox",
        "toxicity",
        "Detoxification: positive ε makes text less toxic (civil), negative ε more toxic (the paper's convention).",
        "provocative",
        "toxicity_prob",
        -1,
        4.0,
        {"lr": 3e-3, "steps": 300, "rank": 16},
    ),
    Spec(
        "formality",
        "formality",
        "Formality: positive ε makes text more formal, negative ε more casual.",
        "neutral",
        "formal_share",
        +1,
        5.0,
        {"lr": 3e-3, "steps": 300, "rank": 16},
    ),
)

Log = Callable[[str], None]


def get_spec(name: str) -> Spec:
    for spec in SPECS:
        if spec.name == name:
            return spec
    raise ValueError(f"no shipped switch named {name!r}; choose from {', '.join(s.name for s in SPECS)}")


def heldout_accuracy(lm: LanguageModel, switch: Switch, positive: Sequence[str], negative: Sequence[str]) -> float:
    """Share of held-out texts whose style-meter slope at ε = 0 has the sign of their label (zero-shot classification)."""
    right = sum(style_slope(lm, switch, t) > 0 for t in positive) + sum(style_slope(lm, switch, t) < 0 for t in negative)
    return right / (len(positive) + len(negative))


def build_switch(
    lm: LanguageModel,
    spec: Spec,
    *,
    data_dir: str | Path | None = None,
    eval_prompts: int = 20,
    samples: int = 4,
    seed: int = 0,
    log: Log | None = None,
) -> Switch:
    """Train and measure one shipped switch (deterministic for a given model, data and seed)."""
    say = log or (lambda _msg: None)
    start = time.perf_counter()
    data = load_dataset(spec.dataset, data_dir)
    pos, neg = data.train()
    say(f"[{spec.name}] training on {len(pos)} + {len(neg)} texts of '{spec.dataset}'")
    switch = train_switch(
        lm,
        pos,
        neg,
        name=spec.name,
        description=spec.description,
        positive_label=data.positive_label,
        negative_label=data.negative_label,
        seed=seed,
        **spec.train,
    )
    gain = switch.card["heldout_gain"]
    say(f"[{spec.name}] {switch.card['steps']} steps in {switch.card['seconds']:.0f} s; held-out gain {gain:+.4f} nats/token")
    held_pos, held_neg = data.heldout()
    accuracy = heldout_accuracy(lm, switch, held_pos, held_neg)
    say(f"[{spec.name}] style meter on {len(held_pos)} + {len(held_neg)} held-out pairs: {accuracy:.1%} correct")
    r = spec.recommended_eps
    evaluation = {}
    if eval_prompts:
        prompts = load_prompts(spec.prompts, eval_prompts)
        protocol = Protocol(samples=samples, seed=seed)
        for ev in evaluate_sweep(lm, switch, [-r, 0.0, r], prompts, protocol):
            eps = ev.setting[spec.name]
            evaluation[f"{eps:+g}"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in ev.summary().items() if k != "setting"}
            say(f"[{spec.name}] eps {eps:+g}: {spec.metric} {getattr(ev, spec.metric):.3f}, perplexity {ev.perplexity:.1f}")
    folder, pos_file, neg_file, *_ = DATASETS[spec.dataset]
    switch.eps_range = (-2 * r, 2 * r)
    switch.card.update({
        "data": {
            "dataset": spec.dataset,
            "files": [f"assets/data/{folder}/{pos_file}", f"assets/data/{folder}/{neg_file}"],
            "train_pairs": len(pos),
            "heldout_pairs": len(held_pos),
            "split": "every tenth pair (index % 10 == 9) held out",
        },
        "direction": f"+eps -> {data.positive_label}, -eps -> {data.negative_label}",
        "recommended_eps": r,
        "recommended_eps_range": [-2 * r, 2 * r],
        "heldout_meter_accuracy": round(accuracy, 4),
        "evaluation": {
            "prompts": f"{spec.prompts} (first {eval_prompts})",
            "samples_per_prompt": samples,
            "max_new_tokens": Protocol.max_new_tokens,
            "top_p": Protocol.top_p,
            "metric": spec.metric,
            "by_eps": evaluation,
        },
        "built_with": f"lmswitch {__version__}: python -m lmswitch build-pretrained",
        "build_seconds": round(time.perf_counter() - start, 1),
    })
    return switch


def build_pretrained(
    lm: LanguageModel,
    out_dir: str | Path = PRETRAINED_DIR,
    *,
    names: Sequence[str] | None = None,
    data_dir: str | Path | None = None,
    eval_prompts: int = 20,
    samples: int = 4,
    seed: int = 0,
    log: Log | None = None,
) -> list[Path]:
    """Rebuild the shipped switches (all of :data:`SPECS`, or ``names``) into ``out_dir``; returns the files written."""
    specs = [get_spec(n) for n in names] if names else list(SPECS)
    out = Path(out_dir)
    paths = []
    for spec in specs:
        switch = build_switch(lm, spec, data_dir=data_dir, eval_prompts=eval_prompts, samples=samples, seed=seed, log=log)
        paths.append(switch.save(out / f"{spec.name}.safetensors"))
        if log:
            log(f"[{spec.name}] saved {paths[-1]}")
    write_index(out)
    return paths


def write_index(folder: str | Path) -> Path:
    """``README.md`` in a switch folder: one row per switch, from the cards."""
    folder = Path(folder)
    rows = []
    for path in sorted(folder.glob("*.safetensors")):
        s = load_switch(path)
        c = s.card
        ev = c.get("evaluation", {})
        by_eps = ev.get("by_eps", {})
        metric = ev.get("metric", "")
        moved = " / ".join(f"{k}: {v[metric]:.2f} (ppl {v['perplexity']:.1f})" for k, v in by_eps.items()) if metric else "—"
        rows.append(f"| `{path.name}` | {s.description} | {c.get('data', {}).get('dataset', '—')} "
                    f"({c.get('data', {}).get('train_pairs', '?')} pairs) | {c.get('steps')} | {c.get('heldout_gain', 0):+.4f} | "
                    f"{c.get('heldout_meter_accuracy', 0):.0%} | ±{c.get('recommended_eps', '?')} | {metric}: {moved} |")
    text = "\n".join([
        "# Shipped switches",
        "",
        "Built by `python -m lmswitch build-pretrained` from `assets/data/` (see `assets/data/DATA.md`); "
        "every number below comes from the switch's own card (`python -m lmswitch info --switch FILE`). "
        "Held-out gain: nats per token by which the switch explains held-out training text better than the base model. "
        "Meter: zero-shot accuracy of the style meter's sign on the held-out pairs. "
        "The evaluation columns come from the card's short evaluation (prompts and samples are in the card); "
        "the full evaluation is in EVALUATION.md.",
        "",
        "| file | what it does | data | steps | held-out gain | meter | recommended ε | evaluation at −ε / 0 / +ε |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    out = folder / "README.md"
    out.write_text(text, encoding="utf-8")
    return out


def load_pretrained(lm: LanguageModel | None = None, folder: str | Path = PRETRAINED_DIR) -> dict[str, Switch]:
    """Every ``.safetensors`` switch in ``folder`` by name, checked against ``lm`` when given."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"switch folder {folder} does not exist")
    return {path.stem: load_switch(path, lm) for path in sorted(folder.glob("*.safetensors"))}
