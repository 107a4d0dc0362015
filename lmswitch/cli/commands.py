"""One function per subcommand: parsed arguments and the loaded model → library call → printed text or JSON.

:data:`COMMANDS` maps each subcommand's name to its function; ``info --switch``, the
one command that needs no model, is :func:`lmswitch.cli.preflight.cmd_switch_card`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tqdm import tqdm

from lmswitch.cli.common import emit, log, read_examples, text_arg
from lmswitch.cli.evaluate import cmd_eval
from lmswitch.cli.parser import DEMO_NEW_TOKENS, SWEEP_EPS
from lmswitch.cli.preflight import card_without_curves, flag_errors, sampling_options
from lmswitch.core.export import TOP_WORDS, export
from lmswitch.core.generate import generate, sweep
from lmswitch.core.models import LanguageModel, load_model
from lmswitch.core.options import TrainConfig
from lmswitch.core.parallel import is_main
from lmswitch.core.steering import beyond_fluent, check_setting
from lmswitch.core.switch import Switch, load_switch
from lmswitch.core.train import advise_on_data, train_switch
from lmswitch.core.transfer import fit_text, strength_advice, transfer
from lmswitch.harness.frontier import calibrated_card
from lmswitch.harness.pretrained import PRETRAINED_DIR, build_pretrained
from lmswitch.io.parse import FALLBACK_EPS
from lmswitch.io.resources import examples_dir
from lmswitch.lenses.meter import measure
from lmswitch.lenses.spans import highlight
from lmswitch.lenses.svd import RARE_NOTE, promoted_words, svd_dimensions


def _sampling(args: argparse.Namespace, lm: LanguageModel) -> dict:
    """The decoding options of ``generate``/``sweep`` as keyword arguments, checked against ``lm`` (its context length,
    a chat template) with the flags named."""
    options = sampling_options(args)
    flag_errors(lambda: options.validate(lm))
    return options.to_dict()


def cmd_info(args: argparse.Namespace, lm: LanguageModel) -> None:
    data = {"name": lm.name, "source": lm.source, "fingerprint": lm.fingerprint, "hidden_size": lm.hidden_size,
            "vocab_size": lm.vocab_size, "context_length": lm.context_length, "chat_template": lm.has_chat_template,
            "load_seconds": round(lm.load_seconds, 3)}
    emit(args, data, "\n".join(f"{k}: {v}" for k, v in data.items()))


def _progress_bar(bar: tqdm) -> Callable[[int, int, float], None]:
    """A ``train_switch`` progress callback that moves ``bar`` and shows the loss."""

    def show(step: int, total: int, loss: float) -> None:
        bar.total = total  # L-BFGS ends its ridge path before the step cap
        bar.set_postfix(loss=f"{loss:.4f}", refresh=False)  # drawn by update, which honours the bar's delay
        bar.update(step - bar.n)

    return show


def _save_and_probe(args: argparse.Namespace, lm: LanguageModel, switch: Switch) -> str:
    """Write ``switch`` to ``--out`` at once (an interrupted probe keeps it); unless ``--no-calibrate``, probe its fluent ε
    range on ``lm``'s dev prompts and write it again with that range in its card. Returns the range as text ("" unprobed)."""
    if is_main():  # under `accelerate launch` every process holds the same switch; one writes it
        switch.save(args.out)
    if not args.calibrate or switch.steers_nothing:  # (a switch that steers nothing has no range: calibrated_card says so)
        return ""
    if not args.json:
        log(f"probing the fluent ε range on {lm.name}'s dev prompts …")
    try:
        switch.card = calibrated_card(lm, switch)
    except KeyboardInterrupt:  # the file stays, and says nothing of the stop itself
        log(f"{args.out} is saved without its fluent ε range: the probe was interrupted (run the command again with --force "
            "to measure it)")
        raise
    if is_main():
        switch.save(args.out)
    return switch.card.fluent_text


def cmd_train(args: argparse.Namespace, lm: LanguageModel) -> None:
    positive = read_examples(args.positive, args.document)
    negative = read_examples(args.negative, args.document) if args.negative else None
    config = TrainConfig(optimizer=args.optimizer, self_contrast=args.self_contrast, steps=args.steps, lr=args.lr, l2=args.l2,
                         seed=args.seed)
    # drawn at steps from 1 s on: a run refused at once, or over within a second, prints no bar
    with tqdm(total=args.steps, desc="training", unit="step", disable=args.json, file=sys.stderr, delay=1.0) as bar:
        switch = train_switch(lm, positive, negative, name=args.name, description=args.description,
                              positive_label=args.positive_label, negative_label=args.negative_label, config=config,
                              progress=_progress_bar(bar))
        bar.total = bar.n  # done: a run its stopping rule ended early shows a full bar, not one left at 67%
    fluent = _save_and_probe(args, lm, switch)
    fluent = f"; fluent ε {fluent}" if fluent else ""
    card = card_without_curves(switch)
    advice = advise_on_data(card)  # whether the data sufficed, and any warning (a text in another language)
    emit(args, {"out": args.out, "card": card, "advice": advice.text, "may_not_generalise": advice.weak},
         f"saved {args.out}: {switch.card.training.summary()}{fluent}\n{'warning: ' if advice.weak else ''}{advice.text}")


