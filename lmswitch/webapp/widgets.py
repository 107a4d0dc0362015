"""Widget values → library arguments, and library results → display values (no model work here)."""

from __future__ import annotations

import html
import os
import textwrap
from collections.abc import Sequence

import gradio as gr

from lmswitch.core.checks import check_seed
from lmswitch.core.options import SAMPLING, SamplingOptions
from lmswitch.core.switch import Switch
from lmswitch.harness.evaluate import TextScores
from lmswitch.harness.frontier import Probe
from lmswitch.io.documents import TextTooLong, read_document
from lmswitch.io.parse import parse_eps, parse_number
from lmswitch.lenses.spans import TokenChange
from lmswitch.serve.session import Session, SwitchLibrary

MAX_SLOTS = 12  # ε sliders shown in the Steer view (switches beyond that are usable in the other views)
UNSAVED = "Not saved: it goes with this page unless you save or download it (Train tab)."  # a session switch's slider says so
UNSAVED_CLASS = "unsaved-switch"  # and has this class: the page asks before it is left or reloaded (sliders.html)
DESCRIPTION_CHARS = 160  # of a switch's description under its slider (a transferred shipped switch's is ~140)
# a switch just trained is steered at once: until its fluent range is measured, its slider reaches the largest strength
# the probe checks below its first, where the trained switches seen read fluent on the dev prompts (a one-article switch
# −4 … +2; 30 + 30 sentences −2 … +2 or −1 … +2, where ε −2 writes 4× the unsteered perplexity)
PROVISIONAL_EPS = Probe().inner[-1]


def measuring_note(wide: bool = False) -> str:
    """What a switch's slider and the Train report say while its fluent range is being measured."""
    widened = f" (±{2 * PROVISIONAL_EPS:g} with the sliders widened)" if wide else ""
    return (f"Its fluent range is being measured on a few prompts (a few seconds); until then the slider reaches "
            f"±{PROVISIONAL_EPS:g}{widened}, where most trained switches read well.")
PENDING = "<small>generating… scores follow when the text is complete</small>"
# first choice of each switch picker (sweep, composition rows, composition columns, manage, inspect, highlight, transfer):
# a preferred name, else the switch in that slot
PICKER_DEFAULTS = (("sentiment", 0), ("sentiment", 0), ("detox", 1), (None, 0), ("sentiment", 0), ("detox", 0), ("sentiment", 0))
MANAGE_PICKER = 3  # the Train tab's own picker (Save, download) among them (and among layout's ui.pickers)
LIBRARY_WATCH_S = 5.0  # how often a page asks whether another page saved or deleted a switch (its sliders and pickers follow)


GUARD_ON = SAMPLING.repeat_guard > 0  # the repeat guard's checkbox at first, and where a call leaves it out: the library's default


def sampling(max_new_tokens, temperature, top_p, seed, chat, adaptive=False, best_of=SAMPLING.best_of, guide=SAMPLING.guide,
             repeat_guard=GUARD_ON) -> tuple[SamplingOptions, int]:
    """Widget values → (decoding options, seed); the library validates the ranges."""
    seed = check_seed(parse_number(seed, "seed", int))
    options = SamplingOptions(max_new_tokens=parse_number(max_new_tokens, "max new tokens", int), temperature=parse_number(temperature, "temperature"),
                              top_p=parse_number(top_p, "top-p"), chat=bool(chat), adaptive=bool(adaptive),
                              best_of=parse_number(SAMPLING.best_of if best_of is None else best_of, "best of", int),
                              guide=parse_number(SAMPLING.guide if guide is None else guide, "guided", int),
                              repeat_guard=SAMPLING.repeat_guard if repeat_guard is None or bool(repeat_guard) else 0)
    return options, seed


