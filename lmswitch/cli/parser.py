"""The argparse tree of ``python -m lmswitch``: one small function per subcommand's arguments.

Every default that the library already has is read from it, never restated:
decoding from :data:`~lmswitch.core.options.SAMPLING`, training from
:class:`~lmswitch.core.options.TrainConfig`, evaluation from
:class:`~lmswitch.harness.options.Protocol`, the rest from the constants that the
signature of the function the subcommand calls reads too. All of them live in
torch-free modules (``core/options.py``, ``lenses/options.py``,
``harness/options.py``), so a subcommand's ``--help`` loads no model library.
Switch settings and ε lists go through the one parser in :mod:`lmswitch.io.parse`.

>>> build_parser().parse_args(["generate", "--prompt", "Hi", "--switch", "sentiment=4"]).switch   # doctest: +SKIP
[('sentiment', 4.0)]
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from pathlib import Path
from typing import TypeVar

from lmswitch.core.options import (
    ANCHORS,
    DEFAULT_PROMPT,
    EXPORT_FORMAT,
    EXPORT_FORMATS,
    GUIDE_TOKENS,
    MIN_ANCHORS,
    NAMINGS,
    OPTIMIZERS,
    SAMPLES,
    SAMPLING,
    SEED,
    TrainConfig,
)
from lmswitch.harness.options import BUILD_SEED, CARD_PROMPTS, CARD_SAMPLES, FRONTIER_METHODS, PROTOCOL, STANCE_METHODS
from lmswitch.io.parse import FALLBACK_EPS, parse_eps_list, parse_switch_spec
from lmswitch.lenses import options as lens

T = TypeVar("T")

# CLI-only defaults, each named once
SWEEP_EPS = [-5.0, -3.0, 0.0, 3.0, 5.0]  # a sweep of a switch whose card has no fluent range
EVAL_EPS = [-10.0, -7.5, -5.0, -2.5, 0.0, 2.5, 5.0, 7.5, 10.0]
EVAL_GRID_EPS = [-5.0, 0.0, 5.0]
EVAL_MAX_EPS_VALUES = 101  # an offline sweep may be finer than an interactive one
EVAL_PROMPTS = "neutral"
EVAL_LIMIT = 20
EVAL_METRICS = "positive_share,toxicity_prob"
DEMO_STEPS = 100
DEMO_NEW_TOKENS = 30


def _help(cls: type, name: str) -> str:
    """The help text a dataclass field carries in its metadata (written once, on the option class)."""
    return next(f.metadata["help"] for f in fields(cls) if f.name == name).replace("%", "%%")


def _argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Adapt a :mod:`lmswitch.io.parse` function for ``type=``: argparse shows only an ArgumentTypeError's message."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


switch_spec_or_card = _argument_type(partial(parse_switch_spec, default_eps=None))  # no =EPS: the card's recommended ε
eps_list = _argument_type(parse_eps_list)
eval_eps_list = _argument_type(partial(parse_eps_list, max_values=EVAL_MAX_EPS_VALUES))

SWITCH_HELP = "a .safetensors switch file or the name of a shipped switch (e.g. sentiment)"


def _add_common_options(p: argparse.ArgumentParser, defaults: bool) -> None:
    """--model/--dtype/--device-map/--offload-folder/--json, accepted before or after the subcommand (the subcommand's
    value wins)."""
    d = (lambda value: value) if defaults else (lambda value: argparse.SUPPRESS)
    p.add_argument("--model", default=d(None), help="model alias, local folder, .gguf file or cached hub id (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default=d("auto"), choices=["auto", "float32", "bfloat16", "float16"],
                   help="model weights dtype (auto: bfloat16 where the hardware is fast at it)")
    p.add_argument("--device-map", default=d(None), metavar="auto",
                   help="spread a big model over GPUs, then CPU RAM, then --offload-folder (accelerate's device_map, e.g. auto)")
    p.add_argument("--offload-folder", default=d(None), metavar="DIR", help="with --device-map: where weights that fit nowhere else go")
    p.add_argument("--json", action="store_true", default=d(False), help="print machine-readable JSON")


def _add_generation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=SAMPLING.max_new_tokens, help="tokens to write after the prompt")
    p.add_argument("--temperature", type=float, default=SAMPLING.temperature, help="0 for greedy decoding")
    p.add_argument("--top-p", type=float, default=SAMPLING.top_p, help="nucleus sampling: draw from the likeliest tokens that "
                   "make up this share of the probability")
    p.add_argument("--seed", type=int, default=SEED, help="random seed: the same seed and settings give the same text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    _add_adaptive_options(p)


def _add_adaptive_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adaptive", action="store_true",
                   help="adaptive strength: steer each generation only until the switch has changed its sampled tokens by "
                        "--generation-budget nats (then the model writes on unsteered: no word loops at strong ε)")
    p.add_argument("--generation-budget", type=float, default=SAMPLING.generation_budget,
                   help="with --adaptive: nats of steering per generation (default %(default)s)")
    p.add_argument("--kl-budget", type=float, default=SAMPLING.kl_budget,
                   help="with --adaptive: also cap each token's KL(steered ‖ unsteered) at this many nats (default: no cap)")
    p.add_argument("--best-of", type=int, default=SAMPLING.best_of, metavar="N",
                   help="sample N candidates of each text and keep the likeliest under the steered model (OpenAI's best_of; "
                        "N times the decoding; default %(default)s)")
    p.add_argument("--guide", type=int, default=SAMPLING.guide, metavar="N",
                   help=f"guided decoding: every {GUIDE_TOKENS} tokens sample N candidates and keep the one the switch's judge "
                        "(a classifier of its two styles) places furthest the way ε points; about 1.8× the decoding time "
                        "with N = 4, 2.2× with 8; no word loops; default %(default)s (off)")
    p.add_argument("--repeat-guard", type=int, default=SAMPLING.repeat_guard, metavar="N",
                   help="steering never raises the logit of a token among the text's last N tokens, which keeps a strong "
                        "switch from looping ('great great great'); 0 for the paper's plain steering (default %(default)s)")


def _add_calibrate_option(p: argparse.ArgumentParser, after: str, prompts: str) -> None:
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help=f"skip the quick probe of the fluent ε range on {prompts} dev prompts after {after} (stored in the "
                        "card as fluent_eps, with the recommended ε inside it)")


def _add_text_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--text", help="the text to analyse")
    group.add_argument("--file", help="a document to analyse: .txt, .md, .html, .pdf or .docx")


class OneSwitch(argparse.Action):
    """``--switch`` of a command that takes one switch: given twice it kept the last one silently, and ``NAME=EPS``
    looked for a file of that name; both are refused, saying what the command takes (``eps_flag``: where its ε goes)."""

    def __init__(self, *args, eps_flag: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.eps_flag = eps_flag

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        command = parser.prog.split()[-1]
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"--switch is given twice; {command} takes one switch (generate and measure take several)")
        ref, sep, eps = value.rpartition("=")
        if sep and ref and re.fullmatch(r"[-+−]?[\d.]+(e[-+]?\d+)?", eps.strip()) and not Path(value).exists():
            where = f"; give its ε with {self.eps_flag}" if self.eps_flag else ""
            parser.error(f"--switch {value}: {command} takes the switch without =EPS (--switch {ref}){where}")
        setattr(namespace, self.dest, value)


def _info(p: argparse.ArgumentParser) -> None:
    p.add_argument("--switch", action=OneSwitch, help=f"{SWITCH_HELP} to describe")


def _named(field: str) -> str:
    """One field of each data shape's :data:`~lmswitch.core.options.NAMINGS`, for a help text (a description in the
    shape's own labels)."""
    return "; ".join(f"{kind}, {getattr(named, field).format(positive=named.positive_label, negative=named.negative_label)!r}"
                     for kind, named in NAMINGS.items())


