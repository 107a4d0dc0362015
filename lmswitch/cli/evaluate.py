"""``eval``: the paper's evaluation protocol as an ε sweep or a 2-D grid, the full report, or the transfer report.

>>> main(["eval", "--switch", "sentiment", "--eps=-5,0,5", "--out", "results"])   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from lmswitch.cli.common import emit, log
from lmswitch.cli.preflight import flag_errors, is_sweep, sweep_inputs
from lmswitch.core.models import LanguageModel, load_model
from lmswitch.core.parallel import is_main, world
from lmswitch.core.switch import Switch, load_switch
from lmswitch.harness.evaluate import Evaluation, Protocol, evaluate_grid, evaluate_sweep
from lmswitch.harness.pretrained import PRETRAINED_DIR
from lmswitch.io.parse import parse_names


@dataclass
class _Outcome:
    """One sweep's or grid's results: the JSON data, the figure, the text lines, every evaluation, the file stem."""

    data: dict
    figure: object
    lines: list[str]
    evals: list[Evaluation]
    stem: str


def _progress(done: int, total: int) -> None:
    log(f"{done}/{total} settings evaluated")


def _grid(args: argparse.Namespace, lm: LanguageModel, switch: Switch, prompts: list[str], protocol: Protocol, metrics: list[str]) -> _Outcome:
    from lmswitch.harness.figures import grid_figure

    other = load_switch(args.grid, lm)
    grid = evaluate_grid(lm, (switch, args.eps), (other, args.grid_eps), prompts, protocol, progress=_progress)
    data = {"switch": switch.name, "grid_switch": other.name, "eps": args.eps, "grid_eps": args.grid_eps,
            "grid": [[ev.summary() for ev in row] for row in grid]}
    lines = [f"{switch.name} eps {ev.setting.get(switch.name, 0):+g}, {other.name} eps {ev.setting.get(other.name, 0):+g}: "
             + ", ".join(f"{m} {getattr(ev, m):.3f}" for m in [*metrics, "perplexity"]) for row in grid for ev in row]
    return _Outcome(data, grid_figure(grid, switch.name, other.name, metrics), lines, [ev for row in grid for ev in row], "grid")


def _sweep(args: argparse.Namespace, lm: LanguageModel, switch: Switch, prompts: list[str], protocol: Protocol, metrics: list[str]) -> _Outcome:
    from lmswitch.harness.figures import sweep_figure

    evals = evaluate_sweep(lm, switch, args.eps, prompts, protocol, progress=_progress)
    data = {"switch": switch.name, "eps": args.eps, "sweep": [ev.summary() for ev in evals]}
    lines = [f"eps {ev.setting.get(switch.name, 0):+6g}: " + ", ".join(f"{m} {getattr(ev, m):.3f}" for m in [*metrics, "perplexity", "dist3"])
             for ev in evals]
    return _Outcome(data, sweep_figure(evals, switch.name, metrics, fluent=switch.card.fluent_eps), lines, evals, "sweep")


def _write(outcome: _Outcome, folder: str, png: bool) -> None:
    """results.json (with every generated text) and the figure; records what was written in the data and the lines."""
    from lmswitch.harness.figures import export

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    results = {**outcome.data, "texts": [[t.to_dict() for t in ev.texts] for ev in outcome.evals]}
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    written = [out / "results.json", export(outcome.figure, out / f"{outcome.stem}.html")]
    if png:
        written.append(export(outcome.figure, out / f"{outcome.stem}.png"))
    outcome.data["written"] = [str(p) for p in written]
    outcome.lines.append("wrote " + ", ".join(str(p) for p in written))


def _evaluate(args: argparse.Namespace, lm: LanguageModel) -> None:
    """An ε sweep of ``--switch``, or with ``--grid`` the 2-D grid of two switches."""
    metrics, prompts, protocol = sweep_inputs(args)
    switch = load_switch(args.switch, lm)
    flag_errors(lambda: protocol.sampling().validate(lm))
    outcome = (_grid if args.grid else _sweep)(args, lm, switch, prompts, protocol, metrics)
    outcome.data.update({"prompts": args.prompts, "n_prompts": len(prompts), "protocol": protocol.__dict__})
    if args.out and is_main():  # under accelerate launch every process has every result; one writes them
        _write(outcome, args.out, args.png)
    emit(args, outcome.data, "\n".join(outcome.lines))


def _report(args: argparse.Namespace, lm: LanguageModel) -> None:
    """``--report``: evaluate the shipped switches and write the markdown report."""
    from lmswitch.harness.report import QUICK, Suite, command_line, run_report

    report = run_report(lm, args.report, suite=QUICK if args.quick else Suite(), switch_dir=args.switches or PRETRAINED_DIR,
                        seed=args.seed, repeat_guard=args.repeat_guard, command=command_line(args.argv), log=log)
    results = report.to_dict()
    emit(args, results, "\n".join(c.line() for c in report.checks))


def _transfer_report(args: argparse.Namespace, lm: LanguageModel) -> None:
    """``--transfer-to MODEL``: the shipped sentiment switch transferred to MODEL, against one trained there."""
    from lmswitch.harness.report import command_line
    from lmswitch.harness.transfer_report import run_transfer_report, summary

    target = load_model(args.transfer_to, dtype=args.dtype)
    report = run_transfer_report(lm, target, args.report or "EVALUATION.md", switch_dir=args.switches or PRETRAINED_DIR,
                                 seed=args.seed, command=command_line(args.argv), log=log)
    emit(args, report.to_dict(), summary(report))


def _frontier(args: argparse.Namespace, lm: LanguageModel) -> None:
    """``--frontier NAME …``: each switch's fluent frontier (choose on dev, report on test); JSON, figures, report section."""
    from lmswitch.harness.figures import export, frontier_figure
    from lmswitch.harness.frontier import FrontierSpec, check_sliders, markdown, run_frontier, target_checks
    from lmswitch.harness.report import command_line, replace_section

    methods = parse_names(args.methods)
    protocol = Protocol(samples=args.samples, max_new_tokens=args.max_new_tokens, top_p=args.top_p, seed=args.seed, kl_budget=args.kl_budget,
                        generation_budget=args.generation_budget, repeat_guard=args.repeat_guard)
    frontiers = [run_frontier(lm, load_switch(name, lm), FrontierSpec.for_switch(name), methods=methods, protocol=protocol,
                              dev_limit=args.limit, test_limit=args.limit, log=log) for name in args.frontier]
    sliders = [check_sliders(lm, load_switch(name, lm), FrontierSpec.for_switch(name), protocol, args.limit)
               for name in args.frontier] if args.sliders else []
    data = {"frontiers": [f.to_dict() for f in frontiers], "sliders": [c.to_dict() for c in sliders], "command": command_line(args.argv)}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "frontier.json").write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
        for f in frontiers:
            export(frontier_figure(f), out / f"frontier-{f.spec.switch}.html")
    if args.report:
        body = f"Command: `{command_line(args.argv)}`\n\n" + "\n".join(markdown(f) for f in frontiers)
        if sliders:
            body += "\n### The app's default slider ranges on the test prompts\n\n" + "".join(c.markdown() for c in sliders)
        replace_section(Path(args.report), "## Fluent frontier (dev → test)", body)
    lines = [c.line() for f in frontiers for c in target_checks(f)]
    lines += [c.markdown().strip() for c in sliders]
    emit(args, data, "\n".join(lines))