BEYOND_FLUENT = {  # what to expect beyond a switch's fluent range, generated with or without --adaptive (an export's: its notes)
    "adaptive": "--adaptive stops the steering once its budget is spent, so expect a weaker effect rather than loops",
    "plain": "expect lower fluency: the text drifts from one style word to the next and can repeat whole phrases (the "
             "repeat guard stops only a word pushed again at once; --adaptive stops the steering once it has changed the "
             "text enough)",
}


def _warn_beyond_fluent(setting: list[tuple[Switch, float]], kind: str) -> None:
    """A warning on stderr for each ε outside its switch's calibrated fluent range (text there reads less well)."""
    for switch, eps in setting:
        if switch.card.beyond_fluent(eps):
            log(f"warning: ε {eps:+g} for '{switch.name}' is beyond its fluent range {switch.card.fluent_text}; {BEYOND_FLUENT[kind]}")


def cmd_generate(args: argparse.Namespace, lm: LanguageModel) -> None:
    setting = [(s, _card_eps(s, eps, ref, fallback=FALLBACK_EPS)) for s, ref, eps in ((load_switch(ref, lm), ref, eps) for ref, eps in args.switch)]
    check_setting(lm, setting)  # a setting that will be refused is refused before any warning
    _warn_beyond_fluent(setting, "adaptive" if args.adaptive else "plain")
    texts = generate(lm, args.prompt, setting, samples=args.samples, seed=args.seed, **_sampling(args, lm))
    used = [{"path": ref, "name": s.name, "eps": eps} for (ref, _), (s, eps) in zip(args.switch, setting, strict=True)]
    data = {"prompt": args.prompt, "switches": used, "seed": args.seed, "beyond_fluent": beyond_fluent(setting),
            "samples": [{"seed": args.seed + k, "text": t} for k, t in enumerate(texts)]}
    emit(args, data, "\n".join(_row(f"[seed {args.seed + k}]", _shown(args, t)) for k, t in enumerate(texts)))


def cmd_sweep(args: argparse.Namespace, lm: LanguageModel) -> None:
    switch = load_switch(args.switch, lm)
    rows = sweep(lm, args.prompt, switch, args.eps or switch.card.fluent_row or SWEEP_EPS, seed=args.seed, **_sampling(args, lm))
    data = {"prompt": args.prompt, "switch": args.switch, "seed": args.seed, "rows": [{"eps": e, "text": t} for e, t in rows]}
    emit(args, data, "\n".join(_row(f"eps {e:+6g}", _shown(args, t)) for e, t in rows))


def _row(label: str, text: str) -> str:
    """``label | text``, a text's later lines under its first (a multi-line generation broke the sweep's table)."""
    return f"{label} | " + text.replace("\n", "\n" + " " * len(label) + " | ")


def _shown(args: argparse.Namespace, text: str) -> str:
    """A continuation after its prompt; with --chat, the reply after the user's message (it does not continue it)."""
    return f"{args.prompt} → {text.lstrip()}" if args.chat else f"{args.prompt}{text}"


def cmd_demo(args: argparse.Namespace, lm: LanguageModel) -> None:
    examples = examples_dir()
    log(f"model {lm.name} loaded in {lm.load_seconds:.1f} s; training a sentiment switch from "
        f"{examples / 'sentiment_positive.txt'} and sentiment_negative.txt ...")
    pos = read_examples(str(examples / "sentiment_positive.txt"), False)
    neg = read_examples(str(examples / "sentiment_negative.txt"), False)
    switch = train_switch(lm, pos, neg, name="sentiment", config=TrainConfig(steps=args.steps))
    log(f"trained in {switch.card['seconds']:.1f} s; {advise_on_data(card_without_curves(switch)).text}")  # as train says
    log("probing its fluent ε range on a few dev prompts …")
    switch.card = calibrated_card(lm, switch)
    rows = sweep(lm, args.prompt, switch, switch.card.fluent_row, max_new_tokens=DEMO_NEW_TOKENS)
    data = {"fluent_eps": switch.card.fluent_eps, "prompt": args.prompt, "sweep": [{"eps": eps, "text": text} for eps, text in rows]}
    emit(args, data, f"fluent ε {switch.card.fluent_text}; the same prompt and seed across that range:\n\n"
         + "\n".join(_row(f"eps {eps:+5g}", f"{args.prompt}{text}") for eps, text in rows))