def _train(p: argparse.ArgumentParser) -> None:
    train = TrainConfig()
    p.add_argument("--positive", required=True, help="a .txt/.md/.html/.pdf/.docx file: one example per line (or one document with --document)")
    p.add_argument("--negative", help="a file of contrasting examples (same formats)")
    p.add_argument("--document", action="store_true", help="treat each file as one whole document")
    p.add_argument("--out", required=True, help="output .safetensors path (an existing file is kept unless --force)")
    p.add_argument("--force", action="store_true", help="replace --out when it exists")
    p.add_argument("--name", default=None, help="the switch's name (default: --out's file name); 1–48 letters, digits, _ . + -")
    p.add_argument("--description", default=None, help=f"what the switch is (default by the data: {_named('description')})")
    p.add_argument("--positive-label", default=None, help=f"what +eps moves toward, e.g. non-toxic (default by the data: {_named('positive_label')})")
    p.add_argument("--negative-label", default=None, help=f"what -eps moves toward, e.g. toxic (default by the data: {_named('negative_label')})")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=train.optimizer, help=_help(TrainConfig, "optimizer"))
    p.add_argument("--self-contrast", action="store_true", help=_help(TrainConfig, "self_contrast"))
    p.add_argument("--steps", type=int, default=train.steps, help=_help(TrainConfig, "steps"))
    p.add_argument("--lr", type=float, default=train.lr, help="Adam's learning rate (--optimizer adam only)")
    p.add_argument("--l2", type=float, default=train.l2, help="Adam's L2 penalty on W (L-BFGS chooses its own on a held-out split)")
    p.add_argument("--seed", type=int, default=train.seed, help="random seed (held-out split, sampled tail, self-contrast)")
    _add_calibrate_option(p, "training", "the model's")


