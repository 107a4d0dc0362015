"""``python -m lmswitch``: info, train, generate, sweep, svd, highlight, measure, eval, build-pretrained."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from lmswitch.io.documents import read_document, read_lines
from lmswitch.io.resources import examples_dir


def read_examples(path: str, document: bool) -> list[str]:
    """One example per non-empty line, or the whole file as one document (.txt, .md, .html, .pdf, .docx)."""
    return [read_document(path)] if document else read_lines(path)


def _parse_switch_arg(value: str) -> tuple[str, float]:
    path, _, eps = value.rpartition("=")
    if not path:
        return value, 5.0
    try:
        return path, float(eps)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PATH=EPS with a number for EPS; got '{value}'") from None


def _parse_eps_list(value: str) -> list[float]:
    try:
        values = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like -5,0,5; got '{value}'") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one eps value")
    return values


def _add_generation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--temperature", type=float, default=1.0, help="0 for greedy decoding")
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")


def _add_text_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--text", help="the text to analyse")
    group.add_argument("--file", help="a document to analyse: .txt, .md, .html, .pdf or .docx")


def _text_arg(args) -> str:
    return read_document(args.file) if args.file else args.text


def _add_common_options(p: argparse.ArgumentParser, defaults: bool) -> None:
    """--model/--dtype/--json, accepted before or after the subcommand (the subcommand's value wins)."""
    d = (lambda value: value) if defaults else (lambda value: argparse.SUPPRESS)
    p.add_argument("--model", default=d(None), help="model alias, local folder, .gguf file or cached hub id (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default=d("auto"), choices=["auto", "float32", "bfloat16", "float16"],
                   help="model weights dtype (auto: bfloat16 where the hardware is fast at it)")
    p.add_argument("--json", action="store_true", default=d(False), help="print machine-readable JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lmswitch", description="Steer language models with LM-Switch switches.")
    _add_common_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="show the model, or a switch file's card")
    _add_common_options(info, defaults=False)
    info.add_argument("--switch", help="a .safetensors switch file to describe")

    train = sub.add_parser("train", help="train a switch from example texts")
    _add_common_options(train, defaults=False)
    train.add_argument("--positive", required=True, help="a .txt/.md/.html/.pdf/.docx file: one example per line (or one document with --document)")
    train.add_argument("--negative", help="a file of contrasting examples (same formats)")
    train.add_argument("--document", action="store_true", help="treat each file as one whole document")
    train.add_argument("--out", required=True, help="output .safetensors path")
    train.add_argument("--name", default=None)
    train.add_argument("--description", default="")
    train.add_argument("--positive-label", default="positive", help="what +eps moves toward (e.g. non-toxic)")
    train.add_argument("--negative-label", default="negative", help="what -eps moves toward (e.g. toxic)")
    train.add_argument("--steps", type=int, default=200)
    train.add_argument("--lr", type=float, default=1e-2)
    train.add_argument("--l2", type=float, default=0.0)
    train.add_argument("--seed", type=int, default=0)

    gen = sub.add_parser("generate", help="generate text with switches")
    _add_common_options(gen, defaults=False)
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--switch", action="append", default=[], type=_parse_switch_arg, metavar="S.safetensors=EPS", help="repeatable; EPS in eps0 units (default 5)")
    gen.add_argument("--samples", type=int, default=1)
    _add_generation_options(gen)

    sw = sub.add_parser("sweep", help="one prompt at several eps values of one switch, one batched call")
    _add_common_options(sw, defaults=False)
    sw.add_argument("--prompt", required=True)
    sw.add_argument("--switch", required=True)
    sw.add_argument("--eps", type=_parse_eps_list, default=[-5.0, -3.0, 0.0, 3.0, 5.0])
    _add_generation_options(sw)
    svd = sub.add_parser("svd", help="a switch's SVD word dimensions and the words it promotes")
    _add_common_options(svd, defaults=False)
    svd.add_argument("--switch", required=True)
    svd.add_argument("--dims", type=int, default=10)
    svd.add_argument("--words", type=int, default=20)

    hl = sub.add_parser("highlight", help="the most style-indicative span(s) of a text")
    _add_common_options(hl, defaults=False)
    hl.add_argument("--switch", required=True)
    _add_text_options(hl)
    hl.add_argument("--eps", type=float, default=5.0, help="eps in eps0 units; negative finds the switch's negative side")
    hl.add_argument("--max-span", type=int, default=5, help="tokens per span")
    hl.add_argument("--spans", type=int, default=1, help="number of non-overlapping spans")

    me = sub.add_parser("measure", help="style meter: which eps of each switch explains a text best")
    _add_common_options(me, defaults=False)
    me.add_argument("--switch", action="append", required=True, help="repeatable")
    _add_text_options(me)
    me.add_argument("--points", type=int, default=21, help="grid points per switch over its recommended range")

    ev = sub.add_parser("eval", help="the paper's evaluation protocol: an eps sweep, a 2-D grid, or the full report")
    _add_common_options(ev, defaults=False)
    ev.add_argument("--switch", help="switch to sweep (.safetensors)")
    ev.add_argument("--eps", type=_parse_eps_list, default=[-10.0, -7.5, -5.0, -2.5, 0.0, 2.5, 5.0, 7.5, 10.0], help="eps values (eps0 units)")
    ev.add_argument("--grid", help="a second switch: evaluate the 2-D grid of --eps × --grid-eps instead of a sweep")
    ev.add_argument("--grid-eps", type=_parse_eps_list, default=[-5.0, 0.0, 5.0])
    ev.add_argument("--prompts", default="neutral", help="neutral, provocative, or a file with one prompt per line")
    ev.add_argument("--limit", type=int, default=20, help="use the first N prompts")
    ev.add_argument("--samples", type=int, default=5, help="samples per prompt")
    ev.add_argument("--max-new-tokens", type=int, default=25)
    ev.add_argument("--top-p", type=float, default=0.9)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--metrics", default="positive_share,toxicity_prob", help="comma-separated metrics to plot")
    ev.add_argument("--out", help="folder for results.json and the figure (.html, plus .png with --png)")
    ev.add_argument("--png", action="store_true", help="also export the figure as PNG (needs Chromium)")
    ev.add_argument("--report", metavar="EVALUATION.md", help="run the full evaluation of the shipped switches and write this report")
    ev.add_argument("--quick", action="store_true", help="with --report: a tiny suite, for a smoke test")
    ev.add_argument("--switches", default=None, help="with --report: folder of shipped switches (default pretrained_switches/)")
    ev.add_argument("--transfer-to", default=None, metavar="MODEL",
                    help="transfer the shipped sentiment switch to MODEL, evaluate it there against a switch trained on MODEL "
                         "directly, and write that section of the report file (default EVALUATION.md)")

    bp = sub.add_parser("build-pretrained", help="rebuild the shipped switches from assets/data (seeded, deterministic)")
    _add_common_options(bp, defaults=False)
    bp.add_argument("--out", default=None, help="folder to write (default: pretrained_switches/)")
    bp.add_argument("--only", action="append", default=None, help="build only this switch (repeatable)")
    bp.add_argument("--data", default=None, help="dataset folder (default: assets/data)")
    bp.add_argument("--eval-prompts", type=int, default=20, help="prompts for the card's quick evaluation (0 to skip)")
    bp.add_argument("--samples", type=int, default=4)
    bp.add_argument("--seed", type=int, default=0)

    tr = sub.add_parser("transfer", help="map a switch to another model (Hᵀ W H over shared word embeddings)")
    _add_common_options(tr, defaults=False)
    tr.add_argument("--switch", required=True, help="switch file made for --model (the source model)")
    tr.add_argument("--to", required=True, help="target model: alias (gemma3-270m), folder, .gguf or cached hub id")
    tr.add_argument("--out", required=True, help="where to write the transferred switch (.safetensors)")
    tr.add_argument("--anchors", type=int, default=4000, help="shared word tokens used to fit the map (default 4000)")
    tr.add_argument("--min-anchors", type=int, default=200, help="refuse when fewer words are shared (default 200)")

    demo = sub.add_parser("demo", help="train a sentiment switch from the shipped examples and show a sweep")
    _add_common_options(demo, defaults=False)
    demo.add_argument("--prompt", default="My weekend was")
    demo.add_argument("--steps", type=int, default=100)
    return parser