def cmd_svd(args: argparse.Namespace, lm: LanguageModel) -> None:
    switch = load_switch(args.switch, lm)
    found = svd_dimensions(lm, switch, dims=args.dims, words=args.words)
    words = promoted_words(lm, switch, words=args.words)
    lines = [f"{switch.name}: +eps → {switch.positive_label}, -eps → {switch.negative_label}",
             "promoted at +eps:  " + ", ".join(w.shown for w in words.promoted),
             "suppressed at +eps: " + ", ".join(w.shown for w in words.suppressed), ""]
    for d in found.dimensions:
        lines.append(f"dim {d.index}  σ={d.singular_value:.3g} ({100 * d.share:.1f}% of W)  "
                     f"agreement {d.agreement:.2f}  strength {d.strength:.3g}")
        lines.append("  ↑ " + ", ".join(w.shown for w in d.promoted))
        lines.append("  ↓ " + ", ".join(w.shown for w in d.suppressed))
    if len(found.dimensions) < args.dims:
        lines.append(f"(the switch has rank {len(found.dimensions)}: its other directions are numerically zero and steer nothing)")
    listed = [*words.promoted, *words.suppressed, *(w for d in found.dimensions for w in (*d.promoted, *d.suppressed))]
    if not all(w.written for w in listed):
        lines += ["", RARE_NOTE]
    dims, overall = found.to_dict(), words.to_dict()
    emit(args, {**dims, "promoted": overall["promoted"], "suppressed": overall["suppressed"]}, "\n".join(lines))


def cmd_highlight(args: argparse.Namespace, lm: LanguageModel) -> None:
    switch = load_switch(args.switch, lm)
    h = highlight(lm, switch, text_arg(args), eps=args.eps, max_span=args.max_span, n_spans=args.spans)
    marked = "".join(f"[[{piece}]]" if label else piece for piece, label in h.highlighted)
    lines = ([marked, ""] if h.spans else []) + [
        f"span {s.start}:{s.end}  Δ={s.score:+.3f} nats  {s.text!r}{'  (weak)' if s.weak else ''}" for s in h.spans]
    if any(s.weak for s in h.spans):
        lines.append(f"weak: a span {h.weak_text()}")
    if len(h.spans) < args.spans:  # the others would have read the other way, or not at all
        found, asked = len(h.spans), f"the {args.spans} spans asked" if args.spans > 1 else "the span asked"
        lines.append(f"{found} of {asked} read toward {h.label} (summed Δ > 0)" if found else
                     f"no span reads toward {h.label} (summed Δ > 0)")
    data = {k: v for k, v in h.to_dict().items() if k in ("switch", "eps", "label", "spans", "total_delta", "windows")}
    data["tokens"] = [{"text": t.text, "start": t.start, "end": t.end, "delta": t.delta} for t in h.tokens]
    emit(args, data, "\n".join(lines))


def cmd_measure(args: argparse.Namespace, lm: LanguageModel) -> None:
    switches = [load_switch(ref, lm) for ref in args.switch]
    m = measure(lm, switches, text_arg(args), points=args.points)
    lines = [f"{m.scored_tokens} token{'s' if m.scored_tokens != 1 else ''}; log-likelihood {m.base_loglik:.4f} nats/token at eps 0, "
             f"{m.best_loglik:.4f} at the best eps (gain {m.gain:+.4f})"]
    for row in m.switches:
        lines.append(f"{row.name}: best eps {row.best_eps:+.2f} → {row.label or 'neutral'} (evidence {row.evidence_nats:.2f} nats"
                     + ("; weak: the side means little" if row.weak else "") + ")"
                     + ("  (at the edge of the range)" if row.at_bound else ""))
        lines += [f"  eps {x:+6.2f}  {y:.4f}" for x, y in zip(row.grid, row.loglik, strict=True)]
    emit(args, m.to_dict(), "\n".join(lines))


def cmd_build_pretrained(args: argparse.Namespace, lm: LanguageModel) -> None:
    paths = build_pretrained(lm, args.out or PRETRAINED_DIR, names=args.only, data_dir=args.data, eval_prompts=args.eval_prompts,
                             samples=args.samples, seed=args.seed, fluent=not args.no_calibrate,
                             recalibrate=args.recalibrate, log=log)
    emit(args, {"written": [str(p) for p in paths]}, "\n".join(f"wrote {p}" for p in paths))