def optional_text(value, what: str, max_chars: int | None = None) -> str:
    """A text widget's value ("" when empty), refusing what is not text (a script can send anything) or too long."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text; got {type(value).__name__}")
    if max_chars is not None and len(value) > max_chars:
        raise ValueError(f"{what} has {len(value):,} characters; keep it to {max_chars}")
    return value


def uploaded(file: object, what: str) -> str:
    """An uploaded file's path, refused when it is not a path or no longer on the server (Gradio's copies are swept
    after ``--keep-files`` hours: :mod:`lmswitch.webapp.files`)."""
    if not isinstance(file, (str, os.PathLike)):
        raise ValueError(f"{what}: expected an uploaded file's path; got {type(file).__name__}")
    if not os.path.exists(file):
        raise ValueError(f"{what}: the uploaded file is no longer on the server (old uploads are removed); upload it again")
    return os.fspath(file)


def read_input(text: str | None, file: str | None, what: str, max_chars: int, advice: str) -> str:
    """Text from an uploaded file (.txt .md .html .pdf .docx) or the pasted text; both at once is refused (which one
    was meant is not known, and the other would be dropped without a word), and so is a text of more than
    ``max_chars`` characters, the caller's limit, with its ``advice`` (a file's extraction stops past it)."""
    if file:
        if optional_text(text, what).strip():
            raise ValueError(f"{what} was given twice: pasted text and the file {os.path.basename(file)}. Clear one (the "
                             "box, or the file with its ×) so it is clear which to read")
        try:
            return read_document(uploaded(file, what), max_chars=max_chars)
        except TextTooLong:
            raise ValueError(f"{what} ({os.path.basename(file)}) has more than {max_chars:,} characters; {advice}") from None
    if not optional_text(text, what).strip():
        raise ValueError(f"{what} is empty: paste text or upload a .txt, .md, .html, .pdf or .docx file")
    if len(text) > max_chars:
        raise ValueError(f"{what} has {len(text):,} characters; {advice}")
    return text


def checked_setting(session: Session, library: SwitchLibrary, pairs: Sequence[tuple[str, object]]) -> list[tuple[Switch, float]]:
    """Name/ε pairs → (switch, ε) pairs of this session's switches; ε 0 is left out."""
    out = []
    for name, eps in pairs:
        eps = parse_eps(eps, name)
        if eps:
            out.append((session.get(name, library), eps))
    return out


def slot_names(session: Session, library: SwitchLibrary) -> list[str]:
    """The switch of each slider slot as the page shows it (:func:`slot_updates` drew them), so that a value stays with
    its own switch when another page deletes one drawn before it (its values moved up a slot, onto the next switch);
    for a client that never drew sliders (a script calling ``/steer``), the session's switches in order."""
    return session.slots or session.available(library)[:MAX_SLOTS]


def slot_setting(session: Session, library: SwitchLibrary, values: Sequence[object]) -> list[tuple[Switch, float]]:
    """The sliders' values → the setting (:func:`checked_setting`); a slider steering a switch deleted since the page
    drew it is refused, saying so (its text was the unsteered model's, without a word)."""
    gone = steered_but_gone(session, library, values)
    if gone:
        raise ValueError(f"'{gone[0]}' is no longer in the library (deleted from another page): its slider leaves this page "
                         "within a few seconds (or reload the page)")
    there = set(session.available(library))
    return checked_setting(session, library, [(name, eps) for name, eps in zip(slot_names(session, library), values, strict=False)
                                              if name in there])


def steered_but_gone(session: Session, library: SwitchLibrary, values: Sequence[object]) -> list[str]:
    """The switches of the page's slider slots (:func:`slot_names`) that its ``values`` steer, though they have left the
    library since the page drew them (another page deleted them)."""
    there = set(session.available(library))
    return [name for name, eps in zip(slot_names(session, library), values, strict=False) if name not in there and parse_eps(eps, name)]


# --- sliders and pickers ------------------------------------------------------------------------
def slider_label(switch: Switch) -> str:
    return f"{switch.name}: + → {switch.positive_label}, − → {switch.negative_label}"


def slot_updates(session: Session, library: SwitchLibrary, *, reset: bool = False, values: dict[str, float] | None = None) -> list:
    """One update per slider slot: the session's switches for this model in their stable order, then hidden slots.

    ``reset`` puts every slider back to 0 (another model's switches now fill the slots); ``values`` sets each slider's,
    moved into its range (0 for a switch not in it: a slot that held another switch must not pass its value on).
    """
    names = session.slots = session.available(library)[:MAX_SLOTS]
    reset, values = reset or values is not None, values or {}
    updates = []
    for i in range(MAX_SLOTS):
        if i >= len(names):
            updates.append(gr.Slider(visible=False, elem_classes=[], **({"value": 0.0} if reset else {})))
            continue
        switch = session.get(names[i], library)
        lo, hi = slider_range(session, names[i], switch)
        extra = {"value": min(max(float(values.get(names[i], 0.0)), lo), hi)} if reset else {}
        unsaved = session.unsaved(names[i])
        info = slider_info(switch, unsaved=unsaved, measuring=measuring_note(session.wide_sliders) if names[i] in session.measuring else "")
        updates.append(gr.Slider(minimum=lo, maximum=hi, label=slider_label(switch), visible=True, info=info or None,
                                 elem_classes=[UNSAVED_CLASS] if unsaved else [], **extra))
    return updates


ON_A_SLIDER = "its slider is in the Steer tab"  # where a switch just trained or imported is steered, as a rule


def where_to_steer(session: Session, library: SwitchLibrary, name: str) -> str:
    """Where the page steers switch ``name``, just added: its slider, or past the Steer tab's :data:`MAX_SLOTS`, where
    else (a 13th switch was announced as having a slider it did not get)."""
    names = session.available(library)  # (a switch for another model than the page's now: a slider with its model)
    if name not in names or names.index(name) < MAX_SLOTS:
        return ON_A_SLIDER
    return (f"the Steer tab has sliders for the first {MAX_SLOTS} switches, so it gets none: steer it in the sweep or the "
            "composition map, read it in Inspect and Highlight, or delete a switch this page made to give it a slider")


