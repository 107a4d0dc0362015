"""What the command line does before it loads a model: refuse what can be refused without one, and ``info --switch``,
the one command that needs none. Only torch comes in here (a switch is a tensor), not the model libraries, so these
answer in about two seconds; ``eval``'s sweep inputs (its prompt set and metrics) bring in the harness, a few more.

>>> from lmswitch.cli import main
>>> main(["info", "--switch", "detox"])   # this module's cmd_switch_card   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from lmswitch.cli.common import emit
from lmswitch.core.checks import check_samples, check_seed
from lmswitch.core.options import SAMPLING, SamplingOptions
from lmswitch.core.switch import Switch, check_name, load_switch, switch_path, usable_name
from lmswitch.harness.options import METRICS, Protocol, load_prompts
from lmswitch.io.atomic import writable
from lmswitch.io.parse import parse_names
from lmswitch.io.resources import resolve_switch_file
from lmswitch.lenses.options import check_counts, check_highlight_args

_BUDGETS = (lambda a: not a.adaptive and (a.kl_budget is not None or a.generation_budget != SAMPLING.generation_budget),
            "--kl-budget and --generation-budget are adaptive strength's budgets; add --adaptive")
CONFLICTS = {  # subcommand → [(a bad combination of options, what to do instead)], checked before the model loads
    "eval": [(lambda a: a.sliders and not a.frontier, "--sliders scores the slider ranges of --frontier switches; add --frontier NAME"),
             (lambda a: a.png and not a.out, "--png renders the figure that --out DIR writes; add --out DIR")],
    "build-pretrained": [(lambda a: a.recalibrate and a.no_calibrate, "--recalibrate measures the fluent range; drop --no-calibrate")],
    "train": [(lambda a: not a.negative and not a.document and not a.self_contrast,
               "--positive without --negative gives one side only: add --negative FILE (examples of the other style), "
               "--self-contrast (the model's own continuations as the other side), or --document to learn what the file's "
               "text does differently from the model's own writing")],
    "sweep": [_BUDGETS],
    "generate": [_BUDGETS,  # with no switch the text is the model's own, which these would leave as it is
                 (lambda a: a.guide > 1 and not a.switch,
                  "--guide keeps the candidates a switch's judge prefers, and no --switch is given; add --switch NAME[=EPS]"),
                 (lambda a: a.adaptive and not a.switch,
                  "--adaptive limits a switch's steering, and no --switch is given; add --switch NAME[=EPS]")],
}


# eval's modes, chosen by the first of these options given (else --report, else a sweep or grid), and the options each
# reads (lmswitch/cli/evaluate.py): another option given with it would be silently ignored, so it is refused
_SAMPLING = {"limit", "samples", "max_new_tokens", "top_p", "seed", "kl_budget", "generation_budget", "repeat_guard"}
EVAL_MODES = {
    "stance": {"stance_methods", "out", "report"},
    "highlight": {"switches", "out", "report"},
    "frontier": {"methods", "sliders", "out", "report", *_SAMPLING},
    "transfer_to": {"report", "seed", "switches"},
    "report": {"quick", "seed", "repeat_guard", "switches"},
    "switch": {"eps", "grid", "grid_eps", "prompts", "metrics", "out", "png", "adaptive", "best_of", "guide", *_SAMPLING},
}


def _eval_unused(args: argparse.Namespace) -> None:
    """Refuse an eval option its mode does not read, and a second mode, naming what the mode does read."""
    from lmswitch.cli.parser import build_parser

    modes = [m for m in EVAL_MODES if m not in ("report", "switch") and getattr(args, m)]
    if len(modes) > 1:
        raise ValueError(f"eval runs one of --stance, --highlight, --frontier, --transfer-to at a time; got {_flags(modes)}")
    mode = modes[0] if modes else "report" if args.report else "switch"
    defaults = vars(build_parser().parse_args(["eval"]))
    reads = EVAL_MODES[mode] | {mode}
    options = set(EVAL_MODES).union(*EVAL_MODES.values())  # eval's own: not --model, --dtype, --json
    unused = sorted(k for k, v in vars(args).items() if k in options - reads and v != defaults[k])
    if unused:
        what = "a sweep or grid (--switch)" if mode == "switch" else f"eval {_flags([mode])}"
        raise ValueError(f"{_flags(unused)} {'does' if len(unused) == 1 else 'do'} not apply to {what}, which reads "
                         f"{_flags(sorted(reads - {mode}))}; drop {'it' if len(unused) == 1 else 'them'}")


def _flags(dests: list[str]) -> str:
    return ", ".join("--" + d.replace("_", "-") for d in dests)


OWN_NAMES = {"n_spans": "spans", "ε": "eps"}  # a library parameter → the command's option that sets it, where their names differ


def flag_named(message: str, args: argparse.Namespace) -> str:
    """A library's refusal of a value ("n_spans must be …") naming the command's flag that set it ("--spans must be …")."""
    name = re.match(r"(\w+) must be", message)
    dest = OWN_NAMES.get(name[1], name[1]) if name else None
    return _flags([dest]) + message[len(name[1]):] if dest is not None and dest in vars(args) else message


def checked_before_loading(args: argparse.Namespace) -> None:
    """Refuse what can be refused without the model (bad combinations, where a switch goes, its name, a switch given
    twice, an output path that cannot be written), so no work is lost to it; fills in ``args.out`` and ``args.report``
    (``~`` expanded) and ``train``'s default name."""
    if getattr(args, "offload_folder", None) and not getattr(args, "device_map", None):
        raise ValueError("--offload-folder is where --device-map puts weights that fit nowhere else; add --device-map auto")
    for bad, message in CONFLICTS.get(args.command, []):
        if bad(args):
            raise ValueError(message)
    if args.command == "eval":
        _eval_unused(args)
    if args.command == "transfer":
        from lmswitch.core.options import check_anchors

        check_anchors(args.anchors, args.min_anchors, names=("--anchors", "--min-anchors"))
    if args.command in ("train", "transfer"):
        args.out = str(switch_path(args.out, overwrite=args.force))
    elif args.command in ("export", "eval", "build-pretrained") and args.out:  # a folder to write into
        args.out = str(writable(args.out, folder=True))
    if args.command == "export":  # a folder of other files, or the model's own: refused before the model loads, not after
        from lmswitch.core.export import checked_out

        checked_out(args.out, args.format, args.force, (args.model,) if args.model and Path(args.model).expanduser().exists() else ())
    if getattr(args, "report", None):
        args.report = str(writable(args.report))
    if args.command == "train":
        args.name = check_name(args.name) if args.name else usable_name(Path(args.out).stem)  # (a file's name may be freer)
    if args.command in ("generate", "sweep"):
        flag_errors(sampling_options(args).validate)
    _counts_before_loading(args)
    given = getattr(args, "switch", None)
    refs = [g[0] if isinstance(g, tuple) else g for g in (given if isinstance(given, list) else [given] if given else [])]
    digests = [load_switch(ref).digest for ref in refs]  # one that does not load (a typo) is refused before the model
    _once(refs, digests)  # generate, measure, export take several: one given twice is a typo