EXAMPLES = examples_dir()


def _gen_kwargs(args) -> dict:
    return dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, chat=args.chat)


def _emit(args, data, text: str) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else text)


def run(args: argparse.Namespace) -> int:
    from lmswitch import generate, load_model, load_switch, sweep, train_switch

    if args.command == "info" and args.switch:
        s = load_switch(args.switch)
        data = {"path": args.switch, **s.header(), "dim": s.dim}
        data["card"] = {k: v for k, v in s.card.items() if "losses" not in k}
        lines = [f"{s.name}: {s.description}", f"  made for {s.model_name} ({s.model_fingerprint}), d = {s.dim}"]
        lines.append(f"  +eps → {s.positive_label}, -eps → {s.negative_label}; recommended eps {s.eps_range[0]:g}…{s.eps_range[1]:g} × {s.eps0:g}")
        lines += [f"  {k}: {v}" for k, v in data["card"].items()]
        _emit(args, data, "\n".join(lines))
        return 0

    lm = load_model(args.model, dtype=args.dtype)
    if args.command == "info":
        data = {"name": lm.name, "source": lm.source, "fingerprint": lm.fingerprint, "hidden_size": lm.hidden_size,
                "vocab_size": lm.vocab_size, "context_length": lm.context_length, "chat_template": lm.has_chat_template,
                "load_seconds": round(lm.load_seconds, 3)}
        _emit(args, data, "\n".join(f"{k}: {v}" for k, v in data.items()))
    elif args.command == "train":
        positive = read_examples(args.positive, args.document)
        negative = read_examples(args.negative, args.document) if args.negative else None
        from tqdm import tqdm

        with tqdm(total=args.steps, desc="training", unit="step", disable=args.json, file=sys.stderr) as bar:
            def progress(step: int, total: int, loss: float) -> None:
                bar.update(step - bar.n)
                bar.set_postfix(loss=f"{loss:.4f}")

            switch = train_switch(lm, positive, negative, name=args.name or Path(args.out).stem, description=args.description,
                                  positive_label=args.positive_label, negative_label=args.negative_label, steps=args.steps, lr=args.lr, l2=args.l2, seed=args.seed, progress=progress)
        switch.save(args.out)
        card = {k: v for k, v in switch.card.items() if "losses" not in k}
        gain = card["heldout_gain"]
        _emit(args, {"out": args.out, "card": card},
              f"saved {args.out}: {card['steps']} steps in {card['seconds']:.1f} s, held-out gain "
              + (f"{gain:+.4f} nats/token" if gain is not None else "n/a (no held-out data)"))
    elif args.command == "generate":
        setting = [(load_switch(path, lm), eps) for path, eps in args.switch]
        texts = generate(lm, args.prompt, setting, samples=args.samples, seed=args.seed, **_gen_kwargs(args))
        data = {"prompt": args.prompt, "switches": [{"path": p, "eps": e} for p, e in args.switch], "seed": args.seed,
                "samples": [{"seed": args.seed + k, "text": t} for k, t in enumerate(texts)]}
        _emit(args, data, "\n".join(f"[seed {args.seed + k}] {args.prompt}{t}" for k, t in enumerate(texts)))
    elif args.command == "demo":
        print(f"model {lm.name} loaded in {lm.load_seconds:.1f} s; training a sentiment switch from "
              f"{EXAMPLES / 'sentiment_positive.txt'} and sentiment_negative.txt ...", file=sys.stderr)
        pos = read_examples(str(EXAMPLES / "sentiment_positive.txt"), False)
        neg = read_examples(str(EXAMPLES / "sentiment_negative.txt"), False)
        switch = train_switch(lm, pos, neg, name="sentiment", steps=args.steps)
        print(f"trained in {switch.card['seconds']:.1f} s; the same prompt and seed at five eps values:\n")
        for eps, text in sweep(lm, args.prompt, switch, [-8, -4, 0, 4, 8], seed=0, max_new_tokens=30):
            print(f"eps {eps:+5.1f} | {args.prompt}{text}")
    elif args.command == "svd":
        from lmswitch.lenses.svd import promoted_words, svd_dimensions

        switch = load_switch(args.switch, lm)
        dims = svd_dimensions(lm, switch, dims=args.dims, words=args.words)
        overall = promoted_words(lm, switch, words=args.words)
        lines = [f"{switch.name}: +eps → {switch.positive_label}, -eps → {switch.negative_label}",
                 "promoted at +eps:  " + ", ".join(w["word"] for w in overall["promoted"]),
                 "suppressed at +eps: " + ", ".join(w["word"] for w in overall["suppressed"]), ""]
        for d in dims["dimensions"]:
            lines.append(f"dim {d['index']}  σ={d['singular_value']:.3g} ({100 * d['share']:.1f}% of W)  "
                         f"agreement {d['agreement']:.2f}  strength {d['strength']:.3g}")
            lines.append("  ↑ " + ", ".join(w["word"] for w in d["promoted"]))
            lines.append("  ↓ " + ", ".join(w["word"] for w in d["suppressed"]))
        _emit(args, {**dims, "promoted": overall["promoted"], "suppressed": overall["suppressed"]}, "\n".join(lines))
    elif args.command == "highlight":
        from lmswitch.lenses.spans import highlight

        switch = load_switch(args.switch, lm)
        h = highlight(lm, switch, _text_arg(args), eps=args.eps, max_span=args.max_span, n_spans=args.spans)
        marked = "".join(f"[[{piece}]]" if label else piece for piece, label in h["highlighted"])
        lines = [marked, ""] + [f"span {s['start']}:{s['end']}  Δ={s['score']:+.3f} nats  {s['text']!r}" for s in h["spans"]]
        data = {k: h[k] for k in ("switch", "eps", "label", "spans", "total_delta", "windows")}
        data["tokens"] = [{"text": t["text"], "start": t["start"], "end": t["end"], "delta": t["delta"]} for t in h["tokens"]]
        _emit(args, data, "\n".join(lines))
    elif args.command == "measure":
        from lmswitch.lenses.meter import measure

        switches = [load_switch(path, lm) for path in args.switch]
        r = measure(lm, switches, _text_arg(args), points=args.points)
        lines = [f"{r['scored_tokens']} tokens; log-likelihood {r['base_loglik']:.4f} nats/token at eps 0, "
                 f"{r['best_loglik']:.4f} at the best eps (gain {r['gain']:+.4f})"]
        for row in r["switches"]:
            lines.append(f"{row['name']}: best eps {row['best_eps']:+.2f} → {row['label'] or 'neutral'} "
                         f"(evidence {row['evidence_nats']:.2f} nats)"
                         + ("  (at the edge of the range)" if row["at_bound"] else ""))
            lines += [f"  eps {x:+6.2f}  {y:.4f}" for x, y in zip(row["grid"], row["loglik"], strict=True)]
        _emit(args, r, "\n".join(lines))
    elif args.command == "eval":
        _run_eval(args, lm)
    elif args.command == "build-pretrained":
        from lmswitch.harness.pretrained import PRETRAINED_DIR, build_pretrained

        paths = build_pretrained(lm, args.out or PRETRAINED_DIR, names=args.only, data_dir=args.data, eval_prompts=args.eval_prompts,
                                 samples=args.samples, seed=args.seed, log=lambda msg: print(msg, file=sys.stderr))
        _emit(args, {"written": [str(p) for p in paths]}, "\n".join(f"wrote {p}" for p in paths))
    elif args.command == "transfer":
        from lmswitch.core.transfer import transfer

        target = load_model(args.to, dtype=args.dtype)
        moved = transfer(load_switch(args.switch), lm, target, anchors=args.anchors, min_anchors=args.min_anchors)
        path = moved.save(args.out)
        t = moved.card["transfer"]
        _emit(args, {"written": str(path), "card": moved.card},
              f"wrote {path}: '{moved.name}' for {target.name}; fit on {t['anchors']} shared words, held-out R² {t['heldout_r2']}, "
              f"nearest-word accuracy {t['heldout_top1']:.0%}; recommended ε {moved.card['recommended_eps']:+g} "
              f"(source {t['source_recommended_eps']:+g} × {t['eps_scale']})")
    elif args.command == "sweep":
        switch = load_switch(args.switch, lm)
        rows = sweep(lm, args.prompt, switch, args.eps, seed=args.seed, **_gen_kwargs(args))
        data = {"prompt": args.prompt, "switch": args.switch, "seed": args.seed, "rows": [{"eps": e, "text": t} for e, t in rows]}
        _emit(args, data, "\n".join(f"eps {e:+6.2f} | {args.prompt}{t}" for e, t in rows))
    return 0