def slider_range(session: Session, name: str, switch: Switch, wide: bool | None = None) -> tuple[float, float]:
    """The ε range of ``name``'s slider in ``session``: the switch's own (:meth:`Switch.slider_range`), or while its
    fluent range is being measured, ±:data:`PROVISIONAL_EPS`; twice as far with the sliders widened (``wide``: by
    default the session's choice)."""
    wide = session.wide_sliders if wide is None else wide
    if name not in session.measuring:
        return switch.slider_range(wide)
    reach = PROVISIONAL_EPS * (2 if wide else 1)
    return -reach, reach


def slider_info(switch: Switch, unsaved: bool = False, measuring: str = "") -> str:
    """The slider's note: whether the switch is still only this page's (:data:`UNSAVED`), its description and the
    range in which it still writes fluent text: calibrated, or being measured (``measuring``: :func:`measuring_note`)."""
    fluent = switch.card.fluent_text
    note = measuring or (f"Fluent ε {fluent}; beyond it text reads less well." if fluent else "")
    # cut at a word, marked: a transferred switch's "(transferred from …)" was cut mid-word at 120 characters
    description = textwrap.shorten(switch.description, DESCRIPTION_CHARS, placeholder=" …")
    if description and description[-1] not in ".!?…":  # a sentence of its own, not run into the next part
        description += "."
    return " ".join(part for part in (UNSAVED if unsaved else "", description, note) if part)


def library_view(session: Session, library: SwitchLibrary) -> tuple:
    """What a page shows of the switches it can use: compared with :attr:`Session.shown`, it tells that another page
    saved or deleted one since."""
    return id(library), tuple(session.available(library))


def dropdown_updates(session: Session, library: SwitchLibrary, values: Sequence[str | None], *, emptied: bool = False) -> list:
    """Switch pickers of the other views, keeping each current choice when it still exists; one whose switch is gone
    moves to its default, or with ``emptied`` is left empty (a deleted switch's: moved to another, a Delete or the
    Download would act on a switch nobody picked)."""
    session.shown = library_view(session, library)
    names = list(session.shown[1])
    out = []
    for value, (preferred, slot) in zip(values, PICKER_DEFAULTS, strict=True):
        if value not in names:
            value = None if emptied else preferred if preferred in names else names[min(slot, len(names) - 1)] if names else None
        out.append(gr.Dropdown(choices=names, value=value))
    return out


# --- outputs ------------------------------------------------------------------------------------
# the scales were said nowhere (a loop's perplexity is low too, which the frontier's other rules catch)
SCORES_NOTE = "sentiment −1 … +1 (VADER), toxicity 0 … 1 (profanity-check), perplexity under the unsteered model, lower is likelier"


def format_scores(scores: TextScores) -> str:
    ppl = "–" if scores.perplexity is None else f"{scores.perplexity:.1f}"
    return (f"sentiment **{scores.sentiment:+.2f}** · toxicity **{scores.toxicity:.2f}** · "
            f"perplexity **{ppl}** <small>({SCORES_NOTE}; {scores.tokens} tokens)</small>")


def _token_tip(t: TokenChange) -> str:
    if not t.scored:
        return "not scored (no context before it)"
    up = ", ".join(f"{a.token!r} {a.delta:+.2f}" for a in t.promoted)
    down = ", ".join(f"{a.token!r} {a.delta:+.2f}" for a in t.demoted)
    return (f"Δ log p {t.delta:+.2f} (steered {t.logp_steered:.2f}, unsteered {t.logp_base:.2f})\n"
            f"promoted here: {up}\ndemoted here: {down}")


TOKEN_LEGEND = ('<div class="legend"><span class="tok" style="background:rgba(22,163,74,.55)">raised</span> '
                '<span class="tok" style="background:rgba(220,38,38,.55)">lowered</span> by the switches · hover a token for the '
                'alternatives they promoted and demoted most at that step</div>')


def token_html(changes: list[TokenChange] | None, pending: bool = False) -> str:
    """Steered tokens coloured by how much the switches raised (green) or lowered (red) them; alternatives on hover."""
    if pending:
        return '<div class="tokens empty">generating…</div>'
    if not changes:
        return '<div class="tokens empty">Move a slider away from 0 to see which tokens the switches changed.</div>'
    parts = []
    for t in changes:
        alpha = min(abs(t.delta) / 3.0, 1.0) * 0.65
        colour = f"rgba(22,163,74,{alpha:.2f})" if t.delta > 0 else f"rgba(220,38,38,{alpha:.2f})"
        parts.append(f'<span class="tok" style="background:{colour}" title="{html.escape(_token_tip(t))}">{html.escape(t.text)}</span>')
    return f'<div class="tokens">{"".join(parts)}</div>{TOKEN_LEGEND}'