def _counts_before_loading(args: argparse.Namespace) -> None:
    """The values a command refuses without the model, refused before it loads (a typo cost seconds of loading)."""
    if args.command == "highlight":
        check_highlight_args(args.eps, args.max_span, args.spans)
    elif args.command == "svd":
        check_counts(args.dims, args.words)
    elif args.command == "generate":
        check_samples(args.samples)
        check_seed(args.seed)
    elif args.command == "eval":
        if is_sweep(args):
            sweep_inputs(args)


def is_sweep(args: argparse.Namespace) -> bool:
    """Whether ``eval`` runs an ε sweep or grid (:func:`cmd_eval`'s last branch)."""
    return not (args.stance or args.highlight or args.frontier or args.transfer_to or args.report)


def sweep_inputs(args: argparse.Namespace) -> tuple[list[str], list[str], Protocol]:
    """A sweep's metrics, prompts and protocol from its flags, checked as far as they can be without the model (the
    command line does so before it loads one)."""
    if not args.switch:
        raise ValueError("give --switch S.safetensors to evaluate (or --report EVALUATION.md for the full report)")
    metrics = _metrics(args.metrics)
    prompts = load_prompts(args.prompts, args.limit)
    protocol = Protocol(samples=args.samples, max_new_tokens=args.max_new_tokens, top_p=args.top_p, seed=args.seed,
                        adaptive=args.adaptive, kl_budget=args.kl_budget, generation_budget=args.generation_budget,
                        best_of=args.best_of, guide=args.guide, repeat_guard=args.repeat_guard)
    flag_errors(protocol.validate)
    flag_errors(protocol.sampling().validate)  # all but the model's part (its context length)
    return metrics, prompts, protocol


def _metrics(text: str) -> list[str]:
    metrics = parse_names(text)
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise ValueError(f"unknown metric(s) {', '.join(bad)}; choose from {', '.join(METRICS)}")
    return metrics