def _card_eps(switch: Switch, eps: float | None, ref: str, fallback: float | None = None) -> float:
    """``eps``, or when none was given the switch card's recommended ε (inside its fluent range when it was probed; a
    transferred switch's never probed is said on stderr); an unprobed card without one: ``fallback`` (said on stderr),
    or with None an error. ``ref``: the name or path the user gave, repeated in the hint (the switch's own name is no
    file's when it was given as a path)."""
    if eps is not None:
        return eps
    if switch.card.recommended_eps is not None:
        if switch.card.transfer is not None and switch.card.fluent_eps is None:  # its probe skipped, failed or stopped
            why = (f"its fluent-range probe failed ({switch.card.calibration_error})" if switch.card.calibration_error
                   else "it was never probed on this model")
            log(f"note: switch '{switch.name}' was transferred and {why}: its ε {switch.card.recommended_eps:+g} is scaled "
                f"from the source's and may not read fluently here (give one: --switch {ref}=EPS, or transfer it again)")
        return switch.card.recommended_eps
    if switch.card.fluent_eps is not None:  # probed, and no +ε read fluently: nothing to recommend
        raise ValueError(f"switch '{switch.name}' recommends no ε: no positive one read fluently when its range was probed "
                         f"(fluent ε {switch.card.fluent_text}); give one: --switch {ref}=EPS")
    if fallback is None or switch.card.transfer is not None:  # (a source that recommends none passes none on)
        raise ValueError(f"switch '{switch.name}' has no recommended ε in its card; give one: --switch {ref}=EPS")
    log(f"note: switch '{switch.name}' has no recommended ε in its card; using ε {fallback:+g} (give one: --switch "
        f"{ref}=EPS)")
    return fallback


def cmd_export(args: argparse.Namespace, lm: LanguageModel) -> None:
    setting = [(s, _card_eps(s, eps, ref)) for s, ref, eps in ((load_switch(ref, lm), ref, eps) for ref, eps in args.switch)]
    check_setting(lm, setting)
    if not is_main():  # under accelerate launch: one process writes
        return
    r = export(lm, setting, args.out, format=args.format, rank=args.rank, force=args.force)
    what = (f"a {r.format} LoRA on '{r.target_module}', rank {r.rank} of {r.full_rank} ({r.kept_energy:.1%} of the steering matrix's "
            "energy kept)" if r.is_lora else f"a {r.format} model with the steered '{r.target_module}' baked in")
    kept = f", {r.promoted_words_kept:.0%} of its {TOP_WORDS} most promoted words kept" if r.rank < r.full_rank else ""
    emit(args, r.to_dict(), "\n".join([f"wrote {r.out}: {what}, relative error of the logit change {r.relative_logit_error:.1e} "
                                       f"(largest logit error {r.max_logit_error:.1e}{kept}) at "
                                       f"{', '.join(f'{n}={e:+g}' for n, e in r.setting)}", *(f"note: {n}" for n in r.notes)]))


def cmd_transfer(args: argparse.Namespace, lm: LanguageModel) -> None:
    target = load_model(args.to, dtype=args.dtype)
    moved = transfer(load_switch(args.switch), lm, target, anchors=args.anchors, min_anchors=args.min_anchors)
    _save_and_probe(args, target, moved)
    emit(args, {"out": args.out, "written": args.out, "card": dict(moved.card)},  # "out" as train's; "written" kept for scripts
         f"wrote {args.out}: '{moved.name}' for {target.name}; its map was {fit_text(moved.card.transfer)}.\n"
         f"{strength_advice(moved, target.name)}")


COMMANDS: dict[str, Callable[[argparse.Namespace, LanguageModel], None]] = {
    "info": cmd_info,
    "train": cmd_train,
    "generate": cmd_generate,
    "sweep": cmd_sweep,
    "svd": cmd_svd,
    "highlight": cmd_highlight,
    "measure": cmd_measure,
    "eval": cmd_eval,
    "build-pretrained": cmd_build_pretrained,
    "transfer": cmd_transfer,
    "export": cmd_export,
    "demo": cmd_demo,
}


def run(args: argparse.Namespace) -> None:
    """Load the model and run the parsed command line (checked by :func:`~lmswitch.cli.preflight.checked_before_loading`;
    errors are raised, for :func:`~lmswitch.cli.main`)."""
    lm = load_model(args.model, dtype=args.dtype, device_map=args.device_map, offload_folder=args.offload_folder)
    COMMANDS[args.command](args, lm)