def _run_eval(args, lm) -> None:
    from lmswitch.core.options import SamplingOptions
    from lmswitch.core.switch import load_switch
    from lmswitch.harness.evaluate import Protocol, evaluate_grid, evaluate_sweep, load_prompts
    from lmswitch.harness.figures import METRICS, export, grid_figure, sweep_figure

    def log(msg: str) -> None:
        print(msg, file=sys.stderr)

    if args.transfer_to:
        from lmswitch.core.models import load_model
        from lmswitch.harness.pretrained import PRETRAINED_DIR
        from lmswitch.harness.report import command_line, run_transfer_report

        target = load_model(args.transfer_to, dtype=args.dtype)
        results = run_transfer_report(lm, target, args.report or "EVALUATION.md", switch_dir=args.switches or PRETRAINED_DIR,
                                      seed=args.seed, command=command_line(), log=log)
        _emit(args, results, f"{'met   ' if results['met'] else 'MISSED'}  transfer to {target.name}: best {results['best_transfer']}, "
                             f"source spread {results['source_spread']:+.3f}; direct reference {results['best_direct']}")
        return
    if args.report:
        from lmswitch.harness.pretrained import PRETRAINED_DIR
        from lmswitch.harness.report import QUICK, Suite, command_line, run_report

        results = run_report(lm, args.report, suite=QUICK if args.quick else Suite(), switch_dir=args.switches or PRETRAINED_DIR,
                             seed=args.seed, command=command_line(), log=log)
        checks = results["checks"]
        _emit(args, results, "\n".join(f"{'met   ' if c['met'] else 'MISSED'}  {c['target']}: {c['measured']}" for c in checks))
        return
    if not args.switch:
        raise ValueError("give --switch S.safetensors to evaluate (or --report EVALUATION.md for the full report)")
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise ValueError(f"unknown metric(s) {', '.join(bad)}; choose from {', '.join(METRICS)}")
    switch = load_switch(args.switch, lm)
    prompts = load_prompts(args.prompts, args.limit)
    protocol = Protocol(samples=args.samples, max_new_tokens=args.max_new_tokens, top_p=args.top_p, seed=args.seed)
    protocol.validate()
    SamplingOptions(args.max_new_tokens, 1.0, args.top_p).validate(lm)

    def progress(done: int, total: int) -> None:
        log(f"{done}/{total} settings evaluated")

    if args.grid:
        other = load_switch(args.grid, lm)
        grid = evaluate_grid(lm, (switch, args.eps), (other, args.grid_eps), prompts, protocol, progress=progress)
        data = {"switch": switch.name, "grid_switch": other.name, "eps": args.eps, "grid_eps": args.grid_eps,
                "grid": [[ev.summary() for ev in row] for row in grid]}
        fig = grid_figure(grid, switch.name, other.name, metrics)
        lines = [f"{switch.name} eps {ev.setting.get(switch.name, 0):+g}, {other.name} eps {ev.setting.get(other.name, 0):+g}: "
                 + ", ".join(f"{m} {getattr(ev, m):.3f}" for m in [*metrics, "perplexity"]) for row in grid for ev in row]
        evals = [ev for row in grid for ev in row]
        stem = "grid"
    else:
        evals = evaluate_sweep(lm, switch, args.eps, prompts, protocol, progress=progress)
        data = {"switch": switch.name, "eps": args.eps, "sweep": [ev.summary() for ev in evals]}
        fig = sweep_figure(evals, switch.name, metrics)
        lines = [f"eps {ev.setting.get(switch.name, 0):+6.2f}: " + ", ".join(f"{m} {getattr(ev, m):.3f}" for m in [*metrics, "perplexity", "dist3"])
                 for ev in evals]
        stem = "sweep"
    data.update({"prompts": args.prompts, "n_prompts": len(prompts), "protocol": protocol.__dict__})
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({**data, "texts": [ev.texts for ev in evals]}, indent=1, ensure_ascii=False), encoding="utf-8")
        written = [out / "results.json", export(fig, out / f"{stem}.html")]
        if args.png:
            written.append(export(fig, out / f"{stem}.png"))
        data["written"] = [str(p) for p in written]
        lines.append("wrote " + ", ".join(str(p) for p in written))
    _emit(args, data, "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.simplefilter("ignore", FutureWarning)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars are noise on a command line
    try:
        return run(args)
    except (ValueError, FileNotFoundError) as err:  # SwitchFileError is a ValueError
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