def sampling_options(args: argparse.Namespace) -> SamplingOptions:
    """The decoding options of ``generate`` and ``sweep``: each field from its flag (``--top-p`` → ``top_p``), by name,
    so that fields of one type cannot trade places."""
    return SamplingOptions(**{f.name: getattr(args, f.name) for f in fields(SamplingOptions)})


def flag_errors(check: Callable[[], None]) -> None:
    """``check()``, its refusal naming the command line's flags (``--max-new-tokens``, ``--chat`` for ``chat=True``),
    not the library's fields, and without the library's "or None" (a flag left out is that)."""
    try:
        check()
    except ValueError as err:
        switched = re.sub(r"\b(chat|adaptive)=True( \(--\1\))?", r"--\1", str(err))  # the switches a flag turns on
        names = "|".join(f.name for f in fields(SamplingOptions) if f.name not in ("chat", "adaptive"))  # ("adaptive strength")
        said = re.sub(rf"\b({names})\b", lambda m: _flags([m[1]]), switched)
        raise ValueError(re.sub(r",? or None\b|,? \(or None[^)]*\)", "", said)) from None


def _once(refs: list[str], matrices: list[str]) -> None:
    """Refuse a switch given twice, also once by name and once by its file's path, or as a copy of its file (its
    steering would be doubled); ``matrices``: each one's content id (:attr:`Switch.digest`)."""
    if len(refs) < 2:
        return
    files = [_file_of(ref) for ref in refs]
    for i, (file, matrix) in enumerate(zip(files, matrices, strict=True)):
        j = min(files.index(file), matrices.index(matrix))
        if j < i:
            how = "the same file" if files[j] == file else "the same matrix"
            same = f"--switch {refs[i]}" if refs[i] == refs[j] else f"--switch {refs[j]} and --switch {refs[i]} ({how})"
            raise ValueError(f"{same} {'is given twice' if refs[i] == refs[j] else 'are one switch'}; give each switch once")


def _file_of(ref: str) -> str:
    """The switch file ``ref`` names (a path or a shipped name), or ``ref`` itself when there is none (loading says why)."""
    try:
        return str(resolve_switch_file(ref).resolve())
    except (FileNotFoundError, OSError):
        return ref


def card_without_curves(switch: Switch) -> dict:
    """The card minus its per-step loss curves (too long to print)."""
    return {k: v for k, v in switch.card.items() if "losses" not in k}


def cmd_switch_card(args: argparse.Namespace) -> None:
    """``info --switch``: a switch file's card; no model needed."""
    s = load_switch(args.switch)
    data = {"path": args.switch, **s.header(), "dim": s.dim}
    data["card"] = card_without_curves(s)
    lines = [f"{s.name}: {s.description}" if s.description else s.name, f"  made for {s.model_name} ({s.model_fingerprint}), d = {s.dim}"]
    lo, hi = s.slider_range()
    recommended = f"recommended eps {s.card.recommended_eps:+g}; " if s.card.recommended_eps is not None else ""
    lines.append(f"  +eps → {s.positive_label}, -eps → {s.negative_label}; {recommended}"
                 + (f"fluent eps {s.card.fluent_text}" if s.card.fluent_text else f"fluent range not probed (the app's slider spans {lo:g} … {hi:g})")
                 + f" (× {s.eps0:g})")
    lines += card_lines({k: v for k, v in data["card"].items() if k not in s.card.unused()})  # --json keeps the whole card
    emit(args, data, "\n".join(lines))


def card_lines(entries: dict, indent: str = "  ") -> list[str]:
    """A card's entries one per line, a nested group indented under its key (the evaluation's per-ε rows were one line
    of a Python dict), a group of plain values below the top on one line (a row); numbers to four figures."""
    lines = []
    for key, value in entries.items():
        if isinstance(value, dict) and value and (indent == "  " or not all(map(_plain, value.values()))):
            lines += [f"{indent}{key}:", *card_lines(value, indent + "  ")]
        elif isinstance(value, dict) and value:
            lines.append(f"{indent}{key}: " + ", ".join(f"{k} {_shown(v)}" for k, v in value.items()))
        else:
            lines.append(f"{indent}{key}: {_shown(value)}")
    return lines


def _plain(value: object) -> bool:
    """A value shown on one line: no group, nor a list holding one."""
    return not isinstance(value, dict | list) or isinstance(value, list) and not any(isinstance(v, dict | list) for v in value)


def _shown(value: object) -> str:
    """A plain value as read: a float to four figures, a list's items joined."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_shown, value)) + "]"
    return str(value)