def _generate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--switch", action="append", default=[], type=switch_spec_or_card, metavar="SWITCH[=EPS]",
                   help=f"repeatable; SWITCH is {SWITCH_HELP}; EPS in eps0 units (default: the card's recommended ε, "
                        f"inside its fluent range; {FALLBACK_EPS:g}, the paper's 5 eps0, for a card without one)")
    p.add_argument("--samples", type=int, default=SAMPLES, help="texts to write (seeds SEED, SEED+1, …)")
    _add_generation_options(p)


def _sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--switch", required=True, action=OneSwitch, eps_flag="--eps (a list)", help=SWITCH_HELP)
    p.add_argument("--eps", type=eps_list, default=None,
                   help="eps values (eps0 units); default: the card's fluent range, its ends, their halves and 0 "
                        f"({','.join(f'{e:g}' for e in SWEEP_EPS)} for a switch without one)")
    _add_generation_options(p)


def _svd(p: argparse.ArgumentParser) -> None:
    p.add_argument("--switch", required=True, action=OneSwitch, help=SWITCH_HELP)
    p.add_argument("--dims", type=int, default=lens.DEFAULT_DIMS, help="singular directions of W to show")
    p.add_argument("--words", type=int, default=lens.DEFAULT_WORDS, help="words per list")


def _highlight(p: argparse.ArgumentParser) -> None:
    p.add_argument("--switch", required=True, action=OneSwitch, eps_flag="--eps", help=SWITCH_HELP)
    _add_text_options(p)
    p.add_argument("--eps", type=float, default=lens.DEFAULT_EPS, help="eps in eps0 units; negative finds the switch's negative side")
    p.add_argument("--max-span", type=int, default=lens.DEFAULT_MAX_SPAN, help="tokens per span")
    p.add_argument("--spans", type=int, default=lens.DEFAULT_SPANS, help="number of non-overlapping spans")


def _measure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--switch", action="append", required=True, help=f"repeatable; {SWITCH_HELP}")
    _add_text_options(p)
    p.add_argument("--points", type=int, default=lens.DEFAULT_POINTS, help=f"grid points per switch over its meter range (the switch's eps_range; default {lens.DEFAULT_POINTS})")


