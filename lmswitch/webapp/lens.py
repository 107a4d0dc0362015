"""Inspect and Highlight tabs: a switch's SVD word dimensions, its most style-indicative spans and the style meter."""

from __future__ import annotations

import json

from lmswitch.core.hidden import encode_text
from lmswitch.harness import figures
from lmswitch.io.parse import parse_number
from lmswitch.io.resources import examples_dir
from lmswitch.lenses.meter import Measurement, MeterRow, measure
from lmswitch.lenses.options import check_highlight_args
from lmswitch.lenses.spans import Highlight, highlight
from lmswitch.lenses.svd import Dimension, promoted_words, svd_dimensions, word_map
from lmswitch.serve.limits import MAX_HIGHLIGHT_CHARS, MAX_METER_CHARS, MAX_METER_SWITCHES
from lmswitch.serve.session import MeterPick, Session
from lmswitch.webapp.backend import Backend, computed, user_errors
from lmswitch.webapp.widgets import read_input

MAP_WORDS = 15  # words per group on the word map


def _dimension_row(d: Dimension) -> list:
    """One row of the SVD table: its words by what +ε does to them (its u's sign is the decomposition's choice)."""
    return [d.index + 1, round(d.singular_value, 3), f"{100 * d.share:.1f}%", ", ".join(w.shown for w in d.promoted),
            ", ".join(w.shown for w in d.suppressed), f"{100 * d.agreement:.0f}%"]


@user_errors
@computed
def inspect_switch(backend: Backend, name: str, dims, words, session: Session):
    """SVD table (both poles, the promoted one marked), spectrum, word map and the promoted/suppressed words."""
    lm, library = backend.get(session=session)
    switch = session.get(name, library)
    dims, words = parse_number(dims, "directions", int), parse_number(words, "words", int)
    svd = svd_dimensions(lm, switch, dims=dims, words=words)
    pw = promoted_words(lm, switch, words=words)
    word_rows = [[i + 1, up.shown, round(up.delta, 3), down.shown, round(down.delta, 3)]
                 for i, (up, down) in enumerate(zip(pw.promoted, pw.suppressed, strict=False))]
    return ([_dimension_row(d) for d in svd.dimensions], figures.spectrum_figure(svd.singular_values),
            figures.word_map_figure(word_map(lm, switch, words=min(words, MAP_WORDS))), word_rows)


def _reading(row: MeterRow) -> str:
    """One switch's line of the meter summary; a best ε shown as +0.0 reads neither way, whatever its sign."""
    eps = f"{row.best_eps_alone:+.1f}"
    side = (row.label_alone if float(eps) else None) or "neither"
    return f"- **{row.name}**: best ε {eps} → *{side}* (evidence {row.evidence_nats:.1f} nats{'; weak' if row.weak else ''})"


def _summary(result: Highlight, meter: Measurement, cut: bool, pick: MeterPick) -> str:
    lines = [_reading(r) for r in meter.switches]
    lines += [f"- {name}: not read again, the same switch as **{kept}**" for name, kept in pick.same.items()]
    if pick.left_out:
        lines.append(f"- not read ({MAX_METER_SWITCHES} switches at most, the picked one first): {', '.join(pick.left_out)}")
    spans = "; ".join(f"“{s.text}” ({s.score:+.2f}{'; weak' if s.weak else ''})" for s in result.spans) or "none: no part of the text reads that way"
    spans += f" (weak: {result.weak_text()})" if any(s.weak for s in result.spans) else ""
    read = f"{meter.scored_tokens} token{'s' if meter.scored_tokens != 1 else ''}" + (f" of the first {MAX_METER_CHARS:,} characters" if cut else "")
    return f"**Spans toward {result.label}:** {spans}\n\n**Style meter** ({read}):\n" + "\n".join(lines)


@user_errors
@computed
def run_highlight(backend: Backend, text: str, file: str | None, name: str, eps, max_span, n_spans, session: Session):
    """Most style-indicative span(s) of the text, a per-word heatmap, and the style meter over the session's switches."""
    lm, library = backend.get(session=session)
    text = read_input(text, file, "the text", MAX_HIGHLIGHT_CHARS, HIGHLIGHT_ADVICE)
    switch = session.get(name, library)
    eps, max_span, n_spans = parse_number(eps, "ε"), parse_number(max_span, "max span", int), parse_number(n_spans, "spans", int)
    check_highlight_args(eps, max_span, n_spans)  # before the body pass
    encoded = encode_text(lm, text)  # one body pass, read by both lenses
    result = highlight(lm, switch, encoded, eps=eps, max_span=max_span, n_spans=n_spans)
    # the meter tries many ε per switch, so it reads a long text's beginning (another body pass, on that part alone)
    cut = len(text) > MAX_METER_CHARS
    pick = session.meter_switches(library, first=switch)  # the picked one first
    meter = measure(lm, pick.read, text[:MAX_METER_CHARS] if cut else encoded)
    return result.highlighted, _shown_heatmap(result), figures.meter_figure(meter), _summary(result, meter, cut, pick)


def _shown_heatmap(result: Highlight) -> list[tuple[str, float]]:
    """The per-word heatmap as the page shows it: a line break as ↵ (drawn as is, it was an empty coloured box)."""
    return [(word.replace("\n", "↵"), score) for word, score in result.word_heatmap()]


HIGHLIGHT_ADVICE = (f"highlighting takes at most {MAX_HIGHLIGHT_CHARS:,}. Paste the part you want to look at, or use "
                    "python -m lmswitch highlight --file")


def highlight_examples() -> list[list]:
    """The Highlight tab's examples (toxic comments, a mixed review, mixed registers) with the switch and settings that suit each."""
    items = json.loads((examples_dir() / "highlight.json").read_text(encoding="utf-8"))
    return [[x["text"], x["switch"], x["eps"], x["max_span"], x["n_spans"]] for x in items]