def _stance(args: argparse.Namespace, lm: LanguageModel) -> None:
    """``--stance``: switches from opinion articles, per topic and method (dev sweep, then test); JSON and report section."""
    from lmswitch.harness.stance import markdown, run_stance

    report = run_stance(lm, parse_names(args.stance_methods), log=log)
    _publish(args, "stance", report.to_dict(), "## Stance from documents (dev → test)", markdown(report))


def _highlight(args: argparse.Namespace, lm: LanguageModel) -> None:
    """``--highlight``: how often the highlight lens finds a planted sentence of each shipped switch's style (dev → test)."""
    from lmswitch.harness.highlight_report import DATASET_OF, markdown, run_highlight_report, to_dict

    folder = args.switches or PRETRAINED_DIR
    results = run_highlight_report(lm, {name: load_switch(str(Path(folder) / f"{name}.safetensors"), lm) for name in DATASET_OF},
                                   log=log)
    _publish(args, "highlight", to_dict(results), "## Highlighting (dev → test)", markdown(results))


def _publish(args: argparse.Namespace, name: str, results: object, heading: str, body: str) -> None:
    """An evaluation's results: ``--out DIR`` gets ``name``.json, ``--report FILE`` its section under ``heading``, the
    terminal ``body`` (or the JSON with ``--json``)."""
    from lmswitch.harness.report import command_line, replace_section

    data = {name: results, "command": command_line(args.argv)}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    if args.report:
        replace_section(Path(args.report), heading, f"Command: `{command_line(args.argv)}`\n\n{body}")
    emit(args, data, body)


def cmd_eval(args: argparse.Namespace, lm: LanguageModel) -> None:
    """``eval``: the frontier, the stance evaluation, the transfer report, the full report, or a sweep/grid."""
    if world()[1] > 1 and not is_sweep(args):
        raise ValueError("under accelerate launch, eval runs ε sweeps and grids (--switch); run --stance, --highlight, --frontier, "
                         "--transfer-to and --report in one process")
    if is_sweep(args):
        _evaluate(args, lm)
    elif args.stance:
        _stance(args, lm)
    elif args.highlight:
        _highlight(args, lm)
    elif args.frontier:
        _frontier(args, lm)
    elif args.transfer_to:
        _transfer_report(args, lm)
    else:
        _report(args, lm)