def _eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("--switch", action=OneSwitch, eps_flag="--eps (a list)", help=f"switch to sweep: {SWITCH_HELP}")
    p.add_argument("--eps", type=eval_eps_list, default=EVAL_EPS, help="eps values (eps0 units)")
    p.add_argument("--grid", help="a second switch: evaluate the 2-D grid of --eps × --grid-eps instead of a sweep")
    p.add_argument("--grid-eps", type=eps_list, default=EVAL_GRID_EPS, help="eps values of the --grid switch")
    p.add_argument("--prompts", default=EVAL_PROMPTS, help="neutral, provocative, or a file with one prompt per line")
    p.add_argument("--limit", type=int, default=EVAL_LIMIT, help="use the first N prompts")
    p.add_argument("--samples", type=int, default=PROTOCOL.samples, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=PROTOCOL.max_new_tokens, help="tokens per sample")
    p.add_argument("--top-p", type=float, default=PROTOCOL.top_p, help="nucleus sampling share")
    p.add_argument("--seed", type=int, default=PROTOCOL.seed, help="random seed of the first sample")
    _add_adaptive_options(p)
    p.add_argument("--metrics", default=EVAL_METRICS, help="comma-separated metrics to plot")
    p.add_argument("--out", help="folder for results.json and the figure (.html, plus .png with --png)")
    p.add_argument("--png", action="store_true", help="also export the figure as PNG (needs Chromium)")
    p.add_argument("--report", metavar="EVALUATION.md", help="run the full evaluation of the shipped switches and write this report")
    p.add_argument("--quick", action="store_true", help="with --report: a tiny suite, for a smoke test")
    p.add_argument("--switches", default=None, help="with --report, --highlight or --transfer-to: folder of shipped switches (default: the shipped switches, lmswitch/data/switches/)")
    p.add_argument("--frontier", nargs="+", metavar="SWITCH", help="the fluent frontier of shipped switches (sentiment, detox, "
                   "formality): sweep each method on the dev prompts, report its strongest fluent setting on the test prompts; "
                   "with --report FILE, write that section of FILE; with --out DIR, JSON and figures")
    p.add_argument("--methods", default=",".join(FRONTIER_METHODS), help="with --frontier: comma-separated methods (default %(default)s)")
    p.add_argument("--sliders", action="store_true",
                   help="with --frontier: also score every whole ε of each switch's default slider range on the test prompts "
                        "and report where samples loop")
    p.add_argument("--stance", action="store_true",
                   help="the stance evaluation (lmswitch/data/stance/): switches trained from opinion articles, per topic and "
                        "method (meter accuracy on held-out statements, lexicon shift at the ε chosen on dev topics); with "
                        "--report FILE, write that section of FILE; with --out DIR, stance.json")
    p.add_argument("--highlight", action="store_true",
                   help="how often the highlight lens finds a sentence of each shipped switch's style planted between two of the "
                        "other side's (held-out pairs): |ε| and span length chosen on dev, hits reported on test; with --report "
                        "FILE, write that section of FILE; with --out DIR, highlight.json")
    p.add_argument("--stance-methods", default=",".join(STANCE_METHODS), help="with --stance: comma-separated methods (default %(default)s)")
    p.add_argument("--transfer-to", default=None, metavar="MODEL",
                   help="transfer the shipped sentiment switch to MODEL and compare it there with a switch trained on MODEL "
                        "from the same data, each probed for its fluent range on dev prompts and scored on test prompts "
                        "across it; write that section of the report file (default EVALUATION.md)")


def _build_pretrained(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, help="folder to write the switches and their index, README.md, into (a README.md "
                   "that is not such an index is kept; default: the shipped switches, lmswitch/data/switches/)")
    p.add_argument("--only", action="append", default=None, help="build only this switch (repeatable)")
    p.add_argument("--data", default=None, help="dataset folder (default: the shipped datasets, lmswitch/data/styles/)")
    p.add_argument("--eval-prompts", type=int, default=CARD_PROMPTS, help="prompts for the card's quick evaluation (0 to skip)")
    p.add_argument("--samples", type=int, default=CARD_SAMPLES, help="samples per prompt in the card's quick evaluation")
    p.add_argument("--seed", type=int, default=BUILD_SEED, help="random seed of training and evaluation")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip probing each switch's fluent ε range on the dev prompts (the card then recommends the spec's ε)")
    p.add_argument("--recalibrate", action="store_true",
                   help="keep each switch's weights (read from --out) and only measure its card again: the fluent ε range on the "
                        "dev prompts, the recommended ε at its limit, the short evaluation at ±that ε; and fit its judge (for --guide) "
                        "on the training pairs")


def _transfer(p: argparse.ArgumentParser) -> None:
    p.add_argument("--switch", required=True, action=OneSwitch, help=f"the switch made for --model (the source model): {SWITCH_HELP}")
    p.add_argument("--to", required=True, help="target model: alias (gemma3-270m), folder, .gguf or cached hub id")
    p.add_argument("--out", required=True, help="where to write the transferred switch (.safetensors; an existing file is kept "
                                                "unless --force)")
    p.add_argument("--force", action="store_true", help="replace --out when it exists")
    p.add_argument("--anchors", type=int, default=ANCHORS, help=f"shared word tokens used to fit the map (default {ANCHORS})")
    p.add_argument("--min-anchors", type=int, default=MIN_ANCHORS, help=f"refuse when fewer words are shared (default {MIN_ANCHORS})")
    _add_calibrate_option(p, "transfer", "the --to model's")


def _export(p: argparse.ArgumentParser) -> None:
    p.add_argument("--switch", action="append", required=True, type=switch_spec_or_card, metavar="SWITCH[=EPS]",
                   help=f"repeatable (exported together, as they compose); SWITCH is {SWITCH_HELP}; EPS in eps0 units "
                        "(default: the card's recommended ε)")
    p.add_argument("--format", default=EXPORT_FORMAT, choices=EXPORT_FORMATS,
                   help="peft: a LoRA adapter on the output head (transformers + peft, vLLM); merged: a full model folder with "
                        "the steered head baked in (any from_pretrained); gguf: the model's GGUF with the steered head (llama.cpp, "
                        "Ollama); gguf-lora: a llama.cpp LoRA adapter (plus base.gguf with an untied head when the model ties it); "
                        "the gguf formats need a model loaded from a GGUF file; default %(default)s")
    p.add_argument("--out", required=True, help="a new or empty folder to write (an earlier export of the same format is replaced)")
    p.add_argument("--rank", type=int, default=None, help="peft, gguf-lora: keep only the top R singular directions (default: exact)")
    p.add_argument("--force", action="store_true", help="write into --out even when it holds other files")


def _demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="the text the sweep continues")
    p.add_argument("--steps", type=int, default=DEMO_STEPS, help="training steps (loss evaluations)")


# subcommand → (help, its arguments), in the order ``--help`` lists them
SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "info": ("show the model, or a switch file's card", _info),
    "train": ("train a switch from example texts", _train),
    "generate": ("generate text with switches", _generate),
    "sweep": ("one prompt at several eps values of one switch, one batched call", _sweep),
    "svd": ("a switch's SVD word dimensions and the words it promotes", _svd),
    "highlight": ("the most style-indicative span(s) of a text", _highlight),
    "measure": ("style meter: which eps of each switch explains a text best", _measure),
    "eval": ("the paper's evaluation protocol: an eps sweep, a 2-D grid, or the full report", _eval),
    "build-pretrained": ("rebuild the shipped switches from lmswitch/data/styles (seeded, deterministic)", _build_pretrained),
    "transfer": ("map a switch to another model (Hᵀ W H over shared word embeddings)", _transfer),
    "export": ("write switches at fixed ε as a LoRA adapter on the output head (PEFT, llama.cpp) or a merged model (folder, GGUF)", _export),
    "demo": ("train a sentiment switch from the shipped examples and show a sweep", _demo),
}


_NEGATIVE_LIST = re.compile(r"^[-−]\.?\d")  # "-2,0,2", "-.5, 1", "-1e-3,0", "−2": a value, not an option


def values_after_options(argv: list[str]) -> list[str]:
    """``argv`` with an option's value that starts with a minus joined to it (``--eps -2,0,2`` → ``--eps=-2,0,2``):
    argparse takes "-2" for a value but "-2,0,2" for an unknown option, and said only "expected one argument"."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and out[-1] != "--" and "=" not in out[-1] and _NEGATIVE_LIST.match(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def unknown_options_first(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Refuse an option the subcommand does not have, with the nearest one it has, before argparse's own checks:
    ``generate --swtich x`` was told "--prompt is required", and only once --prompt was added that --swtich is unknown."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = next((arg for arg in argv if arg in sub.choices), None)
    if command is None:
        _unknown_command(parser, sub, argv)
        return
    p = sub.choices[command]
    known = list(p._option_string_actions)
    after = argv[argv.index(command) + 1 :]
    for arg in after[: after.index("--")] if "--" in after else after:
        flag = arg.split("=", 1)[0]
        # argparse takes a value with a space for a value, and an unambiguous prefix of an option for the option
        if flag.startswith("--") and " " not in arg and not any(k.startswith(flag) for k in known):
            near = difflib.get_close_matches(flag, known, n=1)
            p.error(f"unrecognized option {flag}" + (f"; did you mean {near[0]}?" if near else f" (see {p.prog} --help)"))


# what a user of the app, the MCP tools or the README's prose may type for a command: the command that does it
COMMAND_NAMES = {"inspect": "svd", "words": "svd", "steer": "generate", "steer_text": "generate", "highlight_text": "highlight",
                 "meter": "measure", "measure_style": "measure", "evaluate": "eval", "lora": "export", "convert": "export"}


def _unknown_command(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction, argv: list[str]) -> None:
    """A first word that is no command, answered with the command meant (argparse lists every choice)."""
    taking = [k for k, a in parser._option_string_actions.items() if a.nargs != 0]  # the common options' values

    def takes_a_value(flag: str) -> bool:  # (argparse also takes an unambiguous prefix: --mod for --model)
        return flag.startswith("--") and "=" not in flag and any(k.startswith(flag) for k in taking)

    for i, arg in enumerate(argv):
        if arg.startswith("-") or (i and takes_a_value(argv[i - 1])):
            continue
        meant = COMMAND_NAMES.get(arg.lower()) or next(iter(difflib.get_close_matches(arg.lower(), list(sub.choices), n=1)), None)
        parser.error(f"{arg!r} is not a command" + (f"; did you mean {meant!r}?" if meant else "") +
                     f" (the commands: {', '.join(sub.choices)})")


class _Formatter(argparse.HelpFormatter):
    """Help that gives each option's default, unless its help already speaks of it (or it has none to give: a flag
    such as ``--no-calibrate``, whose stored default True would read as "skipped by default")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if ("default" in help_text or action.required or not action.option_strings or action.nargs == 0
                or action.default is None or action.default is False or action.default == argparse.SUPPRESS):  # 0 is shown
            return help_text
        return f"{help_text} (default %(default)s)" if help_text else "default %(default)s"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: common options, then one subparser per entry of :data:`SUBCOMMANDS`.

    The defaults come from the torch-free option modules, never from the library itself (torch and transformers take
    seconds to import), so ``--help``, a subcommand's ``--help`` and a mistyped command answer at once.
    """
    prog = "lmswitch" if Path(sys.argv[0]).name == "lmswitch" else "python -m lmswitch"  # the console script, or the module
    parser = argparse.ArgumentParser(prog=prog, description="Steer language models with LM-Switch switches.", formatter_class=_Formatter)
    _add_common_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_arguments) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, formatter_class=_Formatter)
        _add_common_options(p, defaults=False)
        add_arguments(p)
    return parser
